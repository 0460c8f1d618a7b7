// Chapter 00: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/roofline.hpp"

#include "roofline/roofline.hpp"

#include <string>
#include <vector>

namespace ch00 {

namespace rl = pd::roofline;
namespace k = pd::kernels::roofline;

struct Options {
    rl::CalculatorOptions calc;   // what is served, on which GPU
    std::string dtype, kv_dtype;  // --dtype, --kv-dtype: b and the KV bytes by format (chapter 08)
    bool calculator_only = false;
    // Measured ceilings: benchmark sizes on a GPU, seconds-long runs on the simulator.
#if defined(PD_BACKEND_SIM)
    int copy_mib = 64, fma_iters = 256;
#else
    int copy_mib = 1024, fma_iters = 16384;
#endif
    int gemm_n = 8192;
};

// studies.cu
/// `--dtype` and `--kv-dtype` set the calculator's b and KV bytes: the formats' bytes, scales
/// included.
void apply_formats(Options& o);
/// What fits, by format: a table of the sequences whose caches fit beside the weights, for
/// each weight and cache format; empty without a model or a known memory.
std::string capacity_by_format(const Options& o, const rl::Machine& machine, long long context);
/// The ceilings of device @p dev, each validated before it is timed: the copy bandwidth, the
/// FP32 FMA rate, the cuBLAS BF16 rate.
std::vector<pd::Row> measure_ceilings(pd::Bench& bench, const Options& o, const pd::DeviceInfo& dev);

}  // namespace ch00
