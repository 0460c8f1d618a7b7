/// @file varlen_attention.hpp
/// @brief Chapter 05: varlen attention over the KV cache, the attention of a mixed batch. The
/// S sequences of one forward pass bring different numbers of new tokens (a decode token is
/// one query, a prefill chunk several, a whole prompt all of its tokens), packed one after
/// another into a single token-major Q; each sequence attends to its own cache slot with the
/// bottom-right causal rule of chapter 01 (attention::allowed_keys()). Includable from plain
/// C++.
///
/// Layout: q and out [T, Hq, d] fp32 (T = the sum of q_len); k and v one layer's cache
/// [slots, Hkv, S_max, d] in fp32 or bf16. Sequence s owns rows q_start[s] ... q_start[s] +
/// q_len[s] - 1 of q and out, and cache slot slot[s], whose first kv_len[s] positions are in
/// use: the new tokens' K and V were appended first, at its last q_len[s] positions. Query i
/// of sequence s attends to keys 0 ... allowed_keys(i, q_len[s], kv_len[s]) - 1. Query head h
/// reads KV head h / (Hq / Hkv); scores are scaled by 1 / sqrt(d); softmax and accumulation
/// are in fp32.
#pragma once

#include "attention/decode_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pd::kernels::attention {

/// Sizes of one varlen attention call (the per-sequence lengths are on the device).
struct VarlenShape {
    int sequences = 1;  ///< S, sequences in the batch (<= 65535, a grid limit)
    int tokens = 1;     ///< T, query rows of q and out: the sum of q_len
    int heads = 1;      ///< Hq query heads (<= 65535, a grid limit)
    int kv_heads = 1;   ///< Hkv KV heads; Hq % Hkv == 0
    int head_dim = 64;  ///< d, <= kMaxHeadDim
    int slots = 1;      ///< cache slots of k and v (every slot[s] is below it)
    int max_seq = 1;    ///< S_max, the cache's positions per slot (the row stride of K and V)
    int max_q_len = 1;  ///< the longest q_len[s] (sizes the grid), <= T and <= S_max

    /// Query heads per KV head: Hq / Hkv.
    int group() const { return heads / kv_heads; }
};

/// Throws std::invalid_argument naming the first parameter out of range.
/// @param s the sizes to check
void check_varlen_shape(const VarlenShape& s);

/// Varlen attention of a mixed batch over an fp32 cache: a tiled kernel with the online
/// softmax (no score matrix in memory). One block per (16 queries of a sequence, query head,
/// sequence); the block loads tiles of K and V rows into shared memory once for its 16
/// queries, and each warp keeps the running softmax of 4 of them.
/// @param q [T, Hq, d]  @param k_cache [slots, Hkv, S_max, d] fp32  @param v_cache [slots, Hkv, S_max, d] fp32
/// @param q_start [S] (device) first row of each sequence in q and out
/// @param q_len [S] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [S] (device) cache positions of each sequence in use, new tokens included
/// @param slot [S] (device) the cache slot of each sequence, 0 ... slots - 1
/// @param out [T, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
/// @pre for every s: 1 <= q_len[s] <= min(kv_len[s], max_q_len), kv_len[s] <= S_max, the rows
/// of different sequences do not overlap and lie below T (the launcher cannot see device
/// memory; a slot out of range writes nothing, a length out of range is clamped)
void varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start, const int* q_len,
                      const int* kv_len, const int* slot, float* out, const VarlenShape& s,
                      cudaStream_t stream = nullptr);
/// As above on a bf16 cache (rows are widened to fp32 as they are loaded).
/// @param q [T, Hq, d]  @param k_cache [slots, Hkv, S_max, d] bf16  @param v_cache [slots, Hkv, S_max, d] bf16
/// @param q_start [S] (device) first row of each sequence in q and out
/// @param q_len [S] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [S] (device) cache positions of each sequence in use, new tokens included
/// @param slot [S] (device) the cache slot of each sequence, 0 ... slots - 1
/// @param out [T, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* q_start,
                      const int* q_len, const int* kv_len, const int* slot, float* out, const VarlenShape& s,
                      cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
