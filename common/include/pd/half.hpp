/// @file half.hpp
/// @brief The 16-bit float types kernels use (`__half`, `__nv_bfloat16`) and host conversions.
///
/// The toolkit's own headers are used; they compile under a host compiler too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pd {

/// Converts a 16-bit float (or a float) to float on the host.
inline float to_float(float x) {
    return x;
}
/// __half to float (exact).
inline float to_float(__half x) {
    return __half2float(x);
}
/// __nv_bfloat16 to float (exact).
inline float to_float(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

/// Converts a float to type T with round-to-nearest-even.
template <typename T>
T from_float(float x);
/// float to float: the value itself.
template <>
inline float from_float<float>(float x) {
    return x;
}
/// float to __half, round to nearest even.
template <>
inline __half from_float<__half>(float x) {
    return __float2half_rn(x);
}
/// float to __nv_bfloat16, round to nearest even.
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

/// The element type of a kernel's inputs, as `--dtype` names it (and the KV cache's, as
/// `--kv-dtype` names it: chapter 08 adds the 8-bit caches).
enum class DType {
    fp32,  ///< float
    bf16,  ///< __nv_bfloat16 (fp32 accumulation in every kernel of the project)
    fp8,   ///< the KV cache only: e4m3 codes and an fp32 scale per token and KV head (chapter 08)
    int8   ///< the KV cache only: int8 codes and an fp32 scale per token and KV head (chapter 08)
};

/// "fp32", "bf16", "fp8" or "int8": the name in tables, JSON and `--dtype`.
inline const char* to_string(DType d) {
    switch (d) {
        case DType::fp32:
            return "fp32";
        case DType::bf16:
            return "bf16";
        case DType::fp8:
            return "fp8";
        case DType::int8:
            return "int8";
    }
    return "?";
}

/// The type named @p name ("fp32", "bf16", "fp8" or "int8", as to_string() writes it; an
/// option's check has already refused any other). @param name the name
/// @throws std::invalid_argument for another
inline DType dtype_named(std::string_view name) {
    for (DType d : {DType::fp32, DType::bf16, DType::fp8, DType::int8})
        if (name == to_string(d)) return d;
    throw std::invalid_argument("dtype " + std::string(name) + " is not one of fp32, bf16, fp8, int8");
}

/// Bytes of one element of type @p d: 4, 2, or 1 (the 8-bit caches' codes; their scales, 4 bytes
/// per row of d elements, come on top).
inline int size_of(DType d) {
    return d == DType::fp32 ? 4 : d == DType::bf16 ? 2 : 1;
}

/// Bytes per element of a KV cache of type @p d whose rows (one token, one KV head) hold
/// @p head_dim elements: size_of(d), and for the 8-bit caches their row's fp32 scale shared by
/// its elements. @param d the cache's type  @param head_dim d
inline double kv_element_bytes(DType d, int head_dim) {
    return size_of(d) + (d == DType::fp8 || d == DType::int8 ? 4.0 / head_dim : 0.0);
}

/// Short dtype name for tables and JSON: "fp32", "fp16", "bf16".
template <typename T>
constexpr const char* dtype_name();
/// "fp32".
template <>
constexpr const char* dtype_name<float>() {
    return "fp32";
}
/// "fp16".
template <>
constexpr const char* dtype_name<__half>() {
    return "fp16";
}
/// "bf16".
template <>
constexpr const char* dtype_name<__nv_bfloat16>() {
    return "bf16";
}

/// Rounds every value of @p values to T (round to nearest even): the inputs of a 16-bit kernel
/// made from the same random floats as its fp32 counterpart.
template <typename T>
std::vector<T> round_all(std::span<const float> values) {
    std::vector<T> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = from_float<T>(values[i]);
    return out;
}

/// Widens every value of @p values to float (exact), e.g. to dump bf16 data as a float32 .npy.
template <typename T>
std::vector<float> to_float_all(std::span<const T> values) {
    std::vector<float> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = to_float(values[i]);
    return out;
}

/// @p values as a kernel of input type @p d reads them: unchanged for fp32, rounded to bf16 (and
/// widened back, exactly) for bf16. For dumping a bf16 kernel's inputs as float32 .npy files.
inline std::vector<float> rounded_to(DType d, std::span<const float> values) {
    return d == DType::fp32 ? std::vector<float>(values.begin(), values.end())
                            : to_float_all<__nv_bfloat16>(round_all<__nv_bfloat16>(values));
}

}  // namespace pd
