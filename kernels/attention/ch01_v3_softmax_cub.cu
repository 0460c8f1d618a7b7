/// @file ch01_v3_softmax_cub.cu
/// @brief Chapter 01, v3 softmax = v1 (Predecessor: solutions/01_naive_attention/causal_softmax.cu)
/// with the row reductions done by CUB's BlockReduce: the production
/// library doing what v1 and v2 wrote by hand. CUDA only: CUB does not run on the simulator.
#include "attention.hpp"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <stdexcept>

#if !defined(PD_BACKEND_SIM)
#include <cub/block/block_reduce.cuh>
#endif

namespace pd::kernels::attention {

#if !defined(PD_BACKEND_SIM)

/// Threads per row: the block size is a template argument of cub::BlockReduce, so it is fixed.
constexpr int kCubSoftmaxThreads = 256;

namespace {
/// The maximum as a binary functor, for CUB's row reduction (local to this file).
struct CubMaxOp {
    /// @return the larger of @p a and @p b
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
}  // namespace

// [softmax_cub_kernel]
/// As softmax_smem_tree_kernel (one block per row, in place, exact zeros at the masked keys), with
/// both row reductions done by cub::BlockReduce; its result is valid in thread 0 only, so
/// thread 0 broadcasts it through shared memory.
__global__ void softmax_cub_kernel(float* __restrict__ scores, int q_len, int kv_len, bool causal) {
    using BlockReduce = cub::BlockReduce<float, kCubSoftmaxThreads>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float broadcast;
    const std::size_t row = blockIdx.x;
    const int keys = allowed_keys(int(row % std::size_t(q_len)), q_len, kv_len, causal);
    float* s = scores + row * std::size_t(kv_len);
    const int t = threadIdx.x;

    float m = -INFINITY;
    for (int j = t; j < keys; j += blockDim.x) m = fmaxf(m, s[j]);
    m = BlockReduce(temp).Reduce(m, CubMaxOp{});  // the result is valid in thread 0 only
    if (t == 0) broadcast = m;
    __syncthreads();
    const float row_max = broadcast;

    float sum = 0.f;
    for (int j = t; j < keys; j += blockDim.x) {
        const float e = expf(s[j] - row_max);
        s[j] = e;
        sum += e;
    }
    __syncthreads();  // temp storage and broadcast are reused
    sum = BlockReduce(temp).Sum(sum);
    if (t == 0) broadcast = sum;
    __syncthreads();
    const float inv = 1.f / broadcast;
    for (int j = t; j < keys; j += blockDim.x) s[j] *= inv;
    for (int j = keys + t; j < kv_len; j += blockDim.x) s[j] = 0.f;
}
// [softmax_cub_kernel]

void softmax_cub(float* scores, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;  // <= 2^31 - 1: check_shape
    softmax_cub_kernel<<<unsigned(rows), kCubSoftmaxThreads, 0, stream>>>(scores, s.q_len, s.kv_len, s.causal);
    PD_CHECK_LAUNCH();
}

#else

void softmax_cub(float*, const Shape&, cudaStream_t) {
    throw std::invalid_argument("softmax_cub (v3) uses CUB, which does not run on the simulator: v3 is CUDA-only");
}

#endif

}  // namespace pd::kernels::attention
