/// @file ch02_v8_mma_pipelined.cu
/// @brief v8 = v7 (Predecessor: ch02_v7_wmma.cu) one level down: the warp-level `mma.sync.m16n8k16` instruction
/// on fragments loaded by `ldmatrix`, and a 3-stage `cp.async` pipeline that copies the next
/// two K tiles from global to shared memory, without passing through registers, while the
/// tensor cores work on the current one. Same 128 x 128 block tile and 8 warps of 64 x 32 as
/// v7; the K step stays 32.
///
/// The instructions are the wrappers of pd/warp_mma.cuh: inline PTX on a GPU of compute
/// capability 8.0 and later, and on the simulator an emulation with the PTX ISA's fragment
/// layouts, so this kernel runs and is tested there too. The shared tiles are not padded but
/// XOR-swizzled (see swizzle()), so the three stages fit in 48 KiB. The asynchronous 16-byte
/// copies need K % 8 == 0 and 16-byte aligned X and W; other shapes run the same kernel with
/// synchronous, guarded scalar loads in place of cp.async.
#include "gemm.hpp"
#include "tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/warp_mma.cuh"

#include <cstdint>
#include <cstring>

namespace pd::kernels::gemm {

/// Tokens (rows of Y) per block tile of v8.
constexpr int kMmaBM = 128;
/// Features (columns of Y) per block tile of v8.
constexpr int kMmaBN = 128;
/// K step of v8: one pipeline stage holds a 128 x 32 tile of X and one of W.
constexpr int kMmaBK = 32;
/// Pipeline depth: tiles kt + 1 and kt + 2 are in flight while tile kt is computed.
constexpr int kMmaStages = 3;
/// Threads per block: 8 warps, 2 along T by 4 along N, as in v7.
constexpr int kMmaThreads = 256;
/// Warps along N (the other 2 are along T).
constexpr int kMmaWarpsN = 4;
/// m16 tiles per warp along T: 64 / 16 = 4.
constexpr int kMmaTilesM = 4;
/// n8 tiles per warp along N: 32 / 8 = 4.
constexpr int kMmaTilesN = 4;
/// Bytes of one staged 128 x 32 bf16 tile.
constexpr int kMmaTileBytes = kMmaBM * kMmaBK * 2;
/// Bytes of shared memory of the whole pipeline: 3 stages of an X and a W tile, 48 KiB.
constexpr int kMmaSmemBytes = kMmaStages * 2 * kMmaTileBytes;
/// 16-byte chunks of each tile that one thread copies per stage: 128 * 32 * 2 / 16 / 256 = 2.
constexpr int kMmaLoads = kMmaTileBytes / 16 / kMmaThreads;

static_assert(kMmaSmemBytes <= 48 * 1024, "fits the default dynamic shared memory limit");
static_assert(2 * kMmaTilesM * 16 == kMmaBM && kMmaWarpsN * kMmaTilesN * 8 == kMmaBN &&
                  2 * kMmaWarpsN * kWarpSize == kMmaThreads,
              "2 x 4 warps of 4 x 4 m16n8 tiles cover the block tile");
static_assert(kMmaLoads * kMmaThreads * 16 == kMmaTileBytes, "the threads copy each tile exactly once");

/// Byte offset of 16-byte chunk @p c (0..3) of row @p r in a staged [rows][32] bf16 tile. Rows
/// are 64 bytes, so unswizzled, the 8 rows an `ldmatrix` phase reads at one chunk would fall in
/// two groups of 4 banks (4-way conflicts). XOR-ing the chunk with bits 1..2 of the row spreads
/// any 8 consecutive rows (from a multiple of 8) over all 32 banks.
/// @param r the row  @param c the chunk  @return the byte offset in the tile
__device__ __forceinline__ int swizzle(int r, int c) {
    return r * (kMmaBK * 2) + ((c ^ ((r >> 1) & 3)) << 4);
}

/// Issues the copies of K tile @p kt of X and W into the stage at @p stage_x / @p stage_w. With
/// @p kAsync, cp.async with zero fill past the edges (needs K % 8 == 0, aligned X and W); else
/// guarded scalar loads and 16-byte shared stores, complete when this returns.
/// @param x [T, K]  @param w [N, K]  @param stage_x the stage's X tile  @param stage_w its W tile
/// @param t0 first token of the block  @param n0 first feature  @param kt the K tile
/// @param T tokens  @param N features  @param K depth
template <bool kAsync>
__device__ __forceinline__ void load_stage(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                           unsigned char* stage_x, unsigned char* stage_w, int t0, int n0, int kt,
                                           int T, int N, int K) {
#pragma unroll
    for (int i = 0; i < kMmaLoads; ++i) {
        // Chunk e is row e / 4, chunk e % 4 (elements 8 (e % 4) .. + 7): four threads per 64-byte row.
        const int e = threadIdx.x + i * kMmaThreads, r = e / 4, c = e % 4, k = kt * kMmaBK + c * 8;
        if constexpr (kAsync) {
            // 16 bytes, or nothing read and 16 zero bytes where the tile overhangs the matrix.
            const bool xin = t0 + r < T && k < K, win = n0 + r < N && k < K;
            cp_async(stage_x + swizzle(r, c), xin ? x + std::size_t(t0 + r) * K + k : x, 16, xin ? 16 : 0);
            cp_async(stage_w + swizzle(r, c), win ? w + std::size_t(n0 + r) * K + k : w, 16, win ? 16 : 0);
        } else {
            __nv_bfloat16 xe[8], we[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                xe[j] = load_or_zero(x, t0 + r, k + j, T, K);
                we[j] = load_or_zero(w, n0 + r, k + j, N, K);
            }
            memcpy(stage_x + swizzle(r, c), xe, 16);
            memcpy(stage_w + swizzle(r, c), we, 16);
        }
    }
}

// [gemm_mma_pipelined_kernel]
/// Block (bx, by) computes y[t0 .. t0+127][n0 .. n0+127]; warp `warp` owns rows 64 (warp / 4)
/// .. + 63 and columns 32 (warp % 4) .. + 31, as 4 x 4 tiles of m16n8 (64 fp32 accumulators
/// per lane). Stage s of the dynamic shared memory holds the X tile then the W tile of K tile
/// kt with kt % 3 == s, both [row][32 k], swizzled.
template <bool kAsync>
__global__ void __launch_bounds__(kMmaThreads)
    gemm_mma_pipelined_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                              float* __restrict__ y, int T, int N, int K) {
#if defined(PD_BACKEND_SIM) || __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char smem[];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int t0 = blockIdx.y * kMmaBM, n0 = blockIdx.x * kMmaBN;
    const int warp_t = (warp / kMmaWarpsN) * (kMmaTilesM * 16), warp_n = (warp % kMmaWarpsN) * (kMmaTilesN * 8);
    auto stage_x = [&](int s) { return smem + s * 2 * kMmaTileBytes; };
    auto stage_w = [&](int s) { return smem + s * 2 * kMmaTileBytes + kMmaTileBytes; };
    const int k_tiles = ceil_div(K, kMmaBK);
    float acc[kMmaTilesM][kMmaTilesN][4] = {};

    // Prologue: start the copies of the first two tiles; one commit group per tile (empty
    // groups past the last tile keep the counting of cp_async_wait uniform).
#pragma unroll
    for (int s = 0; s < kMmaStages - 1; ++s) {
        if (s < k_tiles) load_stage<kAsync>(x, w, stage_x(s), stage_w(s), t0, n0, s, T, N, K);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<kMmaStages - 2>();  // this thread's copies of tile kt have landed ...
        __syncthreads();                  // ... and every thread's; and every warp is done with tile kt - 1
        // Refill the stage of tile kt - 1 (free since the barrier) with tile kt + 2.
        const int next = kt + kMmaStages - 1;
        if (next < k_tiles)
            load_stage<kAsync>(x, w, stage_x(next % kMmaStages), stage_w(next % kMmaStages), t0, n0, next, T, N, K);
        cp_async_commit();

        const unsigned char* xs = stage_x(kt % kMmaStages);
        const unsigned char* ws = stage_w(kt % kMmaStages);
#pragma unroll
        for (int kk = 0; kk < kMmaBK / 16; ++kk) {  // two k16 slices, chunks 2 kk and 2 kk + 1
            std::uint32_t a[kMmaTilesM][4], b[kMmaTilesN][2];
#pragma unroll
            for (int i = 0; i < kMmaTilesM; ++i) {
                // Lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15:
                // the four matrices are the A fragment's a0..a3 in mma's order.
                const int r = warp_t + i * 16 + lane % 16, c = kk * 2 + lane / 16;
                ldmatrix_x4(a[i], xs + swizzle(r, c));
            }
#pragma unroll
            for (int j = 0; j < kMmaTilesN; j += 2) {
                // W's rows are B's columns: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15,
                // k 0-7), (n 8-15, k 8-15) are b0, b1 of n8 tile j, then of tile j + 1.
                const int r = warp_n + j * 8 + lane % 8 + (lane / 16) * 8, c = kk * 2 + (lane / 8) % 2;
                std::uint32_t q[4];
                ldmatrix_x4(q, ws + swizzle(r, c));
                b[j][0] = q[0];
                b[j][1] = q[1];
                b[j + 1][0] = q[2];
                b[j + 1][1] = q[3];
            }
#pragma unroll
            for (int i = 0; i < kMmaTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kMmaTilesN; ++j) mma_m16n8k16_bf16(acc[i][j], a[i], b[j], acc[i][j]);
        }
    }
    cp_async_wait<0>();  // only empty groups remain; leave none behind at exit

    // Lane l holds, of each m16n8 tile, rows l / 4 and l / 4 + 8, columns 2 (l % 4) and + 1.
#pragma unroll
    for (int i = 0; i < kMmaTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaTilesN; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int t = t0 + warp_t + i * 16 + lane / 4 + h * 8;
                const int n = n0 + warp_n + j * 8 + (lane % 4) * 2;
                if (t >= T) continue;
                if (n < N) y[std::size_t(t) * N + n] = acc[i][j][2 * h];
                if (n + 1 < N) y[std::size_t(t) * N + n + 1] = acc[i][j][2 * h + 1];
            }
#else
    __trap();  // built for a GPU older than sm_80: the launcher refuses to get here
#endif
}
// [gemm_mma_pipelined_kernel]

void gemm_mma_pipelined(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    require_bf16_tensor_cores("gemm_mma_pipelined (v8)");
    const dim3 grid(ceil_div(s.n, kMmaBN), ceil_div(s.tokens, kMmaBM));
    if (s.k % 8 == 0 && is_aligned16(x) && is_aligned16(w))
        gemm_mma_pipelined_kernel<true><<<grid, kMmaThreads, kMmaSmemBytes, stream>>>(x, w, y, s.tokens, s.n, s.k);
    else
        gemm_mma_pipelined_kernel<false><<<grid, kMmaThreads, kMmaSmemBytes, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
