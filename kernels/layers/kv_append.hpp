/// @file kv_append.hpp
/// @brief The KV appends: before a step attends to the cache, the K and V of its new tokens are
/// written there, converting to the cache's type (fp32, or bf16 rounded to nearest even).
/// Three forms, for the three ways a batch addresses the cache:
///
/// * kv_append (lab 04): B sequences of n new tokens each, sequence b in row b of chapter 04's
///   contiguous cache [B, Hkv, S_max, d], its tokens from position start[b] on (a prefill from
///   0, a decode step at the length so far);
/// * kv_append_rows (chapter 05): the packed rows of a mixed batch, each to its own slot and
///   position of the contiguous cache;
/// * paged_kv_append_rows (chapter 06): the same rows through a block table into a paged cache.
///
/// The last two are one kernel body with the two row accessors of attention/cache_rows.cuh, and
/// also write chapter 08's 8-bit cache (attention/kv_quant.hpp): fp8 e4m3 or int8 codes and one
/// fp32 scale per (token, KV head) row, in an array shaped like the cache without d.
/// Includable from plain C++.
#pragma once

#include "attention/decode_attention.hpp"
#include "attention/kv_quant.hpp"
#include "attention/paged_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pd::kernels::layers {

using attention::CacheShape;
using attention::Fp8Kv;
using attention::Int8Kv;
using attention::PagedShape;

/// KV append (lab 04): writes the n new tokens of each sequence into one layer's cache:
/// cache[b][h][start[b] + t][:] = new[b][t][h][:], for K and for V, converting to the cache's
/// type. Positions at or past S_max are not written (the launcher cannot see @p start).
/// @param k_new [B, n, Hkv, d] fp32 (the K projection after RoPE)  @param v_new [B, n, Hkv, d]
/// @param k_cache [B, Hkv, S_max, d]  @param v_cache [B, Hkv, S_max, d]
/// @param start [B] device array: the position of each sequence's first new token
/// @param n new tokens per sequence  @param s the cache's sizes  @param stream the stream to launch on
void kv_append(const float* k_new, const float* v_new, float* k_cache, float* v_cache, const int* start, int n,
               const CacheShape& s, cudaStream_t stream = nullptr);
/// As above, into a bf16 cache (round to nearest even).
/// @param k_new [B, n, Hkv, d] fp32  @param v_new [B, n, Hkv, d]  @param k_cache [B, Hkv, S_max, d] bf16
/// @param v_cache [B, Hkv, S_max, d] bf16  @param start [B] first new position of each sequence
/// @param n new tokens per sequence  @param s the cache's sizes  @param stream the stream to launch on
void kv_append(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const int* start,
               int n, const CacheShape& s, cudaStream_t stream = nullptr);

/// KV append of a mixed batch: row t of k_new and v_new goes to position positions[t] of cache
/// slot token_slot[t], cache[slot][h][pos][:] = new[t][h][:], converting to the cache's type. A
/// row whose slot or position is outside the cache is not written (the launcher cannot see them).
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d]  @param v_cache [slots, Hkv, S_max, d]
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache, const int* token_slot,
                    const int* positions, int T, const CacheShape& s, cudaStream_t stream = nullptr);
/// As above, into a bf16 cache (round to nearest even).
/// @param k_new [T, Hkv, d] fp32  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d] bf16  @param v_cache [slots, Hkv, S_max, d] bf16
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                    const int* token_slot, const int* positions, int T, const CacheShape& s,
                    cudaStream_t stream = nullptr);

/// KV append through the block table: row t of @p k_new and @p v_new goes to logical position
/// positions[t] of sequence row_seq[t], cache[p][h][positions[t] % block_size][:] =
/// new[t][h][:] with p = block_table[row_seq[t] * max_blocks + positions[t] / block_size],
/// converting to the cache's type. A row whose sequence is outside 0 ... B - 1, whose position
/// is outside 0 ... max_blocks * block_size - 1, or whose table entry is not a block of the
/// cache writes nothing (the launcher cannot see them). Uses batch, kv_heads, head_dim,
/// block_size, num_blocks and max_blocks of @p s.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] fp32  @param v_cache [num_blocks, Hkv, block_size, d] fp32
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream = nullptr);
/// As above, into a bf16 cache (round to nearest even).
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] bf16  @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream = nullptr);

// [kv_append_kv8]
/// kv_append_rows() into chapter 08's fp8 KV cache: each (row, KV head) of d values is quantized
/// with scale = max |x| / 448 (0 for a row of zeros) to e4m3 codes of x / scale (round to
/// nearest, ties to even; quant::fp8_e4m3_encode() bit for bit), and its scale is written to
/// @p k_scales or @p v_scales at [slot][h][pos]. A row with no place in the cache writes nothing.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d] fp8 codes  @param v_cache [slots, Hkv, S_max, d] fp8 codes
/// @param k_scales [slots, Hkv, S_max] K's row scales  @param v_scales [slots, Hkv, S_max] V's row scales
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, Fp8Kv* k_cache, Fp8Kv* v_cache, float* k_scales,
                    float* v_scales, const int* token_slot, const int* positions, int T, const CacheShape& s,
                    cudaStream_t stream = nullptr);
/// As above into an int8 KV cache: scale = max |x| / 127, codes round(x / scale) (ties away from
/// zero) in -127 ... 127.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d] int8 codes  @param v_cache [slots, Hkv, S_max, d] int8 codes
/// @param k_scales [slots, Hkv, S_max] K's row scales  @param v_scales [slots, Hkv, S_max] V's row scales
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, Int8Kv* k_cache, Int8Kv* v_cache, float* k_scales,
                    float* v_scales, const int* token_slot, const int* positions, int T, const CacheShape& s,
                    cudaStream_t stream = nullptr);

/// paged_kv_append_rows() into chapter 08's fp8 KV cache: codes and scales as kv_append_rows()
/// writes them, the scale of the row at block p, head h, offset o at [p][h][o].
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] fp8 codes  @param v_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, Fp8Kv* k_cache, Fp8Kv* v_cache, float* k_scales,
                          float* v_scales, const int* block_table, const int* row_seq, const int* positions, int T,
                          const PagedShape& s, cudaStream_t stream = nullptr);
/// As above into an int8 KV cache.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] int8 codes  @param v_cache [num_blocks, Hkv, block_size, d] int8
/// codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, Int8Kv* k_cache, Int8Kv* v_cache, float* k_scales,
                          float* v_scales, const int* block_table, const int* row_seq, const int* positions, int T,
                          const PagedShape& s, cudaStream_t stream = nullptr);
// [kv_append_kv8]

}  // namespace pd::kernels::layers
