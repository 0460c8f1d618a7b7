/// @file ch07_split_kv.cu
/// @brief Chapter 07's split-KV form (flash decoding): few queries over a long context.
/// Predecessor: v3, ch07_v3_causal_skip.cu. The one change: the keys of each (sequence, head) are
/// divided among flash_splits() blocks, each running v3's body over its range and writing its
/// normalized partial O and its logsumexp to a workspace; a second kernel combines the ranges
/// (O = sum_i e^(lse_i - lse) O_i, lse = log sum_i e^(lse_i)), as chapter 04's decode v4 does.
/// A suffix of 1 to 16 queries fills one query tile per (sequence, head), too few blocks for a
/// GPU without the split.
#include "attention/flash_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

// [flash_split_kv_kernel]
/// Block (x, h, b), x = query tile t x splits + split: queries 16 t ... 16 t + 15 of head h of
/// sequence b over keys [split * split_keys, (split + 1) * split_keys) only; each query's O (over
/// those keys) and logsumexp go to row split * split_stride + its row. A query that sees no key of
/// the range writes zeros and a logsumexp of -inf, which weighs nothing in the combine.
template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_split_kv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          float* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int q_len,
                          int kv_len, int d, bool causal, float scale, int splits, int split_keys,
                          std::size_t split_stride) {
    __shared__ float qs[kFlashSimtQueries][kMaxHeadDim];  // the block's queries, pre-scaled
    // K padded by one float: lane j reads row j at column c, bank (j + c) % 32, all different
    __shared__ float ks[kFlashSimtKeys][kMaxHeadDim + 1], vs[kFlashSimtKeys][kMaxHeadDim];
    __shared__ float ps[kDecodeWarps][kFlashQueriesPerWarp][kFlashSimtKeys];  // each warp's p of the tile
    const int h = blockIdx.y, b = blockIdx.z;
    const int split = blockIdx.x % splits, first = blockIdx.x / splits * kFlashSimtQueries;
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

    // [flash_split_range]
    // This block's range of the keys, and v3's skipping within it.
    const int begin = split * split_keys, end = min(kv_len, begin + split_keys);
    const int block_end = min(end, allowed_keys(min(first + kFlashSimtQueries, q_len) - 1, q_len, kv_len, causal));
    const int warp_end = min(end, mine > 0 ? keys[mine - 1] : 0);
    // [flash_split_range]

    for (int j0 = begin; j0 < block_end; j0 += kFlashSimtKeys) {
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

    // A warp has seen every key of its queries in the range: no merge across warps, only the
    // lanes' parts of l to add.
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        if (g >= mine) break;
        const float L = warp_reduce_sum(l[g]);
        const std::size_t row = split * split_stride + q_row + i0 + g;
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
// [flash_split_kv_kernel]

// [flash_combine_kernel]
/// Block r: row r's output from its @p splits partial outputs, each normalized over its own
/// keys with logsumexp lse_i: with M = max_i lse_i, O = sum_i e^(lse_i - M) O_i / sum_i
/// e^(lse_i - M) and lse = M + log sum_i e^(lse_i - M) (a split whose keys the row may not see
/// has lse_i = -inf and weighs 0).
__global__ void flash_combine_kernel(const float* __restrict__ part_out, const float* __restrict__ part_lse,
                                     float* __restrict__ out, float* __restrict__ lse, int splits, std::size_t rows,
                                     int d) {
    const std::size_t r = blockIdx.x;
    float M = -INFINITY;
    for (int i = 0; i < splits; ++i) M = fmaxf(M, part_lse[i * rows + r]);
    float L = 0.f;
    for (int i = 0; i < splits; ++i) L += M == -INFINITY ? 0.f : expf(part_lse[i * rows + r] - M);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float A = 0.f;
        for (int i = 0; i < splits; ++i) {
            const float w = M == -INFINITY ? 0.f : expf(part_lse[i * rows + r] - M);
            A = fmaf(w, part_out[(i * rows + r) * d + c], A);
        }
        out[r * d + c] = L > 0.f ? A / L : 0.f;
    }
    if (lse && threadIdx.x == 0) lse[r] = L > 0.f ? M + logf(L) : -INFINITY;
}
// [flash_combine_kernel]

namespace {

/// The keys per split: the context over flash_splits() blocks, whole tiles.
int split_keys_of(const Shape& s, int splits) {
    return ceil_div(ceil_div(s.kv_len, splits), kFlashSimtKeys) * kFlashSimtKeys;
}

/// Launches the split kernel: grid (query tiles x splits, H, B), 128 threads.
template <typename T>
void launch_split(const T* q, const T* k, const T* v, float* out, float* lse, const Shape& s, int splits,
                  int split_keys, std::size_t split_stride, cudaStream_t stream) {
    const dim3 grid(unsigned(ceil_div(s.q_len, kFlashSimtQueries) * splits), unsigned(s.heads), unsigned(s.batch));
    flash_split_kv_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, out, lse, s.heads, s.kv_head_count(), s.q_len, s.kv_len, s.head_dim, s.causal,
        1.0f / std::sqrt(float(s.head_dim)), splits, split_keys, split_stride);
    PD_CHECK_LAUNCH();
}

template <typename T>
void split_kv(const T* q, const T* k, const T* v, float* out, float* lse, float* workspace, const Shape& s,
              int sm_count, cudaStream_t stream) {
    check_flash_shape(s);
    if (s.q_len > kFlashSplitMaxQueries)
        throw std::invalid_argument("flash attention split-KV: q_len = " + std::to_string(s.q_len) + " exceeds " +
                                    std::to_string(kFlashSplitMaxQueries) + " (use a version of flash_versions())");
    if (sm_count < 1) throw std::invalid_argument("flash attention split-KV: sm_count must be >= 1");
    const int want = flash_splits(s, sm_count), keys = split_keys_of(s, want), splits = ceil_div(s.kv_len, keys);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;
    if (splits == 1) {  // one range: v3's result, written directly
        launch_split(q, k, v, out, lse, s, 1, keys, 0, stream);
        return;
    }
    if (!workspace) throw std::invalid_argument("flash attention split-KV: workspace is null");
    float* part_out = workspace;
    float* part_lse = workspace + std::size_t(splits) * rows * s.head_dim;
    launch_split(q, k, v, part_out, part_lse, s, splits, keys, rows, stream);
    flash_combine_kernel<<<unsigned(rows), kDecodeThreads, 0, stream>>>(part_out, part_lse, out, lse, splits, rows,
                                                                        s.head_dim);
    PD_CHECK_LAUNCH();
}

}  // namespace

int flash_splits(const Shape& s, int sm_count) {
    const long long blocks = (long long)(s.batch) * s.heads * ceil_div(s.q_len, kFlashSimtQueries);
    const long long want = ceil_div(2LL * std::max(sm_count, 1), blocks);  // two blocks per SM
    return int(std::clamp<long long>(std::min<long long>(want, s.kv_len / 64), 1, kFlashMaxSplits));
}

std::size_t flash_split_workspace_floats(const Shape& s, int sm_count) {
    const int splits = flash_splits(s, sm_count);
    if (splits == 1) return 0;
    const int actual = ceil_div(s.kv_len, split_keys_of(s, splits));
    return std::size_t(actual) * s.batch * s.heads * s.q_len * (s.head_dim + 1);
}

void flash_attention_split_kv(const float* q, const float* k, const float* v, float* out, float* lse, float* workspace,
                              const Shape& s, int sm_count, cudaStream_t stream) {
    split_kv(q, k, v, out, lse, workspace, s, sm_count, stream);
}
void flash_attention_split_kv(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out,
                              float* lse, float* workspace, const Shape& s, int sm_count, cudaStream_t stream) {
    split_kv(q, k, v, out, lse, workspace, s, sm_count, stream);
}

}  // namespace pd::kernels::attention
