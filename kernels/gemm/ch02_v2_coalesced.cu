/// @file ch02_v2_coalesced.cu
/// @brief v2 = v1 (Predecessor: ch02_v1_naive.cu) with the warp turned around: consecutive threads take
/// consecutive output features n. A warp then reads one x[t][k] (a broadcast) and 32 rows of W,
/// and stores 32 adjacent floats of Y in one transaction.
#include "gemm.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Side of the square thread block of v2: 32 features by 32 tokens, as in v1.
constexpr int kCoalescedBlock = 32;

// [gemm_coalesced_kernel]
/// Thread (x, y) computes y[t][n] with n along x (the fast index inside a warp) and t along y.
/// Every lane of a warp reads the same x[t][k] (served once, a broadcast) and its own row of W;
/// the 32 stores of a warp land in 128 contiguous bytes of Y (coalesced). W's rows are K floats
/// apart, so W is still read one 4-byte word per 32-byte sector: the tiles of v3 fix that.
__global__ void gemm_coalesced_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                      int T, int N, int K) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int t = blockIdx.y * blockDim.y + threadIdx.y;
    if (t >= T || n >= N) return;  // the grid overhangs Y: those threads have no output
    const float* xt = x + std::size_t(t) * K;
    const float* wn = w + std::size_t(n) * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += xt[k] * wn[k];
    y[std::size_t(t) * N + n] = acc;
}
// [gemm_coalesced_kernel]

void gemm_coalesced(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 block(kCoalescedBlock, kCoalescedBlock);
    const dim3 grid(ceil_div(s.n, kCoalescedBlock), ceil_div(s.tokens, kCoalescedBlock));
    gemm_coalesced_kernel<<<grid, block, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
