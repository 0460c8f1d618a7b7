/// @file fma.cu
/// @brief The FP32 arithmetic ceiling: independent fused multiply-add chains per thread.
#include "roofline.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <stdexcept>
#include <string>

namespace pd::kernels::roofline {

// [fma_chains]
/// kFmaChains independent chains per thread hide the FMA latency (about 4 cycles) inside
/// one thread; many warps per SM hide the rest. Inputs are read once and outputs written
/// once, so memory traffic is negligible next to 2 * kFmaChains * iters FLOPs per thread.
__global__ void fma_chains_kernel(const float* __restrict__ init, const float* __restrict__ mul,
                                  const float* __restrict__ add, int patterns, float* __restrict__ out,
                                  std::size_t threads, int iters) {
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= threads) return;
    const std::size_t row = (t % std::size_t(patterns)) * kFmaChains;
    float a[kFmaChains], m[kFmaChains], c[kFmaChains];
#pragma unroll
    for (int k = 0; k < kFmaChains; ++k) {
        a[k] = init[row + k];
        m[k] = mul[row + k];
        c[k] = add[row + k];
    }
#pragma unroll 4
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < kFmaChains; ++k) a[k] = fmaf(a[k], m[k], c[k]);
    }
#pragma unroll
    for (int k = 0; k < kFmaChains; ++k) out[t * kFmaChains + k] = a[k];
}
// [fma_chains]

void fma_chains(const float* init, const float* mul, const float* add, int patterns, float* out, std::size_t threads,
                int iters, cudaStream_t stream) {
    if (threads == 0) throw std::invalid_argument("fma_chains: threads must be >= 1, got 0");
    if (patterns < 1) throw std::invalid_argument("fma_chains: patterns must be >= 1, got " + std::to_string(patterns));
    if (iters < 1) throw std::invalid_argument("fma_chains: iters must be >= 1, got " + std::to_string(iters));
    constexpr int kThreads = 256;
    const std::size_t blocks = ceil_div<std::size_t>(threads, kThreads);
    if (blocks > 0x7FFFFFFFu)
        throw std::invalid_argument("fma_chains: threads too large (" + std::to_string(threads) + ")");
    fma_chains_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(init, mul, add, patterns, out, threads,
                                                                              iters);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::roofline
