/// @file runtime.hpp
/// @brief The runtime kernels: forms the model runs that no chapter's step is on its own. Each
/// names the steps it combines or extends, and is tested against the same CPU references as
/// those steps and, on their shapes and inputs, bitwise against them. Includable from plain C++.
#pragma once

#include "attention/decode_attention.hpp"
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

/// The KV append of a mixed batch (kernels/runtime/kv_append_rows.cu): chapter 05's packed rows,
/// each to its own slot and position of chapter 04's contiguous cache, and chapter 06's through a
/// block table, into an fp32, bf16 or chapter 08's 8-bit cache; one kernel body with the two row
/// accessors of attention/cache_rows.cuh. Lab 04's kv_append() (layers/kv_append.hpp) is its
/// chapter 04 form, for B equal sequences.
///
/// Row t of k_new and v_new goes to position positions[t] of cache
/// slot token_slot[t], cache[slot][h][pos][:] = new[t][h][:], converting to the cache's type. A
/// row whose slot or position is outside the cache is not written (the launcher cannot see them).
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d]  @param v_cache [slots, Hkv, S_max, d]
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache, const int* token_slot,
                    const int* positions, int T, const attention::CacheShape& s, cudaStream_t stream = nullptr);
/// As above, into a bf16 cache (round to nearest even).
/// @param k_new [T, Hkv, d] fp32  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d] bf16  @param v_cache [slots, Hkv, S_max, d] bf16
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                    const int* token_slot, const int* positions, int T, const attention::CacheShape& s,
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
                          const int* block_table, const int* row_seq, const int* positions, int T,
                          const attention::PagedShape& s, cudaStream_t stream = nullptr);
/// As above, into a bf16 cache (round to nearest even).
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] bf16  @param v_cache [num_blocks, Hkv, block_size, d] bf16
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T,
                          const attention::PagedShape& s, cudaStream_t stream = nullptr);

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
void kv_append_rows(const float* k_new, const float* v_new, attention::Fp8Kv* k_cache, attention::Fp8Kv* v_cache,
                    float* k_scales, float* v_scales, const int* token_slot, const int* positions, int T,
                    const attention::CacheShape& s, cudaStream_t stream = nullptr);
/// As above into an int8 KV cache: scale = max |x| / 127, codes round(x / scale) (ties away from
/// zero) in -127 ... 127.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [slots, Hkv, S_max, d] int8 codes  @param v_cache [slots, Hkv, S_max, d] int8 codes
/// @param k_scales [slots, Hkv, S_max] K's row scales  @param v_scales [slots, Hkv, S_max] V's row scales
/// @param token_slot [T] (device)  @param positions [T] (device)
/// @param T rows  @param s the cache's sizes (batch = slots)  @param stream the stream to launch on
void kv_append_rows(const float* k_new, const float* v_new, attention::Int8Kv* k_cache, attention::Int8Kv* v_cache,
                    float* k_scales, float* v_scales, const int* token_slot, const int* positions, int T,
                    const attention::CacheShape& s, cudaStream_t stream = nullptr);

/// paged_kv_append_rows() into chapter 08's fp8 KV cache: codes and scales as kv_append_rows()
/// writes them, the scale of the row at block p, head h, offset o at [p][h][o].
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] fp8 codes  @param v_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, attention::Fp8Kv* k_cache, attention::Fp8Kv* v_cache,
                          float* k_scales, float* v_scales, const int* block_table, const int* row_seq,
                          const int* positions, int T, const attention::PagedShape& s, cudaStream_t stream = nullptr);
/// As above into an int8 KV cache.
/// @param k_new [T, Hkv, d] fp32 (after RoPE)  @param v_new [T, Hkv, d] fp32
/// @param k_cache [num_blocks, Hkv, block_size, d] int8 codes  @param v_cache [num_blocks, Hkv, block_size, d] int8
/// codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param row_seq [T] (device) the sequence (row of block_table) of each
/// row
/// @param positions [T] (device) the logical position of each row
/// @param T rows, >= 1  @param s the sizes  @param stream the stream to launch on
void paged_kv_append_rows(const float* k_new, const float* v_new, attention::Int8Kv* k_cache,
                          attention::Int8Kv* v_cache, float* k_scales, float* v_scales, const int* block_table,
                          const int* row_seq, const int* positions, int T, const attention::PagedShape& s,
                          cudaStream_t stream = nullptr);
// [kv_append_kv8]

// [fixed_grid_decode]
/// Chapter 12: a decode attention whose launch does not depend on the step's lengths, so that a
/// CUDA graph captured once per batch bucket replays it at any context. The kernel is the one
/// above (paged_decode.cu: chapter 04's v4 body on chapter 04's slots or chapter 06's pages, any
/// element type), launched with as many splits as the bucket can ever take (split_rule() at the
/// cache's capacity); a first kernel, fixed_grid_decode_plan(), applies the eager rule
/// (decode_splits() for slots, paged_splits() for pages) to the lengths it finds on the device,
/// and the blocks past the step's split count return at once. A step's bits are those of the
/// eager launch on the same batch (chapter 04's v4 on slots, chapter 06's v2 on pages, chapter
/// 08's on an 8-bit cache).
struct FixedGridDecode {
    int batch = 1;       ///< B, the bucket's rows
    int heads = 1;       ///< Hq
    int kv_heads = 1;    ///< Hkv
    int head_dim = 64;   ///< d
    int block_size = 0;  ///< 0: chapter 04's slots; > 0: chapter 06's pages of this many positions
    int slots = 1;       ///< slots: slots of the cache (sequence b reads slot b)
    int max_seq = 1;     ///< slots: positions per slot
    int num_blocks = 1;  ///< pages: blocks of the cache
    int max_blocks = 1;  ///< pages: columns of the block table
    int sm_count = 1;    ///< the device's SMs (the split rule's)
    /// The positions a sequence can hold: max_seq (slots) or max_blocks x block_size (pages).
    int capacity() const { return block_size > 0 ? max_blocks * block_size : max_seq; }
};

/// The grid's splits: split_rule() for the bucket at the cache's capacity, the most any step
/// may take. @param s the sizes  @throws std::invalid_argument naming a size out of range
int fixed_grid_splits(const FixedGridDecode& s);
/// One thread on the device: plan [2] = the step's splits and chunk from kv_len [B], by the
/// eager rule of the layout (the longest of kv_len, clamped to the capacity, at least 1).
/// @param kv_len [B] (device)  @param plan [2] (device, out)  @param s the sizes  @param stream the stream
void fixed_grid_decode_plan(const int* kv_len, int* plan, const FixedGridDecode& s, cudaStream_t stream = nullptr);
/// The decode attention on the fixed grid: out [B, Hq, d] from q [B, Hq, d] over each sequence's
/// kv_len[b] positions, its split count and chunk read from @p plan. T is float, bf16,
/// attention::Fp8Kv or attention::Int8Kv (the 8-bit ones with their row scales; null otherwise).
/// @param q [B, Hq, d]  @param k_cache the layer's K (slots [slots, Hkv, max_seq, d]; pages
/// [num_blocks, Hkv, block_size, d])  @param v_cache as k_cache  @param k_scales 8-bit: K's row
/// scales  @param v_scales 8-bit: V's  @param block_table pages: [B, max_blocks] (device); slots: null
/// @param kv_len [B] (device)  @param plan [2] (device, fixed_grid_decode_plan())  @param out [B, Hq, d]
/// @param partials B Hq fixed_grid_splits() (d + 2) floats  @param s the sizes  @param stream the stream
template <typename T>
void fixed_grid_decode_attention(const float* q, const T* k_cache, const T* v_cache, const float* k_scales,
                                 const float* v_scales, const int* block_table, const int* kv_len, const int* plan,
                                 float* out, float* partials, const FixedGridDecode& s, cudaStream_t stream = nullptr);
// [fixed_grid_decode]

}  // namespace pd::kernels::runtime
