/// @file ch02_v1_naive.cu
/// @brief v1, the starting point of chapter 02 (no predecessor): one thread per output y[t][n], a plain dot
/// product of row t of X with row n of W. Consecutive threads of a warp take consecutive
/// tokens t, so each load of X touches 32 rows K floats apart (uncoalesced), and so does each
/// store to Y; v2 turns the warp around.
#include "gemm.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Side of the square thread block of v1: 32 x 32 = 1024 threads, 32 tokens by 32 features.
constexpr int kNaiveBlock = 32;

// [gemm_naive_kernel]
/// Thread (x, y) computes y[t][n] with t along x (the fast index inside a warp) and n along y:
/// the 32 lanes of a warp read x[t][k] from 32 different rows (32 memory transactions per
/// load), all read the same w[n][k] (one broadcast), and store 32 floats N apart.
__global__ void gemm_naive_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                  int T, int N, int K) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y * blockDim.y + threadIdx.y;
    if (t >= T || n >= N) return;  // the grid overhangs Y: those threads have no output
    const float* xt = x + std::size_t(t) * K;
    const float* wn = w + std::size_t(n) * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += xt[k] * wn[k];
    y[std::size_t(t) * N + n] = acc;
}
// [gemm_naive_kernel]

void gemm_naive(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 block(kNaiveBlock, kNaiveBlock);
    const dim3 grid(ceil_div(s.tokens, kNaiveBlock), ceil_div(s.n, kNaiveBlock));
    gemm_naive_kernel<<<grid, block, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
