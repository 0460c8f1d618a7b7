// Chapter 02: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/cublas.hpp"

#include "gemm/gemm.hpp"

#include <cstdint>
#include <map>
#include <vector>

namespace ch02 {

namespace gm = pd::kernels::gemm;
using bf16 = __nv_bfloat16;
using pd::DType;

/// One problem: X and W drawn in fp32 (uniform in [-1, 1)), on the device in each input type
/// that runs (bf16: the rounded values), Y, and the reference of each type (bf16: of the
/// rounded inputs, so only the kernel's fp32 accumulation differs from it).
struct Problem {
    gm::Shape s;
    std::vector<float> x, w;
    pd::DeviceBuffer<float> x32, w32, y;
    pd::DeviceBuffer<bf16> x16, w16;
    std::map<DType, pd::Expected> expected;
};

// main.cu
/// The problem of shape @p s with the weights @p w, X drawn from @p x_seed, in each of @p dtypes;
/// the reference of every row when @p check_all_rows, else of sampled rows when the problem is large.
Problem make_problem(const gm::Shape& s, std::vector<float> w, std::uint64_t x_seed, const std::vector<DType>& dtypes,
                     bool check_all_rows);
/// What a problem holds on the device: X and W in each input type, and Y.
double problem_bytes(const gm::Shape& s, const std::vector<DType>& dtypes);
/// cuBLAS (when @p cublas), then every selected version of input type @p d on @p p, validated then timed.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, DType d, const pd::CublasHandle* cublas);

// studies.cu
/// --sweep-tokens: every version over T = 1, 2, 4 ... at @p shape's N and K and the weights @p w.
std::vector<pd::Row> sweep_tokens(pd::Bench& bench, const gm::Shape& shape, const std::vector<float>& w,
                                  const std::vector<DType>& dtypes, const pd::CublasHandle* cublas);

}  // namespace ch02
