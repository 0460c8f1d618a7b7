/// @file ch07_v3_causal_skip.cu
/// @brief Chapter 07, flash attention v3: v2 + causal block skipping. Predecessor: v2,
/// ch07_v2_split_q.cu. The one change: the block stops at its last query's last allowed key, and
/// a warp at its own last query's, so the key tiles above the diagonal of a causal problem are
/// never loaded (block) or computed (warp): about half the work of a square causal prompt.
///
/// The model's attention of a mixed batch (chapters 05, 06 and 08) is this kernel's body reading
/// its rows through the cache's accessors: kernels/runtime/flash_varlen.cu; the split-KV form
/// for a few queries over a long context is ch07_split_kv.cu.
#include "attention/flash_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>

namespace pd::kernels::attention {

// [flash_v3_kernel]
/// Block (x, h, b): out and lse of queries 16 x ... 16 x + 15 of head h of sequence b.
template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_causal_skip_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             float* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int q_len,
                             int kv_len, int d, bool causal, float scale) {
    __shared__ float qs[kFlashSimtQueries][kMaxHeadDim];  // the block's queries, pre-scaled
    // K padded by one float: lane j reads row j at column c, bank (j + c) % 32, all different
    __shared__ float ks[kFlashSimtKeys][kMaxHeadDim + 1], vs[kFlashSimtKeys][kMaxHeadDim];
    __shared__ float ps[kDecodeWarps][kFlashQueriesPerWarp][kFlashSimtKeys];  // each warp's p of the tile
    const int h = blockIdx.y, b = blockIdx.z, first = blockIdx.x * kFlashSimtQueries;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const std::size_t q_row = (std::size_t(b) * heads + h) * q_len;  // row 0 of this head in Q, O and lse
    const std::size_t kv_row = (std::size_t(b) * kv_heads + h / (heads / kv_heads)) * kv_len;

    for (int e = threadIdx.x; e < kFlashSimtQueries * d; e += blockDim.x) {  // rows past Sq: zeros
        const int g = e / d, c = e % d;
        qs[g][c] = first + g < q_len ? to_f32(q[(q_row + first + g) * d + c]) * scale : 0.f;
    }
    const int i0 = first + warp * kFlashQueriesPerWarp;              // this warp's first query
    const int mine = max(0, min(kFlashQueriesPerWarp, q_len - i0));  // and how many it has
    int keys[kFlashQueriesPerWarp];                                  // keys each query may see
    float m[kFlashQueriesPerWarp], l[kFlashQueriesPerWarp];          // running max; this lane's part of the sum
    float acc[kFlashQueriesPerWarp][kLaneDims];                      // this lane's dimensions of O, unnormalized
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        keys[g] = g < mine ? allowed_keys(i0 + g, q_len, kv_len, causal) : 0;
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) acc[g][r] = 0.f;
    }

    // [flash_block_skipping]
    // The block's last query sees the most keys, and a warp's last query the most of the warp's;
    // no tile after them is loaded (block) or computed (warp).
    const int block_end = allowed_keys(min(first + kFlashSimtQueries, q_len) - 1, q_len, kv_len, causal);
    const int warp_end = mine > 0 ? keys[mine - 1] : 0;
    // [flash_block_skipping]

    for (int j0 = 0; j0 < block_end; j0 += kFlashSimtKeys) {
        const int tile = min(kFlashSimtKeys, block_end - j0);
        // The whole block loads the tile, consecutive threads reading consecutive elements of a
        // row (coalesced); keys past the block's last are zeros.
        for (int e = threadIdx.x; e < kFlashSimtKeys * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            const bool here = r < tile;
            ks[r][c] = here ? to_f32(k[(kv_row + j0 + r) * d + c]) : 0.f;
            vs[r][c] = here ? to_f32(v[(kv_row + j0 + r) * d + c]) : 0.f;
        }
        __syncthreads();  // the tile (and the query tile) is complete before any warp reads it
        if (j0 < warp_end) {
            // 1. lane j scores key j for each query, the warp takes the tile's maximum, rescales
            //    the state once and leaves p_j = exp(s_j - m_new) for the P V below
#pragma unroll
            for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
                if (g >= mine) break;
                float s = 0.f;
                for (int c = 0; c < d; ++c) s = fmaf(qs[warp * kFlashQueriesPerWarp + g][c], ks[lane][c], s);
                if (lane >= tile || j0 + lane >= keys[g]) s = -INFINITY;  // past the block's keys, or masked
                const float m_new = fmaxf(m[g], warp_reduce(s, MaxOp{}));
                float p = 0.f;
                if (m_new != -INFINITY) {  // every key so far masked: nothing to add (and no NaN)
                    const float correction = expf(m[g] - m_new);  // 0 while the state is empty
                    p = s == -INFINITY ? 0.f : expf(s - m_new);
                    l[g] = l[g] * correction + p;
#pragma unroll
                    for (int r = 0; r < kLaneDims; ++r) acc[g][r] *= correction;
                    m[g] = m_new;
                }
                ps[warp][g][lane] = p;
            }
            __syncwarp();  // every lane's p is in shared memory

            // 2. O += P V: lane l adds p_j v_j over its dimensions; a masked key (p = 0) is
            //    skipped, whatever its V row holds
#pragma unroll
            for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
                if (g >= mine) break;
                for (int j = 0; j < tile; ++j) {
                    const float p = ps[warp][g][j];
                    if (p == 0.f) continue;  // the same in every lane
#pragma unroll
                    for (int r = 0; r < kLaneDims; ++r)
                        if (lane + r * kWarpSize < d) acc[g][r] = fmaf(p, vs[j][lane + r * kWarpSize], acc[g][r]);
                }
            }
        }
        __syncthreads();  // every warp is done with the tile (and ps) before the next overwrites it
    }

    // A warp has seen every key of its queries: no merge across warps, only the lanes' parts of
    // l to add.
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        if (g >= mine) break;
        const float L = warp_reduce_sum(l[g]);
        const std::size_t row = q_row + i0 + g;
        float* o = out + row * d;
        const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = acc[g][r] * inv;
        }
        if (lse && lane == 0) lse[row] = L > 0.f ? m[g] + logf(L) : -INFINITY;
    }
}
// [flash_v3_kernel]

namespace {

/// Checks the shape and launches v3: grid (query tiles, H, B), 128 threads.
template <typename T>
void launch_flash_v3(const T* q, const T* k, const T* v, float* out, float* lse, const Shape& s, cudaStream_t stream) {
    check_flash_shape(s);
    const dim3 grid(unsigned(ceil_div(s.q_len, kFlashSimtQueries)), unsigned(s.heads), unsigned(s.batch));
    flash_causal_skip_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, out, lse, s.heads, s.kv_head_count(),
                                                                     s.q_len, s.kv_len, s.head_dim, s.causal,
                                                                     1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

}  // namespace

void flash_attention_v3(const float* q, const float* k, const float* v, float* out, float* lse, const Shape& s,
                        cudaStream_t stream) {
    launch_flash_v3(q, k, v, out, lse, s, stream);
}
void flash_attention_v3(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream) {
    launch_flash_v3(q, k, v, out, lse, s, stream);
}

}  // namespace pd::kernels::attention
