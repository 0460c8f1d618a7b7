/// @file ch03_v1_thread_per_row.cu
/// @brief v1 of the decode GEMV: one thread per row of W, the first step of chapter 03 (no
/// predecessor). Each thread walks its row alone, so the 32 threads of a warp read addresses
/// K elements apart: every load touches 32 memory segments (uncoalesced, the lesson of v1).
#include "gemv.hpp"
#include "gemv_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cstddef>

namespace pd::kernels::gemv {

/// Threads per block of v1: one row each.
constexpr int kThreadPerRowThreads = 256;

// [gemv_thread_per_row_kernel]
/// y[b][row] = sum_c w[row][c] * x[b][c] for row = blockIdx.x * blockDim.x + threadIdx.x and
/// token b = blockIdx.y: one thread per (row, token), accumulating in fp32.
template <typename T>
__global__ void gemv_thread_per_row_kernel(const T* __restrict__ w, const T* __restrict__ x, float* __restrict__ y,
                                           int n, int k) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const std::size_t b = blockIdx.y;
    const T* wr = w + std::size_t(row) * k;  // neighbouring threads: K elements apart
    const T* xb = x + b * k;                 // the same address in every thread: a broadcast
    float acc = 0.f;
    for (int c = 0; c < k; ++c) acc = fmaf(to_f32(wr[c]), to_f32(xb[c]), acc);
    y[b * n + row] = acc;
}
// [gemv_thread_per_row_kernel]

/// Checks the shape and launches v1 on element type T: grid (ceil(N / 256), B), 256 threads.
template <typename T>
void launch_thread_per_row(const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(unsigned(ceil_div(s.n, kThreadPerRowThreads)), unsigned(s.batch));
    gemv_thread_per_row_kernel<T><<<grid, kThreadPerRowThreads, 0, stream>>>(w, x, y, s.n, s.k);
    PD_CHECK_LAUNCH();
}

void gemv_thread_per_row(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_thread_per_row(w, x, y, s, stream);
}

void gemv_thread_per_row(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                         cudaStream_t stream) {
    launch_thread_per_row(w, x, y, s, stream);
}

}  // namespace pd::kernels::gemv
