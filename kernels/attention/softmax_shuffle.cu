/// @file softmax_shuffle.cu
/// @brief v2 softmax = v1 + warp-shuffle reductions: each warp reduces in registers, and
/// only one value per warp goes through shared memory (2 barriers per reduction, not 9).
#include "attention.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cmath>
#include <stdexcept>

namespace pd::kernels::attention {

/// Threads per row: a multiple of the warp size, at most 32 warps (one leader per lane).
constexpr int kSoftmaxV2Threads = 256;
/// Warps per block: how many partial results meet in shared memory.
constexpr int kSoftmaxV2Warps = kSoftmaxV2Threads / kWarpSize;

// [warp_reduce]
/// Butterfly reduction inside one warp: after log2(32) = 5 exchanges every lane holds the
/// result, with no shared memory and no barrier.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

/// Block-wide reduction: warps reduce in registers, warp leaders meet in shared memory,
/// and the first warp reduces their results. Every thread gets the result.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float* warp_results, Op op, float identity) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    v = warp_reduce(v, op);
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    v = lane < kSoftmaxV2Warps ? warp_results[lane] : identity;
    v = warp_reduce(v, op);  // every warp reduces the leaders' values: no second broadcast needed
    __syncthreads();         // warp_results may be rewritten by the next reduction
    return v;
}
// [warp_reduce]

/// The maximum as a binary functor, for the row reductions of softmax v2.
struct MaxOp {
    /// @return the larger of @p a and @p b
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
/// The sum as a binary functor, for warp_reduce and block_reduce.
struct SumOp {
    /// @return @p a + @p b
    __device__ float operator()(float a, float b) const { return a + b; }
};

/// As softmax_v1_kernel (one block per row, in place, exact zeros at the masked keys), with
/// the row maximum and the row sum each reduced by block_reduce: two barriers per reduction.
__global__ void softmax_v2_kernel(float* __restrict__ scores, int q_len, int kv_len, bool causal) {
    __shared__ float warp_results[kSoftmaxV2Warps];
    const std::size_t row = blockIdx.x;
    const int i = int(row % std::size_t(q_len));
    const int keys = causal ? kv_len - q_len + i + 1 : kv_len;
    float* s = scores + row * std::size_t(kv_len);
    const int t = threadIdx.x;

    float m = -INFINITY;
    for (int j = t; j < keys; j += blockDim.x) m = fmaxf(m, s[j]);
    const float row_max = block_reduce(m, warp_results, MaxOp{}, -INFINITY);

    float sum = 0.f;
    for (int j = t; j < keys; j += blockDim.x) {
        const float e = expf(s[j] - row_max);
        s[j] = e;
        sum += e;
    }
    const float inv = 1.f / block_reduce(sum, warp_results, SumOp{}, 0.f);
    for (int j = t; j < keys; j += blockDim.x) s[j] *= inv;
    for (int j = keys + t; j < kv_len; j += blockDim.x) s[j] = 0.f;
}

void softmax_v2(float* scores, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;  // <= 2^31 - 1: check_shape
    softmax_v2_kernel<<<unsigned(rows), kSoftmaxV2Threads, 0, stream>>>(scores, s.q_len, s.kv_len, s.causal);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::attention
