/// @file ch03_v3_vectorized.cu
/// @brief GEMV v3 = v2 (Predecessor: solutions/03_decode_gemv/gemv_warp_per_row.cu) + 128-bit loads: each lane
/// reads 16 bytes of W at a time (4 floats or 8 bf16), with 4 loads in flight, and a block
/// holds 4 warps (4 rows). The elements of a row before its first 16-byte boundary and after
/// its last whole vector are read one by one, so any K works (row n starts at w + n K, which
/// is unaligned whenever K is odd).
#include "gemv.hpp"
#include "gemv_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cstddef>

namespace pd::kernels::gemv {

/// Warps (rows) per block of v3: small blocks, so that the rows spread evenly over the SMs.
constexpr int kVectorizedWarps = 4;
/// Threads per block of v3.
constexpr int kVectorizedThreads = kVectorizedWarps * kWarpSize;

// [gemv_vectorized_kernel]
/// Warp w of block (i, b) computes y[b][row] for row = i * kVectorizedWarps + w: each lane
/// sums its share of the row with 16-byte loads (lane_dot_vectorized), then the warp adds the
/// 32 partial sums with shuffles and lane 0 writes the result.
template <typename T>
__global__ void __launch_bounds__(kVectorizedThreads)
    gemv_vectorized_kernel(const T* __restrict__ w, const T* __restrict__ x, float* __restrict__ y, int n, int k) {
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * kVectorizedWarps + threadIdx.x / kWarpSize;
    if (row >= n) return;  // the whole warp leaves together: the shuffles below see all 32 lanes
    const std::size_t b = blockIdx.y;
    const float sum = warp_reduce_sum(lane_dot_vectorized(w + std::size_t(row) * k, x + b * k, k, lane));
    if (lane == 0) y[b * n + row] = sum;
}
// [gemv_vectorized_kernel]

/// Checks the shape and launches v3 on element type T: grid (ceil(N / 4), B), 128 threads.
template <typename T>
void launch_vectorized(const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(unsigned(ceil_div(s.n, kVectorizedWarps)), unsigned(s.batch));
    gemv_vectorized_kernel<T><<<grid, kVectorizedThreads, 0, stream>>>(w, x, y, s.n, s.k);
    PD_CHECK_LAUNCH();
}

void gemv_vectorized(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_vectorized(w, x, y, s, stream);
}

void gemv_vectorized(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_vectorized(w, x, y, s, stream);
}

}  // namespace pd::kernels::gemv
