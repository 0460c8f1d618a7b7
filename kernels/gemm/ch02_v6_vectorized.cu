/// @file ch02_v6_vectorized.cu
/// @brief v6 = v5 (Predecessor: ch02_v5_blocktile_2d.cu) + 128-bit loads: each thread stages its part of the X and
/// W tiles with one float4 load from global memory each (instead of 4 scalar loads), and reads
/// its micro-tile operands from shared memory as float4 (4 loads instead of 16 per k). The
/// micro-tile is split into two 4-wide halves 64 apart, which makes those shared float4 reads
/// free of bank conflicts. Since the loads go through registers anyway, the next K tile's
/// loads are issued before the current tile's math, so their latency hides behind it.
///
/// The float4 loads need K % 4 == 0 and 16-byte aligned X and W (every row then starts on a
/// 16-byte boundary). Other shapes run the same kernel, tiling and schedule with 4 scalar loads
/// in place of each float4 (the `kVec4 = false` instantiation).
#include "gemm.hpp"
#include "tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Tokens (rows of Y) per block tile of v6.
constexpr int kVecBM = 128;
/// Features (columns of Y) per block tile of v6.
constexpr int kVecBN = 128;
/// K step of v6: the depth of the staged tiles, two float4 per tile row.
constexpr int kVecBK = 8;
/// Side of each thread's 8 x 8 micro-tile, made of two halves of 4 rows (and of 4 columns).
constexpr int kVecTM = 8;
/// Rows (or columns) of one half of the micro-tile: one float4.
constexpr int kVecHalf = 4;
/// Threads per block: (128 / 8) * (128 / 8) = 256.
constexpr int kVecThreads = (kVecBM / kVecTM) * (kVecBN / kVecTM);
/// Padding of the tiles' rows, in floats: keeps rows 16-byte aligned (132 floats = 33 float4).
constexpr int kVecPad = 4;

static_assert(kVecBM * kVecBK == 4 * kVecThreads, "each thread stages one float4 of each tile");

/// Four consecutive elements m[row][col .. col+3] of a row-major matrix with @p rows rows and
/// @p cols columns, zeros outside it. With @p kVec4 one 128-bit load (needs cols % 4 == 0, col
/// % 4 == 0 and a 16-byte aligned m: the whole float4 is then inside or outside); else 4
/// guarded scalar loads.
/// @param m the matrix  @param row the row  @param col the first column  @param rows row count
/// @param cols column count  @return the four values
template <bool kVec4>
__device__ __forceinline__ float4 load4_or_zero(const float* __restrict__ m, int row, int col, int rows, int cols) {
    if constexpr (kVec4) {
        if (row < rows && col < cols) return *reinterpret_cast<const float4*>(m + std::size_t(row) * cols + col);
        return make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        return make_float4(load_or_zero(m, row, col, rows, cols), load_or_zero(m, row, col + 1, rows, cols),
                           load_or_zero(m, row, col + 2, rows, cols), load_or_zero(m, row, col + 3, rows, cols));
    }
}

// [gemm_vectorized_kernel]
/// Block (bx, by) computes y[t0 .. t0+127][n0 .. n0+127]. Thread `tid`, with tr = tid / 16 and
/// tc = tid % 16, owns tokens t0 + 4 tr + {0..3} and t0 + 64 + 4 tr + {0..3}, and features
/// n0 + 4 tc + {0..3} and n0 + 64 + 4 tc + {0..3}. Tiles are k-major as in v5, with 16-byte
/// aligned rows so that those 4-wide groups are float4 reads.
template <bool kVec4>
__global__ void __launch_bounds__(kVecThreads, 2)
    gemm_vectorized_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int T,
                           int N, int K) {
    __shared__ __align__(16) float xs[kVecBK][kVecBM + kVecPad];
    __shared__ __align__(16) float ws[kVecBK][kVecBN + kVecPad];
    const int tid = threadIdx.x;
    const int t0 = blockIdx.y * kVecBM, n0 = blockIdx.x * kVecBN;
    const int tr = tid / (kVecBN / kVecTM), tc = tid % (kVecBN / kVecTM);
    // The float4 this thread stages: row load_r, k = load_c .. load_c + 3 of each tile.
    const int load_r = tid / (kVecBK / 4), load_c = (tid % (kVecBK / 4)) * 4;
    float acc[kVecTM][kVecTM] = {};

    // The first tile goes to registers before the loop; inside, each iteration stores the
    // registers to shared memory and immediately loads the next tile into them.
    float4 xv = load4_or_zero<kVec4>(x, t0 + load_r, load_c, T, K);
    float4 wv = load4_or_zero<kVec4>(w, n0 + load_r, load_c, N, K);
    for (int k0 = 0; k0 < K; k0 += kVecBK) {
        // Transposing stores, k-major; a warp's 16 rows by 2 float4 fall in 32 different banks.
        xs[load_c + 0][load_r] = xv.x;
        xs[load_c + 1][load_r] = xv.y;
        xs[load_c + 2][load_r] = xv.z;
        xs[load_c + 3][load_r] = xv.w;
        ws[load_c + 0][load_r] = wv.x;
        ws[load_c + 1][load_r] = wv.y;
        ws[load_c + 2][load_r] = wv.z;
        ws[load_c + 3][load_r] = wv.w;
        __syncthreads();  // both tiles complete before anyone reads them

        // The next tile's global loads are in flight while the FMAs below run.
        if (k0 + kVecBK < K) {
            xv = load4_or_zero<kVec4>(x, t0 + load_r, k0 + kVecBK + load_c, T, K);
            wv = load4_or_zero<kVec4>(w, n0 + load_r, k0 + kVecBK + load_c, N, K);
        }

#pragma unroll
        for (int kk = 0; kk < kVecBK; ++kk) {
            // 4 shared float4 reads: in each quarter-warp the 8 lanes' tc differ, so their 8
            // float4 of ws cover 32 consecutive words (all banks, no conflict); xs is a broadcast.
            const float4 xa = *reinterpret_cast<const float4*>(&xs[kk][tr * kVecHalf]);
            const float4 xb = *reinterpret_cast<const float4*>(&xs[kk][kVecBM / 2 + tr * kVecHalf]);
            const float4 wa = *reinterpret_cast<const float4*>(&ws[kk][tc * kVecHalf]);
            const float4 wb = *reinterpret_cast<const float4*>(&ws[kk][kVecBN / 2 + tc * kVecHalf]);
            const float xr[kVecTM] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            const float wr[kVecTM] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
            for (int i = 0; i < kVecTM; ++i)
#pragma unroll
                for (int j = 0; j < kVecTM; ++j) acc[i][j] += xr[i] * wr[j];
        }
        __syncthreads();  // everyone is done with the tiles before the next step overwrites them
    }

    // Micro-tile row i is token t0 + 4 tr + i (i < 4) or t0 + 64 + 4 tr + i - 4; likewise columns.
#pragma unroll
    for (int i = 0; i < kVecTM; ++i) {
        const int t = t0 + (i / kVecHalf) * (kVecBM / 2) + tr * kVecHalf + i % kVecHalf;
        if (t >= T) continue;
#pragma unroll
        for (int j = 0; j < kVecTM; ++j) {
            const int n = n0 + (j / kVecHalf) * (kVecBN / 2) + tc * kVecHalf + j % kVecHalf;
            if (n < N) y[std::size_t(t) * N + n] = acc[i][j];
        }
    }
}
// [gemm_vectorized_kernel]

void gemm_vectorized(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 grid(ceil_div(s.n, kVecBN), ceil_div(s.tokens, kVecBM));
    if (s.k % 4 == 0 && is_aligned16(x) && is_aligned16(w))
        gemm_vectorized_kernel<true><<<grid, kVecThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    else
        gemm_vectorized_kernel<false><<<grid, kVecThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
