/// @file gemv_int4.cu
/// @brief Lab 08: the int4 weights of chapter 08's GEMV, read and decoded in registers.
///
/// The kernel (kernels/quant/gemv_quant.cuh) is written once for every format; a format gives it
/// a view with load() (one 16-byte vector of a row and what decoding it needs) and dequant8()
/// (8 of its values as floats). Here they are for int4: value c of a row is nibble c % 8 of
/// 32-bit word c / 8 of the row's packed bytes, and its weight is (q - zero) x scale, with the
/// scale (bf16) and the zero point (a byte, or 8 for every group without one) of its group of G
/// values along the row. A 16-byte vector holds 32 values, all in one group (G is a multiple of
/// 32). Read 16 bytes per load: a decode step's time is its bytes, and 4-byte loads would take
/// four requests where one does.
#include "quant/gemv_quant.cuh"
#include "quant/quant.hpp"

#include "pd/common.hpp"
#include "pd/device_helpers.cuh"  // load16(), to_f32()

#include <stdexcept>

namespace pd::kernels::quant {

// [int4_load]
/// Vector @p vec of row @p row: its 16 bytes, and the scale and zero point of its group.
__device__ Int4Weights::Vector Int4Weights::load(int row, int vec) const {
    const std::size_t group = std::size_t(row) * groups + vec / vectors_per_group;  // [N, groups]
    Vector v;
    // TODO(student): 1. v.bits = the 16 bytes of vector vec of row row: row row starts at packed + row * row_vectors * 16 bytes; one 128-bit load with load16() (not four 4-byte loads) (~1 line)
    v.bits = make_uint4(0u, 0u, 0u, 0u);
    (void)packed;
    v.scale = to_f32(scales[group]);
    v.zero = zeros ? float(zeros[group]) : 8.f;
    return v;
}
// [int4_load]

// [int4_dequant8]
/// Values 8 j ... 8 j + 7 of the vector: the 8 nibbles of its 32-bit word j.
__device__ void Int4Weights::dequant8(const Vector& v, int j, float (&w)[8]) const {
    const unsigned word = j == 0 ? v.bits.x : j == 1 ? v.bits.y : j == 2 ? v.bits.z : v.bits.w;
    // TODO(student): 2. w[i] = (nibble i of word - v.zero) * v.scale for i = 0 ... 7: nibble i is bits 4i ... 4i + 3 (shift right by 4i, mask with 0xf), converted to float (~3 lines)
    for (int i = 0; i < 8; ++i) w[i] = 0.f;
    (void)word;
}
// [int4_dequant8]

void gemv_int4(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s, w.layout);
    if (w.layout.format != Format::int4)
        throw std::invalid_argument(std::string("gemv_int4: weights in ") + to_string(w.layout.format) + ", not int4");
    launch_gemv_quant(int4_view(w), x, y, s, stream);
}

void gemv_int4_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                   cudaStream_t stream) {
    launch_gemv_quant_mma(int4_view(w), x, y, s, stream);
}

void dequantize_int4(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream) {
    launch_dequantize(int4_view(q), q, out, stream);
}

}  // namespace pd::kernels::quant
