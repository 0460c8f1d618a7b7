/// @file ch02_v4_blocktile_1d.cu
/// @brief v4 = v3 (Predecessor: solutions/02_prefill_gemm/gemm_smem_tiled.cu) + 1D register blocking: each
/// thread computes a column of 8 outputs (8 tokens, one feature), so one W value read from
/// shared memory into a register serves 8 multiply-adds instead of one. The block tile grows to
/// 64 x 64 outputs with 512 threads, and the K step shrinks to 8.
#include "gemm.hpp"
#include "tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Tokens (rows of Y) per block tile of v4.
constexpr int kBt1dBM = 64;
/// Features (columns of Y) per block tile of v4.
constexpr int kBt1dBN = 64;
/// K step of v4: the depth of the X and W tiles staged in shared memory.
constexpr int kBt1dBK = 8;
/// Outputs per thread, a column of 8 tokens.
constexpr int kBt1dTM = 8;
/// Threads per block: one per column of 8 outputs, 64 * 64 / 8 = 512.
constexpr int kBt1dThreads = kBt1dBM * kBt1dBN / kBt1dTM;
/// Padding of the tiles' rows, in floats (see the kernel).
constexpr int kBt1dPad = 4;

static_assert(kBt1dBM * kBt1dBK == kBt1dThreads && kBt1dBN * kBt1dBK == kBt1dThreads,
              "each thread stages one element of each tile");

// [gemm_blocktile_1d_kernel]
/// Block (bx, by) computes y[t0 .. t0+63][n0 .. n0+63]; thread `tid` owns feature
/// n0 + tid % 64 and tokens t0 + 8 (tid / 64) .. + 7. The tiles are stored k-major, xs[k][t] and
/// ws[k][n], so that the inner loop reads a row of each: the 32 lanes of a warp (one token
/// group, 32 consecutive features) read 32 consecutive words of ws and one word of xs.
__global__ void __launch_bounds__(kBt1dThreads)
    gemm_blocktile_1d_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int T,
                             int N, int K) {
    // Rows of 64 + 4 floats: the transposing stores below (xs[c][r], 8 k-values c by 4 rows r per
    // warp) then hit 32 different banks ((68 c + r) % 32 = 4 c + r) instead of 4.
    __shared__ float xs[kBt1dBK][kBt1dBM + kBt1dPad];
    __shared__ float ws[kBt1dBK][kBt1dBN + kBt1dPad];
    const int tid = threadIdx.x;
    const int t0 = blockIdx.y * kBt1dBM, n0 = blockIdx.x * kBt1dBN;
    const int col = tid % kBt1dBN;                             // this thread's feature in the tile
    const int row = (tid / kBt1dBN) * kBt1dTM;                 // its first token in the tile
    const int load_r = tid / kBt1dBK, load_c = tid % kBt1dBK;  // the element it stages
    float acc[kBt1dTM] = {};

    for (int k0 = 0; k0 < K; k0 += kBt1dBK) {
        // Each thread stages one element of each tile: 8 consecutive threads read 8 consecutive
        // k of one row (32 bytes, a full sector), zeros past the edges of X and W.
        xs[load_c][load_r] = load_or_zero(x, t0 + load_r, k0 + load_c, T, K);
        ws[load_c][load_r] = load_or_zero(w, n0 + load_r, k0 + load_c, N, K);
        __syncthreads();  // both tiles complete before anyone reads them

#pragma unroll
        for (int kk = 0; kk < kBt1dBK; ++kk) {
            const float wv = ws[kk][col];  // one shared load, reused by the 8 FMAs below
#pragma unroll
            for (int i = 0; i < kBt1dTM; ++i) acc[i] += xs[kk][row + i] * wv;
        }
        __syncthreads();  // everyone is done with the tiles before the next step overwrites them
    }

    const int n = n0 + col;
    if (n >= N) return;
#pragma unroll
    for (int i = 0; i < kBt1dTM; ++i) {
        const int t = t0 + row + i;
        if (t < T) y[std::size_t(t) * N + n] = acc[i];  // a warp stores 32 adjacent floats
    }
}
// [gemm_blocktile_1d_kernel]

void gemm_blocktile_1d(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(ceil_div(s.n, kBt1dBN), ceil_div(s.tokens, kBt1dBM));
    gemm_blocktile_1d_kernel<<<grid, kBt1dThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
