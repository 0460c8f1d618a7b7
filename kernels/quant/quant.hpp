/// @file quant.hpp
/// @brief Chapter 08: weight-only quantization for the decode GEMV. The formats, written down
/// once (their layouts, bytes and error bounds), the host quantizer and its exact dequantizer,
/// and the GEMV kernels that read the packed bytes and dequantize in registers. Includable from
/// plain C++ (tests, programs, the model).
///
/// A weight matrix W [N, K] (one row per output feature, chapter 03's layout) becomes a
/// QuantizedMatrix: packed values row after row, each row padded to a whole number of 16-byte
/// vectors (kernels read 16 bytes at a time, and every row starts 16-byte aligned), plus scales:
///
/// | format | values            | scale                              | bytes per weight (K = 4096) |
/// | ------ | ----------------- | ---------------------------------- | --------------------------- |
/// | bf16   | bf16 (chapter 03) | none                               | 2                           |
/// | int8   | int8, -127 ... 127 | fp32 per row: max abs / 127       | 1 + 4 / K                   |
/// | int4   | 4 bits, 8 per word | bf16 per group of G along K (and a 4-bit zero point, stored as a byte) | 0.5 + 2 / G
/// (+ 1 / G) | | fp8    | e4m3 (1-4-3 bits, max 448) | fp32 per row: max abs / 448 | 1 + 4 / K                 |
///
/// Dequantization: int8 w = q s_row; int4 w = (q - z) s_group with z = 8 without a zero point
/// (symmetric, q in 0 ... 15 stands for -8 ... 7); fp8 w = e4m3(q) s_row.
///
/// int4 packing: value k of a row is nibble k % 8 of 32-bit word k / 8 (bits 4 (k % 8) ...
/// 4 (k % 8) + 3, little-endian), so 16 bytes hold 32 consecutive values and a lane unpacks its
/// word with a shift and a mask per value. (The interleaved orders of FasterTransformer and
/// Marlin serve a conversion of two nibbles into a half2 at once; these kernels convert to fp32
/// one value at a time, for which the natural order is as fast.) G is a multiple of 32, so one
/// 16-byte vector never straddles two groups: its scale is loaded once.
#pragma once

#include "pd/buffer.hpp"
#include "pd/common.hpp"
#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pd::kernels::quant {

/// How a weight matrix is stored.
enum class Format {
    bf16,  ///< unquantized: chapter 03's bf16 weights, the baseline
    int8,  ///< int8, symmetric, one fp32 scale per row (output channel)
    int4,  ///< 4-bit, one bf16 scale (and optionally a zero point) per group of G values along K
    fp8    ///< fp8 e4m3, one fp32 scale per row
};

/// "bf16", "int8", "int4", "fp8": the name in tables, JSON and options.
const char* to_string(Format f);
/// The format named @p name. @throws std::invalid_argument naming the value and the valid names
Format format_named(std::string_view name);
/// Every format, in the order of the tables: bf16, int8, int4, fp8.
const std::vector<Format>& all_formats();

/// The int4 group size of the chapter (GPTQ's and AWQ's default).
constexpr int kDefaultGroup = 128;
/// Largest batch of the quantized GEMV kernels (decode batches; larger ones are past the ridge
/// and belong to a tensor-core kernel).
constexpr int kMaxQuantBatch = 16;
/// Largest finite e4m3 value (S.1111.110 = 1.75 x 2^8).
constexpr float kFp8Max = 448.f;

/// How @p format stores a matrix of @p k columns: values per 16-byte vector and the row's
/// padded length.
struct Layout {
    Format format = Format::int8;  ///< how the values are stored
    int k = 1;                     ///< K: values per row
    int group = kDefaultGroup;     ///< G: int4's group (ignored by the others)
    bool zero_point = false;       ///< int4: a zero point per group (asymmetric)

    /// Values per 16-byte vector: 32 for int4, 16 for int8 and fp8, 8 for bf16.
    int values_per_vector() const;
    /// 16-byte vectors per row: ceil(K / values_per_vector()).
    int vectors_per_row() const;
    /// Bytes of one packed row (vectors_per_row() x 16).
    std::size_t row_bytes() const { return std::size_t(vectors_per_row()) * 16; }
    /// int4: groups per row, ceil(K / G); 1 for the per-row formats.
    int groups_per_row() const;
    /// Bytes per weight of an N x K matrix as stored: values, padding and scales (and zero points).
    double bytes_per_weight(int n) const;
};

/// Throws std::invalid_argument naming the field out of range: K below 1, G not one of 32, 64,
/// 128, 256 (a multiple of the 32 values of a vector), a zero point on a format other than int4.
/// @param l the layout to check
void check_layout(const Layout& l);

/// A weight matrix as a quantized format stores it (host side; DeviceQuantizedMatrix holds the
/// same arrays on the device).
struct QuantizedMatrix {
    Layout layout;                            ///< format, K, group, zero point
    int n = 0;                                ///< N: rows
    std::vector<std::uint8_t> packed;         ///< [N, row_bytes()]: the values, 16-byte vectors
    std::vector<float> row_scales;            ///< int8, fp8: [N]
    std::vector<__nv_bfloat16> group_scales;  ///< int4: [N, groups_per_row()]
    std::vector<std::uint8_t> zeros;          ///< int4 with a zero point: [N, groups_per_row()], 0 ... 15
    /// Bytes as stored (packed values, scales, zero points).
    std::size_t bytes() const;
};

/// Quantizes W [N, K] (row-major) into @p layout: round to nearest (ties away from zero), the
/// scale from the group's (or row's) largest magnitude, deterministic. int4's bf16 scale is
/// rounded up, so that no value is clamped: |w - dequantize(q)| <= scale / 2 for int8 and int4;
/// fp8 rounds w / scale to the nearest e4m3 (ties to even), within 2^-4 of |w| in e4m3's normal
/// range (|w| / scale >= 2^-6) and within 2^-10 scale below it. An all-zero group gets scale 0
/// (int8, fp8) or the smallest positive bf16 (int4) and dequantizes to zeros.
/// @param w [N, K] fp32 weights (finite)  @param n N  @param layout the format and K
/// @throws std::invalid_argument for a bad layout, a size mismatch or a non-finite weight
QuantizedMatrix quantize(std::span<const float> w, int n, const Layout& layout);
/// The exact dequantized values [N, K] in fp32 (the products q x scale rounded once to fp32):
/// the matrix the kernels' results are checked against.
/// @param q a matrix from quantize()
std::vector<float> dequantize(const QuantizedMatrix& q);

// ---- one value, on the host and the device alike (the quantizers share them: bit-exact) ----

// [fp8_e4m3]
/// The e4m3 code of @p x (round to nearest, ties to even; saturating at +-448; NaN to 0x7f).
/// e4m3: exponent bias 7, 3 mantissa bits; normal values 2^-6 ... 448, subnormals m x 2^-9. The
/// step between neighbours is 2^(e - 3) for a value in [2^e, 2^(e + 1)), 2^-9 below 2^-6: the
/// value is rounded to a whole number of steps (an exact division by a power of two), which may
/// carry it into the next binade.
PD_HOST_DEVICE inline std::uint8_t fp8_e4m3_encode(float x) {
    if (!(x == x)) return 0x7f;
    const std::uint8_t sign = copysignf(1.f, x) < 0.f ? 0x80 : 0x00;
    const float a = fminf(fabsf(x), kFp8Max);  // saturate: e4m3 has no infinity
    int e = 0;
    frexpf(a, &e);  // a in [2^(e - 1), 2^e)
    const float step = ldexpf(1.f, (e - 1 > -6 ? e - 1 : -6) - 3);
    const float r = rintf(a / step) * step;  // ties to even (the default rounding mode)
    if (r == 0.f) return sign;
    int re = 0;
    const float f = frexpf(r, &re);  // r = f x 2^re, f in [0.5, 1)
    if (re - 1 + 7 <= 0) return std::uint8_t(sign | std::uint8_t(lrintf(r / ldexpf(1.f, -9))));  // subnormal
    return std::uint8_t(sign | std::uint8_t((re - 1 + 7) << 3) | std::uint8_t(lrintf((f * 2.f - 1.f) * 8.f)));
}
// [fp8_e4m3]

/// The value of e4m3 code @p code (exact; 0x7f and 0xff are NaN).
float fp8_e4m3_decode(std::uint8_t code);

/// The int8 code of @p w with scale @p s: round(w / s) (ties away from zero) in -127 ... 127, as
/// its two's-complement byte; 0 when s is 0.
PD_HOST_DEVICE inline std::uint8_t int8_code(float w, float s) {
    const float q = s > 0.f ? roundf(w / s) : 0.f;
    return std::uint8_t(std::int8_t(fminf(fmaxf(q, -127.f), 127.f)));
}

/// The smallest bf16 >= @p x (x >= 0 and finite): int4's scale, rounded up so that no value of
/// the group lands past the 4-bit range.
PD_HOST_DEVICE inline __nv_bfloat16 bf16_at_least(float x) {
    __nv_bfloat16 b = __float2bfloat16_rn(x);
    if (__bfloat162float(b) < x) {
        __nv_bfloat16_raw raw = b;
        ++raw.x;  // the next bf16 up (x >= 0: the bit patterns of positive values are ordered)
        b = raw;
    }
    return b;
}

/// int4's scale and zero point of a group whose values span [@p lo, @p hi] (lo <= 0 <= hi) with
/// largest magnitude @p amax: symmetric, q - 8 in -7 ... 7 covers -amax ... amax (zero 8);
/// with a zero point, 0 ... 15 covers lo ... hi. An all-zero group gets the smallest scale.
PD_HOST_DEVICE inline void int4_group_scale(float lo, float hi, float amax, bool zero_point, __nv_bfloat16& scale,
                                            float& zero) {
    const float wanted = zero_point ? (hi - lo) / 15.f : amax / 7.f;
    scale = bf16_at_least(wanted > 0.f ? wanted : 1e-30f);
    zero = zero_point ? fminf(fmaxf(roundf(-lo / __bfloat162float(scale)), 0.f), 15.f) : 8.f;
}

/// The int4 code (0 ... 15) of @p w in a group of scale @p s and zero point @p z.
PD_HOST_DEVICE inline unsigned int4_code(float w, float s, float z) {
    return unsigned(fminf(fmaxf(roundf(w / s) + z, 0.f), 15.f));
}

/// A QuantizedMatrix on the device (the same arrays, uploaded; move-only).
struct DeviceQuantizedMatrix {
    Layout layout;                             ///< format, K, group, zero point
    int n = 0;                                 ///< N: rows
    DeviceBuffer<std::uint8_t> packed;         ///< [N, row_bytes()], every row 16-byte aligned
    DeviceBuffer<float> row_scales;            ///< int8, fp8: [N]
    DeviceBuffer<__nv_bfloat16> group_scales;  ///< int4: [N, groups_per_row()]
    DeviceBuffer<std::uint8_t> zeros;          ///< int4 with a zero point: [N, groups_per_row()]
    std::size_t bytes = 0;                     ///< bytes as stored: what a GEMV must read

    DeviceQuantizedMatrix() = default;
    /// Uploads @p q. @param q the host matrix
    explicit DeviceQuantizedMatrix(const QuantizedMatrix& q);
};

/// Quantizes the bf16 matrix @p w [N, K] on the device into @p out (allocated here), with the
/// same codes and scales as quantize() gives for the same values (each value of the layout
/// computed by the same functions). What the model does with its weights at load.
/// @param w [N, K] bf16 (device)  @param n N  @param layout the format and K
/// @param stream the stream @return the packed matrix
DeviceQuantizedMatrix quantize_device(const __nv_bfloat16* w, int n, const Layout& layout,
                                      cudaStream_t stream = nullptr);
/// Writes the dequantized values of @p q, rounded to bf16, into @p out [N, K] (device): what a
/// prompt's GEMM reads (a pass of many tokens runs on the tensor cores, in bf16).
/// @param q the packed matrix  @param out [N, K] bf16 (device)  @param stream the stream
void dequantize_device(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream = nullptr);
/// The host copy of @p q's arrays. @param q the packed matrix @return its QuantizedMatrix
QuantizedMatrix download(const DeviceQuantizedMatrix& q);

/// Sizes of one quantized decode GEMV: Y [B, N] = X [B, K] W [N, K]^T, X bf16, Y fp32.
struct Shape {
    int batch = 1;  ///< B: tokens, 1 ... kMaxQuantBatch
    int n = 1;      ///< N: rows of W
    int k = 1;      ///< K: columns of W
    /// 2 B N K.
    double flops() const { return 2.0 * batch * n * k; }
    /// The fewest bytes: W as stored (@p weight_bytes), X read once (bf16), Y written once (fp32).
    /// @param weight_bytes bytes of W in its format
    double min_bytes(double weight_bytes) const {
        return weight_bytes + 2.0 * double(batch) * k + 4.0 * double(batch) * n;
    }
};

/// Throws std::invalid_argument naming the first parameter out of range (N, K below 1, B
/// outside 1 ... kMaxQuantBatch, N x row bytes above 2^31 - 1).
/// @param s the sizes  @param l the weights' layout, whose K must equal s.k
void check_shape(const Shape& s, const Layout& l);

// [quant_versions]
/// The quantized GEMV kernels of chapter 08, per format (bf16 activations, fp32 accumulation).
/// int8, int4 and fp8 are chapter 03's v5 (4 rows per warp, 16-byte loads, the batch's tokens
/// staged once per block in shared memory, one accumulator per row and token) reading packed
/// weights and decoding them in registers; the _tc versions are chapter 03's v6 (WMMA on the
/// tensor cores) fed the same way, for the larger batches (gemv_mma()).
inline const std::vector<Version>& versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"int8", {bf16}, simt, "16 int8 weights per 16-byte load, the row's scale applied once to the sum"},
        {"int4",
         {bf16},
         simt,
         "32 int4 weights per 16-byte load, unpacked by shift and mask, the group's scale per load (lab 08)"},
        {"fp8", {bf16}, simt, "16 e4m3 weights per 16-byte load, decoded by moving their bits into an fp32"},
        {"int8_tc", {bf16}, tensor_cores, "int8 decoded in registers into bf16 tiles for WMMA (chapter 03's v6)"},
        {"int4_tc", {bf16}, tensor_cores, "int4 decoded in registers (lab 08's unpack) into bf16 tiles for WMMA"},
        {"fp8_tc", {bf16}, tensor_cores, "fp8 decoded in registers into bf16 tiles for WMMA"},
    };
    return list;
}
// [quant_versions]

/// The format of version @p version ("int8", "int4", "fp8", or one of them with "_tc").
Format version_format(const std::string& version);

/// The simulator work of one launch (pd::sim_launch_work()): a warp per 4 rows, 2 B N K FLOPs
/// plus one per weight to dequantize, and 31 shuffles per warp per 32 sums; with
/// @p tensor_cores (the _tc versions), a warp per 16 rows, 2 x 16 N K FLOPs of WMMA and four
/// per weight to decode and stage it. @param s the sizes  @param tensor_cores a _tc version
double sim_work(const Shape& s, bool tensor_cores = false);

/// The SIMT kernels of one format each (versions int8, fp8, int4): Y [B, N] = X W^T, chapter 03's
/// v5 reading the packed weights (ch08_int8_gemv.cu, ch08_fp8_gemv.cu, and int4's in lab 08's
/// gemv_int4.cu). @param w the quantized weights, in the function's format  @param x [B, K] bf16
/// @param y [B, N] fp32  @param s the sizes  @param stream the stream
/// @throws std::invalid_argument for weights in another format or a bad shape
void gemv_int8(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
               cudaStream_t stream = nullptr);
/// The fp8 SIMT kernel (version fp8). @param w fp8 weights  @param x [B, K] bf16  @param y [B, N] fp32
/// @param s the sizes  @param stream the stream
void gemv_fp8(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
              cudaStream_t stream = nullptr);
/// The int4 SIMT kernel (version int4, lab 08). @param w int4 weights  @param x [B, K] bf16
/// @param y [B, N] fp32  @param s the sizes  @param stream the stream
void gemv_int4(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
               cudaStream_t stream = nullptr);
/// The tensor-core kernels of one format each (versions int8_tc, fp8_tc, int4_tc): chapter 03's
/// v6 fed the same way, in the same files. @param w the quantized weights, in the function's
/// format  @param x [B, K] bf16  @param y [B, N] fp32  @param s the sizes  @param stream the stream
/// @throws std::invalid_argument for weights in another format, a bad shape, or a GPU without
/// bf16 tensor cores
void gemv_int8_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                   cudaStream_t stream = nullptr);
/// The fp8 tensor-core kernel (version fp8_tc). @param w fp8 weights  @param x [B, K] bf16
/// @param y [B, N] fp32  @param s the sizes  @param stream the stream
void gemv_fp8_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                  cudaStream_t stream = nullptr);
/// The int4 tensor-core kernel (version int4_tc, lab 08's file). @param w int4 weights
/// @param x [B, K] bf16  @param y [B, N] fp32  @param s the sizes  @param stream the stream
void gemv_int4_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                   cudaStream_t stream = nullptr);
/// dequantize_device() for one format: in the format's file, beside its view (nvcc compiles each
/// file whole: a device function is called from the file that defines it).
/// @param q the packed matrix, in the function's format  @param out [N, K] bf16  @param stream the stream
void dequantize_int8(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream = nullptr);
/// dequantize_device() for fp8 weights. @param q fp8 weights  @param out [N, K] bf16  @param stream the stream
void dequantize_fp8(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream = nullptr);
/// dequantize_device() for int4 weights (lab 08's file). @param q int4 weights  @param out [N, K] bf16
/// @param stream the stream
void dequantize_int4(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream = nullptr);
/// The tensor-core path (the _tc versions), for the larger batches: the kernel of @p w's format
/// (int8, int4 or fp8) on bf16 tensor cores, WMMA 16 x 16 x 16 over up to 16 tokens. int8 and fp8
/// codes are exact in bf16; int4's dequantized weights are rounded to bf16, as the model's
/// dequantized GEMM rounds them. @param w the quantized weights  @param x [B, K] bf16
/// @param y [B, N] fp32  @param s the sizes  @param stream the stream
/// @throws std::invalid_argument for bf16 weights, a bad shape, or a GPU without bf16 tensor cores
void gemv_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
              cudaStream_t stream = nullptr);
/// Runs the kernel of @p w's format. @param w the quantized weights (int8, int4 or fp8)
/// @param x [B, K] bf16  @param y [B, N] fp32  @param s the sizes  @param stream the stream
/// @throws std::invalid_argument for bf16 weights or a bad shape
void gemv(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
          cudaStream_t stream = nullptr);

}  // namespace pd::kernels::quant
