// CPU references of chapter 00 against values worked out by hand.
#include "roofline_reference.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

TEST_CASE("FMA chain reference: hand-computed steps and a fixed point", "[reference]") {
    // a = a * 0.5 + 1 from a = 0: 1, 1.5, 1.75 (all exact in float).
    const std::vector<float> init = {0.f, 4.f}, mul = {0.5f, 0.5f}, add = {1.f, 1.f};
    CHECK(pd::reference::fma_chains(init, mul, add, 1, 2, 3) == std::vector<float>{1.75f, 2.25f});
    // Many steps converge to the fixed point add / (1 - mul) = 2.
    const auto far = pd::reference::fma_chains(init, mul, add, 2, 1, 200);
    CHECK(far[0] == 2.f);
    CHECK(far[1] == 2.f);
    CHECK_THROWS_AS(pd::reference::fma_chains(init, mul, add, 2, 2, 1), std::invalid_argument);
}

TEST_CASE("FMA chain reference rounds once per step, like FFMA", "[reference]") {
    // a*m + c with a*m not representable in float: fused and unfused results differ.
    const float a = 1.f + 0x1.0p-23f, m = 1.f - 0x1.0p-23f, c = -1.f;
    const std::vector<float> out = pd::reference::fma_chains({&a, 1}, {&m, 1}, {&c, 1}, 1, 1, 1);
    CHECK(out[0] == std::fma(a, m, c));
    CHECK(out[0] == -0x1.0p-46f);  // exact: (1+e)(1-e) - 1 = -e^2
}

TEST_CASE("GEMM sample reference: C = A B^T on chosen entries", "[reference]") {
    // A [2,3], B [2,3]: C[i][j] = dot(A_i, B_j).
    const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, -1, 2, 1, 0};
    const std::vector<std::size_t> rows = {0, 1}, cols = {1, 0};
    const auto c = pd::reference::gemm_abt_sample(a, b, 3, rows, cols);
    CHECK(c == std::vector<double>{4, -2, 13, -2});
}
