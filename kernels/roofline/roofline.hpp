/// @file roofline.hpp
/// @brief Launchers of chapter 00's ceiling kernels: a bandwidth copy and an FMA-throughput
/// kernel. Includable from plain C++ (tests), the kernels themselves live in the .cu files.
#pragma once

#include "pd/registry.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::roofline {

// [roofline_versions]
/// The ceilings chapter 00 measures, as versions: each one validated, then timed.
inline const std::vector<Version>& versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"copy_memcpy", {fp32}, simt, "cudaMemcpy device to device: the reference copy"},
        {"copy_kernel", {fp32}, simt, "grid-stride float4 copy kernel (copy_grid_stride)"},
        {"fma_fp32", {fp32}, simt, "8 independent FMA chains per thread (fma_chains): the FP32 rate"},
        {"cublas_bf16",
         {bf16},
         tensor_cores,
         "cublasGemmEx, bf16 in, fp32 accumulate and out: the tensor-core rate",
         Backends::cuda_only},
    };
    return list;
}
// [roofline_versions]

/// Bytes a copy of @p bytes moves: each byte read once and written once.
inline double copy_bytes_moved(double bytes) {
    return 2.0 * bytes;
}

/// Copies @p n floats from @p in to @p out with a grid-stride loop of 16-byte (float4)
/// loads and stores; the n % 4 tail is copied element by element.
/// Bytes moved: 8 n (each float read once and written once).
/// @param in  [n] device memory, 16-byte aligned
/// @param out [n] device memory, 16-byte aligned, not overlapping @p in
/// @param n      number of floats
/// @param stream stream the kernel is launched on
/// @pre n >= 1; throws std::invalid_argument naming the parameter otherwise.
void copy_grid_stride(const float* in, float* out, std::size_t n, cudaStream_t stream = nullptr);

/// Number of independent FMA chains each thread of fma_chains keeps in registers.
inline constexpr int kFmaChains = 8;

/// FLOPs of fma_chains: 2 (a multiply and an add) per step of every chain of every thread.
inline double fma_flops(std::size_t threads, int iters) {
    return 2.0 * kFmaChains * double(iters) * double(threads);
}

/// The simulator work of one run of a version of versions() (pd::sim_launch_work()): a copy of
/// @p floats floats, each loaded and stored once (counted as 4 FLOPs: the simulator copies about
/// as fast as it computes); or the FMA chains of @p threads threads, @p iters steps each.
/// @param version a name of versions()  @param floats the copy's floats  @param threads FMA threads
/// @param iters FMA steps per chain
inline double sim_work(const std::string& version, double floats, double threads, int iters) {
    if (version == "fma_fp32") return sim_launch_work(threads, fma_flops(std::size_t(threads), iters));
    return sim_launch_work(0, 4.0 * floats);
}

/// Runs @p threads threads, each carrying kFmaChains independent chains
/// `a = fmaf(a, mul, add)` for @p iters steps, and writes the final values.
/// Thread t uses row (t % patterns) of the inputs, so a CPU reference of @p patterns rows
/// checks every output exactly. FLOPs: 2 * kFmaChains * iters * threads.
/// @param init [patterns, kFmaChains] starting values
/// @param mul  [patterns, kFmaChains] multipliers (|mul| < 1 keeps the chains finite)
/// @param add  [patterns, kFmaChains] addends
/// @param out  [threads, kFmaChains] final values
/// @param patterns rows of the inputs
/// @param threads  threads launched
/// @param iters    FMA steps per chain
/// @param stream   stream the kernel is launched on
/// @pre threads >= 1, 1 <= patterns, iters >= 1; throws std::invalid_argument otherwise.
void fma_chains(const float* init, const float* mul, const float* add, int patterns, float* out, std::size_t threads,
                int iters, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::roofline
