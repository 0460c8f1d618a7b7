// Lab 07: the online-softmax tile update of flash attention v1 (flash_simt_tiles_kernel in
// <lab tree>/07_flash_attention/flash_simt_tiles.cu) against the double-precision reference:
// O and each row's logsumexp; keys in one tile and in several, causal with warps whose first
// keys are all masked, GQA with Sq != Sk in fp32 and bf16, large scores; nothing written past
// the outputs.
#include "../kernels/guard_check.hpp"
#include "attention/flash_attention.hpp"
#include "attention_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace att = pd::kernels::attention;
using bf16 = __nv_bfloat16;

namespace {

constexpr const char* kWhere = "lab 07: flash_simt_tiles_kernel in <lab tree>/07_flash_attention/flash_simt_tiles.cu";
constexpr std::size_t kGuard = 32;  // poisoned floats after O and after the logsumexp

/// v1 on inputs of type T (uniform in [-2, 2) for Q and K, times @p scale for Q) against the
/// reference: fp32 by |out - ref| <= 1e-4 + 1e-4 |ref|, bf16 by the low-precision rule
/// (pd::compare_to_lowp_reference()).
template <typename T>
void check_v1(const att::Shape& s, std::uint64_t seed, float scale = 1.f) {
    constexpr bool kBf16 = std::is_same_v<T, bf16>;
    INFO(kWhere);
    INFO("seed=" << seed << " B=" << s.batch << " H=" << s.heads << " Hkv=" << s.kv_head_count() << " Sq=" << s.q_len
                 << " Sk=" << s.kv_len << " d=" << s.head_dim << (s.causal ? " causal" : " no mask")
                 << " Q scale=" << scale << " " << pd::dtype_name<T>());
    std::vector<float> q(s.q_elements()), k(s.kv_elements()), v(s.kv_elements());
    pd::fill_uniform<float>(q, -2.f, 2.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(k, -2.f, 2.f, pd::derive_seed(seed, 2));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(seed, 3));
    for (float& x : q) x *= scale;
    const int H = s.heads, Hkv = s.kv_head_count();
    std::vector<double> lse, lse_lp;
    const std::vector<double> ref =
        pd::reference::attention_gqa(q, k, v, s.batch, H, Hkv, s.q_len, s.kv_len, s.head_dim, s.causal, &lse);
    const std::vector<float> q_lp = pd::rounded_to(pd::DType::bf16, q), k_lp = pd::rounded_to(pd::DType::bf16, k),
                             v_lp = pd::rounded_to(pd::DType::bf16, v);
    const std::vector<double> ref_lp = pd::reference::attention_gqa(q_lp, k_lp, v_lp, s.batch, H, Hkv, s.q_len,
                                                                    s.kv_len, s.head_dim, s.causal, &lse_lp);

    const std::vector<T> qt = pd::round_all<T>(q), kt = pd::round_all<T>(k), vt = pd::round_all<T>(v);
    pd::DeviceBuffer<T> dq{std::span<const T>(qt)}, dk{std::span<const T>(kt)}, dv{std::span<const T>(vt)};
    const std::size_t rows = std::size_t(s.batch) * H * s.q_len;
    pd::DeviceBuffer<float> out(s.q_elements() + kGuard), dlse(rows + kGuard);
    out.fill_bytes(pd::kPoisonByte);
    dlse.fill_bytes(pd::kPoisonByte);
    att::flash_attention_v1(dq.data(), dk.data(), dv.data(), out.data(), dlse.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> o = out.download(), l = dlse.download();
    const std::span<const float> o_span = std::span<const float>(o).first(s.q_elements()),
                                 l_span = std::span<const float>(l).first(rows);

    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(H), std::size_t(s.q_len), std::size_t(s.head_dim)};
    const pd::CompareResult ro = kBf16 ? pd::compare_to_lowp_reference<float, double>(o_span, ref, ref_lp, 2.0)
                                       : pd::compare<float, double>(o_span, ref, pd::Tolerance::fp32());
    INFO(pd::describe(ro, "O (all zeros: the state never changed; NaN: exp(-inf - -inf) or a masked V)", dims));
    CHECK(ro.passed);
    const pd::CompareResult rl = kBf16 ? pd::compare_to_lowp_reference<float, double>(l_span, lse, lse_lp, 2.0)
                                       : pd::compare<float, double>(l_span, lse, pd::Tolerance::fp32());
    INFO(pd::describe(rl, "logsumexp (m + log l: wrong when l or m is)", std::span<const std::size_t>(dims).first(3)));
    CHECK(rl.passed);
    INFO("nothing may be written past O or the logsumexp");
    CHECK(pd::testing::guard_intact(o, s.q_elements()));
    CHECK(pd::testing::guard_intact(l, rows));
}

}  // namespace

// Shapes as att::Shape{B, H, Sq, Sk, d, causal, Hkv}.

TEST_CASE("lab07: one query tile, keys in one 32-key tile and in several", "[lab07]") {
    for (int kv : {1, 7, 32, 33, 100}) check_v1<float>(att::Shape{1, 1, std::min(kv, 5), kv, 64, false, 1}, 101 + kv);
}

TEST_CASE("lab07: causal, warps whose first keys are all masked", "[lab07]") {
    // Sq = Sk: query 0 sees key 0 only, so warps 1 to 3 see masked keys alone in the first tile
    check_v1<float>(att::Shape{1, 2, 17, 17, 32, true, 2}, 7);
    check_v1<float>(att::Shape{2, 1, 40, 40, 64, true, 1}, 8);
}

TEST_CASE("lab07: grouped-query heads and Sq != Sk, fp32 and bf16 inputs", "[lab07]") {
    check_v1<float>(att::Shape{1, 4, 20, 70, 128, true, 1}, 9);
    check_v1<bf16>(att::Shape{1, 4, 9, 45, 64, false, 2}, 10);
}

TEST_CASE("lab07: large scores stay finite (the running maximum rescales l and acc)", "[lab07]") {
    check_v1<float>(att::Shape{1, 2, 18, 90, 64, true, 1}, 12, 40.f);
}

TEST_CASE("lab07: a case the grader gives", "[.][lab07-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    const att::Shape s{c.integer("batch"),    c.integer("heads"),     c.integer("q_len"),   c.integer("kv_len"),
                       c.integer("head_dim"), c.flag("causal", true), c.integer("kv_heads")};
    if (c.word("dtype", "fp32") == "bf16")
        check_v1<bf16>(s, c.seed(), c.number("scale", 1.f));
    else
        check_v1<float>(s, c.seed(), c.number("scale", 1.f));
}
