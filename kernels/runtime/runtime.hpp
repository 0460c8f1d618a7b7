/// @file runtime.hpp
/// @brief The runtime kernels: forms the model runs that no chapter's step is on its own. Each
/// names the steps it combines or extends, and is tested against the same CPU references as
/// those steps and, on their shapes and inputs, bitwise against them. Includable from plain C++.
#pragma once

#include "attention/kv_quant.hpp"
#include "attention/paged_attention.hpp"
#include "gemm/gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pd::kernels::runtime {

/// Y [T, N] = X [T, K] W [N, K]^T with bf16 inputs on the SIMT units (fp32 accumulation, fp32
/// output): chapter 02's v6 (gemm/ch02_v6_vectorized.cu) with each element widened to fp32 as it is
/// loaded. The model's bf16 passes take it on GPUs without bf16 tensor cores (compute
/// capability below 8.0, a T4), where chapter 02's v7 and v8 cannot run. Bitwise equal to v6 on
/// the same values in fp32 (the same tiles, the same sums in the same order). 8-byte loads of 4
/// elements where K % 4 == 0 and X, W are 8-byte aligned; element by element otherwise.
/// @param x [T, K]  @param w [N, K]  @param y [T, N] fp32  @param s the sizes (gemm::check_shape())
/// @param stream the stream
void gemm_simt_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const gemm::Shape& s,
                    cudaStream_t stream = nullptr);

/// The simulator work of one gemm_simt_bf16() on @p s: v6's (gemm::sim_work()).
/// @param s the sizes
inline double gemm_simt_bf16_sim_work(const gemm::Shape& s) {
    return gemm::sim_work("v6", s);
}

/// Decode attention over a paged cache of any element type (kernels/runtime/paged_decode.cu):
/// chapter 04's v4 body through chapter 06's block table (its paged v2) on chapter 08's 8-bit
/// cache too. The model's decode batches of a paged 8-bit cache run it, as
/// attention::paged_decode_attention_v2(); on an fp32 or bf16 cache it gives paged v2's bits, on
/// an 8-bit cache laid out as chapter 04's slots chapter 08's. The arguments are
/// attention::paged_decode_attention_v2()'s.
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d]  @param v_cache as k_cache
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device)  @param out [B, Hq, d]
/// @param partials the workspace of @p splits > 1  @param splits 1 ... kMaxSplits  @param s the sizes
/// @param stream the stream
void paged_decode_attention(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                            const int* kv_len, float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream = nullptr);
/// As above on a bf16 cache. @param q [B, Hq, d]  @param k_cache bf16  @param v_cache bf16
/// @param block_table [B, max_blocks]  @param kv_len [B]  @param out [B, Hq, d]  @param partials workspace
/// @param splits 1 ... kMaxSplits  @param s the sizes  @param stream the stream
void paged_decode_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                            const attention::PagedShape& s, cudaStream_t stream = nullptr);
/// As above on an fp8 cache with its row scales [num_blocks, Hkv, block_size].
/// @param q [B, Hq, d]  @param k_cache fp8 codes  @param v_cache fp8 codes  @param k_scales K's row scales
/// @param v_scales V's row scales  @param block_table [B, max_blocks]  @param kv_len [B]  @param out [B, Hq, d]
/// @param partials workspace  @param splits 1 ... kMaxSplits  @param s the sizes  @param stream the stream
void paged_decode_attention(const float* q, const attention::Fp8Kv* k_cache, const attention::Fp8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream = nullptr);
/// As above on an int8 cache.
/// @param q [B, Hq, d]  @param k_cache int8 codes  @param v_cache int8 codes  @param k_scales K's row scales
/// @param v_scales V's row scales  @param block_table [B, max_blocks]  @param kv_len [B]  @param out [B, Hq, d]
/// @param partials workspace  @param splits 1 ... kMaxSplits  @param s the sizes  @param stream the stream
void paged_decode_attention(const float* q, const attention::Int8Kv* k_cache, const attention::Int8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream = nullptr);

}  // namespace pd::kernels::runtime
