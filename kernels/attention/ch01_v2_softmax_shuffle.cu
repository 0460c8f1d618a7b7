/// @file ch01_v2_softmax_shuffle.cu
/// @brief Chapter 01, v2 softmax = v1 (Predecessor: solutions/01_naive_attention/causal_softmax.cu)
/// + warp-shuffle reductions: each warp reduces in registers, and
/// only one value per warp goes through shared memory (2 barriers per reduction, not 9).
/// The reductions are block_reduce() and warp_reduce() of pd/device_helpers.cuh.
#include "attention.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"

#include <cmath>
#include <stdexcept>

namespace pd::kernels::attention {

/// Threads per row: a multiple of the warp size, at most 32 warps (one leader per lane).
constexpr int kWarpShuffleThreads = 256;
/// Warps per block: how many partial results meet in shared memory.
constexpr int kWarpShuffleWarps = kWarpShuffleThreads / kWarpSize;

// [softmax_warp_shuffle_kernel]
/// As softmax_smem_tree_kernel (one block per row, in place, exact zeros at the masked keys),
/// with the row maximum and the row sum each reduced by block_reduce(): two barriers per
/// reduction.
__global__ void softmax_warp_shuffle_kernel(float* __restrict__ scores, int q_len, int kv_len, bool causal) {
    __shared__ float warp_results[kWarpShuffleWarps];
    const std::size_t row = blockIdx.x;
    const int keys = allowed_keys(int(row % std::size_t(q_len)), q_len, kv_len, causal);
    float* s = scores + row * std::size_t(kv_len);
    const int t = threadIdx.x;

    float m = -INFINITY;
    for (int j = t; j < keys; j += blockDim.x) m = fmaxf(m, s[j]);
    const float row_max = block_reduce<kWarpShuffleWarps>(m, warp_results, MaxOp{}, -INFINITY);

    float sum = 0.f;
    for (int j = t; j < keys; j += blockDim.x) {
        const float e = expf(s[j] - row_max);
        s[j] = e;
        sum += e;
    }
    const float inv = 1.f / block_reduce<kWarpShuffleWarps>(sum, warp_results, SumOp{}, 0.f);
    for (int j = t; j < keys; j += blockDim.x) s[j] *= inv;
    for (int j = keys + t; j < kv_len; j += blockDim.x) s[j] = 0.f;
}
// [softmax_warp_shuffle_kernel]

void softmax_warp_shuffle(float* scores, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;  // <= 2^31 - 1: check_shape
    softmax_warp_shuffle_kernel<<<unsigned(rows), kWarpShuffleThreads, 0, stream>>>(scores, s.q_len, s.kv_len,
                                                                                    s.causal);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::attention
