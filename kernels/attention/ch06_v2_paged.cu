/// @file ch06_v2_paged.cu
/// @brief Chapter 06, paged decode attention v2: chapter 04's v4 through the block table.
/// Predecessor: ch04_v4_split.cu. The one change: where a position's K and V rows are. v4 reads
/// sequence b's positions from its slot, row j at j * d; here they live in the blocks the block
/// table gives it (PagedRows, cache_rows.cuh: position j in block table[b][j / block_size], at
/// offset j % block_size), looked up per key, a key with no block being skipped; and a split is a
/// run of whole blocks. v1 (lab 06, solutions/06_paged_kv/block_table_walk.cu) is chapter 04's v2
/// walking the table.
#include "attention/cache_rows.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Keys whose K and V rows a warp of paged v2 loads before computing with them (as chapter 04's v3 and v4).
constexpr int kPagedKeysInFlight = 4;

// [paged_v2_kernel]
/// Block (kv head, b, split): chapter 04's v4 block over positions [split * chunk, min(len,
/// (split + 1) * chunk)) of sequence b, len = kv_len[b] clamped to @p limit, each position's rows
/// found through @p rows (a key with no block is skipped). With one split the block writes the
/// output; with several its partial state, unnormalized, to @p partials: acc [B, Hq, splits, d],
/// then m and l [B, Hq, splits].
template <typename T, int kG>
__global__ void paged_decode_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                    PagedRows rows, const int* __restrict__ kv_len, float* __restrict__ out,
                                    float* __restrict__ partials, int heads, int kv_heads, int d, int limit, int chunk,
                                    float scale) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = context_length(kv_len, b, limit);
    const int begin = int(min((long long)split * chunk, (long long)len));  // no int overflow near the limits
    const int end = min(len - begin, chunk) + begin;
    const auto head = rows.of(b, kvh);  // where this sequence's positions of KV head kvh live
    const std::size_t first_q = std::size_t(b) * heads + std::size_t(kvh) * group;  // query heads of the group

    float qr[kG][kLaneDims] = {};  // zeros past the group
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        if (g < group) load_lane_dims(q + (first_q + g) * d, d, qr[g]);
        for (float& x : qr[g]) x *= scale;
    }
    OnlineState st[kG];
    // Each warp takes kPagedKeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = begin + warp * kPagedKeysInFlight; j0 < end; j0 += kDecodeWarps * kPagedKeysInFlight) {
        float kr[kPagedKeysInFlight][kLaneDims] = {}, vr[kPagedKeysInFlight][kLaneDims] = {};
        long long at[kPagedKeysInFlight];  // each key's row in the cache, -1 past the split or with no block
#pragma unroll
        for (int u = 0; u < kPagedKeysInFlight; ++u) {
            at[u] = j0 + u < end ? head.row(j0 + u) : -1;
            if (at[u] < 0) continue;
            load_lane_dims(k + at[u], d, kr[u]);  // K and V rows: read once for the whole group
            load_lane_dims(v + at[u], d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kPagedKeysInFlight; ++u) {
            if (at[u] < 0) continue;  // the same for the whole warp: its shuffles stay converged
#pragma unroll
            for (int g = 0; g < kG; ++g) {
                if (g >= group) break;                                 // `group` is the same in the whole block
                online_update(st[g], dot_lanes(qr[g], kr[u]), vr[u]);  // the online softmax of v2, per query
            }
        }
    }
    merge_warps<kG>(st, group, d, shared, [&](int g, int c, float M, float L, float A) {
        const std::size_t row = first_q + g;  // b * Hq + h
        if (splits == 1) {
            out[row * d + c] = L > 0.f ? A / L : 0.f;
        } else {
            const std::size_t part = row * splits + split;
            partials[part * d + c] = A;
            if (c == 0) {
                const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;  // after all acc
                partials[stats + part] = M;
                partials[stats + std::size_t(gridDim.y) * heads * splits + part] = L;
            }
        }
    });
}
// [paged_v2_kernel]

// [paged_combine_kernel]
/// The second kernel, block (h, b), as chapter 04's v4's: the splits' states merge as the warps' did inside a block:
/// M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. A split past the end of
/// a shorter sequence saw no key (m = -inf) and weighs 0.
__global__ void paged_combine_kernel(const float* __restrict__ partials, float* __restrict__ out, int heads, int d,
                                     int splits) {
    const std::size_t row = std::size_t(blockIdx.y) * heads + blockIdx.x;
    const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;
    const float* m = partials + stats + row * splits;
    const float* l = m + std::size_t(gridDim.y) * heads * splits;
    const float* acc = partials + row * splits * d;
    float M = -INFINITY;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, m[s]);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float L = 0.f, A = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float w = m[s] == -INFINITY ? 0.f : expf(m[s] - M);
            L = fmaf(l[s], w, L);
            A = fmaf(acc[std::size_t(s) * d + c], w, A);
        }
        out[row * d + c] = L > 0.f ? A / L : 0.f;
    }
}
// [paged_combine_kernel]

namespace {

template <typename T, int kG>
void launch_v2_for(const float* q, const T* k, const T* v, const PagedRows& rows, const int* kv_len, float* out,
                   float* partials, int splits, int chunk, const PagedShape& s, cudaStream_t stream) {
    const dim3 grid(unsigned(s.kv_heads), unsigned(s.batch), unsigned(splits));
    paged_decode_kernel<T, kG><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, rows, kv_len, out, partials, s.heads,
                                                                    s.kv_heads, s.head_dim, s.max_kv_len, chunk,
                                                                    1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

/// Checks the shape and launches paged v2, instantiated for the smallest of 1, 2, 4, 8, 16 query
/// heads that holds the group: grid (Hkv, B, splits), 128 threads, each split a run of
/// ceil(blocks / splits) whole blocks (chunks never share a block); then, with several splits,
/// the combine.
template <typename T>
void launch_v2(const float* q, const T* k, const T* v, const int* table, const int* kv_len, float* out, float* partials,
               int splits, const PagedShape& s, cudaStream_t stream) {
    check_paged_shape(s);
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("paged attention v2: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("paged attention v2: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    if (splits > 1 && partials == nullptr)
        throw std::invalid_argument("paged attention v2: partials is null with splits = " + std::to_string(splits));
    const PagedRows rows = paged_rows(table, s);
    const int chunk = ceil_div(ceil_div(s.max_kv_len, s.block_size), splits) * s.block_size;
    const int group = s.group();
    if (group <= 1)
        launch_v2_for<T, 1>(q, k, v, rows, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 2)
        launch_v2_for<T, 2>(q, k, v, rows, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 4)
        launch_v2_for<T, 4>(q, k, v, rows, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 8)
        launch_v2_for<T, 8>(q, k, v, rows, kv_len, out, partials, splits, chunk, s, stream);
    else
        launch_v2_for<T, 16>(q, k, v, rows, kv_len, out, partials, splits, chunk, s, stream);
    if (splits > 1) {
        paged_combine_kernel<<<dim3(unsigned(s.heads), unsigned(s.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, s.heads, s.head_dim, splits);
        PD_CHECK_LAUNCH();
    }
}

}  // namespace

void paged_decode_attention_v2(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                               cudaStream_t stream) {
    launch_v2(q, k_cache, v_cache, block_table, kv_len, out, partials, splits, s, stream);
}
void paged_decode_attention_v2(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                               const PagedShape& s, cudaStream_t stream) {
    launch_v2(q, k_cache, v_cache, block_table, kv_len, out, partials, splits, s, stream);
}

}  // namespace pd::kernels::attention
