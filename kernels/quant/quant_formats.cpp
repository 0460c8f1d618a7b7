/// @file quant_formats.cpp
/// @brief The formats of chapter 08 on the host: names, layouts, the quantizer, its exact
/// dequantizer, the e4m3 conversions (quant.hpp documents each), and the GEMVs' dispatch by format.
#include "quant.hpp"

#include "pd/half.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace pd::kernels::quant {

const char* to_string(Format f) {
    switch (f) {
        case Format::bf16:
            return "bf16";
        case Format::int8:
            return "int8";
        case Format::int4:
            return "int4";
        case Format::fp8:
            return "fp8";
    }
    return "?";
}

const std::vector<Format>& all_formats() {
    static const std::vector<Format> list = {Format::bf16, Format::int8, Format::int4, Format::fp8};
    return list;
}

Format format_named(std::string_view name) {
    for (Format f : all_formats())
        if (name == to_string(f)) return f;
    throw std::invalid_argument("weight format " + std::string(name) + " is not one of bf16, int8, int4, fp8");
}

int Layout::values_per_vector() const {
    switch (format) {
        case Format::int4:
            return 32;
        case Format::bf16:
            return 8;
        default:
            return 16;
    }
}

int Layout::vectors_per_row() const {
    return ceil_div(k, values_per_vector());
}

int Layout::groups_per_row() const {
    return format == Format::int4 ? ceil_div(k, group) : 1;
}

double Layout::bytes_per_weight(int n) const {
    if (format == Format::bf16) return 2.0;
    double per_row = double(row_bytes());
    if (format == Format::int4)
        per_row += groups_per_row() * (2.0 + (zero_point ? 1.0 : 0.0));
    else
        per_row += 4.0;
    return per_row * n / (double(n) * k);
}

void check_layout(const Layout& l) {
    if (l.k < 1) throw std::invalid_argument("Layout.k = " + std::to_string(l.k) + " must be >= 1");
    if (l.format == Format::int4 && l.group != 32 && l.group != 64 && l.group != 128 && l.group != 256)
        throw std::invalid_argument("Layout.group = " + std::to_string(l.group) +
                                    " must be 32, 64, 128 or 256 (a multiple of the 32 int4 values of a 16-byte "
                                    "vector, so that no vector straddles two groups)");
    if (l.zero_point && l.format != Format::int4)
        throw std::invalid_argument(std::string("Layout.zero_point is for int4 only, not ") + to_string(l.format));
}

std::size_t QuantizedMatrix::bytes() const {
    return packed.size() + row_scales.size() * sizeof(float) + group_scales.size() * sizeof(__nv_bfloat16) +
           zeros.size();
}

// [fp8_e4m3_decode]
float fp8_e4m3_decode(std::uint8_t code) {
    const int biased = (code >> 3) & 0xf, mantissa = code & 0x7;
    if (biased == 0xf && mantissa == 0x7) return std::nanf("");
    const float magnitude = biased == 0 ? std::ldexp(float(mantissa), -9)  // subnormal
                                        : std::ldexp(1.f + float(mantissa) / 8.f, biased - 7);
    return (code & 0x80) ? -magnitude : magnitude;
}
// [fp8_e4m3_decode]

namespace {

/// Writes value @p v (0 ... 15) at position @p c of an int4 row: nibble c % 8 of word c / 8.
void put_nibble(std::uint8_t* row, int c, unsigned v) {
    std::uint8_t& byte =
        row[c / 2];  // little-endian: word c / 8 holds bytes 4 (c / 8) ... (nibble c % 8 in byte c / 2)
    byte = std::uint8_t((c % 2) ? (byte & 0x0f) | (v << 4) : (byte & 0xf0) | v);
}

/// Value @p c of an int4 row, 0 ... 15.
unsigned get_nibble(const std::uint8_t* row, int c) {
    return (row[c / 2] >> (4 * (c % 2))) & 0xfu;
}

}  // namespace

// [quantize]
QuantizedMatrix quantize(std::span<const float> w, int n, const Layout& layout) {
    check_layout(layout);
    if (layout.format == Format::bf16) throw std::invalid_argument("quantize: bf16 is not a quantized format");
    const int K = layout.k;
    if (n < 1 || w.size() != std::size_t(n) * K)
        throw std::invalid_argument("quantize: W has " + std::to_string(w.size()) +
                                    " values, not N x K = " + std::to_string(n) + " x " + std::to_string(K));
    for (float v : w)
        if (!std::isfinite(v)) throw std::invalid_argument("quantize: W holds a value that is not finite");
    QuantizedMatrix q{.layout = layout, .n = n};
    const std::size_t row_bytes = layout.row_bytes();
    q.packed.assign(std::size_t(n) * row_bytes, 0);  // padding past K: zeros (0 in int8, +0 in e4m3)
    const int G = layout.group, groups = layout.groups_per_row();
    for (int r = 0; r < n; ++r) {
        const float* wr = w.data() + std::size_t(r) * K;
        std::uint8_t* out = q.packed.data() + std::size_t(r) * row_bytes;
        if (layout.format == Format::int4) {
            for (int g = 0; g < groups; ++g) {
                const int c0 = g * G, c1 = std::min(K, c0 + G);
                float lo = 0.f, hi = 0.f, amax = 0.f;  // the range includes 0, so 0 stays exact
                for (int c = c0; c < c1; ++c) {
                    lo = std::min(lo, wr[c]);
                    hi = std::max(hi, wr[c]);
                    amax = std::max(amax, std::fabs(wr[c]));
                }
                __nv_bfloat16 sb;
                float z = 0.f;
                int4_group_scale(lo, hi, amax, layout.zero_point, sb, z);
                q.group_scales.push_back(sb);
                if (layout.zero_point) q.zeros.push_back(std::uint8_t(z));
                for (int c = c0; c < c1; ++c) put_nibble(out, c, int4_code(wr[c], to_float(sb), z));
            }
            continue;
        }
        float amax = 0.f;
        for (int c = 0; c < K; ++c) amax = std::max(amax, std::fabs(wr[c]));
        const float s = amax / (layout.format == Format::int8 ? 127.f : kFp8Max);
        q.row_scales.push_back(s);
        for (int c = 0; c < K; ++c)
            out[c] = layout.format == Format::int8 ? int8_code(wr[c], s) : fp8_e4m3_encode(s > 0.f ? wr[c] / s : 0.f);
    }
    return q;
}
// [quantize]

std::vector<float> dequantize(const QuantizedMatrix& q) {
    const Layout& l = q.layout;
    const int K = l.k, groups = l.groups_per_row();
    std::vector<float> w(std::size_t(q.n) * K);
    for (int r = 0; r < q.n; ++r) {
        const std::uint8_t* row = q.packed.data() + std::size_t(r) * l.row_bytes();
        for (int c = 0; c < K; ++c) {
            float v = 0.f;
            if (l.format == Format::int8) {
                v = float(std::int8_t(row[c])) * q.row_scales[r];
            } else if (l.format == Format::fp8) {
                v = fp8_e4m3_decode(row[c]) * q.row_scales[r];
            } else {
                const std::size_t g = std::size_t(r) * groups + c / l.group;
                const float z = l.zero_point ? float(q.zeros[g]) : 8.f;
                v = (float(get_nibble(row, c)) - z) * to_float(q.group_scales[g]);
            }
            w[std::size_t(r) * K + c] = v;
        }
    }
    return w;
}

DeviceQuantizedMatrix::DeviceQuantizedMatrix(const QuantizedMatrix& q)
    : layout(q.layout),
      n(q.n),
      packed(std::span<const std::uint8_t>(q.packed)),
      row_scales(std::span<const float>(q.row_scales)),
      group_scales(std::span<const __nv_bfloat16>(q.group_scales)),
      zeros(std::span<const std::uint8_t>(q.zeros)),
      bytes(q.bytes()) {}

Format version_format(const std::string& version) {
    const bool tc = version.size() > 3 && version.ends_with("_tc");
    const Format f = format_named(tc ? version.substr(0, version.size() - 3) : version);
    if (f == Format::bf16) throw std::invalid_argument("quant: version bf16 is chapter 03's GEMV, not a kernel here");
    return f;
}

void check_shape(const Shape& s, const Layout& l) {
    if (s.n < 1) throw std::invalid_argument("N (rows of W) must be >= 1, got " + std::to_string(s.n));
    if (s.k < 1) throw std::invalid_argument("K (columns of W) must be >= 1, got " + std::to_string(s.k));
    if (s.batch < 1 || s.batch > kMaxQuantBatch)
        throw std::invalid_argument("B (batch) must be in 1 ... kMaxQuantBatch = " + std::to_string(kMaxQuantBatch) +
                                    ", got " + std::to_string(s.batch));
    if (l.k != s.k)
        throw std::invalid_argument("K = " + std::to_string(s.k) +
                                    " differs from the weights' K = " + std::to_string(l.k));
    if (double(s.n) * double(l.row_bytes()) > 2147483647.0)
        throw std::invalid_argument("N x row bytes exceeds 2^31 - 1 (the kernels index with 32 bits)");
}

double sim_work(const Shape& s, bool tensor_cores) {
    if (tensor_cores) {  // a warp per 16 rows, 128 threads per block; each weight decoded, staged and fed to WMMA
        const double strips = std::ceil(s.n / 16.0), padded_k = std::ceil(s.k / 32.0) * 32.0;
        return sim_launch_work(128 * std::ceil(s.n / 64.0), 4 * 16 * strips * padded_k,
                               2.0 * 16 * 16 * strips * padded_k);
    }
    int bucket = 1;
    while (bucket < s.batch) bucket *= 2;
    const double warps = std::ceil(s.n / 4.0), padded_k = std::ceil(s.k / 32.0) * 32.0;
    const double flops = 2.0 * bucket * 4 * warps * padded_k + 4 * warps * padded_k;
    return sim_launch_work(32 * std::ceil(s.n / 32.0) * 8, flops, 0, warps * 31.0 * std::ceil(4.0 * bucket / 32.0));
}

void gemv(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    switch (w.layout.format) {
        case Format::int8:
            return gemv_int8(w, x, y, s, stream);
        case Format::fp8:
            return gemv_fp8(w, x, y, s, stream);
        case Format::int4:
            return gemv_int4(w, x, y, s, stream);  // lab 08's file
        default:
            throw std::invalid_argument("quant::gemv: bf16 weights are chapter 03's (gemv::gemv)");
    }
}

void gemv_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    switch (w.layout.format) {
        case Format::int8:
            return gemv_int8_mma(w, x, y, s, stream);
        case Format::fp8:
            return gemv_fp8_mma(w, x, y, s, stream);
        case Format::int4:
            return gemv_int4_mma(w, x, y, s, stream);  // lab 08's file
        default:
            throw std::invalid_argument("quant::gemv_mma: bf16 weights are chapter 03's (gemv::gemv, v6)");
    }
}

}  // namespace pd::kernels::quant
