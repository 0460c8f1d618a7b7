/// @file ch02_v5_blocktile_2d.cu
/// @brief v5 = v4 (Predecessor: ch02_v4_blocktile_1d.cu) + 2D register blocking: each thread computes an 8 x 8
/// micro-tile of Y as a sum of outer products, a column of 8 X values times a row of 8 W values,
/// both held in registers. Per k step a thread now reads 16 values from shared memory for 64
/// multiply-adds (v4: 9 for 8). The block tile grows to 128 x 128 with 256 threads.
#include "gemm.hpp"
#include "tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Tokens (rows of Y) per block tile of v5.
constexpr int kBt2dBM = 128;
/// Features (columns of Y) per block tile of v5.
constexpr int kBt2dBN = 128;
/// K step of v5: the depth of the staged tiles.
constexpr int kBt2dBK = 8;
/// Side of each thread's micro-tile: 8 tokens by 8 features.
constexpr int kBt2dTM = 8;
/// Threads per block: one per micro-tile, (128 / 8) * (128 / 8) = 256.
constexpr int kBt2dThreads = (kBt2dBM / kBt2dTM) * (kBt2dBN / kBt2dTM);
/// Elements of each tile that one thread stages per k step: 128 * 8 / 256 = 4.
constexpr int kBt2dLoads = kBt2dBM * kBt2dBK / kBt2dThreads;
/// Padding of the tiles' rows, in floats (as in v4).
constexpr int kBt2dPad = 4;

// [gemm_blocktile_2d_kernel]
/// Block (bx, by) computes y[t0 .. t0+127][n0 .. n0+127]. Thread `tid` owns the micro-tile of
/// tokens t0 + 8 (tid / 16) .. + 7 and features n0 + 8 (tid % 16) .. + 7. The tiles are stored
/// k-major (xs[k][t], ws[k][n]) so that a thread's 8 X values and 8 W values of one k are
/// consecutive words of one row.
__global__ void __launch_bounds__(kBt2dThreads)
    gemm_blocktile_2d_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int T,
                             int N, int K) {
    // Rows of 128 + 4 floats: the transposing stores (8 k-values by 4 rows per warp) fall in 32
    // different banks.
    __shared__ float xs[kBt2dBK][kBt2dBM + kBt2dPad];
    __shared__ float ws[kBt2dBK][kBt2dBN + kBt2dPad];
    const int tid = threadIdx.x;
    const int t0 = blockIdx.y * kBt2dBM, n0 = blockIdx.x * kBt2dBN;
    const int row = (tid / (kBt2dBN / kBt2dTM)) * kBt2dTM;  // first token of the micro-tile
    const int col = (tid % (kBt2dBN / kBt2dTM)) * kBt2dTM;  // first feature of the micro-tile
    float acc[kBt2dTM][kBt2dTM] = {};
    float xr[kBt2dTM], wr[kBt2dTM];

    for (int k0 = 0; k0 < K; k0 += kBt2dBK) {
        // Each thread stages 4 elements of each tile, 256 apart in the tile: 8 consecutive
        // threads read 8 consecutive k of one row. Zeros past the edges of X and W.
#pragma unroll
        for (int i = 0; i < kBt2dLoads; ++i) {
            const int e = tid + i * kBt2dThreads, r = e / kBt2dBK, c = e % kBt2dBK;
            xs[c][r] = load_or_zero(x, t0 + r, k0 + c, T, K);
            ws[c][r] = load_or_zero(w, n0 + r, k0 + c, N, K);
        }
        __syncthreads();  // both tiles complete before anyone reads them

#pragma unroll
        for (int kk = 0; kk < kBt2dBK; ++kk) {
            // 16 shared loads into registers, then 64 FMAs that touch registers only.
#pragma unroll
            for (int i = 0; i < kBt2dTM; ++i) xr[i] = xs[kk][row + i];
#pragma unroll
            for (int j = 0; j < kBt2dTM; ++j) wr[j] = ws[kk][col + j];
#pragma unroll
            for (int i = 0; i < kBt2dTM; ++i)
#pragma unroll
                for (int j = 0; j < kBt2dTM; ++j) acc[i][j] += xr[i] * wr[j];
        }
        __syncthreads();  // everyone is done with the tiles before the next step overwrites them
    }

#pragma unroll
    for (int i = 0; i < kBt2dTM; ++i) {
        const int t = t0 + row + i;
        if (t >= T) break;
#pragma unroll
        for (int j = 0; j < kBt2dTM; ++j) {
            const int n = n0 + col + j;
            if (n < N) y[std::size_t(t) * N + n] = acc[i][j];
        }
    }
}
// [gemm_blocktile_2d_kernel]

void gemm_blocktile_2d(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(ceil_div(s.n, kBt2dBN), ceil_div(s.tokens, kBt2dBM));
    gemm_blocktile_2d_kernel<<<grid, kBt2dThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
