/// @file kv_quant.hpp
/// @brief Chapter 08: the 8-bit KV cache. Each cached K (or V) row of d elements (one token,
/// one KV head) is stored as d one-byte codes and one fp32 scale, quantized as chapter 08's
/// per-row weight formats are (quant.hpp): symmetric int8 with scale = max |x| / 127 and
/// q = round(x / scale) (ties away from zero) in -127 ... 127, or fp8 e4m3 with scale =
/// max |x| / 448 and q = e4m3(x / scale) (ties to even); a row of zeros has scale 0 and codes 0.
/// A row dequantizes to code x scale, rounded once to fp32. Includable from plain C++.
///
/// The appends (layers/kv_append.hpp) write the codes and the scales; the kernels that read the
/// cache (decode attention v3/v4, paged v2, the varlen and paged varlen attention) take the
/// codes as a cache of Fp8Kv or Int8Kv elements, in the layouts of the fp32 and bf16 caches,
/// with the scales alongside in the same layout without the d dimension: [slots, Hkv, S_max] for
/// chapter 04's slots, [num_blocks, Hkv, block_size] for chapter 06's blocks. So the row that
/// starts at element offset `row` of the codes has its scale at scales[row / d]. The kernels
/// multiply the codes by the scale in registers as they load a row (no dequantized copy).
#pragma once

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

}  // namespace pd::kernels::attention
