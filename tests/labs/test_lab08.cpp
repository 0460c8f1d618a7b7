// Lab 08: the int4 weights of chapter 08's GEMV (int4_gemv::Weights::load and dequant8, in
// <lab tree>/08_quantized_decode/gemv_int4.cu), through the int8 step's kernels, which the file copies:
// against the GEMV of the dequantized weights (double accumulation) for hand-made rows whose
// every nibble has its own value, groups of 32 and 128 with and without zero points, ragged K
// (not a multiple of the group or of the 32 values of a vector), several tokens and more rows
// than a block; poisoned output with guard floats past the end.
#include "../kernels/guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"
#include "quant/quant.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace qt = pd::kernels::quant;
using bf16 = __nv_bfloat16;

namespace {

constexpr const char* kWhere =
    "lab 08: int4_gemv::Weights::load and dequant8 in <lab tree>/08_quantized_decode/gemv_int4.cu";
constexpr std::size_t kGuard = 32;  // poisoned floats after Y that must stay untouched

/// Quantizes @p w [N, K] to int4 in groups of @p group (with zero points when @p zero_point),
/// runs gemv_int4 on X [B, K] (uniform in [-1, 1), rounded to bf16) and checks Y [B, N] against
/// the GEMV of the dequantized weights, and that nothing is written past Y.
void check_lab(const std::vector<float>& w, int batch, int n, int k, int group, bool zero_point, std::uint64_t seed) {
    INFO(kWhere);
    INFO("seed=" << seed << " B=" << batch << " N=" << n << " K=" << k << " G=" << group
                 << (zero_point ? " with zero points" : " symmetric (zero point 8)"));
    const qt::QuantizedMatrix q = qt::quantize(w, n, {qt::Format::int4, k, group, zero_point});
    std::vector<float> x(std::size_t(batch) * k);
    pd::fill_uniform<float>(x, -1.f, 1.f, pd::derive_seed(seed, 2));
    const std::vector<bf16> xb = pd::round_all<bf16>(x);

    const qt::DeviceQuantizedMatrix dw(q);
    pd::DeviceBuffer<bf16> dx{std::span<const bf16>(xb)};
    pd::DeviceBuffer<float> dy(std::size_t(batch) * n + kGuard);
    dy.fill_bytes(pd::kPoisonByte);
    qt::gemv_int4(dw, dx.data(), dy.data(), {batch, n, k});
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = dy.download();
    const std::span<const float> y(all.data(), std::size_t(batch) * n);

    std::vector<double> magnitudes;
    const std::vector<double> ref =
        pd::reference::linear(pd::rounded_to(pd::DType::bf16, x), qt::dequantize(q), batch, n, k, &magnitudes);
    const pd::CompareResult r = pd::compare_sums<float, double>(y, ref, magnitudes, std::size_t(k));
    const std::size_t dims[] = {std::size_t(batch), std::size_t(n)};
    INFO(
        pd::describe(r, "gemv_int4 against the GEMV of the dequantized weights (NaN: an element never written)", dims));
    CHECK(r.passed);
    const std::size_t past = pd::testing::guard_written(all, y.size());
    INFO(past << " of the " << kGuard << " floats after Y were written: nothing may be written past Y [B, N]");
    CHECK(past == 0);
}

/// Seeded weights [N, K], uniform in [-1, 1).
std::vector<float> random_weights(int n, int k, std::uint64_t seed) {
    std::vector<float> w(std::size_t(n) * k);
    pd::fill_uniform<float>(w, -1.f, 1.f, pd::derive_seed(seed, 1));
    return w;
}

}  // namespace

TEST_CASE("lab08: every nibble of a word in its place, one row and one token", "[lab08]") {
    // Value c of the row is 7 - (c % 15): the 15 levels -7 ... 7 in turn, so each nibble of each
    // word holds its own value, and a nibble taken from the wrong place changes the sum.
    for (int k : {32, 64, 96}) {
        std::vector<float> w(static_cast<std::size_t>(k));
        for (int c = 0; c < k; ++c) w[c] = float(7 - c % 15);
        check_lab(w, 1, 1, k, 32, false, 800 + k);
    }
}

TEST_CASE("lab08: groups of 32 and 128, with and without zero points, ragged K", "[lab08]") {
    for (int k : {1, 31, 33, 129, 200, 1100})
        for (int group : {32, 128})
            for (bool zero_point : {false, true})
                check_lab(random_weights(7, k, 810 + k), 1, 7, k, group, zero_point, 810 + k);
}

TEST_CASE("lab08: several tokens, more rows than one block", "[lab08]") {
    check_lab(random_weights(33, 300, 821), 3, 33, 300, 128, false, 821);
    check_lab(random_weights(70, 256, 822), 16, 70, 256, 64, true, 822);
    check_lab(random_weights(5, 2049, 823), 5, 5, 2049, 256, false, 823);
}

TEST_CASE("lab08: a case the grader gives", "[.][lab08-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    const int n = c.integer("n"), k = c.integer("k");
    check_lab(random_weights(n, k, c.seed()), c.integer("batch"), n, k, c.integer("group"), c.flag("zero_point", false),
              c.seed());
}
