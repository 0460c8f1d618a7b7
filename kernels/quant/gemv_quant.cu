/// @file gemv_quant.cu
/// @brief The int8 and fp8 GEMV of chapter 08 (gemv_quant_kernel over PerRowScaleWeights, and
/// gemv_quant_mma_kernel on the tensor cores) and the dispatch by format. The int4 kernel's view is lab 08 (the lab
/// tree's gemv_int4.cu).
#include "gemv_quant.cuh"
#include "quant.hpp"

#include <stdexcept>

namespace pd::kernels::quant {

void gemv_per_row_scale(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                        cudaStream_t stream) {
    check_shape(s, w.layout);
    if (w.layout.format == Format::int8) {
        launch_gemv_quant(per_row_scale_view<Format::int8>(w), x, y, s, stream);
    } else if (w.layout.format == Format::fp8) {
        launch_gemv_quant(per_row_scale_view<Format::fp8>(w), x, y, s, stream);
    } else {
        throw std::invalid_argument(std::string("gemv_per_row_scale: weights in ") + to_string(w.layout.format) +
                                    ", not int8 or fp8");
    }
}

void gemv_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s, w.layout);
    require_bf16_tensor_cores("quant::gemv_mma (the _tc versions)");
    if (w.layout.format == Format::int8)
        launch_gemv_quant_mma(per_row_scale_view<Format::int8>(w), x, y, s, stream);
    else if (w.layout.format == Format::fp8)
        launch_gemv_quant_mma(per_row_scale_view<Format::fp8>(w), x, y, s, stream);
    else if (w.layout.format == Format::int4)
        gemv_int4_mma(w, x, y, s, stream);
    else
        throw std::invalid_argument("quant::gemv_mma: bf16 weights are chapter 03's (gemv::gemv, v6)");
}

void gemv(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    if (w.layout.format == Format::int4)
        gemv_int4(w, x, y, s, stream);
    else if (w.layout.format == Format::bf16)
        throw std::invalid_argument("quant::gemv: bf16 weights are chapter 03's (gemv::gemv)");
    else
        gemv_per_row_scale(w, x, y, s, stream);
}

}  // namespace pd::kernels::quant
