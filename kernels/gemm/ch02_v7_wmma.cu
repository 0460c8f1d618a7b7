/// @file ch02_v7_wmma.cu
/// @brief v7, the first tensor-core step (Predecessor: v6, ch02_v6_vectorized.cu, the last SIMT one): the
/// block tile of v5/v6 computed by tensor cores through WMMA, with bf16 inputs and fp32
/// accumulators. Each of 8 warps owns a 64 x 32 piece of the 128 x 128 block tile, 4 x 2
/// fragments of 16 x 16, and runs 8 `mma_sync` (16x16x16) per 16-deep slice of K. Tiles of X
/// and W are staged in shared memory as in v6 (through registers, the next tile loaded during
/// the math), 128-bit loads where K % 8 == 0 and X, W are 16-byte aligned, 8 scalar loads each
/// otherwise. Outputs go through a small per-warp shared buffer, so the edges can be guarded.
#include "gemm.hpp"
#include "tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <mma.h>

namespace pd::kernels::gemm {

/// Tokens (rows of Y) per block tile of v7.
constexpr int kWmmaBM = 128;
/// Features (columns of Y) per block tile of v7.
constexpr int kWmmaBN = 128;
/// K step of v7: the depth of the staged tiles, two 16-deep WMMA slices.
constexpr int kWmmaBK = 32;
/// Side of a WMMA fragment (m = n = k = 16).
constexpr int kWmmaFrag = 16;
/// Warps along T in a block: 2 rows of warps ...
constexpr int kWmmaWarpsT = 2;
/// ... by 4 columns of warps: 8 warps.
constexpr int kWmmaWarpsN = 4;
/// Threads per block: 8 warps.
constexpr int kWmmaThreads = kWmmaWarpsT * kWmmaWarpsN * kWarpSize;
/// Fragments along T per warp: (128 / 2) / 16 = 4.
constexpr int kWmmaFragsT = kWmmaBM / kWmmaWarpsT / kWmmaFrag;
/// Fragments along N per warp: (128 / 4) / 16 = 2.
constexpr int kWmmaFragsN = kWmmaBN / kWmmaWarpsN / kWmmaFrag;
/// Row stride of the staged tiles in bf16 elements: 32 + 8. WMMA needs a multiple of 8 (16
/// bytes); the extra 16 bytes shift each row by 4 banks, so the 8 rows of 16 bytes that the
/// tensor-core loads read at once fall in 8 different groups of 4 banks (rows of 64 bytes
/// would put rows r and r + 2 in the same banks).
constexpr int kWmmaLd = kWmmaBK + 8;
/// bf16 elements in one 16-byte chunk: the unit of the vector loads.
constexpr int kWmmaChunk = 8;
/// Chunks of each tile that one thread stages per K step: 128 * 32 / 8 / 256 = 2.
constexpr int kWmmaLoads = kWmmaBM * kWmmaBK / kWmmaChunk / kWmmaThreads;

static_assert(kWmmaFragsT * kWmmaFrag * kWmmaWarpsT == kWmmaBM && kWmmaFragsN * kWmmaFrag * kWmmaWarpsN == kWmmaBN,
              "the warps' fragments cover the block tile");
static_assert(kWmmaLoads * kWmmaChunk * kWmmaThreads == kWmmaBM * kWmmaBK && kWmmaLd % 8 == 0,
              "the threads stage each tile exactly once; WMMA's ldm is a multiple of 16 bytes");

/// m[row][col .. col+7] of a row-major bf16 matrix with @p rows rows and @p cols columns as
/// one 16-byte value, zeros outside it. With @p kVec8 one 128-bit load (needs cols % 8 == 0,
/// col % 8 == 0 and a 16-byte aligned m: the chunk is then wholly inside or outside); else 8
/// guarded scalar loads.
/// @param m the matrix  @param row the row  @param col the first column  @param rows row count
/// @param cols column count  @return the 8 values, packed in order along K
template <bool kVec8>
__device__ __forceinline__ uint4 load8_or_zero(const __nv_bfloat16* __restrict__ m, int row, int col, int rows,
                                               int cols) {
    if constexpr (kVec8) {
        if (row < rows && col < cols) return load16(m + std::size_t(row) * cols + col);
        return make_uint4(0u, 0u, 0u, 0u);
    } else {
        __nv_bfloat16 v[kWmmaChunk];
#pragma unroll
        for (int j = 0; j < kWmmaChunk; ++j) v[j] = load_or_zero(m, row, col + j, rows, cols);
        uint4 packed;
        memcpy(&packed, v, sizeof(packed));
        return packed;
    }
}

// [gemm_wmma_kernel]
/// Block (bx, by) computes y[t0 .. t0+127][n0 .. n0+127] in fp32. Warp `warp` (0..7) owns rows
/// 64 (warp / 4) .. + 63 and columns 32 (warp % 4) .. + 31 of the block tile. xs holds
/// x[t0 ..][k0 .. k0+31] as [t][k] (matrix_a, row_major); ws holds w[n0 ..][k0 .. k0+31] as
/// [n][k], which is B = W^T stored column by column (matrix_b, col_major). Both are padded
/// with zeros past the edges of X and W.
template <bool kVec8>
__global__ void __launch_bounds__(kWmmaThreads)
    gemm_wmma_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, float* __restrict__ y,
                     int T, int N, int K) {
#if defined(PD_BACKEND_SIM) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ __align__(128) __nv_bfloat16 xs[kWmmaBM * kWmmaLd];
    __shared__ __align__(128) __nv_bfloat16 ws[kWmmaBN * kWmmaLd];
    // One 16 x 16 fp32 buffer per warp for the epilogue.
    __shared__ __align__(128) float out_tile[kWmmaThreads / kWarpSize][kWmmaFrag * kWmmaFrag];
    const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
    const int t0 = blockIdx.y * kWmmaBM, n0 = blockIdx.x * kWmmaBN;
    const int warp_t = (warp / kWmmaWarpsN) * (kWmmaFragsT * kWmmaFrag);  // warp's first row
    const int warp_n = (warp % kWmmaWarpsN) * (kWmmaFragsN * kWmmaFrag);  // warp's first column

    wmma::fragment<wmma::accumulator, kWmmaFrag, kWmmaFrag, kWmmaFrag, float> acc[kWmmaFragsT][kWmmaFragsN];
#pragma unroll
    for (int i = 0; i < kWmmaFragsT; ++i)
#pragma unroll
        for (int j = 0; j < kWmmaFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    // Chunk e = tid + i * 256 of a tile is row e / 4, elements 8 (e % 4) .. + 7: four
    // consecutive threads read one 64-byte row segment of X (or W).
    uint4 xv[kWmmaLoads], wv[kWmmaLoads];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < kWmmaLoads; ++i) {
            const int e = tid + i * kWmmaThreads, r = e / (kWmmaBK / kWmmaChunk);
            const int c = (e % (kWmmaBK / kWmmaChunk)) * kWmmaChunk;
            xv[i] = load8_or_zero<kVec8>(x, t0 + r, k0 + c, T, K);
            wv[i] = load8_or_zero<kVec8>(w, n0 + r, k0 + c, N, K);
        }
    };
    fetch(0);
    for (int k0 = 0; k0 < K; k0 += kWmmaBK) {
#pragma unroll
        for (int i = 0; i < kWmmaLoads; ++i) {
            const int e = tid + i * kWmmaThreads, r = e / (kWmmaBK / kWmmaChunk);
            const int c = (e % (kWmmaBK / kWmmaChunk)) * kWmmaChunk;
            store16(&xs[r * kWmmaLd + c], xv[i]);
            store16(&ws[r * kWmmaLd + c], wv[i]);
        }
        __syncthreads();  // both tiles complete before any warp loads fragments from them

        if (k0 + kWmmaBK < K) fetch(k0 + kWmmaBK);  // in flight during the tensor-core math

#pragma unroll
        for (int kk = 0; kk < kWmmaBK; kk += kWmmaFrag) {
            // 4 A and 2 B fragments feed 8 products: each A is reused twice, each B 4 times.
            wmma::fragment<wmma::matrix_a, kWmmaFrag, kWmmaFrag, kWmmaFrag, __nv_bfloat16, wmma::row_major>
                a[kWmmaFragsT];
            wmma::fragment<wmma::matrix_b, kWmmaFrag, kWmmaFrag, kWmmaFrag, __nv_bfloat16, wmma::col_major>
                b[kWmmaFragsN];
#pragma unroll
            for (int i = 0; i < kWmmaFragsT; ++i)
                wmma::load_matrix_sync(a[i], &xs[(warp_t + i * kWmmaFrag) * kWmmaLd + kk], kWmmaLd);
#pragma unroll
            for (int j = 0; j < kWmmaFragsN; ++j)
                wmma::load_matrix_sync(b[j], &ws[(warp_n + j * kWmmaFrag) * kWmmaLd + kk], kWmmaLd);
#pragma unroll
            for (int i = 0; i < kWmmaFragsT; ++i)
#pragma unroll
                for (int j = 0; j < kWmmaFragsN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // every warp is done with the tiles before the next step overwrites them
    }

    // Epilogue: a fragment's layout in registers is unspecified, so each one goes to the
    // warp's buffer, and the lanes copy it out with the edges of Y guarded. Lane l writes
    // rows 2 q + l / 16, column l % 16: 16 lanes store 64 contiguous bytes of a row of Y.
    float* tile = out_tile[warp];
#pragma unroll
    for (int i = 0; i < kWmmaFragsT; ++i)
#pragma unroll
        for (int j = 0; j < kWmmaFragsN; ++j) {
            wmma::store_matrix_sync(tile, acc[i][j], kWmmaFrag, wmma::mem_row_major);
            __syncwarp();  // the other lanes' elements are visible
            const int c = lane % kWmmaFrag, n = n0 + warp_n + j * kWmmaFrag + c;
            for (int r = lane / kWmmaFrag; r < kWmmaFrag; r += kWarpSize / kWmmaFrag) {
                const int t = t0 + warp_t + i * kWmmaFrag + r;
                if (t < T && n < N) y[std::size_t(t) * N + n] = tile[r * kWmmaFrag + c];
            }
            __syncwarp();  // every lane has read the buffer before the next fragment overwrites it
        }
#else
    __trap();  // bf16 WMMA needs sm_80: built for an older GPU, the launcher refuses to get here
#endif
}
// [gemm_wmma_kernel]

void gemm_wmma(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    require_bf16_tensor_cores("gemm_wmma (v7)");
    const dim3 grid(ceil_div(s.n, kWmmaBN), ceil_div(s.tokens, kWmmaBM));
    if (s.k % kWmmaChunk == 0 && is_aligned16(x) && is_aligned16(w))
        gemm_wmma_kernel<true><<<grid, kWmmaThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    else
        gemm_wmma_kernel<false><<<grid, kWmmaThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
