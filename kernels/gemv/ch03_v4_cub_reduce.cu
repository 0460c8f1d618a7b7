/// @file ch03_v4_cub_reduce.cu
/// @brief GEMV v4 = v3 (Predecessor: ch03_v3_vectorized.cu) with the warp's sum done by CUB's WarpReduce: the
/// production library doing what v2 and v3 wrote by hand, for comparison. CUDA only: CUB does
/// not run on the simulator, where the launchers throw std::invalid_argument.
#include "gemv.hpp"
#include "gemv_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cstddef>
#include <stdexcept>

#if !defined(PD_BACKEND_SIM)
#include <cub/warp/warp_reduce.cuh>
#endif

namespace pd::kernels::gemv {

#if !defined(PD_BACKEND_SIM)

/// Warps (rows) per block of v4, as v3.
constexpr int kCubWarps = 4;
/// Threads per block of v4.
constexpr int kCubThreads = kCubWarps * kWarpSize;

// [gemv_cub_kernel]
/// As gemv_vectorized_kernel (one warp per row, 16-byte loads), with the 32 partial sums
/// added by cub::WarpReduce; its result is valid in lane 0, which writes it.
template <typename T>
__global__ void __launch_bounds__(kCubThreads)
    gemv_cub_kernel(const T* __restrict__ w, const T* __restrict__ x, float* __restrict__ y, int n, int k) {
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage temp[kCubWarps];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int row = blockIdx.x * kCubWarps + warp;
    if (row >= n) return;  // the whole warp leaves together
    const std::size_t b = blockIdx.y;
    const float sum = WarpReduce(temp[warp]).Sum(lane_dot_vectorized(w + std::size_t(row) * k, x + b * k, k, lane));
    if (lane == 0) y[b * n + row] = sum;
}
// [gemv_cub_kernel]

/// Checks the shape and launches v4 on element type T: grid (ceil(N / 4), B), 128 threads.
template <typename T>
void launch_cub(const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(unsigned(ceil_div(s.n, kCubWarps)), unsigned(s.batch));
    gemv_cub_kernel<T><<<grid, kCubThreads, 0, stream>>>(w, x, y, s.n, s.k);
    PD_CHECK_LAUNCH();
}

void gemv_cub(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_cub(w, x, y, s, stream);
}

void gemv_cub(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_cub(w, x, y, s, stream);
}

#else

/// The simulator's v4: CUB does not run there, so the launcher says so instead of launching.
[[noreturn]] static void cub_is_cuda_only() {
    throw std::invalid_argument("v4 (gemv_cub) uses CUB, which does not run on the simulator: v4 is CUDA-only");
}

void gemv_cub(const float*, const float*, float*, const Shape&, cudaStream_t) {
    cub_is_cuda_only();
}

void gemv_cub(const __nv_bfloat16*, const __nv_bfloat16*, float*, const Shape&, cudaStream_t) {
    cub_is_cuda_only();
}

#endif

}  // namespace pd::kernels::gemv
