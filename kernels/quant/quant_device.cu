/// @file quant_device.cu
/// @brief Chapter 08's formats on the device: the quantizer the model runs on its bf16 weights
/// (bit-exact with the host's quantize(): the same per-value functions of quant.hpp), the
/// dequantizer that feeds a prompt's GEMM, and the copy back to the host.
#include "quant.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"

#include <stdexcept>

namespace pd::kernels::quant {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / kWarpSize;

/// int8 and fp8: warp w of block i quantizes row i kWarps + w: its largest magnitude (a warp
/// maximum), the scale, then one byte per value.
template <Format kFormat>
__global__ void quantize_rows_kernel(const __nv_bfloat16* __restrict__ w, int n, int k, std::size_t row_bytes,
                                     std::uint8_t* __restrict__ packed, float* __restrict__ scales) {
    const int lane = threadIdx.x % kWarpSize, row = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
    if (row >= n) return;  // the whole warp: the maximum below sees all 32 lanes
    const __nv_bfloat16* wr = w + std::size_t(row) * k;
    float amax = 0.f;
    for (int c = lane; c < k; c += kWarpSize) amax = fmaxf(amax, fabsf(to_f32(wr[c])));
    amax = warp_reduce(amax, MaxOp{});
    const float s = amax / (kFormat == Format::int8 ? 127.f : kFp8Max);
    if (lane == 0) scales[row] = s;
    std::uint8_t* out = packed + std::size_t(row) * row_bytes;
    for (int c = lane; c < k; c += kWarpSize) {
        const float v = to_f32(wr[c]);
        out[c] = kFormat == Format::int8 ? int8_code(v, s) : fp8_e4m3_encode(s > 0.f ? v / s : 0.f);
    }
}

/// int4: warp w of block i quantizes group (i kWarps + w) % groups of row (i kWarps + w) /
/// groups: its range (warp minimum and maxima), the scale and zero point, then one byte (two
/// values) per lane at a time.
__global__ void quantize_int4_kernel(const __nv_bfloat16* __restrict__ w, int n, int k, int group, int groups,
                                     bool zero_point, std::size_t row_bytes, std::uint8_t* __restrict__ packed,
                                     __nv_bfloat16* __restrict__ scales, std::uint8_t* __restrict__ zeros) {
    const int lane = threadIdx.x % kWarpSize, task = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
    if (task >= n * groups) return;
    const int row = task / groups, g = task % groups, c0 = g * group, c1 = min(k, c0 + group);
    const __nv_bfloat16* wr = w + std::size_t(row) * k;
    float lo = 0.f, hi = 0.f, amax = 0.f;  // the range includes 0, so 0 stays exact
    for (int c = c0 + lane; c < c1; c += kWarpSize) {
        const float v = to_f32(wr[c]);
        lo = fminf(lo, v), hi = fmaxf(hi, v), amax = fmaxf(amax, fabsf(v));
    }
    lo = -warp_reduce(-lo, MaxOp{}), hi = warp_reduce(hi, MaxOp{}), amax = warp_reduce(amax, MaxOp{});
    __nv_bfloat16 sb;
    float z = 0.f;
    int4_group_scale(lo, hi, amax, zero_point, sb, z);
    const float s = __bfloat162float(sb);
    if (lane == 0) {
        scales[task] = sb;
        if (zero_point) zeros[task] = std::uint8_t(z);
    }
    std::uint8_t* out = packed + std::size_t(row) * row_bytes;
    for (int c = c0 + 2 * lane; c < c1; c += 2 * kWarpSize) {  // value c in the low nibble of byte c / 2
        const unsigned low = int4_code(to_f32(wr[c]), s, z),
                       high = c + 1 < c1 ? int4_code(to_f32(wr[c + 1]), s, z) : 0u;
        out[c / 2] = std::uint8_t(low | (high << 4));
    }
}

}  // namespace

DeviceQuantizedMatrix quantize_device(const __nv_bfloat16* w, int n, const Layout& layout, cudaStream_t stream) {
    check_layout(layout);
    if (layout.format == Format::bf16) throw std::invalid_argument("quantize_device: bf16 is not a quantized format");
    if (n < 1) throw std::invalid_argument("quantize_device: N = " + std::to_string(n) + " must be >= 1");
    DeviceQuantizedMatrix q;
    q.layout = layout;
    q.n = n;
    const std::size_t row_bytes = layout.row_bytes(), groups = std::size_t(layout.groups_per_row());
    q.packed = DeviceBuffer<std::uint8_t>(std::size_t(n) * row_bytes);
    PD_CHECK_CUDA(cudaMemsetAsync(q.packed.data(), 0, q.packed.bytes(), stream));  // the padding past K: zeros
    if (layout.format == Format::int4) {
        q.group_scales = DeviceBuffer<__nv_bfloat16>(std::size_t(n) * groups);
        if (layout.zero_point) q.zeros = DeviceBuffer<std::uint8_t>(std::size_t(n) * groups);
        const long long tasks = (long long)n * groups;
        quantize_int4_kernel<<<unsigned(ceil_div(tasks, (long long)kWarps)), kThreads, 0, stream>>>(
            w, n, layout.k, layout.group, int(groups), layout.zero_point, row_bytes, q.packed.data(),
            q.group_scales.data(), layout.zero_point ? q.zeros.data() : nullptr);
    } else {
        q.row_scales = DeviceBuffer<float>(std::size_t(n));
        const unsigned blocks = unsigned(ceil_div(n, kWarps));
        if (layout.format == Format::int8)
            quantize_rows_kernel<Format::int8>
                <<<blocks, kThreads, 0, stream>>>(w, n, layout.k, row_bytes, q.packed.data(), q.row_scales.data());
        else
            quantize_rows_kernel<Format::fp8>
                <<<blocks, kThreads, 0, stream>>>(w, n, layout.k, row_bytes, q.packed.data(), q.row_scales.data());
    }
    PD_CHECK_LAUNCH();
    q.bytes = q.packed.bytes() + q.row_scales.bytes() + q.group_scales.bytes() + q.zeros.bytes();
    return q;
}

void dequantize_device(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream) {
    switch (q.layout.format) {
        case Format::int8:
            return dequantize_int8(q, out, stream);
        case Format::fp8:
            return dequantize_fp8(q, out, stream);
        case Format::int4:
            return dequantize_int4(q, out, stream);  // in lab 08's file, beside int4's view
        default:
            throw std::invalid_argument("dequantize_device: bf16 weights are not packed");
    }
}

QuantizedMatrix download(const DeviceQuantizedMatrix& q) {
    return {.layout = q.layout,
            .n = q.n,
            .packed = q.packed.download(),
            .row_scales = q.row_scales.download(),
            .group_scales = q.group_scales.download(),
            .zeros = q.zeros.download()};
}

}  // namespace pd::kernels::quant
