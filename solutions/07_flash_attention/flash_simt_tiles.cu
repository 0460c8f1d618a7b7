/// @file flash_simt_tiles.cu
/// @brief Lab 07: flash attention v1 (no predecessor), SIMT tiles with the online softmax. The first step after
/// chapter 01's three kernels: the same attention with no score matrix in memory.
///
/// One block per (query tile of 16, head h, sequence b), four warps. The block copies its 16
/// queries (scaled by 1 / sqrt(d)) into shared memory once, then walks the keys in tiles of 32:
/// it loads the tile's K and V rows into shared memory, and **each warp takes 8 of the tile's
/// keys for all 16 queries** (warp w: keys 8w ... 8w + 7 of every tile). A warp computes the 8
/// scores of a query (lanes hold 4 dimensions each; a shuffle reduction adds them) and folds
/// them into that query's running state (m, l, acc): the largest score so far, the sum of
/// exp(s - m), the sum of exp(s - m) v. So each warp ends with a partial softmax over a quarter
/// of the keys, and the four are merged through shared memory at the end (merge_warps()), as
/// decode attention v2 does. v2 changes exactly this split: each warp owns 4 queries and sees
/// every key, and the merge disappears.
#include "attention/flash_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>

namespace pd::kernels::attention {

/// Keys of each tile one warp of v1 takes: 8 of 32.
constexpr int kV1KeysPerWarp = kFlashSimtKeys / kDecodeWarps;

/// v1's shared memory: the K/V tile while the keys are walked, then the warps' states for the
/// merge (the tile is dead by then: one union, 32.5 KiB, beside the 8 KiB query tile).
union FlashV1Shared {
    struct {
        float k[kFlashSimtKeys][kMaxHeadDim];  ///< the tile's K rows, fp32
        float v[kFlashSimtKeys][kMaxHeadDim];  ///< the tile's V rows, fp32
    } tile;                                    ///< during the walk over the keys
    WarpStates<kFlashSimtQueries> merge;       ///< after it
};

// [flash_v1_kernel]
/// Block (x, h, b): out and lse of queries 16 x ... 16 x + 15 of head h of sequence b.
template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_simt_tiles_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                            float* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int q_len,
                            int kv_len, int d, bool causal, float scale) {
    __shared__ float qs[kFlashSimtQueries][kMaxHeadDim];
    __shared__ FlashV1Shared sh;
    const int h = blockIdx.y, b = blockIdx.z, first = blockIdx.x * kFlashSimtQueries;
    const int n = min(kFlashSimtQueries, q_len - first);  // the block's queries (fewer in the last tile)
    const int warp = threadIdx.x / kWarpSize;
    const std::size_t q_row = (std::size_t(b) * heads + h) * q_len + first;  // the block's first row of Q and O
    const std::size_t kv_row = (std::size_t(b) * kv_heads + h / (heads / kv_heads)) * kv_len;

    // 1. the query tile, pre-scaled, zeros past the last query
    for (int e = threadIdx.x; e < kFlashSimtQueries * d; e += blockDim.x) {
        const int g = e / d, c = e % d;
        qs[g][c] = g < n ? to_f32(q[(q_row + g) * d + c]) * scale : 0.f;
    }

    OnlineState st[kFlashSimtQueries];  // this warp's state for each query, over its keys
    for (int j0 = 0; j0 < kv_len; j0 += kFlashSimtKeys) {
        const int tile = min(kFlashSimtKeys, kv_len - j0);
        __syncthreads();  // the previous tile is consumed (and the query tile written)
        // 2. the block loads the tile's K and V rows, coalesced; rows past the end are zeros
        for (int e = threadIdx.x; e < kFlashSimtKeys * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            const bool here = r < tile;
            sh.tile.k[r][c] = here ? to_f32(k[(kv_row + j0 + r) * d + c]) : 0.f;
            sh.tile.v[r][c] = here ? to_f32(v[(kv_row + j0 + r) * d + c]) : 0.f;
        }
        __syncthreads();  // the tile is complete before any warp reads it
        // 3. this warp's 8 keys of the tile, for every query of the block
        float kr[kV1KeysPerWarp][kLaneDims], vr[kV1KeysPerWarp][kLaneDims];
#pragma unroll
        for (int j = 0; j < kV1KeysPerWarp; ++j) {
            load_lane_dims(&sh.tile.k[warp * kV1KeysPerWarp + j][0], d, kr[j]);
            load_lane_dims(&sh.tile.v[warp * kV1KeysPerWarp + j][0], d, vr[j]);
        }
#pragma unroll
        for (int g = 0; g < kFlashSimtQueries; ++g) {  // unrolled, so that st[] stays in registers
            if (g >= n) break;                         // the same for the whole block
            float qr[kLaneDims];
            load_lane_dims(&qs[g][0], d, qr);
            const int keys = allowed_keys(first + g, q_len, kv_len, causal);
            float s[kV1KeysPerWarp];  // the scores of this warp's keys; -inf where masked or past the end
#pragma unroll
            for (int j = 0; j < kV1KeysPerWarp; ++j) {
                const int key = j0 + warp * kV1KeysPerWarp + j;
                s[j] = dot_lanes(qr, kr[j]);
                if (key >= kv_len || key >= keys) s[j] = -INFINITY;
            }
            OnlineState& state = st[g];
            // [flash_v1_tile_update]
            // BEGIN LAB: fold this warp's 8 keys into the query's running state `state` (m, l, acc[kLaneDims]), one rescale for all 8: m_new = max(m, s[0..7]); if m_new is -INFINITY (every key this warp has seen so far was masked) leave the state as it is (exp(-inf - -inf) is NaN); otherwise multiply l and acc by exp(m - m_new), then for each key j that is not masked (s[j] > -INFINITY; a masked key's V row may hold anything, even NaN) add p = exp(s[j] - m_new) to l and p * vr[j][r] to acc[r]; m = m_new. Registers only (~15 lines)
            //~ (void)s;
            //~ (void)vr;
            //~ (void)state;
            float m_new = state.m;
#pragma unroll
            for (int j = 0; j < kV1KeysPerWarp; ++j) m_new = fmaxf(m_new, s[j]);
            if (m_new != -INFINITY) {
                const float correction = expf(state.m - m_new);  // 0 while the state is empty (m = -inf)
                state.l *= correction;
#pragma unroll
                for (int r = 0; r < kLaneDims; ++r) state.acc[r] *= correction;
#pragma unroll
                for (int j = 0; j < kV1KeysPerWarp; ++j) {
                    if (s[j] == -INFINITY) continue;  // a masked key adds nothing, whatever its V row holds
                    const float p = expf(s[j] - m_new);
                    state.l += p;
#pragma unroll
                    for (int r = 0; r < kLaneDims; ++r) state.acc[r] = fmaf(p, vr[j][r], state.acc[r]);
                }
                state.m = m_new;
            }
            // END LAB
            // [flash_v1_tile_update]
        }
    }
    __syncthreads();  // every warp is done with the last tile before the union holds the states

    // 4. merge the four warps' states of each query: O = A / L, logsumexp M + log L
    merge_warps<kFlashSimtQueries>(st, n, d, sh.merge, [&](int g, int c, float M, float L, float A) {
        out[(q_row + g) * d + c] = L > 0.f ? A / L : 0.f;
        if (lse && c == 0) lse[q_row + g] = L > 0.f ? M + logf(L) : -INFINITY;
    });
}
// [flash_v1_kernel]

/// Checks the shape and launches v1: grid (query tiles, H, B), 128 threads.
template <typename T>
void launch_flash_v1(const T* q, const T* k, const T* v, float* out, float* lse, const Shape& s, cudaStream_t stream) {
    check_flash_shape(s);
    const dim3 grid(unsigned(ceil_div(s.q_len, kFlashSimtQueries)), unsigned(s.heads), unsigned(s.batch));
    flash_simt_tiles_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, out, lse, s.heads, s.kv_head_count(),
                                                                    s.q_len, s.kv_len, s.head_dim, s.causal,
                                                                    1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

void flash_attention_v1(const float* q, const float* k, const float* v, float* out, float* lse, const Shape& s,
                        cudaStream_t stream) {
    launch_flash_v1(q, k, v, out, lse, s, stream);
}
void flash_attention_v1(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream) {
    launch_flash_v1(q, k, v, out, lse, s, stream);
}

}  // namespace pd::kernels::attention
