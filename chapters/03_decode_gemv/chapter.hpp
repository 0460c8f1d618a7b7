// Chapter 03: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/cublas.hpp"

#include "gemv/gemv.hpp"

#include <cstdint>
#include <vector>

namespace ch03 {

namespace gv = pd::kernels::gemv;
using bf16 = __nv_bfloat16;
using pd::DType;

struct Options {
#if defined(PD_BACKEND_SIM)
    int n = 100, k = 259, layers = 3;  // K odd: the vector loads' head and tail run; seconds on a CPU
#else
    int n = 4096, k = 4096, layers = 16;  // 16 matrices of 4096 x 4096: 512 MiB in bf16, ~10x an H200's L2
#endif
    int batch = 1;
    bool sweep = false;
};

/// One decode step in one input type: the weight stack W [L, N, K] and the tokens X [B, K]
/// (drawn in fp32, uniform in [-1, 1); bf16: rounded), and Y [L, B, N]. The first and the last
/// matrix's outputs are checked: the first catches indexing errors, the last offset errors
/// across the stack; bf16 by the low-precision rule of pd::compare_to_lowp_reference() (error <=
/// 2 x that of the reference of the rounded inputs, both against the reference of the unrounded ones).
struct Problem {
    gv::Shape s;
    int layers = 1;
    DType d = DType::fp32;
    std::vector<float> w, x;
    pd::DeviceBuffer<float> w32, x32, y;
    pd::DeviceBuffer<bf16> w16, x16;
    pd::Expected expected;
};

// main.cu
/// Draws the weight stack of @p p's type from @p seed (once per type) and uploads it.
void set_weights(Problem& p, std::uint64_t seed);
/// Draws @p batch tokens from @p seed, uploads them, and computes the reference.
void set_tokens(Problem& p, int batch, std::uint64_t seed);
/// cuBLAS (when @p cublas is given), then every selected version on one decode step of @p p.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas);

// problem.cu
/// Registers the problem's options (N, K, B, --layers, --dtype, --sweep-batch) on @p bench, into @p o.
void add_options(pd::Bench& bench, Options& o);
/// Throws std::invalid_argument where one weight matrix of @p shape exceeds the kernels' 32-bit offsets.
void check_problem(const gv::Shape& shape);

// studies.cu
/// --sweep-batch: every version and cuBLAS over B = 1, 2, 4 ... 64 at @p shape's N and K.
std::vector<pd::Row> sweep_batch(pd::Bench& bench, const Options& o, const gv::Shape& shape,
                                 const std::vector<DType>& dtypes, const pd::CublasHandle* cublas);

}  // namespace ch03
