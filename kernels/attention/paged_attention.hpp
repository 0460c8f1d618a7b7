/// @file paged_attention.hpp
/// @brief Chapter 06: attention and the KV append through a block table (PagedAttention). The
/// cache is a pool of fixed-size blocks handed out as sequences grow; a block table says which
/// physical block holds each run of block_size logical positions of a sequence. Decode
/// attention (chapter 04's v2 and v4), chapter 05's varlen attention and the KV append all
/// reach K and V through it. Includable from plain C++.
///
/// Layout: one layer's K (and V) cache is [num_blocks, Hkv, block_size, d] in fp32 or bf16:
/// block p holds block_size consecutive positions of one sequence for every KV head, each
/// head's rows contiguous. block_table is [B, max_blocks] int: logical position j of sequence s
/// lives in physical block block_table[s * max_blocks + j / block_size], at offset
/// j % block_size, that is at row ((p * Hkv + h) * block_size + j % block_size) of d elements
/// for KV head h. An entry outside 0 ... num_blocks - 1 (-1: no block allocated there) is never
/// read through: attention skips its positions, the append writes nothing there. q and out are
/// [B, Hq, d] fp32 for decode, [T, Hq, d] fp32 for varlen; query head h reads KV head
/// h / (Hq / Hkv); scores are scaled by 1 / sqrt(d); softmax and accumulation are in fp32.
#pragma once

#include "attention/decode_attention.hpp"
#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::attention {

/// Sizes of a paged cache and of one paged attention call. One layer's K (and V) cache is
/// [num_blocks, Hkv, block_size, d]; sequence s's logical position p lives in physical block
/// block_table[s * max_blocks + p / block_size] at offset p % block_size.
struct PagedShape {
    int batch = 1;        ///< B sequences: rows of block_table and of kv_len (and of q for decode), <= 65535
    int heads = 1;        ///< Hq query heads (<= 65535, a grid limit)
    int kv_heads = 1;     ///< Hkv KV heads; Hq % Hkv == 0
    int head_dim = 64;    ///< d, <= kMaxHeadDim
    int block_size = 16;  ///< positions per block, >= 1
    int num_blocks = 1;   ///< physical blocks of the cache
    int max_blocks = 1;   ///< columns of block_table: blocks per sequence at most
    int max_kv_len = 1;   ///< the longest kv_len[s] (sizes v2's splits), <= max_blocks * block_size

    /// Query heads per KV head: Hq / Hkv.
    int group() const { return heads / kv_heads; }
    /// Positions a sequence can hold: max_blocks * block_size (an int: check_paged_shape() checks it fits).
    int capacity() const { return max_blocks * block_size; }
    /// Elements of one layer's K (or V) cache: num_blocks * Hkv * block_size * d.
    std::size_t cache_elements() const {
        return std::size_t(num_blocks) * std::size_t(kv_heads) * std::size_t(block_size) * std::size_t(head_dim);
    }
    /// The contiguous cache of chapter 04 with the same heads and capacity (S_max = capacity()):
    /// the shape the split rule and the tests compare against.
    DecodeShape contiguous() const { return {batch, heads, kv_heads, head_dim, capacity(), max_kv_len}; }
};

/// Throws std::invalid_argument naming the first parameter out of range (its value and the
/// limit): every size >= 1, Hq % Hkv == 0, d <= kMaxHeadDim, max_blocks * block_size within
/// an int, max_kv_len <= max_blocks * block_size, B and Hq <= 65535 (grid limits).
/// @param s the sizes to check
void check_paged_shape(const PagedShape& s);

// [paged_versions]
/// The paged decode attention versions of chapter 06, in order.
inline const std::vector<Version>& paged_versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1",
         {fp32, bf16},
         simt,
         "chapter 04's v2 through the block table: one block per (sequence, query head) walks it, logical position -> "
         "physical block and offset (lab 06)"},
        {"v2",
         {fp32, bf16},
         simt,
         "chapter 04's v4 through the block table: one block per (sequence, KV head, split) serves the query group, "
         "each split a run of whole blocks, then v4's combine"},
    };
    return list;
}
// [paged_versions]

/// v2's number of splits for @p s on a GPU of @p sm_count SMs: chapter 04's rule
/// (decode_splits() of s.contiguous(): about four blocks per SM, at most one split per 128
/// positions of the longest context, at most kMaxSplits), then rounded to whole blocks: each split takes
/// ceil(blocks / splits) blocks of the longest sequence, which may leave fewer splits.
/// @param s the sizes  @param sm_count the device's SMs
/// @return 1 ... kMaxSplits
int paged_splits(const PagedShape& s, int sm_count);
/// paged_splits()'s rounding to whole blocks: @p wanted splits of @p blocks blocks become
/// ceil(blocks / ceil(blocks / wanted)) splits of whole blocks (never an empty one at the end of
/// the longest sequence). @param blocks blocks of the longest sequence  @param wanted chapter 04's splits
PD_HOST_DEVICE constexpr int whole_block_splits(int blocks, int wanted) {
    return ceil_div(blocks, ceil_div(blocks, wanted));
}

/// Floats of workspace @p version needs: v2 per split and query head a max, a sum and d
/// outputs, B Hq paged_splits() (d + 2); 0 for v1.
/// @param version "v1" or "v2"  @param s the sizes  @param sm_count the device's SMs
/// @return the floats the caller allocates for paged_decode_attention()
std::size_t paged_workspace_floats(const std::string& version, const PagedShape& s, int sm_count);

/// v1 (lab 06): chapter 04's v2 (one block per (sequence, query head), the online softmax, no
/// score buffer) reading each key through the block table: warp w takes logical positions w,
/// w + 4, ... below kv_len[b] and finds each one's physical block and offset.
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp32
/// @param v_cache [num_blocks, Hkv, block_size, d] fp32
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void paged_decode_attention_v1(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, const PagedShape& s, cudaStream_t stream = nullptr);
/// v1 on a bf16 cache.
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] bf16
/// @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void paged_decode_attention_v1(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, const PagedShape& s,
                               cudaStream_t stream = nullptr);

/// v2: chapter 04's v4 through the block table. Block (KV head, b, split) serves the Hq / Hkv
/// query heads of its group (each K and V row read once per group), 4 keys in flight per warp,
/// over positions [split * chunk, (split + 1) * chunk) with chunk = ceil(ceil(max_kv_len /
/// block_size) / splits) * block_size, so a split never shares a block with another; each
/// writes its partial max, sum and unnormalized output to @p partials, then v4's combine
/// kernel merges them (with one split the block writes the output itself).
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp32
/// @param v_cache [num_blocks, Hkv, block_size, d] fp32
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace (unused with one split)
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits
/// @param s the sizes  @param stream the stream to launch on
/// @pre Hq / Hkv <= kMaxGroup
void paged_decode_attention_v2(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                               cudaStream_t stream = nullptr);
/// v2 on a bf16 cache.
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] bf16
/// @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace (unused with one split)
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits
/// @param s the sizes  @param stream the stream to launch on
void paged_decode_attention_v2(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                               const PagedShape& s, cudaStream_t stream = nullptr);

/// Runs @p version (a name from paged_versions(); any other throws std::invalid_argument
/// naming the version) with a workspace of paged_workspace_floats() floats; v2 with
/// paged_splits() splits. Sequence b attends to its first min(kv_len[b], max_kv_len) positions.
/// @param version "v1" or "v2"
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp32
/// @param v_cache [num_blocks, Hkv, block_size, d] fp32
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace paged_workspace_floats() floats (may be null when that is 0)
/// @param s the sizes  @param sm_count the device's SMs (v2's splits)  @param stream the stream to launch on
/// @pre every entry of row b of @p block_table below ceil(kv_len[b] / block_size) is a block of the cache
void paged_decode_attention(const std::string& version, const float* q, const float* k_cache, const float* v_cache,
                            const int* block_table, const int* kv_len, float* out, float* workspace,
                            const PagedShape& s, int sm_count, cudaStream_t stream = nullptr);
/// As above on a bf16 cache.
/// @param version "v1" or "v2"
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] bf16
/// @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace paged_workspace_floats() floats (may be null when that is 0)
/// @param s the sizes  @param sm_count the device's SMs (v2's splits)  @param stream the stream to launch on
void paged_decode_attention(const std::string& version, const float* q, const __nv_bfloat16* k_cache,
                            const __nv_bfloat16* v_cache, const int* block_table, const int* kv_len, float* out,
                            float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream = nullptr);

/// Chapter 05's varlen attention (varlen_attention.hpp) reading K and V through the block
/// table: the S = B sequences of a mixed batch, sequence s (row s of @p block_table) with
/// q_len[s] queries at rows q_start[s] ... q_start[s] + q_len[s] - 1 of q and out and kv_len[s]
/// positions, its new tokens' K and V appended first at its last q_len[s] positions; query i
/// attends to positions 0 ... attention::allowed_keys(i, q_len[s], kv_len[s]) - 1. One block per
/// (16 queries, query head, sequence); each tile of 32 keys is gathered from its blocks into
/// shared memory once for the block's queries. Uses every size of @p s but max_kv_len.
/// @param q [T, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp32
/// @param v_cache [num_blocks, Hkv, block_size, d] fp32
/// @param q_start [B] (device) first row of each sequence in q and out
/// @param q_len [B] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [B] (device) positions of each sequence in use, new tokens included (clamped to max_blocks *
/// block_size)
/// @param block_table [B, max_blocks] (device)  @param out [T, Hq, d]
/// @param s the sizes (batch = S)  @param tokens T, the rows of q and out: the sum of q_len, >= B
/// @param max_q_len the longest q_len[s] (sizes the grid), 1 ... min(T, max_blocks * block_size)
/// @param stream the stream to launch on
/// @pre for every s: 1 <= q_len[s] <= min(kv_len[s], max_q_len), the rows of different
/// sequences do not overlap and lie below T, and the entries of row s of @p block_table below
/// ceil(kv_len[s] / block_size) are blocks of the cache (the launcher cannot see device memory)
void paged_varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start,
                            const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream = nullptr);
/// As above on a bf16 cache (rows are widened to fp32 as they are loaded).
/// @param q [T, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] bf16
/// @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param q_start [B] (device) first row of each sequence in q and out
/// @param q_len [B] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [B] (device) positions of each sequence in use, new tokens included (clamped to max_blocks *
/// block_size)
/// @param block_table [B, max_blocks] (device)  @param out [T, Hq, d]
/// @param s the sizes (batch = S)  @param tokens T, the rows of q and out: the sum of q_len, >= B
/// @param max_q_len the longest q_len[s] (sizes the grid), 1 ... min(T, max_blocks * block_size)
/// @param stream the stream to launch on
void paged_varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* q_start, const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
