// CPU references against values worked out by hand: chapter 00's FMA chains and sampled GEMM,
// chapter 01's attention (scores, probabilities, output, the mask rule allowed_keys() and the
// cost formulas of its Shape), chapters 02 and 03's linear layer (fp32 and bf16 inputs, all rows
// and sampled rows). Each case is small enough to do on paper; the arithmetic is in the comments.
// Inputs are chosen so that results are exact (integers, powers of two) or closed forms in e.
#include "attention_reference.hpp"
#include "layers_reference.hpp"
#include "linear_reference.hpp"
#include "roofline_reference.hpp"

#include "../../kernels/attention/attention.hpp"  // allowed_keys() and Shape: host code, no kernel

#include "pd/half.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace att = pd::kernels::attention;
namespace ref = pd::reference;

namespace {

const double e = std::exp(1.0);

/// Approx with a relative margin of a few double ulps: for closed forms such as e / (1 + e),
/// which the reference reaches through a different order of operations.
Approx close(double v) {
    return Approx(v).epsilon(1e-14).margin(1e-15);
}

}  // namespace

// ---- chapter 00 -----------------------------------------------------------------------------

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

// ---- chapter 01: the mask rule and the cost formulas ----------------------------------------

TEST_CASE("allowed_keys: the 3 x 5 example of attention.hpp, decode and the square mask", "[reference][mask]") {
    // Sq = 3 queries are the last 3 of Sk = 5 positions: query i sits at position 5 - 3 + i = 2 + i
    // and sees keys 0 .. 2 + i, that is 3, 4, 5 keys:
    //     query 0 (position 2)   x x x . .
    //     query 1 (position 3)   x x x x .
    //     query 2 (position 4)   x x x x x
    CHECK(att::allowed_keys(0, 3, 5) == 3);
    CHECK(att::allowed_keys(1, 3, 5) == 4);
    CHECK(att::allowed_keys(2, 3, 5) == 5);
    // Without the mask every query sees all 5 keys.
    for (int i = 0; i < 3; ++i) CHECK(att::allowed_keys(i, 3, 5, false) == 5);
    // Decode, Sq = 1: the new token sees the whole cache, mask or not.
    CHECK(att::allowed_keys(0, 1, 7) == 7);
    CHECK(att::allowed_keys(0, 1, 7, false) == 7);
    // Square, Sq = Sk = 4: query i sees keys 0 .. i (the usual lower triangle).
    for (int i = 0; i < 4; ++i) CHECK(att::allowed_keys(i, 4, 4) == i + 1);
    // constexpr: the kernels and the host share one rule, usable at compile time (the value is
    // checked at run time, so that a wrong rule fails this test instead of the build).
    constexpr int at_compile_time = att::allowed_keys(0, 3, 5);
    CHECK(at_compile_time == 3);
    // The Shape overload is the same function with the sizes of the shape.
    att::Shape s{1, 1, 3, 5, 4, true};
    for (int i = 0; i < 3; ++i) CHECK(att::allowed_keys(s, i) == 3 + i);
    s.causal = false;
    for (int i = 0; i < 3; ++i) CHECK(att::allowed_keys(s, i) == 5);
}

TEST_CASE("attention Shape: element counts, allowed scores, FLOPs and bytes by hand", "[reference][cost]") {
    // B = 2, H = 3, Sq = 3, Sk = 5, d = 4, causal (the 3 x 5 mask above in each of 6 heads).
    att::Shape s{2, 3, 3, 5, 4, true};
    CHECK(s.score_elements() == 90);  // 2 * 3 * 3 * 5
    CHECK(s.q_elements() == 72);      // 2 * 3 * 3 * 4
    CHECK(s.kv_elements() == 120);    // 2 * 3 * 5 * 4
    // Allowed scores per head: 3 + 4 + 5 = 12 (the formula: Sq (Sk - Sq) + Sq (Sq + 1) / 2 =
    // 3 * 2 + 3 * 4 / 2 = 6 + 6 = 12); 6 heads: 72.
    CHECK(s.allowed_scores() == 72.0);
    // FLOPs: 2 d per score (every score computed): 2 * 90 * 4 = 720; softmax 5 per score: 450;
    // P V 2 d per allowed score: 2 * 72 * 4 = 576. Total 1746.
    CHECK(s.flops() == 1746.0);
    // Bytes (fp32): scores read Q, K and write S: 4 (72 + 120 + 90) = 1128; softmax reads and
    // writes S: 4 * 2 * 90 = 720; P V reads S and V, writes O: 4 (90 + 120 + 72) = 1128.
    // Total 2976 (= 8 q + 8 kv + 16 s = 576 + 960 + 1440).
    CHECK(s.min_bytes() == 2976.0);

    // Without the mask every score is used: 90 allowed, P V 2 * 90 * 4 = 720, FLOPs 720 + 450 +
    // 720 = 1890. The bytes do not depend on the mask.
    s.causal = false;
    CHECK(s.allowed_scores() == 90.0);
    CHECK(s.flops() == 1890.0);
    CHECK(s.min_bytes() == 2976.0);

    // allowed_scores() is the sum of allowed_keys() over every query of every head, for a few
    // shapes (square, Sq < Sk, decode), mask on and off.
    for (const att::Shape& t : {att::Shape{1, 1, 4, 4, 8, true}, att::Shape{2, 2, 7, 19, 8, true},
                                att::Shape{3, 1, 1, 33, 8, true}, att::Shape{2, 2, 7, 19, 8, false}}) {
        INFO("B=" << t.batch << " H=" << t.heads << " Sq=" << t.q_len << " Sk=" << t.kv_len << " causal=" << t.causal);
        double sum = 0;
        for (int i = 0; i < t.q_len; ++i) sum += att::allowed_keys(t, i);
        CHECK(t.allowed_scores() == sum * t.batch * t.heads);
    }
    // Square causal Sq = Sk = 4: 1 + 2 + 3 + 4 = 10 of 16 scores.
    CHECK(att::Shape{1, 1, 4, 4, 8, true}.allowed_scores() == 10.0);
}

// ---- chapter 01: scores, probabilities, attention -------------------------------------------

TEST_CASE("attention reference, d = 1, one query and two keys: closed forms in e", "[reference][attention]") {
    // q = [1], K = [0; 1], V = [2; 4], d = 1 so the scale 1 / sqrt(d) is 1.
    // Scores: 1 * 0 = 0 and 1 * 1 = 1.
    // Softmax of (0, 1): (1 / (1 + e), e / (1 + e)) = (0.26894..., 0.73105...).
    // O = 2 / (1 + e) + 4 e / (1 + e) = (2 + 4 e) / (1 + e) = 3.46211...
    // Sq = 1 is decode: the one query sees both keys, so causal and not give the same.
    const std::vector<float> q = {1}, k = {0, 1}, v = {2, 4};
    CHECK(ref::attention_scores(q, k, 1, 1, 1, 2, 1) == std::vector<double>{0.0, 1.0});
    for (bool causal : {true, false}) {
        INFO("causal=" << causal);
        const auto p = ref::attention_probabilities(q, k, 1, 1, 1, 2, 1, causal);
        REQUIRE(p.size() == 2);
        CHECK(p[0] == close(1 / (1 + e)));
        CHECK(p[1] == close(e / (1 + e)));
        const auto o = ref::attention(q, k, v, 1, 1, 1, 2, 1, causal);
        REQUIRE(o.size() == 1);
        CHECK(o[0] == close((2 + 4 * e) / (1 + e)));
    }
}

TEST_CASE("attention reference, d = 1, Sq = 2 < Sk = 3: the bottom-right causal mask", "[reference][attention]") {
    // q = [0; 1], K = [0; 0; 1], V = [3; 6; 9], d = 1.
    // Scores (unmasked): row 0: 0 0 0; row 1: 0 0 1.
    // Causal: query 0 sits at position 3 - 2 + 0 = 1 and sees keys 0, 1; query 1 (position 2)
    // sees keys 0, 1, 2.
    //   row 0: softmax of (0, 0) over 2 keys = (1/2, 1/2, 0 masked); O = (3 + 6) / 2 = 4.5 exactly.
    //   row 1: softmax of (0, 0, 1) = (1, 1, e) / (2 + e); O = (3 + 6 + 9 e) / (2 + e).
    // Not causal: row 0 sees 3 keys: (1/3, 1/3, 1/3), O = (3 + 6 + 9) / 3 = 6; row 1 as above.
    const std::vector<float> q = {0, 1}, k = {0, 0, 1}, v = {3, 6, 9};
    CHECK(ref::attention_scores(q, k, 1, 1, 2, 3, 1) == std::vector<double>{0, 0, 0, 0, 0, 1});

    const auto pc = ref::attention_probabilities(q, k, 1, 1, 2, 3, 1, true);
    REQUIRE(pc.size() == 6);
    CHECK(pc[0] == 0.5);  // exp(0) / (exp(0) + exp(0)): exact
    CHECK(pc[1] == 0.5);
    CHECK(pc[2] == 0.0);  // masked: an exact zero, not a tiny value
    CHECK(pc[3] == close(1 / (2 + e)));
    CHECK(pc[4] == close(1 / (2 + e)));
    CHECK(pc[5] == close(e / (2 + e)));
    const auto oc = ref::attention(q, k, v, 1, 1, 2, 3, 1, true);
    REQUIRE(oc.size() == 2);
    CHECK(oc[0] == 4.5);
    CHECK(oc[1] == close((3 + 6 + 9 * e) / (2 + e)));

    const auto pn = ref::attention_probabilities(q, k, 1, 1, 2, 3, 1, false);
    REQUIRE(pn.size() == 6);
    for (int j = 0; j < 3; ++j) CHECK(pn[std::size_t(j)] == close(1.0 / 3));
    CHECK(pn[5] == close(e / (2 + e)));
    const auto on = ref::attention(q, k, v, 1, 1, 2, 3, 1, false);
    CHECK(on[0] == close(6.0));
    CHECK(on[1] == close((3 + 6 + 9 * e) / (2 + e)));
}

TEST_CASE("attention reference, Sq = Sk = 2 causal: the first query sees only the first key",
          "[reference][attention]") {
    // d = 2, q = [1 0; 0 1], K = [2 0; 0 2], V = [5 -1; 7 3].
    // Scores q_i . k_j / sqrt(2): row 0: (2, 0) / sqrt(2) = (sqrt(2), 0); row 1: (0, sqrt(2)).
    // Causal: query 0 sees key 0 only, so P = (1, 0) exactly and O = V[0] = (5, -1) exactly.
    // Query 1 sees both: P = (1, e^sqrt(2)) / (1 + e^sqrt(2)), O = (5 + 7 a, -1 + 3 a) / (1 + a)
    // with a = e^sqrt(2).
    const std::vector<float> q = {1, 0, 0, 1}, k = {2, 0, 0, 2}, v = {5, -1, 7, 3};
    const auto sc = ref::attention_scores(q, k, 1, 1, 2, 2, 2);
    REQUIRE(sc.size() == 4);
    CHECK(sc[0] == close(std::sqrt(2.0)));
    CHECK(sc[1] == 0.0);
    CHECK(sc[2] == 0.0);
    CHECK(sc[3] == close(std::sqrt(2.0)));
    const double a = std::exp(std::sqrt(2.0));
    const auto p = ref::attention_probabilities(q, k, 1, 1, 2, 2, 2, true);
    CHECK(p == std::vector<double>{1.0, 0.0, p[2], p[3]});
    CHECK(p[2] == close(1 / (1 + a)));
    CHECK(p[3] == close(a / (1 + a)));
    const auto o = ref::attention(q, k, v, 1, 1, 2, 2, 2, true);
    REQUIRE(o.size() == 4);
    CHECK(o[0] == 5.0);
    CHECK(o[1] == -1.0);
    CHECK(o[2] == close((5 + 7 * a) / (1 + a)));
    CHECK(o[3] == close((-1 + 3 * a) / (1 + a)));
}

TEST_CASE("attention reference: the layout [B, H, S, d] keeps heads and batches apart", "[reference][attention]") {
    // B = 2, H = 1, Sq = 1, Sk = 2, d = 4 (scale 1 / sqrt(4) = 1/2, exact).
    //   batch 0: q = (1 1 1 1), K = [1 1 0 0; 0 0 0 0]: dots 2, 0, scores 1, 0;
    //            P = (e, 1) / (1 + e); V = [1 2 3 4; 0 0 0 0]: O = e / (1 + e) (1 2 3 4).
    //   batch 1: q = (0 0 0 0): scores 0, 0, P = (1/2, 1/2);
    //            V = [2 4 6 8; 4 0 -2 2]: O = (3 2 2 5), exactly.
    const std::vector<float> q = {1, 1, 1, 1, 0, 0, 0, 0};
    const std::vector<float> k = {1, 1, 0, 0, 0, 0, 0, 0, /* batch 1 */ 5, -3, 2, 7, 1, 1, 1, 1};
    const std::vector<float> v = {1, 2, 3, 4, 0, 0, 0, 0, /* batch 1 */ 2, 4, 6, 8, 4, 0, -2, 2};
    CHECK(ref::attention_scores(q, k, 2, 1, 1, 2, 4) == std::vector<double>{1, 0, 0, 0});
    const auto p = ref::attention_probabilities(q, k, 2, 1, 1, 2, 4, true);
    REQUIRE(p.size() == 4);
    CHECK(p[0] == close(e / (1 + e)));
    CHECK(p[1] == close(1 / (1 + e)));
    CHECK(p[2] == 0.5);
    CHECK(p[3] == 0.5);
    const auto o = ref::attention(q, k, v, 2, 1, 1, 2, 4, true);
    REQUIRE(o.size() == 8);
    for (int c = 0; c < 4; ++c) CHECK(o[std::size_t(c)] == close((c + 1) * e / (1 + e)));
    CHECK(std::vector<double>(o.begin() + 4, o.end()) == std::vector<double>{3, 2, 2, 5});
    // The same data as H = 2 heads of one batch gives the same numbers: [1, 2, S, d] and
    // [2, 1, S, d] are the same memory.
    CHECK(ref::attention(q, k, v, 1, 2, 1, 2, 4, true) == o);
}

TEST_CASE("attention reference: every probability row sums to 1 and masked entries are exact zeros",
          "[reference][attention]") {
    // Sq = 3, Sk = 5, d = 2, scores of all sizes: the row sums are 1 to rounding, and entry
    // (i, j) is exactly 0 when j >= allowed_keys(i, 3, 5) = 3 + i.
    std::vector<float> q(6), k(10);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = float(i) - 2.5f;
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.5f * float(i) - 2.f;
    for (bool causal : {true, false}) {
        const auto p = ref::attention_probabilities(q, k, 1, 1, 3, 5, 2, causal);
        for (int i = 0; i < 3; ++i) {
            INFO("causal=" << causal << " row " << i);
            double sum = 0;
            for (int j = 0; j < 5; ++j) {
                const double pij = p[std::size_t(i * 5 + j)];
                if (j >= att::allowed_keys(i, 3, 5, causal))
                    CHECK(pij == 0.0);
                else
                    CHECK(pij > 0.0);
                sum += pij;
            }
            CHECK(sum == Approx(1.0).epsilon(1e-15));
        }
    }
}

TEST_CASE("attention reference rejects inconsistent sizes", "[reference][attention][errors]") {
    const std::vector<float> q = {1, 2}, k = {1, 2, 3}, v = {1, 2, 3};
    CHECK_THROWS_AS(ref::attention_scores(q, k, 1, 1, 2, 1, 1), std::invalid_argument);  // Sq = 2 > Sk = 1
    CHECK_THROWS_AS(ref::attention_scores(q, k, 1, 1, 2, 3, 2), std::invalid_argument);  // q holds 2, not 2 * 2
    CHECK_THROWS_AS(ref::attention_probabilities(q, k, 1, 1, 0, 3, 1, true), std::invalid_argument);
    CHECK_THROWS_AS(ref::attention(q, k, std::vector<float>{1, 2}, 1, 1, 2, 3, 1, true), std::invalid_argument);
    CHECK_NOTHROW(ref::attention(q, k, v, 1, 1, 2, 3, 1, true));
}

// ---- chapters 02 and 03: the linear layer ---------------------------------------------------

TEST_CASE("attention_gqa reference, d = 1: two query heads share one KV head, O and logsumexp by hand",
          "[reference][attention]") {
    // One KV head: k = (0, ln 2), v = (3, 6); d = 1, so the scale is 1 and a score is q k.
    // Head 0, q = 1: scores (0, ln 2), e^s = (1, 2): p = (1/3, 2/3), O = 1 + 4 = 5, lse = ln 3.
    // Head 1, q = 0: scores (0, 0): p = (1/2, 1/2), O = 4.5, lse = ln 2.
    const std::vector<float> q = {1.f, 0.f}, k = {0.f, float(std::log(2.0))}, v = {3.f, 6.f};
    std::vector<double> lse;
    const std::vector<double> o = ref::attention_gqa(q, k, v, 1, 2, 1, 1, 2, 1, true, &lse);
    REQUIRE(o.size() == 2);
    REQUIRE(lse.size() == 2);
    CHECK(o[0] == Approx(5.0).epsilon(1e-7));
    CHECK(o[1] == Approx(4.5).epsilon(1e-12));
    CHECK(lse[0] == Approx(std::log(3.0)).epsilon(1e-7));
    CHECK(lse[1] == Approx(std::log(2.0)).epsilon(1e-12));
    // Sq = 2 = Sk, causal: query 0 sees key 0 only (O = v_0 = 3, lse = its score, q_0 k_0 = 0);
    // query 1 sees both.
    const std::vector<double> o2 = ref::attention_gqa(std::vector<float>{1.f, 1.f}, k, v, 1, 1, 1, 2, 2, 1, true, &lse);
    CHECK(o2[0] == 3.0);
    CHECK(lse[0] == 0.0);
    CHECK(o2[1] == Approx(5.0).epsilon(1e-7));
    CHECK_THROWS_AS(ref::attention_gqa(q, k, v, 1, 2, 3, 1, 2, 1, true), std::invalid_argument);  // H % Hkv
}

TEST_CASE("attention_gqa reference with bf16 probabilities: each e^(s - max) rounded, the sum not",
          "[reference][attention]") {
    // q = 1, k = (0, 1), v = (1, 0): scores (0, 1), max 1, e^(s - max) = (e^-1, 1). e^-1 =
    // 0.36787944... = 1.4715... x 2^-2 rounds to bf16 (8 significant bits) as 1.46875 x 2^-2 =
    // 0.3671875; O = 0.3671875 / (1 + e^-1) (unrounded: e^-1 / (1 + e^-1)); lse unchanged.
    const std::vector<float> q = {1.f}, k = {0.f, 1.f}, v = {1.f, 0.f};
    std::vector<double> lse, lse16;
    const std::vector<double> o = ref::attention_gqa(q, k, v, 1, 1, 1, 1, 2, 1, false, &lse);
    const std::vector<double> o16 = ref::attention_gqa(q, k, v, 1, 1, 1, 1, 2, 1, false, &lse16, true);
    const double e = std::exp(-1.0);
    CHECK(o[0] == Approx(e / (1 + e)).epsilon(1e-12));
    CHECK(o16[0] == Approx(0.3671875 / (1 + e)).epsilon(1e-12));
    CHECK(lse16[0] == lse[0]);
    std::vector<double> rows_o, rows_lse;  // the rows' form passes it on
    ref::attention_gqa_rows(q, k, v, 1, 1, 1, 1, 2, 1, false, std::vector<std::size_t>{0}, rows_o, rows_lse, true);
    CHECK(rows_o == o16);
}

TEST_CASE("attention_gqa_rows: the chosen rows of attention_gqa, and which rows a check samples",
          "[reference][attention]") {
    // rows of a check: every row, or 64 spread over Sq of the first and the last (sequence, head)
    CHECK(ref::attention_check_rows(2, 2, true) == std::vector<std::size_t>{0, 1, 2, 3});
    CHECK(ref::attention_check_rows(3, 1, false) == std::vector<std::size_t>{0, 2});
    const std::vector<std::size_t> one_head = ref::attention_check_rows(1, 64, false);  // both ends the same head
    REQUIRE(one_head.size() == 64);
    CHECK((one_head.front() == 0 && one_head.back() == 63));
    CHECK(ref::attention_check_rows(2, 1000, false).size() == 128);
    // B = 2, H = 4, Hkv = 2, Sq = 3 < Sk = 5, d = 2, causal: rows 1, 7 and 23 as the whole problem gives them
    std::vector<float> q(2 * 4 * 3 * 2), k(2 * 2 * 5 * 2), v(k.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = float(int(i % 7) - 3) / 4;
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(int(i % 5) - 2) / 2, v[i] = float(int(i % 9) - 4);
    std::vector<double> lse_all, o_rows, lse_rows;
    const std::vector<double> o_all = ref::attention_gqa(q, k, v, 2, 4, 2, 3, 5, 2, true, &lse_all);
    const std::vector<std::size_t> rows = {1, 7, 23};
    ref::attention_gqa_rows(q, k, v, 2, 4, 2, 3, 5, 2, true, rows, o_rows, lse_rows);
    REQUIRE(o_rows.size() == 6);
    for (std::size_t n = 0; n < rows.size(); ++n) {
        CHECK(lse_rows[n] == Approx(lse_all[rows[n]]).epsilon(1e-12));
        for (std::size_t c = 0; c < 2; ++c) CHECK(o_rows[2 * n + c] == Approx(o_all[2 * rows[n] + c]).margin(1e-12));
    }
    CHECK_THROWS_AS(
        ref::attention_gqa_rows(q, k, v, 2, 4, 2, 3, 5, 2, true, std::vector<std::size_t>{24}, o_rows, lse_rows),
        std::invalid_argument);
}

TEST_CASE("linear reference: Y = X W^T on small integers, fp32 and bf16", "[reference][linear]") {
    // X [2, 3] = [1 2 3; 4 5 6], W [2, 3] = [1 0 -1; 2 1 0]:
    //   y00 = 1 - 3 = -2,  y01 = 2 + 2 = 4,  y10 = 4 - 6 = -2,  y11 = 8 + 5 = 13.
    const std::vector<float> x = {1, 2, 3, 4, 5, 6}, w = {1, 0, -1, 2, 1, 0};
    const std::vector<double> y = {-2, 4, -2, 13};
    CHECK(ref::linear(x, w, 2, 2, 3) == y);
    // The same integers are exact in bf16.
    const auto xb = pd::round_all<__nv_bfloat16>(x), wb = pd::round_all<__nv_bfloat16>(w);
    CHECK(ref::linear(std::span<const __nv_bfloat16>(xb), std::span<const __nv_bfloat16>(wb), 2, 2, 3) == y);
    // One output feature per row of W: W [3, 3] with a third row (0 0 1) picks x_2: 3 and 6.
    const std::vector<float> w3 = {1, 0, -1, 2, 1, 0, 0, 0, 1};
    CHECK(ref::linear(x, w3, 2, 3, 3) == std::vector<double>{-2, 4, 3, -2, 13, 6});
}

TEST_CASE("linear reference accumulates in double and uses the bf16 values as rounded", "[reference][linear]") {
    // fp32: 2^24 + 1 = 16777217 is not a float, but the reference sums in double:
    // x = (16777216, 1), w = (1, 1): y = 16777217 exactly.
    const std::vector<float> x = {16777216.f, 1.f}, w = {1.f, 1.f};
    CHECK(ref::linear(x, w, 1, 1, 2) == std::vector<double>{16777217.0});
    // bf16 keeps 8 significant bits: 257 = 1.00000001b x 2^8 rounds (a tie, to even) to 256, and
    // 1 + 2^-8 to 1. The bf16 reference reads those rounded inputs: (257, 1) . (1, 1) = 256 + 1
    // = 257 (a sum bf16 itself could not hold: the accumulation is in double).
    const std::vector<float> xf = {257.f, 1.f}, wf = {1.f, 1.00390625f};
    const auto xb = pd::round_all<__nv_bfloat16>(xf), wb = pd::round_all<__nv_bfloat16>(wf);
    REQUIRE(pd::to_float(xb[0]) == 256.f);
    REQUIRE(pd::to_float(wb[1]) == 1.f);
    CHECK(ref::linear(std::span<const __nv_bfloat16>(xb), std::span<const __nv_bfloat16>(wb), 1, 1, 2) ==
          std::vector<double>{257.0});
    // The fp32 reference of the unrounded inputs: 257 + 1.00390625 = 258.00390625 (exact in double).
    CHECK(ref::linear(xf, wf, 1, 1, 2) == std::vector<double>{258.00390625});
}

TEST_CASE("linear_rows reference: only the listed rows, in the order listed", "[reference][linear]") {
    // X [3, 2] = [1 2; 3 4; -1 0], W [2, 2] = [1 1; 2 -1]:
    //   row 0: (3, 0); row 1: (7, 2); row 2: (-1, -2).
    const std::vector<float> x = {1, 2, 3, 4, -1, 0}, w = {1, 1, 2, -1};
    CHECK(ref::linear(x, w, 3, 2, 2) == std::vector<double>{3, 0, 7, 2, -1, -2});
    const std::vector<std::size_t> rows = {2, 0};
    CHECK(ref::linear_rows(x, w, 3, 2, 2, rows) == std::vector<double>{-1, -2, 3, 0});
    const std::vector<std::size_t> one = {1};
    CHECK(ref::linear_rows(x, w, 3, 2, 2, one) == std::vector<double>{7, 2});
    // bf16: the same small integers, exact.
    const auto xb = pd::round_all<__nv_bfloat16>(x), wb = pd::round_all<__nv_bfloat16>(w);
    CHECK(ref::linear_rows(std::span<const __nv_bfloat16>(xb), std::span<const __nv_bfloat16>(wb), 3, 2, 2, rows) ==
          std::vector<double>{-1, -2, 3, 0});
    // A row index past M is refused.
    const std::vector<std::size_t> past = {3};
    CHECK_THROWS_AS(ref::linear_rows(x, w, 3, 2, 2, past), std::invalid_argument);
}

TEST_CASE("linear reference rejects inconsistent sizes", "[reference][linear][errors]") {
    const std::vector<float> x = {1, 2, 3, 4}, w = {1, 2};
    CHECK_THROWS_AS(ref::linear(x, w, 2, 1, 3), std::invalid_argument);  // x holds 4, not 2 * 3
    CHECK_THROWS_AS(ref::linear(x, w, 2, 2, 2), std::invalid_argument);  // w holds 2, not 2 * 2
    CHECK_THROWS_AS(ref::linear(x, w, 0, 1, 2), std::invalid_argument);
    CHECK(ref::linear(x, w, 2, 1, 2) == std::vector<double>{5, 11});  // 1 + 4, 3 + 8
}

TEST_CASE("sampling reference: temperature, top-k and top-p by hand, and its draws follow its distribution",
          "[reference][sampling]") {
    // logits ln 1, ln 2, ln 3, ln 4 at temperature 1: p = (1, 2, 3, 4) / 10
    const std::vector<float> logits = {0.f, float(std::log(2.0)), float(std::log(3.0)), float(std::log(4.0))};
    ref::SampledRow all = ref::sample_row(logits, 1.0, 0, 1.0, 0.05);
    CHECK(all.probs[0] == Approx(0.1));
    CHECK(all.probs[3] == Approx(0.4));
    CHECK(all.token == 0);                                         // 0.05 < 0.1
    CHECK(ref::sample_row(logits, 1.0, 0, 1.0, 0.15).token == 1);  // 0.1 <= 0.15 < 0.3
    CHECK(ref::sample_row(logits, 1.0, 0, 1.0, 0.95).token == 3);
    // top-k 2 keeps 3 and 4: p = (0, 0, 3/7, 4/7); u = 0.5 -> 3.5 of 7 falls past the 3
    const ref::SampledRow k2 = ref::sample_row(logits, 1.0, 2, 1.0, 0.5);
    CHECK(k2.probs[1] == 0);
    CHECK(k2.probs[2] == Approx(3.0 / 7));
    CHECK(k2.token == 3);
    // top-p 0.6: 0.4 alone falls short, 0.4 + 0.3 reaches it: {2, 3}; top-p 0.35: {3} alone
    CHECK(ref::sample_row(logits, 1.0, 0, 0.6, 0.0).probs[2] == Approx(3.0 / 7));
    CHECK(ref::sample_row(logits, 1.0, 0, 0.6, 0.0).probs[1] == 0);
    CHECK(ref::sample_row(logits, 1.0, 0, 0.35, 0.0).probs[3] == 1);
    // temperature 0.5 squares the odds: (1, 4, 9, 16) / 30
    CHECK(ref::sample_row(logits, 0.5, 0, 1.0, 0.0).probs[2] == Approx(9.0 / 30));
    // the margin: u = 0.1 lies on the first edge
    CHECK(ref::sample_row(logits, 1.0, 0, 1.0, 0.1).margin < 1e-6);
    // 200,000 draws on a grid of u: the frequencies are the kept distribution
    std::vector<double> count(4, 0.0);
    const int n = 200000;
    for (int i = 0; i < n; ++i) ++count[std::size_t(ref::sample_row(logits, 1.0, 3, 0.95, (i + 0.5) / n).token)];
    const ref::SampledRow kept = ref::sample_row(logits, 1.0, 3, 0.95, 0.0);
    for (std::size_t j = 0; j < 4; ++j) CHECK(count[j] / n == Approx(kept.probs[j]).margin(1e-4));
    CHECK_THROWS_AS(ref::sample_row(logits, 0.0, 0, 1.0, 0.5), std::invalid_argument);
    CHECK_THROWS_AS(ref::sample_row(logits, 1.0, 5, 1.0, 0.5), std::invalid_argument);
    CHECK_THROWS_AS(ref::sample_row(logits, 1.0, 0, 1.0, 1.0), std::invalid_argument);
}
