// Chapter 07's flash attention against the double-precision reference (attention_gqa: O and each
// row's logsumexp): every version of flash_versions() that takes the input type, on shapes
// around the tiles (Sq, Sk in 1, 17, 127, 128, 129, 1000, Sq != Sk), causal and not, GQA groups
// 1, 4 and 8, head dims 64 and 128 (and 48 for the SIMT versions); fp32 inputs by the fp32 rule,
// bf16 inputs by the low-precision rule (the error at most twice that of the reference on the
// rounded inputs, both against the reference of the unrounded ones). Outputs and logsumexp are poisoned with guards
// past their ends; a rerun gives the same bits; the split-KV form against the same reference for a few queries over a
// long context; bad shapes and names rejected naming the parameter. (The varlen and paged forms are v3's body:
// test_varlen_attention.cpp and test_paged_attention.cpp.)
#include "attention/flash_attention.hpp"
#include "attention_reference.hpp"
#include "guard_check.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace at = pd::kernels::attention;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;
using pd::testing::guard_intact;
using pd::testing::same_bits;

namespace {

constexpr std::size_t kGuard = 32;  // floats past out and lse that must stay poisoned

std::string context(const at::Shape& s, std::uint64_t seed) {
    std::ostringstream os;
    os << "B=" << s.batch << " H=" << s.heads << " Hkv=" << s.kv_head_count() << " Sq=" << s.q_len << " Sk=" << s.kv_len
       << " d=" << s.head_dim << (s.causal ? " causal" : " no mask") << " seed=" << seed;
    return os.str();
}

/// Q, K, V (uniform in [-1, 1), and a few large entries so the scores spread), their rounding to
/// bf16, and the references of both: O and the logsumexp.
struct Problem {
    at::Shape s;
    std::vector<float> q, k, v;           // fp32
    std::vector<float> q_lp, k_lp, v_lp;  // the same rounded to bf16
    std::vector<double> ref, lse, ref_lp, lse_lp;
};

Problem make_problem(const at::Shape& s, std::uint64_t seed) {
    Problem p{s, std::vector<float>(s.q_elements()), std::vector<float>(s.kv_elements()),
              std::vector<float>(s.kv_elements())};
    pd::fill_uniform<float>(p.q, -2.f, 2.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(p.k, -2.f, 2.f, pd::derive_seed(seed, 2));
    pd::fill_uniform<float>(p.v, -1.f, 1.f, pd::derive_seed(seed, 3));
    p.q_lp = pd::rounded_to(pd::DType::bf16, p.q);
    p.k_lp = pd::rounded_to(pd::DType::bf16, p.k);
    p.v_lp = pd::rounded_to(pd::DType::bf16, p.v);
    const int H = s.heads, Hkv = s.kv_head_count();
    p.ref =
        pd::reference::attention_gqa(p.q, p.k, p.v, s.batch, H, Hkv, s.q_len, s.kv_len, s.head_dim, s.causal, &p.lse);
    p.ref_lp = pd::reference::attention_gqa(p.q_lp, p.k_lp, p.v_lp, s.batch, H, Hkv, s.q_len, s.kv_len, s.head_dim,
                                            s.causal, &p.lse_lp);
    return p;
}

struct Output {
    std::vector<float> out, lse;  // with their guards
};

/// Runs @p version (or the split-KV form for "split") on inputs of type T into poisoned buffers.
template <typename T>
Output run(const std::string& version, const Problem& p) {
    const at::Shape& s = p.s;
    const std::vector<T> q = pd::round_all<T>(p.q), k = pd::round_all<T>(p.k), v = pd::round_all<T>(p.v);
    pd::DeviceBuffer<T> dq{std::span<const T>(q)}, dk{std::span<const T>(k)}, dv{std::span<const T>(v)};
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;
    pd::DeviceBuffer<float> out(s.q_elements() + kGuard), lse(rows + kGuard);
    out.fill_bytes(pd::kPoisonByte);
    lse.fill_bytes(pd::kPoisonByte);
    if (version == "split") {
        constexpr int kSms = 132;  // an H100's or H200's SMs: the split the GPU would use
        pd::DeviceBuffer<float> work(std::max<std::size_t>(1, at::flash_split_workspace_floats(s, kSms)));
        at::flash_attention_split_kv(dq.data(), dk.data(), dv.data(), out.data(), lse.data(), work.data(), s, kSms);
    } else {
        at::flash_attention(version, dq.data(), dk.data(), dv.data(), out.data(), lse.data(), s);
    }
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return {out.download(), lse.download()};
}

/// Checks @p version on inputs of type T: O and the logsumexp against the reference, the guards,
/// and (when @p rerun) the same bits from a second run.
template <typename T>
void check_version(const std::string& version, const Problem& p, std::uint64_t seed, bool rerun) {
    constexpr bool kBf16 = std::is_same_v<T, bf16>;
    const at::Shape& s = p.s;
    const std::string what = "flash " + version + " " + pd::dtype_name<T>() + " " + context(s, seed);
    INFO(what);
    const Output got = run<T>(version, p);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;
    const std::span<const float> out = std::span<const float>(got.out).first(s.q_elements()),
                                 lse = std::span<const float>(got.lse).first(rows);
    const pd::CompareResult ro = kBf16 ? pd::compare_to_lowp_reference<float, double>(out, p.ref, p.ref_lp, 2.0)
                                       : pd::compare<float, double>(out, p.ref, pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len),
                                std::size_t(s.head_dim)};
    INFO(pd::describe(ro, what + " O (NaN: a row never written)", dims));
    CHECK(ro.passed);
    const pd::CompareResult rl = kBf16 ? pd::compare_to_lowp_reference<float, double>(lse, p.lse, p.lse_lp, 2.0)
                                       : pd::compare<float, double>(lse, p.lse, pd::Tolerance::fp32());
    INFO(pd::describe(rl, what + " logsumexp", std::span<const std::size_t>(dims).first(3)));
    CHECK(rl.passed);
    INFO("nothing may be written past O [B, H, Sq, d] or lse [B, H, Sq]");
    CHECK(guard_intact(got.out, s.q_elements()));
    CHECK(guard_intact(got.lse, rows));
    if (rerun) {
        INFO("a second run on the same input must give the same bits");
        const Output again = run<T>(version, p);
        CHECK(same_bits(got.out, again.out));
        CHECK(same_bits(got.lse, again.lse));
    }
}

/// Every version that takes T and runs here on shape @p s; with @p skipping_only, v3 and later
/// (a long context: v1 and v2 compute the whole square, which the simulator runs slowly).
template <typename T>
void check_versions(const at::Shape& s, std::uint64_t seed, bool rerun = false, bool skipping_only = false) {
    const Problem p = make_problem(s, seed);
    constexpr pd::DType dtype = std::is_same_v<T, float> ? pd::DType::fp32 : pd::DType::bf16;
    for (const pd::Version& v : at::flash_versions()) {
        if (!v.takes(dtype) || !v.runs_here()) continue;
        if (v.units == pd::Units::tensor_cores && s.head_dim != 64 && s.head_dim != 128) continue;
        if (skipping_only && (v.name == "v1" || v.name == "v2")) continue;
        check_version<T>(v.name, p, seed, rerun);
    }
}

at::Shape shape(int heads, int kv_heads, int q_len, int kv_len, int d, bool causal, int batch = 1) {
    return {.batch = batch,
            .heads = heads,
            .q_len = q_len,
            .kv_len = kv_len,
            .head_dim = d,
            .causal = causal,
            .kv_heads = kv_heads};
}

}  // namespace

TEST_CASE("flash attention: S = 1, 17, 127, 128, 129 around the tiles, causal and not, fp32 and bf16", "[flash]") {
    // (Sq, Sk) around the 16- and 64-query blocks and the 32- and 64-key tiles, Sq != Sk among
    // them, causal and not; d = 64; two sequences of one head where short.
    const std::tuple<int, int, bool> cases[] = {{1, 1, true},      {1, 129, false},  {17, 127, true},
                                                {127, 128, false}, {128, 128, true}, {129, 129, false}};
    std::uint64_t seed = 700;
    for (const auto& [sq, sk, causal] : cases) {
        const at::Shape s = shape(1, 1, sq, sk, 64, causal, sk < 100 ? 2 : 1);
        check_versions<float>(s, ++seed, sq == 17);
        check_versions<bf16>(s, ++seed, sq == 17);
    }
}

TEST_CASE("flash attention: GQA groups 4 and 8, head dims 128 and 48, a 1000-key context", "[flash]") {
    check_versions<bf16>(shape(8, 2, 9, 40, 128, true), 801);    // group 4, d = 128
    check_versions<float>(shape(8, 1, 5, 20, 128, false), 802);  // group 8
    check_versions<float>(shape(3, 3, 19, 50, 48, true), 803);   // d = 48: SIMT only
    check_versions<bf16>(shape(2, 1, 9, 31, 48, false), 804);
    check_versions<bf16>(shape(1, 1, 129, 1000, 64, true), 805, false, true);  // Sq != Sk over 1000 keys
    check_versions<float>(shape(1, 1, 20, 1000, 64, true), 806, false, true);
}

TEST_CASE("flash attention: large scores stay finite (the running maximum is rescaled)", "[flash]") {
    // Q scaled by 40: scores up to about 40 * 4 * 64 / 8 = 1280, far past exp()'s range, so only
    // a kernel that subtracts the running maximum gets them right.
    Problem p = make_problem(shape(2, 1, 40, 70, 64, true), 900);
    for (float& x : p.q) x *= 40.f;
    p.q_lp = pd::rounded_to(pd::DType::bf16, p.q);
    const at::Shape& s = p.s;
    p.ref = pd::reference::attention_gqa(p.q, p.k, p.v, 1, 2, 1, s.q_len, s.kv_len, 64, true, &p.lse);
    p.ref_lp = pd::reference::attention_gqa(p.q_lp, p.k_lp, p.v_lp, 1, 2, 1, s.q_len, s.kv_len, 64, true, &p.lse_lp);
    for (const pd::Version& v : at::flash_versions()) {
        if (!v.runs_here()) continue;
        if (v.takes(pd::DType::fp32)) check_version<float>(v.name, p, 900, false);
        check_version<bf16>(v.name, p, 900, false);
    }
}

TEST_CASE("flash attention split-KV: few queries over a long context, combined by their logsumexp", "[flash]") {
    // 132 SMs: one block per (head, query tile) would leave most idle, so the context is split.
    const at::Shape s1 = shape(2, 1, 1, 1000, 64, true);
    REQUIRE(at::flash_splits(s1, 132) > 1);
    check_version<float>("split", make_problem(s1, 1001), 1001, true);
    check_version<bf16>("split", make_problem(shape(4, 2, 8, 777, 128, true), 1002), 1002, false);
    check_version<float>("split", make_problem(shape(1, 1, 16, 300, 64, false), 1003), 1003, false);
    check_version<float>("split", make_problem(shape(1, 1, 3, 5, 64, true), 1004), 1004, false);  // no split
    INFO("more than 16 queries is not the split form's problem");
    pd::DeviceBuffer<float> buf(4096);
    CHECK_THROWS_WITH(at::flash_attention_split_kv(buf.data(), buf.data(), buf.data(), buf.data(), nullptr, buf.data(),
                                                   shape(1, 1, 17, 20, 64, true), 132),
                      Contains("q_len = 17"));
}

TEST_CASE("flash attention: bad shapes and names are rejected naming the parameter", "[flash][errors]") {
    pd::DeviceBuffer<float> f(4096);
    pd::DeviceBuffer<bf16> h(4096);
    const auto run_f = [&](const std::string& v, const at::Shape& s) {
        at::flash_attention(v, f.data(), f.data(), f.data(), f.data(), nullptr, s);
    };
    const auto run_h = [&](const std::string& v, const at::Shape& s) {
        at::flash_attention(v, h.data(), h.data(), h.data(), f.data(), nullptr, s);
    };
    CHECK_THROWS_WITH(run_f("v9", shape(1, 1, 4, 4, 64, true)), Contains("unknown version"));
    CHECK_THROWS_WITH(run_f("v4", shape(1, 1, 4, 4, 64, true)), Contains("takes bf16"));
    CHECK_THROWS_WITH(run_h("v4", shape(1, 1, 4, 4, 48, true)), Contains("head_dim = 48"));
    CHECK_THROWS_WITH(run_f("v2", shape(1, 1, 4, 4, 160, true)), Contains("head_dim = 160"));
    CHECK_THROWS_WITH(run_f("v3", shape(1, 1, 5, 4, 64, true)), Contains("q_len"));
    CHECK_THROWS_WITH(run_h("v1", shape(3, 2, 4, 4, 64, true)), Contains("kv_heads"));
}
