// Seeded inputs: reproducible, in range, not constant, and rounded correctly to 16 bits.
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

TEST_CASE("the same seed gives the same data, another seed different data", "[rng]") {
    std::vector<float> a(1000), b(1000), c(1000);
    pd::fill_uniform<float>(a, -1.f, 1.f, 42);
    pd::fill_uniform<float>(b, -1.f, 1.f, 42);
    pd::fill_uniform<float>(c, -1.f, 1.f, 43);
    CHECK(a == b);
    CHECK(a != c);
    CHECK(pd::derive_seed(42, 0) != pd::derive_seed(42, 1));
    CHECK(pd::derive_seed(42, 0) != pd::derive_seed(43, 0));
    CHECK(pd::derive_seed(42, 5) == pd::derive_seed(42, 5));
}

TEST_CASE("uniform values are in range and spread out", "[rng]") {
    std::vector<float> v(100000);
    pd::fill_uniform<float>(v, -3.f, 5.f, 1);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    CHECK(*lo >= -3.f);
    CHECK(*hi < 5.f);
    CHECK(*lo < -2.99f);
    CHECK(*hi > 4.99f);
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    CHECK(mean == Approx(1.0).margin(0.05));
    CHECK(std::set<float>(v.begin(), v.end()).size() > 90000);  // not constant, few repeats
}

TEST_CASE("normal values have the requested mean and deviation", "[rng]") {
    std::vector<float> v(200000);
    pd::fill_normal<float>(v, 2.f, 0.5f, 9);
    double mean = 0, var = 0;
    for (float x : v) mean += x;
    mean /= v.size();
    for (float x : v) var += (x - mean) * (x - mean);
    var /= v.size();
    CHECK(mean == Approx(2.0).margin(0.01));
    CHECK(std::sqrt(var) == Approx(0.5).margin(0.01));
    for (float x : v) REQUIRE(std::isfinite(x));
}

TEST_CASE("16-bit fills are the float stream rounded to nearest", "[rng][half]") {
    std::vector<float> f(5000);
    std::vector<__nv_bfloat16> bf(5000);
    std::vector<__half> h(5000);
    pd::fill_uniform<float>(f, -4.f, 4.f, 77);
    pd::fill_uniform<__nv_bfloat16>(bf, -4.f, 4.f, 77);
    pd::fill_uniform<__half>(h, -4.f, 4.f, 77);
    std::size_t inexact_bf = 0;
    for (std::size_t i = 0; i < f.size(); ++i) {
        REQUIRE(pd::to_float(bf[i]) == __bfloat162float(__float2bfloat16_rn(f[i])));
        REQUIRE(pd::to_float(h[i]) == __half2float(__float2half_rn(f[i])));
        // bf16 keeps 8 significant bits: the rounding error is at most half a unit.
        REQUIRE(std::fabs(pd::to_float(bf[i]) - f[i]) <= std::fabs(f[i]) * 0x1.0p-8f);
        inexact_bf += pd::to_float(bf[i]) != f[i];
    }
    CHECK(inexact_bf > 4000);  // the rounding really happened
}

TEST_CASE("integer fills cover the range exactly", "[rng]") {
    std::vector<float> v(10000);
    pd::fill_integers<float>(v, -3, 3, 5);
    std::set<float> seen(v.begin(), v.end());
    CHECK(seen == std::set<float>{-3, -2, -1, 0, 1, 2, 3});
    CHECK_THROWS_AS(pd::Rng(1).integer(2, 1), std::invalid_argument);
}
