/// @file kv_quant.hpp
/// @brief Chapter 08: the 8-bit KV cache. Each cached K (or V) row of d elements (one token,
/// one KV head) is stored as d one-byte codes and one fp32 scale, quantized as chapter 08's
/// per-row weight formats are (quant.hpp): symmetric int8 with scale = max |x| / 127 and
/// q = round(x / scale) (ties away from zero) in -127 ... 127, or fp8 e4m3 with scale =
/// max |x| / 448 and q = e4m3(x / scale) (ties to even); a row of zeros has scale 0 and codes 0.
/// A row dequantizes to code x scale, rounded once to fp32. Includable from plain C++.
///
/// The runtime's appends (runtime/runtime.hpp's kv_append_rows()) write the codes and the scales;
/// the kernels that read the cache (decode attention v3/v4, paged v2, the varlen and paged varlen
/// attention) take the codes as a cache of Fp8Kv or Int8Kv elements, in the layouts of the fp32 and
/// bf16 caches, with the scales alongside in the same layout without the d dimension: [slots, Hkv,
/// S_max] for chapter 04's slots, [num_blocks, Hkv, block_size] for chapter 06's blocks. So the row
/// that starts at element offset `row` of the codes has its scale at scales[row / d]. The kernels
/// multiply the codes by the scale in registers as they load a row (no dequantized copy).
#pragma once

#include "attention/decode_attention.hpp"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pd::kernels::attention {

/// One element of an fp8 KV cache: an e4m3 code (sign, 4 exponent bits of bias 7, 3 mantissa
/// bits; largest value 448), to be multiplied by its row's scale.
struct Fp8Kv {
    std::uint8_t bits;  ///< the e4m3 code
};

/// One element of an int8 KV cache: a code in -127 ... 127, to be multiplied by its row's scale.
struct Int8Kv {
    std::int8_t value;  ///< the code
};

/// True for the 8-bit cache elements (Fp8Kv, Int8Kv), which carry a scale per row.
template <typename T>
inline constexpr bool kIsKv8 = std::is_same_v<T, Fp8Kv> || std::is_same_v<T, Int8Kv>;

/// The largest code magnitude of an 8-bit cache element (a row's scale is max |x| of the row over
/// it): 448 for Fp8Kv (e4m3), 127 for Int8Kv. A constant, so device code may use it too.
template <typename T>
inline constexpr float kKvCodeMax = std::is_same_v<T, Fp8Kv> ? 448.f : 127.f;

/// Throws std::invalid_argument naming @p who when an 8-bit cache (T = Fp8Kv or Int8Kv) comes
/// without its scales (nothing to check for fp32 and bf16, which have none).
/// @param k_scales K's scales  @param v_scales V's scales  @param who the launcher, for the message
template <typename T>
void check_kv_scales(const float* k_scales, const float* v_scales, const char* who) {
    if (kIsKv8<T> && (k_scales == nullptr || v_scales == nullptr))
        throw std::invalid_argument(std::string(who) + ": k_scales and v_scales of an 8-bit cache must not be null");
}

/// How a KV cache stores its elements (the element types the kernels take).
enum class KvFormat {
    fp32,  ///< float
    bf16,  ///< __nv_bfloat16
    fp8,   ///< Fp8Kv codes and an fp32 scale per row
    int8   ///< Int8Kv codes and an fp32 scale per row
};

/// "fp32", "bf16", "fp8" or "int8". @param f the format
constexpr const char* to_string(KvFormat f) {
    return f == KvFormat::fp32 ? "fp32" : f == KvFormat::bf16 ? "bf16" : f == KvFormat::fp8 ? "fp8" : "int8";
}

// [kv_row_bytes]
/// Bytes of one cached K (or V) row of @p d elements, what a kernel that reads the row must
/// move: d x 4 (fp32), d x 2 (bf16), d x 1 + 4 for the 8-bit formats (the codes and the row's
/// fp32 scale). A decode step over contexts kv_len[b] reads 2 Hkv sum_b kv_len[b] rows.
/// @param f the format  @param d the head dim
constexpr double kv_row_bytes(KvFormat f, int d) {
    return f == KvFormat::fp32 ? 4.0 * d : f == KvFormat::bf16 ? 2.0 * d : 1.0 * d + 4.0;
}
// [kv_row_bytes]

// ---- the kernels that read the 8-bit cache ---------------------------------------------------
// Chapter 08's decode attention (kernels/attention/ch08_kv8_decode.cu: chapter 04's v4 loading
// 8-bit rows; v3 is its one-split case) and the runtime's forms the model runs on a paged cache
// (kernels/runtime/paged_decode.cu) or a mixed batch (kernels/runtime/flash_varlen.cu). Their shapes
// are chapters 04, 05 and 06's.

/// v3 on chapter 08's fp8 KV cache (kv_quant.hpp): each K and V row's e4m3 codes are multiplied
/// by the row's scale in registers as the row is loaded (no dequantized copy in memory), then
/// the kernel computes as on an fp32 cache holding those values.
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp8 codes  @param v [B, Hkv, S_max, d] fp8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v3(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream = nullptr);
/// v3 on an int8 KV cache (codes times the row's scale, in registers).
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] int8 codes  @param v [B, Hkv, S_max, d] int8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v3(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream = nullptr);
/// v4 on an fp8 KV cache (codes times the row's scale, in registers).
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp8 codes  @param v [B, Hkv, S_max, d] fp8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits (decode_splits())
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v4(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream = nullptr);
/// v4 on an int8 KV cache (codes times the row's scale, in registers).
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] int8 codes  @param v [B, Hkv, S_max, d] int8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits (decode_splits())
/// @param s the sizes  @param stream the stream to launch on
void decode_attention_v4(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream = nullptr);
/// Runs @p version on chapter 08's fp8 KV cache: "v3" or "v4" (with decode_splits() splits);
/// v1 and v2 take fp32 and bf16 caches only, and any other name throws std::invalid_argument.
/// @param version "v3" or "v4"
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] fp8 codes  @param v [B, Hkv, S_max, d] fp8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]  @param workspace decode_workspace_floats() floats
/// @param s the sizes  @param sm_count the device's SMs (v4's splits)  @param stream the stream to launch on
void decode_attention(const std::string& version, const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales,
                      const float* v_scales, const int* kv_len, float* out, float* workspace, const DecodeShape& s,
                      int sm_count, cudaStream_t stream = nullptr);
/// As above on an int8 KV cache.
/// @param version "v3" or "v4"
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d] int8 codes  @param v [B, Hkv, S_max, d] int8 codes
/// @param k_scales [B, Hkv, S_max] K's row scales  @param v_scales [B, Hkv, S_max] V's row scales
/// @param kv_len [B] (device)  @param out [B, Hq, d]  @param workspace decode_workspace_floats() floats
/// @param s the sizes  @param sm_count the device's SMs (v4's splits)  @param stream the stream to launch on
void decode_attention(const std::string& version, const float* q, const Int8Kv* k, const Int8Kv* v,
                      const float* k_scales, const float* v_scales, const int* kv_len, float* out, float* workspace,
                      const DecodeShape& s, int sm_count, cudaStream_t stream = nullptr);

/// v2 on chapter 08's fp8 KV cache (kv_quant.hpp): each K and V row's e4m3 codes are multiplied
/// by the row's scale in registers as the row is loaded through the block table.
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace (unused with one split)
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits (paged_splits())
/// @param s the sizes  @param stream the stream to launch on
void paged_decode_attention_v2(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream = nullptr);
/// v2 on an int8 KV cache (codes times the row's scale, in registers).
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device) positions in use, clamped to max_kv_len
/// @param out [B, Hq, d]  @param partials B Hq splits (d + 2) floats of workspace (unused with one split)
/// @param splits blocks per (sequence, KV head), 1 ... kMaxSplits (paged_splits())
/// @param s the sizes  @param stream the stream to launch on
void paged_decode_attention_v2(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream = nullptr);
/// Runs @p version on chapter 08's fp8 KV cache: "v2" (with paged_splits() splits); lab 06's v1
/// takes fp32 and bf16 caches only, and any other name throws std::invalid_argument.
/// @param version "v2"
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace paged_workspace_floats("v2", ...) floats
/// @param s the sizes  @param sm_count the device's SMs (v2's splits)  @param stream the stream to launch on
void paged_decode_attention(const std::string& version, const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* workspace, const PagedShape& s, int sm_count,
                            cudaStream_t stream = nullptr);
/// As above on an int8 KV cache.
/// @param version "v2"
/// @param q [B, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param block_table [B, max_blocks] (device)  @param kv_len [B] (device)
/// @param out [B, Hq, d]  @param workspace paged_workspace_floats("v2", ...) floats
/// @param s the sizes  @param sm_count the device's SMs (v2's splits)  @param stream the stream to launch on
void paged_decode_attention(const std::string& version, const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* workspace, const PagedShape& s, int sm_count,
                            cudaStream_t stream = nullptr);
/// paged_varlen_attention() on chapter 08's fp8 KV cache (kv_quant.hpp): each row of a tile of
/// keys is multiplied by its scale as the block gathers it into shared memory.
/// @param q [T, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] fp8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param q_start [B] (device) first row of each sequence in q and out
/// @param q_len [B] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [B] (device) positions of each sequence in use, new tokens included
/// @param block_table [B, max_blocks] (device)  @param out [T, Hq, d]
/// @param s the sizes (batch = S)  @param tokens T, the rows of q and out
/// @param max_q_len the longest q_len[s]  @param stream the stream to launch on
void paged_varlen_attention(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                            const float* v_scales, const int* q_start, const int* q_len, const int* kv_len,
                            const int* block_table, float* out, const PagedShape& s, int tokens, int max_q_len,
                            cudaStream_t stream = nullptr);
/// As above on an int8 KV cache.
/// @param q [T, Hq, d]  @param k_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param v_cache [num_blocks, Hkv, block_size, d] int8 codes
/// @param k_scales [num_blocks, Hkv, block_size] K's row scales  @param v_scales [num_blocks, Hkv, block_size] V's
/// @param q_start [B] (device) first row of each sequence in q and out
/// @param q_len [B] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [B] (device) positions of each sequence in use, new tokens included
/// @param block_table [B, max_blocks] (device)  @param out [T, Hq, d]
/// @param s the sizes (batch = S)  @param tokens T, the rows of q and out
/// @param max_q_len the longest q_len[s]  @param stream the stream to launch on
void paged_varlen_attention(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                            const float* v_scales, const int* q_start, const int* q_len, const int* kv_len,
                            const int* block_table, float* out, const PagedShape& s, int tokens, int max_q_len,
                            cudaStream_t stream = nullptr);

/// varlen_attention() on chapter 08's fp8 KV cache (kv_quant.hpp): each row of a tile of keys
/// is multiplied by its scale as the block gathers it into shared memory.
/// @param q [T, Hq, d]  @param k_cache [slots, Hkv, S_max, d] fp8 codes  @param v_cache [slots, Hkv, S_max, d] fp8
/// codes
/// @param k_scales [slots, Hkv, S_max] K's row scales  @param v_scales [slots, Hkv, S_max] V's row scales
/// @param q_start [S] (device) first row of each sequence in q and out
/// @param q_len [S] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [S] (device) cache positions of each sequence in use, new tokens included
/// @param slot [S] (device) the cache slot of each sequence, 0 ... slots - 1
/// @param out [T, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void varlen_attention(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                      const float* v_scales, const int* q_start, const int* q_len, const int* kv_len, const int* slot,
                      float* out, const VarlenShape& s, cudaStream_t stream = nullptr);
/// As above on an int8 KV cache.
/// @param q [T, Hq, d]  @param k_cache [slots, Hkv, S_max, d] int8 codes  @param v_cache [slots, Hkv, S_max, d] int8
/// codes
/// @param k_scales [slots, Hkv, S_max] K's row scales  @param v_scales [slots, Hkv, S_max] V's row scales
/// @param q_start [S] (device) first row of each sequence in q and out
/// @param q_len [S] (device) new tokens of each sequence, 1 ... max_q_len
/// @param kv_len [S] (device) cache positions of each sequence in use, new tokens included
/// @param slot [S] (device) the cache slot of each sequence, 0 ... slots - 1
/// @param out [T, Hq, d]
/// @param s the sizes  @param stream the stream to launch on
void varlen_attention(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                      const float* v_scales, const int* q_start, const int* q_len, const int* kv_len, const int* slot,
                      float* out, const VarlenShape& s, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
