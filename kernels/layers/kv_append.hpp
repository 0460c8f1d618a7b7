/// @file kv_append.hpp
/// @brief Chapter 04: the KV append (lab 04). Before a step attends to the cache, the K and V of
/// its new tokens are written there, converting to the cache's type (fp32, or bf16 rounded to
/// nearest even): B sequences of n new tokens each, sequence b in row b of chapter 04's
/// contiguous cache [B, Hkv, S_max, d], its tokens from position start[b] on (a prefill from 0,
/// a decode step at the length so far). The appends of packed rows that the model's later
/// chapters need (chapter 05's slots, chapter 06's block tables, chapter 08's 8-bit cache) are
/// the runtime's, runtime/runtime.hpp's kv_append_rows() and paged_kv_append_rows().
/// Includable from plain C++.
#pragma once

#include "attention/decode_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pd::kernels::layers {

using attention::CacheShape;

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

}  // namespace pd::kernels::layers
