// The comparison helpers must fail on wrong outputs, NaN, inf and all-zero outputs.
#include "pd/compare.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using Catch::Matchers::Contains;

namespace {

std::vector<double> random_ref(std::size_t n, std::uint64_t seed) {
    std::vector<float> f(n);
    pd::fill_uniform<float>(f, -2.f, 2.f, seed);
    return {f.begin(), f.end()};
}

std::vector<float> as_float(const std::vector<double>& v) {
    return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("identical outputs pass, and one wrong element fails and is reported", "[compare]") {
    const auto ref = random_ref(1000, 7);
    std::vector<float> out = as_float(ref);
    auto r = pd::compare<float, double>(out, ref, pd::Tolerance::fp32());
    CHECK(r.passed);
    CHECK(r.bad == 0);
    CHECK(r.count == 1000);

    out[417] += 0.5f;
    r = pd::compare<float, double>(out, ref, pd::Tolerance::fp32());
    CHECK_FALSE(r.passed);
    CHECK(r.bad == 1);
    REQUIRE(r.first.size() == 1);
    CHECK(r.first[0].index == 417);
    CHECK(r.max_abs_err == Approx(0.5).epsilon(1e-5));
    const std::size_t shape[] = {10, 100};
    const std::string text = pd::describe(r, "v1 seed=7 T=10 N=100", shape);
    CHECK_THAT(text, Contains("MISMATCH"));
    CHECK_THAT(text, Contains("seed=7"));
    CHECK_THAT(text, Contains("[4,17]"));  // 417 = 4 * 100 + 17
}

TEST_CASE("the fp32 tolerance is atol + rtol * |ref|", "[compare]") {
    const std::vector<double> ref = {100.0};
    // Allowed: 1e-4 + 1e-4 * 100 = 0.0101.
    CHECK(pd::compare<double, double>(std::vector<double>{100.0100}, ref, pd::Tolerance::fp32()).passed);
    CHECK_FALSE(pd::compare<double, double>(std::vector<double>{100.0102}, ref, pd::Tolerance::fp32()).passed);
    CHECK_FALSE(pd::compare<double, double>(std::vector<double>{99.9898}, ref, pd::Tolerance::fp32()).passed);
    // Exact means exact.
    CHECK_FALSE(pd::compare<float, double>(std::vector<float>{std::nextafter(1.f, 2.f)}, std::vector<double>{1.0},
                                           pd::Tolerance::exact())
                    .passed);
}

TEST_CASE("NaN and inf outputs always fail, even with a huge tolerance", "[compare]") {
    const auto ref = random_ref(64, 3);
    std::vector<float> out = as_float(ref);
    out[5] = std::numeric_limits<float>::quiet_NaN();
    const pd::Tolerance loose{1e30, 1e30};
    auto r = pd::compare<float, double>(out, ref, loose);
    CHECK_FALSE(r.passed);
    CHECK(r.non_finite == 1);
    CHECK(r.first.at(0).index == 5);
    out[5] = std::numeric_limits<float>::infinity();
    CHECK_FALSE(pd::compare<float, double>(out, ref, loose).passed);

    SECTION("a poisoned buffer that was never written fails") {
        std::vector<float> untouched(64);
        pd::poison<float>(untouched);
        r = pd::compare<float, double>(untouched, ref, loose);
        CHECK_FALSE(r.passed);
        CHECK(r.non_finite == 64);
    }
}

TEST_CASE("an all-zero output fails where the reference is not zero", "[compare]") {
    const std::vector<double> ref = {1e-6, -2e-6, 0.0};
    const std::vector<float> zeros(3, 0.f);
    // Within atol element by element, but all zero: the guard still fails it.
    auto r = pd::compare<float, double>(zeros, ref, pd::Tolerance{1e-3, 0});
    CHECK_FALSE(r.passed);
    CHECK(r.all_zero_output);
    CHECK_THAT(pd::describe(r, "ctx"), Contains("all zeros"));
    // Zero output against a zero reference is right.
    const std::vector<double> zref(3, 0.0);
    CHECK(pd::compare<float, double>(zeros, zref, pd::Tolerance::exact()).passed);
}

TEST_CASE("a size mismatch fails", "[compare]") {
    const std::vector<double> ref(4, 1.0);
    const std::vector<float> out(3, 1.f);
    const auto r = pd::compare<float, double>(out, ref, pd::Tolerance::fp32());
    CHECK_FALSE(r.passed);
    CHECK_THAT(r.rule, Contains("size mismatch"));
}

TEST_CASE("16-bit outputs are compared through float", "[compare][half]") {
    const std::vector<double> ref = {0.5, -1.25, 3.0};
    std::vector<__nv_bfloat16> out;
    for (double v : ref) out.push_back(pd::from_float<__nv_bfloat16>(float(v)));
    CHECK(pd::compare<__nv_bfloat16, double>(out, ref, pd::Tolerance::exact()).passed);
    out[1] = pd::from_float<__nv_bfloat16>(-1.5f);
    CHECK_FALSE(pd::compare<__nv_bfloat16, double>(out, ref, pd::Tolerance::exact()).passed);
    std::vector<__half> h(3);
    pd::poison<__half>(h);
    CHECK(pd::compare<__half, double>(h, ref, pd::Tolerance{1, 1}).non_finite == 3);
}

TEST_CASE("low-precision rule: within twice the error of a reference with the same rounding", "[compare][lowp]") {
    const std::vector<double> ref = {1.0, 2.0, 3.0, 4.0};
    const std::vector<double> ref_lp = {1.01, 2.0, 3.0, 3.99};  // max |ref_lp - ref| = 0.01
    CHECK(
        pd::compare_to_lowp_reference<float, double>(std::vector<float>{1.02f, 2.f, 2.985f, 4.f}, ref, ref_lp).passed);
    const auto bad =
        pd::compare_to_lowp_reference<float, double>(std::vector<float>{1.f, 2.f, 3.03f, 4.f}, ref, ref_lp);
    CHECK_FALSE(bad.passed);
    CHECK(bad.first.at(0).index == 2);
    // NaN still fails.
    CHECK_FALSE(pd::compare_to_lowp_reference<float, double>(
                    std::vector<float>{1.f, std::numeric_limits<float>::quiet_NaN(), 3.f, 4.f}, ref, ref_lp)
                    .passed);
}

TEST_CASE("norm-wise rule for fp16/bf16: ||out - ref|| / ||ref|| <= bound", "[compare][lowp]") {
    const auto ref = random_ref(4096, 11);
    std::vector<float> out = as_float(ref);
    for (std::size_t i = 0; i < out.size(); i += 2) out[i] *= 1.001f;  // 0.1% noise: passes 1e-2
    CHECK(pd::compare_rel_l2<float, double>(out, ref, 1e-2).passed);
    for (std::size_t i = 0; i < out.size(); i += 2) out[i] *= 1.1f;  // ~7% norm error: fails
    const auto r = pd::compare_rel_l2<float, double>(out, ref, 1e-2);
    CHECK_FALSE(r.passed);
    CHECK(r.rel_l2_err > 1e-2);
    CHECK_FALSE(r.first.empty());
}

// ---- pd::check(Expected): what the chapter harness checks every output with ----------------

TEST_CASE("check: a full reference passes the same values and reports a wrong one by its index", "[compare][check]") {
    pd::Expected e;
    e.values = random_ref(12, 21);
    e.dims = {3, 4};
    std::vector<float> out = as_float(e.values);
    CHECK(pd::check(e, out).passed);
    out[7] += 1.f;
    const pd::CompareResult r = pd::check(e, out);
    CHECK_FALSE(r.passed);
    CHECK(r.count == 12);
    REQUIRE(r.first.size() == 1);
    CHECK(r.first[0].index == 7);
    // The expected tolerance is the one applied: exact refuses one ulp that the fp32 rule accepts.
    out = as_float(e.values);
    out[0] = std::nextafter(out[0], 10.f);
    CHECK(pd::check(e, out).passed);
    e.tolerance = pd::Tolerance::exact();
    CHECK_FALSE(pd::check(e, out).passed);
}

TEST_CASE("check: sampled rows map mismatch indices back to the full output", "[compare][check]") {
    // Output [4 rows, 3]; rows 1 and 3 are checked, so e.values holds 2 x 3 values.
    const std::vector<double> full = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    pd::Expected e;
    e.rows = {1, 3};
    e.row_length = 3;
    e.values = {10, 11, 12, 30, 31, 32};
    e.dims = {4, 3};
    REQUIRE(e.sampled());
    std::vector<float> out = as_float(full);
    CHECK(pd::check(e, out).passed);
    // Element (3, 2), index 3 * 3 + 2 = 11 of the output (index 5 of the checked values), and
    // element (1, 0), index 3: reported as 3 and 11, in order.
    out[11] = 99.f;
    out[3] = -1.f;
    pd::CompareResult r = pd::check(e, out);
    CHECK_FALSE(r.passed);
    CHECK(r.count == 6);  // only the checked elements are compared
    REQUIRE(r.first.size() == 2);
    CHECK(r.first[0].index == 3);
    CHECK(r.first[0].out == -1.0);
    CHECK(r.first[0].ref == 10.0);
    CHECK(r.first[1].index == 11);
    CHECK_THAT(pd::describe(r, "ctx", e.dims), Contains("[3,2]"));
    // A wrong but finite value in an unchecked row is not seen (that is what sampling gives up).
    out = as_float(full);
    out[0] = 1234.f;
    CHECK(pd::check(e, out).passed);
}

TEST_CASE("check: a NaN anywhere fails, checked or not, and is counted once", "[compare][check]") {
    const std::vector<double> full = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    pd::Expected e;
    e.rows = {1, 3};
    e.row_length = 3;
    e.values = {10, 11, 12, 30, 31, 32};
    e.tolerance = {1e30, 1e30};  // any finite value passes: only the NaN rule can fail it
    std::vector<float> out = as_float(full);
    // Row 2 is not checked, but a NaN there is an element the kernel never wrote.
    out[7] = std::numeric_limits<float>::quiet_NaN();
    pd::CompareResult r = pd::check(e, out);
    CHECK_FALSE(r.passed);
    CHECK(r.non_finite == 1);
    CHECK_THAT(r.rule, Contains("every output finite"));
    CHECK_THAT(pd::describe(r, "ctx"), Contains("NaN or inf"));
    // In a checked row it is counted once, not once by the comparison and again by the scan.
    out = as_float(full);
    out[4] = std::numeric_limits<float>::infinity();
    r = pd::check(e, out);
    CHECK_FALSE(r.passed);
    CHECK(r.non_finite == 1);
    // Both: two.
    out[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK(pd::check(e, out).non_finite == 2);
    // A wholly poisoned output fails with every element counted, sampled or not.
    std::vector<float> poisoned(12);
    pd::poison<float>(poisoned);
    r = pd::check(e, poisoned);
    CHECK_FALSE(r.passed);
    CHECK(r.non_finite == 12);
    pd::Expected all;
    all.values = full;
    CHECK(pd::check(all, poisoned).non_finite == 12);
}

TEST_CASE("check: the low-precision rule when values_lowp is given", "[compare][check][lowp]") {
    // Reference {1, 2, 3, 4}, low-precision reference {1.01, 2, 3, 3.99}: max |ref_lp - ref| =
    // 0.01, bound 2 x 0.01 + 1e-6 x 4 = 0.020004. The element-wise tolerance no longer applies.
    pd::Expected e;
    e.values = {1, 2, 3, 4};
    e.values_lowp = {1.01, 2, 3, 3.99};
    e.tolerance = pd::Tolerance::exact();
    CHECK(pd::check(e, std::vector<float>{1.02f, 2.f, 2.985f, 4.f}).passed);  // errors 0.02, 0.015
    const pd::CompareResult bad = pd::check(e, std::vector<float>{1.f, 2.f, 3.03f, 4.f});
    CHECK_FALSE(bad.passed);
    REQUIRE(bad.first.size() == 1);
    CHECK(bad.first[0].index == 2);
    CHECK_THAT(bad.rule, Contains("max|ref_lp - ref|"));
    // Sampled: rows 0 and 2 of [3, 2]; the error at (2, 1) is reported at index 5.
    pd::Expected s;
    s.rows = {0, 2};
    s.row_length = 2;
    s.values = {1, 2, 3, 4};
    s.values_lowp = {1.01, 2, 3, 3.99};
    const std::vector<float> out = {1.f, 2.f, 7.f, 7.f, 3.f, 4.05f};
    const pd::CompareResult r = pd::check(s, out);
    CHECK_FALSE(r.passed);
    REQUIRE(r.first.size() == 1);
    CHECK(r.first[0].index == 5);
}

TEST_CASE("check: an all-zero output fails, and bad sampling is refused", "[compare][check][errors]") {
    pd::Expected e;
    e.values = {1e-6, -2e-6, 0};
    e.tolerance = {1e-3, 0};
    const pd::CompareResult r = pd::check(e, std::vector<float>(3, 0.f));
    CHECK_FALSE(r.passed);
    CHECK(r.all_zero_output);
    // Rows without a row length, and a row past the end of the output.
    pd::Expected no_length;
    no_length.rows = {0};
    no_length.values = {1};
    CHECK_THROWS_AS(pd::check(no_length, std::vector<float>{1.f}), std::invalid_argument);
    pd::Expected past;
    past.rows = {2};
    past.row_length = 2;
    past.values = {1, 1};
    CHECK_THROWS_WITH(pd::check(past, std::vector<float>(4, 1.f)), Contains("row 2 is past the end"));
}

namespace {

/// Dot products of N random rows of W with one random x over K terms, summed in fp32 one term
/// after the other (the longest chain of roundings a kernel can have), with their double
/// reference and sum_k |x_k w_k|. With @p shift, element k of x is multiplied with element
/// k + shift of W: a planted indexing bug.
struct Sums {
    std::vector<float> fp32;
    std::vector<double> ref, magnitude;
};

Sums fp32_sums(std::size_t n, std::size_t k, std::uint64_t seed, std::size_t shift = 0) {
    std::vector<float> x(k), w(n * k);
    pd::fill_uniform<float>(x, -1.f, 1.f, seed);
    pd::fill_uniform<float>(w, -1.f, 1.f, seed + 1);
    Sums s;
    for (std::size_t j = 0; j < n; ++j) {
        float acc = 0;
        double ref = 0, mag = 0;
        for (std::size_t c = 0; c < k; ++c) {
            acc = std::fma(x[c], w[j * k + (c + shift) % k], acc);
            const double p = double(x[c]) * double(w[j * k + c]);
            ref += p;
            mag += std::fabs(p);
        }
        s.fp32.push_back(acc);
        s.ref.push_back(ref);
        s.magnitude.push_back(mag);
    }
    return s;
}

}  // namespace

TEST_CASE("long fp32 sums: the bound grows like sqrt(K) and still catches an indexing bug at the largest K",
          "[compare][sums]") {
    // Chapters 02 and 03 allow K up to 2^20. The rounding of a sequential fp32 sum of 65,536
    // products is far above the fixed rule's 1e-4 for an output near zero (a false FAILED
    // whenever one comes out near zero), and far inside the sqrt(K) rule.
    const Sums mid = fp32_sums(64, 65536, 11);
    const pd::CompareResult ok = pd::compare_sums<float, double>(mid.fp32, mid.ref, mid.magnitude, 65536);
    CHECK(ok.max_abs_err > 3e-4);
    CHECK(ok.passed);
    CHECK_THAT(ok.rule, Contains("sqrt(K)"));
    CHECK_THAT(ok.rule, Contains("K = 65536"));

    const std::size_t k_max = std::size_t(1) << 20;
    const Sums longest = fp32_sums(8, k_max, 12);
    CHECK(pd::compare_sums<float, double>(longest.fp32, longest.ref, longest.magnitude, k_max).passed);
    // The same sums with W read one column off: every output must fail.
    const Sums planted = fp32_sums(8, k_max, 12, 1);
    const pd::CompareResult bad = pd::compare_sums<float, double>(planted.fp32, planted.ref, planted.magnitude, k_max);
    CHECK_FALSE(bad.passed);
    CHECK(bad.bad == 8);
    // A one-ulp-of-the-bound error past the rule fails; the bound is not a blanket.
    const double bound = 1e-4 + 1e-4 * std::fabs(mid.ref[0]) + std::sqrt(65536.0) * 0x1p-24 * mid.magnitude[0];
    const std::vector<double> just_out = {mid.ref[0] + bound * 1.001};
    CHECK_FALSE(pd::compare_sums<double, double>(just_out, std::vector<double>{mid.ref[0]},
                                                 std::vector<double>{mid.magnitude[0]}, 65536)
                    .passed);
    const std::vector<double> just_in = {mid.ref[0] + bound * 0.999};
    CHECK(pd::compare_sums<double, double>(just_in, std::vector<double>{mid.ref[0]},
                                           std::vector<double>{mid.magnitude[0]}, 65536)
              .passed);
}

TEST_CASE("check: magnitudes select the sum rule, in the order of the checked rows", "[compare][check][sums]") {
    // Two rows of [3, 2] are checked; K = 10,000: sqrt(K) u = 100 * 2^-24 ~ 5.96e-6, so a
    // magnitude of 1e3 allows 5.96e-3 more than the fixed rule (1e-4 + 1e-4 |ref|).
    pd::Expected e;
    e.rows = {0, 2};
    e.row_length = 2;
    e.values = {1, 2, 3, 4};
    e.magnitudes = {1e3, 1e3, 1e3, 0};
    e.sum_length = 10000;
    CHECK(pd::check(e, std::vector<float>{1.005f, 2.f, 9.f, 9.f, 3.f, 4.f}).passed);
    const pd::CompareResult r = pd::check(e, std::vector<float>{1.f, 2.f, 9.f, 9.f, 3.f, 4.005f});
    CHECK_FALSE(r.passed);  // the last element's magnitude is 0: only the fixed rule
    REQUIRE(r.first.size() == 1);
    CHECK(r.first[0].index == 5);
}
