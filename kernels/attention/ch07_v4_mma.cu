/// @file ch07_v4_mma.cu
/// @brief Chapter 07, flash attention v4: v3 on tensor cores (FlashAttention-2's form).
/// Predecessor: v3, ch07_v3_causal_skip.cu. The one change: the arithmetic moves to `mma.sync`.
/// A block of 4 warps takes 64 queries, each warp 16 of them (split-Q, as v2), and walks K/V
/// tiles of 64 keys with v3's causal block skipping; S = Q K^T and O += P V are `mma.sync`
/// m16n8k16 in bf16 with fp32 accumulators, the online softmax runs on S's accumulator fragments,
/// and P goes from S's C fragments to the A fragments of P V in registers, never through shared
/// memory. The tiles are read with plain 32-bit shared loads (V's B fragment: two 16-bit loads,
/// from two rows), which conflict 4 to 8 ways: v5 (ch07_v5_ldmatrix_swizzle.cu) removes that.
///
/// The instructions are pd/warp_mma.cuh's wrappers, so the kernel runs on the simulator too. The
/// launcher checks the shape (d = 64 or 128) and needs Q, K and V 16-byte aligned (16-byte copies
/// of whole rows) and O 8-byte aligned.
#include "attention/flash_mma.cuh"

#include "pd/cuda_check.hpp"
#include "pd/warp_mma.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace pd::kernels::attention {

// The kernel's helpers, local to this file.
namespace {

/// Byte offset of element (@p r, @p c) of a [64][kD] bf16 tile in shared memory, row after row.
/// A row is 128 or 256 bytes, a multiple of the 32 banks' 128, so the same column of 8 rows lies
/// in the same bank: the 8 groups of a fragment load conflict up to 8 ways.
/// @param r the row  @param c the column (element)  @return the byte offset in the tile
template <int kD>
__device__ __forceinline__ int tile_offset(int r, int c) {
    return r * (kD * 2) + c * 2;
}

/// Copies the 64 rows at @p src (a [rows][kD] bf16 matrix, 16-byte aligned) into the tile at
/// @p dst with the whole block, a 16-byte chunk per thread and step (8 or 16 consecutive
/// threads per row: coalesced): a 16-byte load and store, complete on return. Rows from @p rows
/// on are zeros, never read (V's zero rows keep P V free of NaN where p = 0).
/// @param dst the tile  @param src row 0  @param rows the rows of src that exist (any, even <= 0)
template <int kD>
__device__ __forceinline__ void load_tile(unsigned char* dst, const __nv_bfloat16* __restrict__ src, int rows) {
    constexpr int kChunks = kD / 8;  // per row
    static_assert(kFlashMmaKeys * kChunks % kFlashMmaThreads == 0, "the threads copy the tile exactly once");
#pragma unroll
    for (int i = 0; i < kFlashMmaKeys * kChunks / kFlashMmaThreads; ++i) {
        const int e = threadIdx.x + i * kFlashMmaThreads, r = e / kChunks, c = e % kChunks * 8;
        store16(dst + tile_offset<kD>(r, c),
                r < rows ? load16(src + std::size_t(r) * kD + c) : make_uint4(0u, 0u, 0u, 0u));
    }
}

// [flash_v4_fragments]
/// The A fragment of the 16 x 16 block at (@p r0, @p c0) of a tile: 16 queries' rows of Q at
/// 16 of their dimensions. a[0]: (g, 2t .. 2t+1), a[1]: row g + 8, a[2]: columns + 8, a[3]: both;
/// a pair of columns is one 32-bit word of a row. @param a the fragment out  @param tile the tile
/// @param r0 the first row (a multiple of 16)  @param c0 the first column (a multiple of 16)
template <int kD>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const unsigned char* tile, int r0, int c0) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = r0 + lane / 4, c = c0 + lane % 4 * 2;
    a[0] = load_word<std::uint32_t>(tile + tile_offset<kD>(r, c));
    a[1] = load_word<std::uint32_t>(tile + tile_offset<kD>(r + 8, c));
    a[2] = load_word<std::uint32_t>(tile + tile_offset<kD>(r, c + 8));
    a[3] = load_word<std::uint32_t>(tile + tile_offset<kD>(r + 8, c + 8));
}

/// The B fragments of K^T for keys @p n0 .. n0 + 15 (two n8 tiles, @p b0 and @p b1) at
/// dimensions @p c0 .. c0 + 15: K's rows are B's columns, so a fragment's pair (2t, 2t+1) of
/// dimensions is one word of a row of K. b[0]: (k 2t .. 2t+1, n g) = K[n0 + g][c0 + 2t ..], b[1]:
/// dimensions + 8. @param b0 keys n0 .. n0 + 7  @param b1 keys n0 + 8 .. n0 + 15  @param tile the K
/// tile  @param n0 the first key (a multiple of 16)  @param c0 the first dimension (a multiple of 16)
template <int kD>
__device__ __forceinline__ void load_b_rows(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2], const unsigned char* tile,
                                            int n0, int c0) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = n0 + lane / 4, c = c0 + lane % 4 * 2;
    b0[0] = load_word<std::uint32_t>(tile + tile_offset<kD>(r, c));
    b0[1] = load_word<std::uint32_t>(tile + tile_offset<kD>(r, c + 8));
    b1[0] = load_word<std::uint32_t>(tile + tile_offset<kD>(r + 8, c));
    b1[1] = load_word<std::uint32_t>(tile + tile_offset<kD>(r + 8, c + 8));
}

/// The B fragments of V for keys @p k0 .. k0 + 15 at dimensions @p n0 .. n0 + 15 (two n8
/// tiles, @p b0 and @p b1): V is stored [key][dim], K x N row-major, so a fragment's pair
/// (2t, 2t+1) of keys lies in two rows: b[0] is V[k0 + 2t][n0 + g] and V[k0 + 2t + 1][n0 + g],
/// two 16-bit loads packed. @param b0 dims n0 .. n0 + 7  @param b1 dims n0 + 8 .. n0 + 15
/// @param tile the V tile  @param k0 the first key (a multiple of 16)  @param n0 the first
/// dimension (a multiple of 16)
template <int kD>
__device__ __forceinline__ void load_b_cols(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2], const unsigned char* tile,
                                            int k0, int n0) {
    const int lane = threadIdx.x % kWarpSize;
    const int r = k0 + lane % 4 * 2, c = n0 + lane / 4;
    const auto pair = [&](int key, int dim) {
        return std::uint32_t(load_word<unsigned short>(tile + tile_offset<kD>(key, dim))) |
               std::uint32_t(load_word<unsigned short>(tile + tile_offset<kD>(key + 1, dim))) << 16;
    };
    b0[0] = pair(r, c), b0[1] = pair(r + 8, c), b1[0] = pair(r, c + 8), b1[1] = pair(r + 8, c + 8);
}
// [flash_v4_fragments]

}  // namespace

// [flash_v4_kernel]
/// Block (x, h, b): the 64 queries q0 .. q0 + 63 of head h of sequence b (the last query tile
/// for x = 0: the longest blocks start first), warp w the 16 rows q0 + 16 w .. + 15. Lane l
/// (group g = l / 4, t = l % 4) holds the state of rows g and g + 8 of its warp: m (running
/// maximum of the scores in log2 units, s / sqrt(d) log2 e), l (this lane's part of the running
/// sum of 2^(x - m)) and O's accumulators. The dynamic shared memory holds a K tile then a V
/// tile, [64][kD] bf16 each.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr
/// @param heads H  @param kv_heads Hkv  @param q_len Sq  @param kv_len Sk  @param causal the mask rule
/// @param scale_log2 log2(e) / sqrt(d)
template <int kD>
__global__ void __launch_bounds__(kFlashMmaThreads)
    flash_mma_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                     const __nv_bfloat16* __restrict__ v, float* __restrict__ out, float* __restrict__ lse, int heads,
                     int kv_heads, int q_len, int kv_len, bool causal, float scale_log2) {
#if defined(PD_BACKEND_SIM) || __CUDA_ARCH__ >= 800
    constexpr int kTileBytes = kFlashMmaTileBytes<kD>;
    constexpr int kDimSteps = kD / 16;  // k16 steps of Q K^T
    constexpr int kOutTiles = kD / 8;   // n8 tiles of O
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* ks = smem;               // the K tile
    unsigned char* vs = smem + kTileBytes;  // the V tile

    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, t = lane % 4;
    // Block x = 0 takes the last query tile: with causal, the later a tile the more keys it sees,
    // and starting the longest blocks first shortens the grid's tail.
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kFlashMmaQueries, h = blockIdx.y, b = blockIdx.z;
    const std::size_t head_row = (std::size_t(b) * heads + h) * q_len;  // row 0 of this head in Q, O, lse
    const std::size_t kv_row = (std::size_t(b) * kv_heads + h / (heads / kv_heads)) * kv_len;
    const __nv_bfloat16* kb = k + kv_row * kD;
    const __nv_bfloat16* vb = v + kv_row * kD;

    // This lane's two rows and the keys each may see (rows past Sq: any keys, never written).
    const int rows[2] = {q0 + warp * 16 + lane / 4, q0 + warp * 16 + lane / 4 + 8};
    int limit[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) limit[r] = rows[r] < q_len ? allowed_keys(rows[r], q_len, kv_len, causal) : kv_len;
    // v3's block skipping: the block's last query sees the most keys; no tile after its last is
    // loaded. Tiles below the first query's limit are whole for every row: no mask.
    const int block_keys = allowed_keys(min(q0 + kFlashMmaQueries, q_len) - 1, q_len, kv_len, causal);
    const int unmasked_keys = allowed_keys(q0, q_len, kv_len, causal);
    const int tiles = ceil_div(block_keys, kFlashMmaKeys);

    // The Q tile passes once through the K buffer and stays in registers as the A fragments of
    // Q K^T.
    std::uint32_t qf[kDimSteps][4];
    load_tile<kD>(ks, q + (head_row + q0) * kD, q_len - q0);
    __syncthreads();  // the Q tile is complete before any warp reads it
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) load_a<kD>(qf[kk], ks, warp * 16, kk * 16);

    float o[kOutTiles][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    for (int j = 0; j < tiles; ++j) {
        const int key0 = j * kFlashMmaKeys;
        __syncthreads();  // every warp is done with tile j - 1 (and Q): the buffers are free
        load_tile<kD>(ks, kb + std::size_t(key0) * kD, kv_len - key0);
        load_tile<kD>(vs, vb + std::size_t(key0) * kD, kv_len - key0);
        __syncthreads();  // tile j is complete before any warp reads it

        // S = Q K^T for the warp's 16 rows and the tile's 64 keys: 8 n8 tiles of accumulators.
        float s[kFlashScoreTiles][4] = {};
#pragma unroll
        for (int kk = 0; kk < kDimSteps; ++kk)
#pragma unroll
            for (int n = 0; n < kFlashScoreTiles; n += 2) {
                std::uint32_t b0[2], b1[2];
                load_b_rows<kD>(b0, b1, ks, n * 8, kk * 16);
                mma_m16n8k16_bf16(s[n], qf[kk], b0, s[n]);
                mma_m16n8k16_bf16(s[n + 1], qf[kk], b1, s[n + 1]);
            }
        // Only a tile that crosses some row's last allowed key (the diagonal, or the end of K)
        // is masked: element e of n8 tile n is row rows[e / 2], key key0 + 8 n + 2 t + e % 2.
        if (key0 + kFlashMmaKeys > unmasked_keys) {
#pragma unroll
            for (int n = 0; n < kFlashScoreTiles; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (key0 + n * 8 + t * 2 + e % 2 >= limit[e / 2]) s[n][e] = -INFINITY;
        }

        // [flash_mma_softmax]
        // The online softmax on the fragments: a row's 64 scores of the tile lie in the 4 lanes
        // of its group (16 each), so its maximum takes two shuffles. l stays a per-lane partial
        // sum (every lane of a group rescales by the same factor) until the end.
#pragma unroll
        for (int r = 0; r < 2; ++r) {  // rows g and g + 8: elements 2r and 2r + 1 of each tile
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < kFlashScoreTiles; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[r], mx * scale_log2);
            // A row that has seen only masked keys keeps m = -inf; subtracting 0 instead keeps
            // exp2(-inf - (-inf)) = NaN out (its p are exp2(-inf) = 0).
            const float m_use = m_new == -INFINITY ? 0.f : m_new;
            const float correction = exp2f(m[r] - m_use);  // 0 on a row's first keys (m = -inf)
            l[r] *= correction;
#pragma unroll
            for (int n = 0; n < kOutTiles; ++n) o[n][2 * r] *= correction, o[n][2 * r + 1] *= correction;
#pragma unroll
            for (int n = 0; n < kFlashScoreTiles; ++n)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; ++e) {
                    s[n][e] = exp2f(fmaf(s[n][e], scale_log2, -m_use));  // p = e^(s / sqrt(d) - m)
                    l[r] += s[n][e];
                }
            m[r] = m_new;
        }
        // [flash_mma_softmax]

        // [flash_mma_p_registers]
        // P as the A operand of P V, in registers: for key step kk (keys 16 kk .. + 15), A's
        // (g, 2t .. 2t+1) and (g + 8, ..) are elements 0-1 and 2-3 of S's n8 tile 2 kk, and
        // its columns + 8 the same elements of tile 2 kk + 1. Only the type changes, to bf16.
        std::uint32_t pf[kFlashMmaKeys / 16][4];
#pragma unroll
        for (int kk = 0; kk < kFlashMmaKeys / 16; ++kk) {
            pf[kk][0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            pf[kk][1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            pf[kk][2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pf[kk][3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        // [flash_mma_p_registers]

        // O += P V: 4 key steps of 16, V's rows are the B operand.
#pragma unroll
        for (int kk = 0; kk < kFlashMmaKeys / 16; ++kk)
#pragma unroll
            for (int n = 0; n < kOutTiles; n += 2) {
                std::uint32_t b0[2], b1[2];
                load_b_cols<kD>(b0, b1, vs, kk * 16, n * 8);
                mma_m16n8k16_bf16(o[n], pf[kk], b0, o[n]);
                mma_m16n8k16_bf16(o[n + 1], pf[kk], b1, o[n + 1]);
            }
    }

    // The row sums' 4 parts, then O = acc / l and lse = ln(sum e^(s / sqrt(d))) = (m + log2 l) ln 2.
    // Every row below Sq has seen key 0, so l >= 1.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= q_len) continue;
        const float inv = 1.f / l[r];
        float* o_row = out + (head_row + rows[r]) * kD;
#pragma unroll
        for (int n = 0; n < kOutTiles; ++n) store_pair(o_row + n * 8 + t * 2, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (lse && t == 0) lse[head_row + rows[r]] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
    }
#else
    __trap();  // built for a GPU older than sm_80: the launcher refuses to get here
#endif
}
// [flash_v4_kernel]

namespace {

/// Launches v4 at head dimension kD: grid (query tiles of 64, H, B), 128 threads, 16 or 32 KiB
/// of dynamic shared memory (a K and a V tile).
template <int kD>
void launch_v4(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
               const Shape& s, cudaStream_t stream) {
    constexpr int bytes = 2 * kFlashMmaTileBytes<kD>;
    const dim3 grid(unsigned(ceil_div(s.q_len, kFlashMmaQueries)), unsigned(s.heads), unsigned(s.batch));
    const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(kD)));  // log2(e) / sqrt(d)
    flash_mma_kernel<kD><<<grid, kFlashMmaThreads, bytes, stream>>>(q, k, v, out, lse, s.heads, s.kv_head_count(),
                                                                    s.q_len, s.kv_len, s.causal, scale_log2);
    PD_CHECK_LAUNCH();
}

}  // namespace

void flash_attention_v4(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream) {
    check_flash_mma("v4", q, k, v, out, s);
    if (s.head_dim == 64) return launch_v4<64>(q, k, v, out, lse, s, stream);
    launch_v4<128>(q, k, v, out, lse, s, stream);
}

}  // namespace pd::kernels::attention
