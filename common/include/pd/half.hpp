/// @file half.hpp
/// @brief The 16-bit float types kernels use (`__half`, `__nv_bfloat16`) and host conversions.
///
/// The toolkit's own headers are used; they compile under a host compiler too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pd {

/// Converts a 16-bit float (or a float) to float on the host.
inline float to_float(float x) { return x; }
/// __half to float (exact).
inline float to_float(__half x) { return __half2float(x); }
/// __nv_bfloat16 to float (exact).
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Converts a float to type T with round-to-nearest-even.
template <typename T>
T from_float(float x);
/// float to float: the value itself.
template <>
inline float from_float<float>(float x) { return x; }
/// float to __half, round to nearest even.
template <>
inline __half from_float<__half>(float x) { return __float2half_rn(x); }
/// float to __nv_bfloat16, round to nearest even.
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// Short dtype name for tables and JSON: "fp32", "fp16", "bf16".
template <typename T>
constexpr const char* dtype_name();
/// "fp32".
template <>
constexpr const char* dtype_name<float>() { return "fp32"; }
/// "fp16".
template <>
constexpr const char* dtype_name<__half>() { return "fp16"; }
/// "bf16".
template <>
constexpr const char* dtype_name<__nv_bfloat16>() { return "bf16"; }

}  // namespace pd
