// Chapter 08's weight formats and quantized decode GEMV: the e4m3 conversions over all 256
// codes; the quantizer's round trips within each format's bound (|w - dq(q(w))| <= scale / 2 for
// int8 and int4; for fp8 2^-4 of |w| in e4m3's normal range and 2^-10 scale below it) on ragged
// rows, all-equal groups, outliers and zeros; the packing order, checked byte by byte on hand-made
// rows; every kernel against the GEMV of the dequantized weights (double accumulation) over ragged
// N, K and B, with poisoned outputs, guards and bitwise repeatability; the quantization error of
// the GEMV within the bound the weights' errors imply; and bad layouts and shapes refused with a
// message naming the field.
#include "guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"
#include "quant/quant.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace qt = pd::kernels::quant;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;
using qt::Format;

namespace {

using pd::testing::guard_intact;
using pd::testing::same_bits;

constexpr std::uint64_t kSeed = 20251203;
constexpr std::size_t kGuard = 32;

/// The layouts every test runs: int8, int4 g128 (symmetric), int4 g32 with a zero point, fp8.
std::vector<qt::Layout> layouts(int k) {
    return {{Format::int8, k}, {Format::int4, k, 128}, {Format::int4, k, 32, true}, {Format::fp8, k}};
}

std::string describe(const qt::Layout& l) {
    std::ostringstream os;
    os << qt::to_string(l.format) << " K=" << l.k;
    if (l.format == Format::int4) os << " G=" << l.group << (l.zero_point ? " with zero points" : " symmetric");
    return os.str();
}

/// Seeded weights [N, K] in [-1, 1), with row 0's first group all equal (when N > 1, K > 2),
/// an outlier of 40 in row N - 1, and a row of zeros (row 1, when N > 2).
std::vector<float> make_weights(int n, int k, std::uint64_t seed) {
    std::vector<float> w(std::size_t(n) * k);
    pd::fill_uniform<float>(w, -1.f, 1.f, seed);
    if (n > 1 && k > 2)
        for (int c = 0; c < std::min(k, 32); ++c) w[c] = 0.3125f;
    if (n > 2)
        for (int c = 0; c < k; ++c) w[std::size_t(k) + c] = 0.f;
    w[std::size_t(n - 1) * k + std::size_t(k / 2)] = 40.f;
    return w;
}

/// The bound of |w - dequantize(quantize(w))| at value c of row r.
double error_bound(const qt::QuantizedMatrix& q, int r, int c, float w) {
    const qt::Layout& l = q.layout;
    if (l.format == Format::int4)
        return 0.5 * pd::to_float(q.group_scales[std::size_t(r) * l.groups_per_row() + c / l.group]) * (1 + 1e-6);
    const double s = q.row_scales[r];
    if (l.format == Format::int8) return 0.5 * s * (1 + 1e-6) + 1e-7 * std::fabs(w);
    // fp8: 2^-4 relative in the normal range (|w| / s >= 2^-6), half the subnormal step below
    return std::fabs(w) >= std::ldexp(s, -6) ? std::ldexp(std::fabs(w), -4) * (1 + 1e-6)
                                             : std::ldexp(s, -10) * (1 + 1e-6);
}

/// Runs qt::gemv() (qt::gemv_mma() with @p tensor_cores) on a poisoned Y followed by kGuard
/// poisoned floats.
std::vector<float> run(const qt::DeviceQuantizedMatrix& w, const std::vector<bf16>& x, const qt::Shape& s,
                       bool tensor_cores = false) {
    pd::DeviceBuffer<bf16> dx{std::span<const bf16>(x)};
    pd::DeviceBuffer<float> y(std::size_t(s.batch) * s.n + kGuard);
    y.fill_bytes(pd::kPoisonByte);
    if (tensor_cores)
        qt::gemv_mma(w, dx.data(), y.data(), s);
    else
        qt::gemv(w, dx.data(), y.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return y.download();
}

}  // namespace

TEST_CASE("quant: e4m3 decodes every code and encodes each value back to its code", "[quant]") {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
        INFO("code 0x" << std::hex << c);
        const float v = qt::fp8_e4m3_decode(std::uint8_t(c));
        if ((c & 0x7f) == 0x7f) {
            CHECK(std::isnan(v));
            continue;
        }
        ++finite;
        CHECK(std::fabs(v) <= qt::kFp8Max);
        CHECK(int(qt::fp8_e4m3_encode(v)) == c);
    }
    CHECK(finite == 254);
    CHECK(qt::fp8_e4m3_decode(0x7e) == 448.f);    // S.1111.110: the largest
    CHECK(qt::fp8_e4m3_decode(0x01) == 0x1p-9f);  // the smallest subnormal
    CHECK(qt::fp8_e4m3_decode(0x08) == 0x1p-6f);  // the smallest normal
    CHECK(qt::fp8_e4m3_encode(1000.f) == 0x7e);   // saturates
    CHECK(qt::fp8_e4m3_encode(-1000.f) == 0xfe);
    CHECK(qt::fp8_e4m3_encode(1.0625f) == 0x38);   // halfway between 1 and 1.125: ties to even (1)
    CHECK(qt::fp8_e4m3_encode(1.1875f) == 0x3a);   // halfway between 1.125 and 1.25: to 1.25
    CHECK(qt::fp8_e4m3_encode(0x1p-10f) == 0x00);  // half the smallest subnormal: ties to even (0)
    CHECK(qt::fp8_e4m3_encode(std::nanf("")) == 0x7f);
}

TEST_CASE("quant: round trips stay within each format's bound, ragged K, equal groups, outliers, zeros", "[quant]") {
    std::uint64_t c = 0;
    for (int k : {1, 17, 31, 129, 200, 300}) {
        for (const qt::Layout& l : layouts(k)) {
            const int n = 5;
            const std::vector<float> w = make_weights(n, k, pd::derive_seed(kSeed, c++));
            const qt::QuantizedMatrix q = qt::quantize(w, n, l);
            INFO(describe(l));
            REQUIRE(q.packed.size() == std::size_t(n) * l.row_bytes());
            CHECK(q.bytes() == q.packed.size() + (l.format == Format::int4 ? std::size_t(n) * l.groups_per_row() *
                                                                                 (2 + (l.zero_point ? 1 : 0))
                                                                           : std::size_t(n) * 4));
            const std::vector<float> dq = qt::dequantize(q);
            int bad = 0;
            for (int r = 0; r < n; ++r)
                for (int col = 0; col < k; ++col) {
                    const float wv = w[std::size_t(r) * k + col], d = dq[std::size_t(r) * k + col];
                    if (std::fabs(double(wv) - d) > error_bound(q, r, col, wv) && bad++ < 5)
                        FAIL_CHECK("row " << r << " col " << col << ": w = " << wv << ", dequantized " << d
                                          << ", bound " << error_bound(q, r, col, wv));
                }
            CHECK(bad == 0);
            if (n > 2)
                for (int col = 0; col < k; ++col) CHECK(dq[std::size_t(k) + col] == 0.f);  // zeros stay zeros
            // deterministic: the same input gives the same bytes
            const qt::QuantizedMatrix again = qt::quantize(w, n, l);
            CHECK(again.packed == q.packed);
        }
    }
}

TEST_CASE("quant: the packing order, byte by byte", "[quant]") {
    // int4, symmetric: w = -7 ... 0 with max |w| = 7 gives scale 1 and q = w + 8 = 1 ... 8, value c
    // in nibble c % 8 of word c / 8, little-endian: the word 0x87654321.
    const std::vector<float> w4 = {-7, -6, -5, -4, -3, -2, -1, 0, 7, 7, 7, 7, 7, 7, 7, 7};
    const qt::QuantizedMatrix q4 = qt::quantize(w4, 1, {Format::int4, 16, 32});
    REQUIRE(q4.packed.size() == 16);
    const std::vector<std::uint8_t> want4 = {0x21, 0x43, 0x65, 0x87, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(q4.packed == want4);
    CHECK(pd::to_float(q4.group_scales[0]) == 1.f);
    // int4 with a zero point: w in [-2, 13] with step 1 gives scale 1, zero 2, q = w + 2 = c
    std::vector<float> wz(16);
    for (int c = 0; c < 16; ++c) wz[c] = float(c - 2);
    const qt::QuantizedMatrix qz = qt::quantize(wz, 1, {Format::int4, 16, 32, true});
    CHECK(qz.zeros == std::vector<std::uint8_t>{2});
    CHECK(std::vector<std::uint8_t>(qz.packed.begin(), qz.packed.begin() + 8) ==
          std::vector<std::uint8_t>{0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe});
    // int8: max |w| = 127 gives scale 1; value c in byte c (two's complement)
    const std::vector<float> w8 = {1, -1, 127, -127, 0, 5};
    const qt::QuantizedMatrix q8 = qt::quantize(w8, 1, {Format::int8, 6});
    CHECK(q8.row_scales == std::vector<float>{1.f});
    CHECK(std::vector<std::uint8_t>(q8.packed.begin(), q8.packed.begin() + 6) ==
          std::vector<std::uint8_t>{0x01, 0xff, 0x7f, 0x81, 0x00, 0x05});
    // fp8: max |w| = 448 gives scale 1; 1 = 0.0111.000, -2 = 1.1000.000, 448 = 0.1111.110
    const std::vector<float> w8f = {1, -2, 448, 0x1p-9f};
    const qt::QuantizedMatrix qf = qt::quantize(w8f, 1, {Format::fp8, 4});
    CHECK(std::vector<std::uint8_t>(qf.packed.begin(), qf.packed.begin() + 4) ==
          std::vector<std::uint8_t>{0x38, 0xc0, 0x7e, 0x01});
}

/// One problem of the kernel tests: seeded W and X, the quantized weights and what came out.
struct Checked {
    std::vector<float> w, x, got;    ///< the weights, X, and Y of the kernel (with its guard)
    qt::QuantizedMatrix q;           ///< the weights as stored
    std::vector<double> magnitudes;  ///< sum_k |x_k w_k| of each output
};

/// Runs the kernel of layout @p l (qt::gemv_mma() with @p tensor_cores) on seeded inputs of
/// shape @p s and checks it against the GEMV of the dequantized weights (on the tensor cores
/// int4's rounded to bf16; int8 and fp8 codes are exact in bf16), its guard, and its bits on a
/// second run. @return the problem, for the quantization-error check
Checked check_kernel(const qt::Layout& l, const qt::Shape& s, std::uint64_t seed, bool tensor_cores) {
    std::ostringstream what;
    what << describe(l) << " seed=" << seed << " B=" << s.batch << " N=" << s.n << (tensor_cores ? " (_tc)" : "");
    INFO(what.str());
    Checked c;
    c.w = make_weights(s.n, s.k, pd::derive_seed(seed, 1));
    c.x.resize(std::size_t(s.batch) * s.k);
    pd::fill_uniform<float>(c.x, -1.f, 1.f, pd::derive_seed(seed, 2));
    const std::vector<bf16> xb = pd::round_all<bf16>(c.x);
    c.q = qt::quantize(c.w, s.n, l);
    std::vector<float> dq = qt::dequantize(c.q);
    if (tensor_cores && l.format == Format::int4) dq = pd::rounded_to(pd::DType::bf16, dq);
    const std::vector<double> ref =
        pd::reference::linear(pd::rounded_to(pd::DType::bf16, c.x), dq, s.batch, s.n, s.k, &c.magnitudes);
    const qt::DeviceQuantizedMatrix dw(c.q);
    c.got = run(dw, xb, s, tensor_cores);
    const std::span<const float> y = std::span<const float>(c.got).first(std::size_t(s.batch) * s.n);
    const pd::CompareResult r =
        pd::compare_sums<float, double>(y, ref, c.magnitudes, std::size_t(s.k), pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.n)};
    INFO(pd::describe(r, what.str(), dims));
    CHECK(r.passed);
    CHECK(guard_intact(c.got, y.size()));
    CHECK(same_bits(c.got, run(dw, xb, s, tensor_cores)));
    return c;
}

/// Sizes of a kernel test.
struct Case {
    int n, k, b;  ///< N, K, B
};

TEST_CASE("quant: every kernel matches the GEMV of its dequantized weights, ragged N, K and B", "[quant]") {
    // N around the 32 rows of a block, K around the 1,024 columns staged at a time and not a
    // multiple of 8 (X's rows then sit off 16-byte boundaries), B in every bucket of tokens.
    const Case cases[] = {{1, 1, 1},    {17, 129, 3}, {33, 300, 16}, {33, 1100, 1},
                          {100, 64, 2}, {5, 2049, 5}, {40, 256, 9},  {1, 33, 16}};
    std::uint64_t n = 0;
    for (const Case& cs : cases) {
        for (const qt::Layout& l : layouts(cs.k)) {
            const qt::Shape s{cs.b, cs.n, cs.k};
            const Checked c = check_kernel(l, s, pd::derive_seed(kSeed + 1, n++), false);
            INFO(describe(l) << " B=" << s.batch << " N=" << s.n);
            // The quantization error: against the GEMV of the unquantized weights, within
            // sum_k |x_k| x (the bound of weight k) for every output, plus fp32's rounding.
            const std::vector<float> xr = pd::rounded_to(pd::DType::bf16, c.x);
            const std::vector<double> exact = pd::reference::linear(xr, c.w, s.batch, s.n, s.k);
            int over = 0;
            for (int b = 0; b < s.batch; ++b)
                for (int row = 0; row < s.n; ++row) {
                    double bound = 1e-4 * (1 + c.magnitudes[std::size_t(b) * s.n + row]);
                    for (int col = 0; col < s.k; ++col)
                        bound += std::fabs(xr[std::size_t(b) * s.k + col]) *
                                 error_bound(c.q, row, col, c.w[std::size_t(row) * s.k + col]);
                    const double err =
                        std::fabs(double(c.got[std::size_t(b) * s.n + row]) - exact[std::size_t(b) * s.n + row]);
                    if (err > bound && over++ < 3)
                        FAIL_CHECK("b " << b << " row " << row << ": error " << err << " > bound " << bound);
                }
            CHECK(over == 0);
        }
    }
}

TEST_CASE("quant: the tensor-core path matches the GEMV of its dequantized weights, ragged N, K and B", "[quant]") {
    // N around the 16 rows of a warp and the 64 of a block, K around the 512 columns staged at a
    // time and not a multiple of 8, B from 1 to 16.
    int device = 0, major = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 8) {  // (the simulated device is 8.0)
        WARN("no bf16 tensor cores (compute capability below 8.0): the _tc versions do not run here");
        return;
    }
    const Case cases[] = {{1, 1, 1}, {17, 129, 3}, {65, 520, 16}, {16, 1100, 1}, {33, 40, 9}, {80, 512, 16}};
    std::uint64_t n = 0;
    for (const Case& cs : cases)
        for (const qt::Layout& l : layouts(cs.k))
            check_kernel(l, {cs.b, cs.n, cs.k}, pd::derive_seed(kSeed + 7, n++), true);
}

TEST_CASE("quant: the device quantizer gives the host's bytes, and the device dequantizer its values in bf16",
          "[quant]") {
    // The model quantizes its bf16 weights on the device: the codes, scales and zero points must
    // be the host quantizer's for the same values (bf16-rounded weights), byte for byte.
    std::uint64_t c = 0;
    for (int k : {1, 17, 129, 300}) {
        for (const qt::Layout& l : layouts(k)) {
            const int n = 6;
            INFO(describe(l));
            const std::vector<float> w =
                pd::rounded_to(pd::DType::bf16, make_weights(n, k, pd::derive_seed(kSeed + 2, c++)));
            const pd::DeviceBuffer<bf16> dw{std::span<const bf16>(pd::round_all<bf16>(w))};
            const qt::DeviceQuantizedMatrix dq = qt::quantize_device(dw.data(), n, l);
            const qt::QuantizedMatrix host = qt::quantize(w, n, l), got = qt::download(dq);
            CHECK(got.packed == host.packed);
            CHECK(got.row_scales == host.row_scales);
            CHECK(got.zeros == host.zeros);
            REQUIRE(got.group_scales.size() == host.group_scales.size());
            for (std::size_t i = 0; i < got.group_scales.size(); ++i)
                CHECK(pd::to_float(got.group_scales[i]) == pd::to_float(host.group_scales[i]));
            CHECK(dq.bytes == host.bytes());
            // the dequantizer: the host's dequantized values, rounded to bf16
            pd::DeviceBuffer<bf16> out(std::size_t(n) * k + kGuard);
            out.fill_bytes(pd::kPoisonByte);
            qt::dequantize_device(dq, out.data());
            PD_CHECK_CUDA(cudaDeviceSynchronize());
            const std::vector<bf16> all = out.download();
            const std::vector<float> want = qt::dequantize(host);
            int bad = 0;
            for (std::size_t i = 0; i < want.size(); ++i)
                if (pd::to_float(all[i]) != pd::to_float(pd::from_float<bf16>(want[i])) && bad++ < 3)
                    FAIL_CHECK("value " << i << ": " << pd::to_float(all[i]) << ", want " << want[i]);
            CHECK(bad == 0);
            for (std::size_t i = want.size(); i < all.size(); ++i) {  // the guard past [N, K]
                std::uint16_t bits = 0;
                std::memcpy(&bits, &all[i], 2);
                CHECK(bits == 0x0101u * pd::kPoisonByte);
            }
        }
    }
}

TEST_CASE("quant: bad formats, group sizes and shapes are refused, naming the field", "[quant]") {
    const std::vector<float> w(64, 0.5f);
    CHECK_THROWS_WITH(qt::quantize(w, 1, {Format::int4, 64, 100}), Contains("Layout.group = 100"));
    CHECK_THROWS_WITH(qt::quantize(w, 1, {Format::int4, 64, 16}), Contains("Layout.group = 16"));
    CHECK_THROWS_WITH(qt::quantize(w, 1, {Format::int8, 64, 128, true}), Contains("Layout.zero_point"));
    CHECK_THROWS_WITH(qt::quantize(w, 2, {Format::int8, 64}), Contains("not N x K"));
    CHECK_THROWS_WITH(qt::quantize(w, 1, {Format::bf16, 64}), Contains("bf16 is not a quantized format"));
    CHECK_THROWS_WITH(qt::format_named("int3"), Contains("int3 is not one of bf16, int8, int4, fp8"));
    std::vector<float> inf = w;
    inf[3] = INFINITY;
    CHECK_THROWS_WITH(qt::quantize(inf, 1, {Format::int8, 64}), Contains("not finite"));

    const qt::DeviceQuantizedMatrix dw(qt::quantize(w, 1, {Format::int4, 64}));
    pd::DeviceBuffer<bf16> x(64 * 17);
    pd::DeviceBuffer<float> y(17);
    CHECK_THROWS_WITH(qt::gemv(dw, x.data(), y.data(), {17, 1, 64}),
                      Contains("B (batch) must be in 1 ... kMaxQuantBatch = 16"));
    CHECK_THROWS_WITH(qt::gemv(dw, x.data(), y.data(), {1, 1, 65}), Contains("differs from the weights' K = 64"));
    CHECK_THROWS_WITH(qt::gemv(dw, x.data(), y.data(), {1, 0, 64}), Contains("N (rows of W) must be >= 1"));
    // each format's kernel refuses another format's weights, naming both
    CHECK_THROWS_WITH(qt::gemv_int8(dw, x.data(), y.data(), {1, 1, 64}), Contains("weights in int4, not int8"));
    CHECK_THROWS_WITH(qt::gemv_fp8_mma(dw, x.data(), y.data(), {1, 1, 64}), Contains("weights in int4, not fp8"));
    const qt::DeviceQuantizedMatrix dw8(qt::quantize(w, 1, {Format::int8, 64}));
    CHECK_THROWS_WITH(qt::gemv_int4(dw8, x.data(), y.data(), {1, 1, 64}), Contains("weights in int8, not int4"));
    CHECK_THROWS_WITH(qt::gemv_mma(dw, x.data(), y.data(), {17, 1, 64}), Contains("B (batch) must be in 1"));
    CHECK(pd::names_of(qt::versions()) ==
          std::vector<std::string>{"int8", "int4", "fp8", "int8_tc", "int4_tc", "fp8_tc"});
    for (const pd::Version& v : qt::versions())  // a format's SIMT version, and "_tc" on the tensor cores
        CHECK(std::string(qt::to_string(qt::version_format(v.name))) +
                  (v.units == pd::Units::tensor_cores ? "_tc" : "") ==
              v.name);
    CHECK_THROWS_WITH(qt::version_format("int3_tc"), Contains("int3"));
    CHECK_THROWS_WITH(qt::version_format("bf16"), Contains("chapter 03's GEMV"));
}
