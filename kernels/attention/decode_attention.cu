/// @file decode_attention.cu
/// @brief Decode attention v1 (scores in memory, two-pass softmax), v3 (one block per KV head
/// serving its query group) and v4 (v3 split over the context, with a combine kernel), the
/// shape checks, v4's split rule and the dispatch. The v3/v4 kernel body also reads chapter
/// 06's paged cache, through its block table (paged v2, launched here too). v2 is lab 04
/// (decode_attention_online.cu).
#include "attention/cache_rows.cuh"
#include "attention/decode_attention.hpp"
#include "attention/kv_quant.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"

#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

void check_cache_shape(const CacheShape& s) {
    const std::pair<const char*, int> sizes[] = {
        {"batch", s.batch}, {"kv_heads", s.kv_heads}, {"max_seq", s.max_seq}, {"head_dim", s.head_dim}};
    for (const auto& [name, v] : sizes)
        if (v < 1)
            throw std::invalid_argument(std::string("kv cache: ") + name + " must be >= 1, got " + std::to_string(v));
}

void check_decode_shape(const DecodeShape& s) {
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("decode attention: " + msg); };
    const std::pair<const char*, int> sizes[] = {{"batch", s.batch},       {"heads", s.heads},
                                                 {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim},
                                                 {"max_seq", s.max_seq},   {"max_kv_len", s.max_kv_len}};
    for (const auto& [name, v] : sizes)
        if (v < 1) fail(std::string(name) + " must be >= 1, got " + std::to_string(v));
    if (s.heads % s.kv_heads != 0)
        fail("heads = " + std::to_string(s.heads) + " must be a multiple of kv_heads = " + std::to_string(s.kv_heads));
    if (s.head_dim > kMaxHeadDim)
        fail("head_dim = " + std::to_string(s.head_dim) + " exceeds " + std::to_string(kMaxHeadDim));
    if (s.max_kv_len > s.max_seq)
        fail("max_kv_len = " + std::to_string(s.max_kv_len) +
             " exceeds the cache's max_seq = " + std::to_string(s.max_seq));
    if (s.batch > 65535 || s.heads > 65535)
        fail("batch and heads must be <= 65535 (grid limits), got " + std::to_string(s.batch) + " and " +
             std::to_string(s.heads));
}

// ---- v1: scores in memory, two-pass softmax -------------------------------------------------

// [decode_v1_kernel]
/// Block (h, b): the scores of the query against every cached key go to memory (one warp per
/// key in turn), then the block finds their maximum, then exponentiates and sums them (the
/// two passes of chapter 01's softmax), then thread c adds up P V for dimension c.
template <typename T>
__global__ void decode_attention_v1_kernel(const float* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, const int* __restrict__ kv_len,
                                           float* __restrict__ out, float* __restrict__ scores, int heads, int kv_heads,
                                           int d, int max_seq, int max_kv_len, float scale) {
    __shared__ float partials[kDecodeWarps];
    const int h = blockIdx.x, b = blockIdx.y;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int len = min(context_length(kv_len, b, max_seq), max_kv_len);
    const std::size_t kv_head = std::size_t(b) * kv_heads + h / (heads / kv_heads);
    const T* kh = k + kv_head * max_seq * d;
    const T* vh = v + kv_head * max_seq * d;
    float* s = scores + (std::size_t(b) * heads + h) * max_kv_len;  // this row of the score buffer

    float qr[kLaneDims];
    load_lane_dims(q + (std::size_t(b) * heads + h) * d, d, qr);
    for (int j = warp; j < len; j += kDecodeWarps) {  // 1. scores, one warp per key
        float kr[kLaneDims];
        load_lane_dims(kh + std::size_t(j) * d, d, kr);
        const float dot = dot_lanes(qr, kr);
        if (lane == 0) s[j] = dot * scale;
    }
    __syncthreads();  // the scores in memory are visible to the whole block

    float m = -INFINITY;  // 2. the maximum
    for (int j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, s[j]);
    m = block_reduce<kDecodeWarps>(m, partials, MaxOp{}, -INFINITY);
    float l = 0.f;  // 3. exponentiate in place and sum
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float e = expf(s[j] - m);
        s[j] = e;
        l += e;
    }
    l = block_reduce<kDecodeWarps>(l, partials, SumOp{}, 0.f);  // its barriers also publish s[]

    for (int c = threadIdx.x; c < d; c += blockDim.x) {  // 4. P V: consecutive threads, consecutive c
        float acc = 0.f;
        for (int j = 0; j < len; ++j) acc = fmaf(s[j], to_f32(vh[std::size_t(j) * d + c]), acc);
        out[(std::size_t(b) * heads + h) * d + c] = l > 0.f ? acc / l : 0.f;
    }
}
// [decode_v1_kernel]

// ---- v3 and v4: one block per KV head and its query group, optionally split ------------------

/// Keys whose K and V rows a warp of v3 and v4 loads before computing with them.
constexpr int kKeysInFlight = 4;

// [decode_gqa_kernel]
/// Block (kv head, b, split): the group's query heads (up to kG of them, `group` in use) all
/// attend to positions [split * chunk, min(len, (split + 1) * chunk)) of the same KV head, so
/// every K and V row is loaded once and used for each query of the group (v2 loads it once
/// per query head). Each warp keeps one OnlineState per query and works on kKeysInFlight
/// consecutive keys at a time. @p rows says where a position's rows are: chapter 04's slot
/// (v3, v4) or chapter 06's blocks (paged v2, whose chunks are whole blocks); a key with no row
/// (no block in the table) is skipped. The context is kv_len[b], clamped to @p limit. With one
/// split the block writes the output; with several it writes its partial state, unnormalized,
/// to @p partials: acc [B, Hq, splits, d], then m and l [B, Hq, splits]. T is the cache's
/// element: fp32, bf16, or an 8-bit code (chapter 08) whose row is multiplied by its scale from
/// @p k_scales / @p v_scales as it is loaded (unused, null, for fp32 and bf16).
template <typename T, int kG, typename Rows>
__global__ void decode_attention_gqa_kernel(const float* __restrict__ q, const T* __restrict__ k,
                                            const T* __restrict__ v, const float* __restrict__ k_scales,
                                            const float* __restrict__ v_scales, Rows rows,
                                            const int* __restrict__ kv_len, float* __restrict__ out,
                                            float* __restrict__ partials, int heads, int kv_heads, int d, int limit,
                                            int chunk, float scale) {
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
    // Each warp takes kKeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = begin + warp * kKeysInFlight; j0 < end; j0 += kDecodeWarps * kKeysInFlight) {
        float kr[kKeysInFlight][kLaneDims] = {}, vr[kKeysInFlight][kLaneDims] = {};
        long long at[kKeysInFlight];  // each key's row in the cache, -1 past the split or with no row
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
            at[u] = j0 + u < end ? head.row(j0 + u) : -1;
            if (at[u] < 0) continue;
            load_lane_dims(k, k_scales, at[u], d, kr[u]);  // K and V rows: read once for the whole group
            load_lane_dims(v, v_scales, at[u], d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
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
// [decode_gqa_kernel]

// [decode_combine_kernel]
/// v4's second kernel, block (h, b): the splits' states merge as the warps' did inside a block:
/// M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. A split past the end of
/// a shorter sequence saw no key (m = -inf) and weighs 0.
__global__ void decode_combine_kernel(const float* __restrict__ partials, float* __restrict__ out, int heads, int d,
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
// [decode_combine_kernel]

// ---- launchers --------------------------------------------------------------------------------

namespace {

float scale_of(const DecodeShape& s) {
    return 1.0f / std::sqrt(float(s.head_dim));
}

template <typename T>
void launch_v1(const float* q, const T* k, const T* v, const int* kv_len, float* out, float* scores,
               const DecodeShape& s, cudaStream_t stream) {
    check_decode_shape(s);
    const dim3 grid(unsigned(s.heads), unsigned(s.batch));
    decode_attention_v1_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, kv_len, out, scores, s.heads, s.kv_heads, s.head_dim, s.max_seq, s.max_kv_len, scale_of(s));
    PD_CHECK_LAUNCH();
}

/// The sizes every launch of the v3/v4 kernel needs, from either cache's shape.
struct GqaLaunch {
    int batch, heads, kv_heads, head_dim;
    int limit;   ///< the longest context a sequence may have (kv_len is clamped to it)
    int chunk;   ///< positions per split
    int splits;  ///< blocks per (sequence, KV head)
};

/// The v3/v4 kernel for a group of up to kG query heads.
template <typename T, int kG, typename Rows>
void launch_gqa_for(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                    const Rows& rows, const int* kv_len, float* out, float* partials, const GqaLaunch& g,
                    cudaStream_t stream) {
    const dim3 grid(unsigned(g.kv_heads), unsigned(g.batch), unsigned(g.splits));
    decode_attention_gqa_kernel<T, kG, Rows><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g.heads, g.kv_heads, g.head_dim, g.limit, g.chunk,
        1.0f / std::sqrt(float(g.head_dim)));
    PD_CHECK_LAUNCH();
}

/// v3 and v4 (either cache): the kernel instantiated for the smallest of 1, 2, 4, 8, 16 query
/// heads that holds the group; then, with several splits, the combine.
template <typename T, typename Rows>
void launch_gqa(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales, const Rows& rows,
                const int* kv_len, float* out, float* partials, const GqaLaunch& g, cudaStream_t stream) {
    const int group = g.heads / g.kv_heads;
    if (group <= 1)
        launch_gqa_for<T, 1>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 2)
        launch_gqa_for<T, 2>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 4)
        launch_gqa_for<T, 4>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 8)
        launch_gqa_for<T, 8>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else
        launch_gqa_for<T, 16>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    if (g.splits > 1) {
        decode_combine_kernel<<<dim3(unsigned(g.heads), unsigned(g.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, g.heads, g.head_dim, g.splits);
        PD_CHECK_LAUNCH();
    }
}

/// v3 (splits = 1) and v4 on chapter 04's contiguous cache: sequence b in slot b, splits of
/// ceil(max_kv_len / splits) positions.
template <typename T>
void launch_contiguous(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                       const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                       cudaStream_t stream) {
    check_decode_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "decode attention v3/v4");
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("decode attention v3/v4: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("decode attention v4: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    const SlotRows rows{
        .slot = nullptr, .slots = s.batch, .kv_heads = s.kv_heads, .max_seq = s.max_seq, .d = s.head_dim};
    launch_gqa(q, k, v, k_scales, v_scales, rows, kv_len, out, partials,
               {s.batch, s.heads, s.kv_heads, s.head_dim, s.max_seq, ceil_div(s.max_kv_len, splits), splits}, stream);
}

/// Paged v2: the same kernel through the block table, each split a run of whole blocks,
/// ceil(blocks / splits) of them (chunks never share a block).
template <typename T>
void launch_paged(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                  const int* table, const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                  cudaStream_t stream) {
    check_paged_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "paged attention v2");
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
    launch_gqa(q, k, v, k_scales, v_scales, rows, kv_len, out, partials,
               {s.batch, s.heads, s.kv_heads, s.head_dim, s.max_kv_len, chunk, splits}, stream);
}

}  // namespace

// [split_rule]
int decode_splits(const DecodeShape& s, int sm_count) {
    check_decode_shape(s);
    // Enough blocks for about four per SM (one block per KV head and sequence is far too few
    // at small batch: 8 blocks for llama-3-8b at B = 1 on 132 SMs), but at most one split per
    // kKeysPerSplit positions of the batch's longest context, so that for a context over 128
    // a split averages more than 64 positions (the partial results and the combine must stay
    // small next to the K and V a split reads). When that bound binds, a split holds
    // ceil(S / ceil(S / 128)) <= 128 positions: 8 of 125 for 1,000, 65 and 64 for 129.
    constexpr int kBlocksPerSm = 4, kKeysPerSplit = 128;
    const long blocks = long(s.batch) * s.kv_heads;
    const long wanted = (long(std::max(sm_count, 1)) * kBlocksPerSm + blocks - 1) / blocks;
    const long longest = (long(s.max_kv_len) + kKeysPerSplit - 1) / kKeysPerSplit;
    return int(std::clamp<long>(std::min(wanted, longest), 1, kMaxSplits));
}
// [split_rule]

std::size_t decode_workspace_floats(const std::string& version, const DecodeShape& s, int sm_count) {
    check_decode_shape(s);
    if (version == "v1") return std::size_t(s.batch) * s.heads * s.max_kv_len;
    if (version == "v4") return std::size_t(s.batch) * s.heads * decode_splits(s, sm_count) * (s.head_dim + 2);
    return 0;
}

void decode_attention_v1(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* scores,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_v1(q, k, v, kv_len, out, scores, s, stream);
}
void decode_attention_v1(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* scores, const DecodeShape& s, cudaStream_t stream) {
    launch_v1(q, k, v, kv_len, out, scores, s, stream);
}
void decode_attention_v3(const float* q, const float* k, const float* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, nullptr, nullptr, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v3(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, nullptr, nullptr, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v4(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* partials,
                         int splits, const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, nullptr, nullptr, kv_len, out, partials, splits, s, stream);
}
void decode_attention_v4(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* partials, int splits, const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, nullptr, nullptr, kv_len, out, partials, splits, s, stream);
}

void decode_attention_v3(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, k_scales, v_scales, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v3(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream) {
    launch_contiguous(q, k, v, k_scales, v_scales, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v4(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream) {
    launch_contiguous(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
}
void decode_attention_v4(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream) {
    launch_contiguous(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
}

void paged_decode_attention_v2(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                               cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, nullptr, nullptr, block_table, kv_len, out, partials, splits, s, stream);
}
void paged_decode_attention_v2(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                               const PagedShape& s, cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, nullptr, nullptr, block_table, kv_len, out, partials, splits, s, stream);
}

void paged_decode_attention_v2(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials, splits, s, stream);
}
void paged_decode_attention_v2(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials, splits, s, stream);
}

namespace {

template <typename T>
void dispatch(const std::string& version, const float* q, const T* k, const T* v, const int* kv_len, float* out,
              float* workspace, const DecodeShape& s, int sm_count, cudaStream_t stream) {
    if (version == "v1") return decode_attention_v1(q, k, v, kv_len, out, workspace, s, stream);
    if (version == "v2") return decode_attention_v2(q, k, v, kv_len, out, s, stream);
    if (version == "v3") return decode_attention_v3(q, k, v, kv_len, out, s, stream);
    if (version == "v4")
        return decode_attention_v4(q, k, v, kv_len, out, workspace, decode_splits(s, sm_count), s, stream);
    throw std::invalid_argument("decode attention: version = " + version + " is not one of v1, v2, v3, v4");
}

/// Chapter 08's 8-bit cache: v3 and v4 read it (v1 and lab 04's v2 take fp32 and bf16 only).
template <typename T>
void dispatch_kv8(const std::string& version, const float* q, const T* k, const T* v, const float* k_scales,
                  const float* v_scales, const int* kv_len, float* out, float* workspace, const DecodeShape& s,
                  int sm_count, cudaStream_t stream) {
    if (version == "v3") return decode_attention_v3(q, k, v, k_scales, v_scales, kv_len, out, s, stream);
    if (version == "v4")
        return decode_attention_v4(q, k, v, k_scales, v_scales, kv_len, out, workspace, decode_splits(s, sm_count), s,
                                   stream);
    throw std::invalid_argument("decode attention: version = " + version +
                                " does not read an 8-bit cache (v3 and v4 do)");
}

}  // namespace

void decode_attention(const std::string& version, const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales,
                      const float* v_scales, const int* kv_len, float* out, float* workspace, const DecodeShape& s,
                      int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k, v, k_scales, v_scales, kv_len, out, workspace, s, sm_count, stream);
}
void decode_attention(const std::string& version, const float* q, const Int8Kv* k, const Int8Kv* v,
                      const float* k_scales, const float* v_scales, const int* kv_len, float* out, float* workspace,
                      const DecodeShape& s, int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k, v, k_scales, v_scales, kv_len, out, workspace, s, sm_count, stream);
}

void decode_attention(const std::string& version, const float* q, const float* k, const float* v, const int* kv_len,
                      float* out, float* workspace, const DecodeShape& s, int sm_count, cudaStream_t stream) {
    dispatch(version, q, k, v, kv_len, out, workspace, s, sm_count, stream);
}
void decode_attention(const std::string& version, const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                      const int* kv_len, float* out, float* workspace, const DecodeShape& s, int sm_count,
                      cudaStream_t stream) {
    dispatch(version, q, k, v, kv_len, out, workspace, s, sm_count, stream);
}

}  // namespace pd::kernels::attention
