/// @file gemv_warp_per_row.cu
/// @brief Lab 03: GEMV v2 = v1 (Predecessor: kernels/gemv/ch03_v1_thread_per_row.cu) with one warp per row.
///
/// The 32 lanes of a warp share one row of W: lane l reads elements l, l + 32, l + 64, ...,
/// so at each step the warp reads 32 consecutive weights (one coalesced access instead of 32
/// scattered ones), and keeps a partial sum. The warp then adds its 32 partial sums with
/// shuffles (register to register, no shared memory, no barrier) and lane 0 writes y.
#include "gemv/gemv.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"  // to_f32()

#include <cstddef>

namespace pd::kernels::gemv {

/// Warps (rows) per block of v2.
constexpr int kWarpPerRowWarps = 4;
/// Threads per block of v2.
constexpr int kWarpPerRowThreads = kWarpPerRowWarps * kWarpSize;

// [gemv_warp_per_row_kernel]
/// Warp w of block (i, b) computes y[b][row] = sum_c w[row][c] * x[b][c] for
/// row = i * kWarpPerRowWarps + w, accumulating in fp32.
template <typename T>
__global__ void gemv_warp_per_row_kernel(const T* __restrict__ w, const T* __restrict__ x, float* __restrict__ y, int n,
                                         int k) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * kWarpPerRowWarps + threadIdx.x / kWarpSize;
    if (row >= n) return;  // the whole warp leaves together: the shuffles below see all 32 lanes
    const std::size_t b = blockIdx.y;
    const T* wr = w + std::size_t(row) * k;  // row `row` of W, k elements
    const T* xb = x + b * k;                 // token b of X, k elements

    // TODO(student): 1. partial = this lane's share of the dot product of wr and xb: elements lane, lane + 32, lane + 64, ... below k (neighbouring lanes read neighbouring elements: coalesced); convert with to_f32() and accumulate in fp32 (~3 lines)
    float partial = 0.f;
    (void)wr;
    (void)xb;
    (void)lane;

    // TODO(student): 2. sum = the total of the 32 lanes' partial sums, added with warp shuffles (__shfl_xor_sync or __shfl_down_sync, full mask 0xffffffff, offsets 16, 8, 4, 2, 1); no shared memory, no atomics, no warp_reduce_sum() (~3 lines)
    float sum = partial;

    // TODO(student): 3. one lane (lane 0) writes sum to y[b][row], that is y[b * n + row] (~1 line)
    (void)sum;
    (void)y;
    (void)b;
}
// [gemv_warp_per_row_kernel]

/// Checks the shape and launches v2 on element type T: grid (ceil(N / 4), B), 128 threads.
template <typename T>
void launch_warp_per_row(const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(unsigned(ceil_div(s.n, kWarpPerRowWarps)), unsigned(s.batch));
    gemv_warp_per_row_kernel<T><<<grid, kWarpPerRowThreads, 0, stream>>>(w, x, y, s.n, s.k);
    PD_CHECK_LAUNCH();
}

void gemv_warp_per_row(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_warp_per_row(w, x, y, s, stream);
}

void gemv_warp_per_row(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_warp_per_row(w, x, y, s, stream);
}

}  // namespace pd::kernels::gemv
