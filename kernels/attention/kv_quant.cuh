/// @file kv_quant.cuh
/// @brief Device side of the 8-bit KV cache (kv_quant.hpp): a code's value, the quantization of
/// one element with its row's scale (chapter 08's per-value functions of quant.hpp), and the loads of the kernels that
/// read the cache, which take any cache element (fp32, bf16, Fp8Kv, Int8Kv) and multiply an 8-bit row by its scale in
/// registers as they load it. fp8 is decoded and encoded by moving bits (chapter 08's fp8_at()),
/// never with the cuda_fp8 intrinsics: sm_75 has no fp8 instructions.
#pragma once

#include "attention/kv_quant.hpp"
#include "attention/online_softmax.cuh"
#include "quant/gemv_quant.cuh"

#include "pd/device_helpers.cuh"

#include <cmath>

namespace pd::kernels::attention {

/// The value of an fp8 code (times its row's scale: the element's value). Exact.
__device__ __forceinline__ float kv_code(Fp8Kv e) {
    return quant::fp8_at(e.bits, 0);
}
/// The value of an int8 code (times its row's scale: the element's value). Exact.
__device__ __forceinline__ float kv_code(Int8Kv e) {
    return float(e.value);
}

/// The code of @p x in a row of scale @p scale (max |x| of the row / kKvCodeMax<T>): chapter 08's
/// per-value functions, which the host quantizer (quant::quantize()) uses too, so the codes are
/// its codes bit for bit: int8 x / scale rounded (ties away from zero) and clamped to -127 ...
/// 127; fp8 e4m3 of x / scale (ties to even); 0 when the scale is 0 (a row of zeros).
template <typename T>
__device__ __forceinline__ T kv_encode(float x, float scale) {
    if constexpr (std::is_same_v<T, Fp8Kv>)
        return {quant::fp8_e4m3_encode(scale > 0.f ? x / scale : 0.f)};
    else
        return {std::int8_t(quant::int8_code(x, scale))};
}

// [kv8_load_lane_dims]
/// This lane's dimensions (lane + 32 r) of the cache row that starts at element @p row of
/// @p cache, as fp32; zeros past @p d. An fp32 or bf16 cache is read as load_lane_dims() reads
/// it (@p scales unused, may be null); an 8-bit cache's codes are multiplied by the row's scale,
/// scales[row / d], in registers: the dequantized row, rounded once per element.
template <typename T>
__device__ __forceinline__ void load_lane_dims(const T* __restrict__ cache, const float* __restrict__ scales,
                                               long long row, int d, float (&out)[kLaneDims]) {
    if constexpr (!kIsKv8<T>) {
        load_lane_dims(cache + row, d, out);
    } else {
        const float scale = scales[row / d];  // the same in every lane: one load, broadcast
        const int lane = threadIdx.x % kWarpSize;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            out[r] = c < d ? kv_code(cache[row + c]) * scale : 0.f;
        }
    }
}
// [kv8_load_lane_dims]

/// The scale of the cache row that starts at element @p row: scales[row / d] for an 8-bit
/// cache, 1 (and no load) for fp32 and bf16.
template <typename T>
__device__ __forceinline__ float kv_row_scale(const float* __restrict__ scales, long long row, int d) {
    if constexpr (kIsKv8<T>)
        return scales[row / d];
    else
        return 1.f;
}

/// Element @p at of a cache as fp32, given its row's scale from kv_row_scale() (the product is
/// the dequantized value for an 8-bit cache; fp32 and bf16 are read as they are).
template <typename T>
__device__ __forceinline__ float kv_value(const T* __restrict__ cache, long long at, float row_scale) {
    if constexpr (kIsKv8<T>)
        return kv_code(cache[at]) * row_scale;
    else
        return to_f32(cache[at]);
}

}  // namespace pd::kernels::attention
