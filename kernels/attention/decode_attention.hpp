/// @file decode_attention.hpp
/// @brief Chapter 04: decode attention over the KV cache, in four steps. Each of the B
/// sequences has one new query token per head; it attends to the first kv_len[b] positions of
/// its cache (the new token's own K and V were appended first, so the mask rule
/// allowed_keys(0, 1, kv_len) admits them all). Includable from plain C++.
///
/// Layout: q [B, Hq, d] fp32; k, v one layer's cache [B, Hkv, S_max, d] in fp32 or bf16; out
/// [B, Hq, d] fp32; kv_len [B] on the device. Query head h reads KV head h / (Hq / Hkv).
/// Scores are scaled by 1 / sqrt(d); softmax and accumulation are in fp32.
#pragma once

#include "pd/common.hpp"
#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::attention {

/// Sizes of one layer's contiguous KV cache (chapter 04): [B, Hkv, S_max, d], one slot of S_max
/// positions per sequence, in fp32 or bf16 (the model's whole cache is [L, B, Hkv, S_max, d],
/// one array for K and one for V).
struct CacheShape {
    int batch = 1;     ///< B, sequences (cache slots)
    int kv_heads = 1;  ///< Hkv
    int max_seq = 1;   ///< S_max, positions per sequence
    int head_dim = 1;  ///< d
    /// Elements of one layer's K (or V): B * Hkv * S_max * d.
    std::size_t elements() const { return std::size_t(batch) * kv_heads * max_seq * head_dim; }
};

/// Throws std::invalid_argument naming the first size below 1. @param s the sizes to check
void check_cache_shape(const CacheShape& s);

/// The largest head dim the decode kernels take (4 values per lane of a warp; Llama uses 128).
constexpr int kMaxHeadDim = 128;
/// The largest GQA group (query heads per KV head) v3 and v4 take.
constexpr int kMaxGroup = 16;
/// The most splits v4 uses.
constexpr int kMaxSplits = 128;

/// Sizes of one decode attention call.
struct DecodeShape {
    int batch = 1;       ///< B sequences, one query token each
    int heads = 1;       ///< Hq query heads
    int kv_heads = 1;    ///< Hkv KV heads; Hq % Hkv == 0
    int head_dim = 64;   ///< d, even, <= kMaxHeadDim
    int max_seq = 1;     ///< S_max, the cache's positions per sequence (the row stride of K and V)
    int max_kv_len = 1;  ///< the longest kv_len[b] (sizes v1's workspace and v4's splits), <= S_max

    /// Query heads per KV head: Hq / Hkv.
    int group() const { return heads / kv_heads; }
    /// The cache's sizes (for kv_append).
    CacheShape cache() const { return {batch, kv_heads, max_seq, head_dim}; }
};

/// Throws std::invalid_argument naming the first parameter out of range. @param s the sizes to check
void check_decode_shape(const DecodeShape& s);

// [decode_versions]
/// The decode attention versions of chapter 04, in order.
inline const std::vector<Version>& decode_versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1", {fp32, bf16}, simt, "one block per (sequence, query head): scores in memory, two-pass softmax"},
        {"v2", {fp32, bf16}, simt, "v1 with the online softmax: one pass over K and V, no score buffer (lab 04)"},
        {"v3",
         {fp32, bf16},
         simt,
         "v2 per KV head: one block serves the group's query heads (K, V read once); 4 keys in flight per warp"},
        {"v4", {fp32, bf16}, simt, "v3 split over the context (flash-decoding): partial results, then a combine"},
    };
    return list;
}
// [decode_versions]

// [split_rule]
/// v4's number of splits for @p batch sequences of @p kv_heads KV heads whose longest context is
/// @p max_kv_len, on a GPU of @p sm_count SMs (decode_splits(); chapter 12's fixed-grid decode
/// applies it on the device to the lengths it finds there).
/// @param batch B  @param kv_heads Hkv  @param max_kv_len the longest context  @param sm_count SMs
PD_HOST_DEVICE constexpr int split_rule(int batch, int kv_heads, int max_kv_len, int sm_count) {
    // Enough blocks for about four per SM (one block per KV head and sequence is far too few
    // at small batch: 8 blocks for llama-3-8b at B = 1 on 132 SMs), but at most one split per
    // kKeysPerSplit positions of the batch's longest context, so that for a context over 128
    // a split averages more than 64 positions (the partial results and the combine must stay
    // small next to the K and V a split reads). When that bound binds, a split holds
    // ceil(S / ceil(S / 128)) <= 128 positions: 8 of 125 for 1,000, 65 and 64 for 129.
    constexpr int kBlocksPerSm = 4, kKeysPerSplit = 128;
    const long blocks = long(batch) * kv_heads;
    const long wanted = (long(sm_count > 1 ? sm_count : 1) * kBlocksPerSm + blocks - 1) / blocks;
    const long longest = (long(max_kv_len) + kKeysPerSplit - 1) / kKeysPerSplit;
    const long n = wanted < longest ? wanted : longest;
    return int(n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n));
}
// [split_rule]

/// v4's number of splits for @p s on a GPU of @p sm_count SMs: about four blocks per SM, at
/// most one split per 128 positions of the longest context (s.max_kv_len), at most kMaxSplits
/// (split_rule()). @param s the sizes (checked)  @param sm_count SMs
int decode_splits(const DecodeShape& s, int sm_count);

/// Floats of workspace @p version needs: v1 B Hq max_kv_len scores; v4 per split and query
/// head a max, a sum and d outputs; 0 for v2 and v3.
/// @param version "v1" ... "v4"  @param s the sizes  @param sm_count the device's SMs
std::size_t decode_workspace_floats(const std::string& version, const DecodeShape& s, int sm_count);

/// v1: one block per (sequence, query head); the scores go to @p scores [B, Hq, max_kv_len],
/// then a max pass and an exp-and-sum pass (the two-pass softmax of chapter 01), then P V.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp32  @param v [B, Hkv, S_max, d] fp32  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param scores [B, Hq, max_kv_len] workspace
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v1(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* scores,
                         const DecodeShape& s, cudaStream_t stream = nullptr);
/// v1 on a bf16 cache.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] bf16  @param v [B, Hkv, S_max, d] bf16  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param scores [B, Hq, max_kv_len] workspace
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v1(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* scores, const DecodeShape& s, cudaStream_t stream = nullptr);

/// v2 (lab 04): v1 with the online softmax, one pass over the keys and no score buffer.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp32  @param v [B, Hkv, S_max, d] fp32  @param kv_len [B] (device)
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v2(const float* q, const float* k, const float* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream = nullptr);
/// v2 on a bf16 cache.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] bf16  @param v [B, Hkv, S_max, d] bf16  @param kv_len [B] (device)
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v2(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream = nullptr);

/// v3: v2 with one block per (sequence, KV head) serving all Hq / Hkv query heads of its group,
/// so each K and V row is read once per group instead of once per query head; each warp loads
/// the K and V rows of 4 keys before computing with them (more loads in flight).
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp32  @param v [B, Hkv, S_max, d] fp32  @param kv_len [B] (device)
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v3(const float* q, const float* k, const float* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream = nullptr);
/// v3 on a bf16 cache.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] bf16  @param v [B, Hkv, S_max, d] bf16  @param kv_len [B] (device)
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v3(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream = nullptr);

/// v4: v3 with the context split over @p splits blocks per (sequence, KV head); each writes its
/// fp32 partial max, sum and unnormalized output to @p partials, and a combine kernel rescales
/// and adds them.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp32  @param v [B, Hkv, S_max, d] fp32  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v4(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* partials,
                         int splits, const DecodeShape& s, cudaStream_t stream = nullptr);
/// v4 on a bf16 cache.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] bf16  @param v [B, Hkv, S_max, d] bf16  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v4(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* partials, int splits, const DecodeShape& s, cudaStream_t stream = nullptr);

/// Runs @p version (a name from decode_versions(); any other throws std::invalid_argument
/// naming the version) with a workspace of decode_workspace_floats() floats.
/// @param version "v1" ... "v4"
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp32  @param v [B, Hkv, S_max, d] fp32  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace decode_workspace_floats() floats
/// @param s the sizes  @param sm_count the device's SMs (v4's splits)  @param stream the stream to launch on
void decode_attention(const std::string& version, const float* q, const float* k, const float* v, const int* kv_len,
                      float* out, float* workspace, const DecodeShape& s, int sm_count, cudaStream_t stream = nullptr);
/// As above on a bf16 cache.
/// @param version "v1" ... "v4"
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] bf16  @param v [B, Hkv, S_max, d] bf16  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace decode_workspace_floats() floats
/// @param s the sizes  @param sm_count the device's SMs (v4's splits)  @param stream the stream to launch on
void decode_attention(const std::string& version, const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                      const int* kv_len, float* out, float* workspace, const DecodeShape& s, int sm_count,
                      cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
