// Lab 01: the causal row softmax (softmax_smem_tree, v1, in
// <lab tree>/01_naive_attention/causal_softmax.cu) against the CPU reference: rows shorter and
// longer than the block, causal and not, Sq < Sk, large logits, exact zeros at masked keys
// (allowed_keys()), nothing written past the matrix.
#include "../kernels/guard_check.hpp"
#include "attention/attention.hpp"
#include "attention_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/rng.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <span>
#include <vector>

namespace att = pd::kernels::attention;

namespace {

constexpr const char* kWhere = "lab 01: softmax_smem_tree in <lab tree>/01_naive_attention/causal_softmax.cu";
constexpr std::size_t kGuard = 64;  // poisoned floats after the score matrix that must stay untouched

/// Scores Q K^T / sqrt(d) rounded to float, from seeded Q and K, as the scores kernel would
/// give them (pd::reference::attention_scores, every score, masked or not).
std::vector<float> make_scores(const att::Shape& s, std::uint64_t seed, float logit_scale, std::vector<float>& q,
                               std::vector<float>& k) {
    q.resize(s.q_elements());
    k.resize(s.kv_elements());
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(seed, 2));
    for (float& x : q) x *= logit_scale;
    const std::vector<double> scores =
        pd::reference::attention_scores(q, k, s.batch, s.heads, s.q_len, s.kv_len, s.head_dim);
    return {scores.begin(), scores.end()};
}

/// Entries at masked keys (j >= allowed_keys(i)) of the [B*H*Sq, Sk] matrix @p p that are not
/// exactly 0.
std::size_t masked_nonzero(std::span<const float> p, const att::Shape& s) {
    std::size_t bad = 0;
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;
    for (std::size_t r = 0; r < rows; ++r)
        for (int j = att::allowed_keys(s, int(r % std::size_t(s.q_len))); j < s.kv_len; ++j)
            bad += p[r * std::size_t(s.kv_len) + std::size_t(j)] != 0.f;
    return bad;
}

void check_softmax(const att::Shape& s, std::uint64_t seed, float logit_scale = 1.f) {
    INFO(kWhere);
    INFO("seed=" << seed << " B=" << s.batch << " H=" << s.heads << " Sq=" << s.q_len << " Sk=" << s.kv_len
                 << " d=" << s.head_dim << " causal=" << s.causal << " logit scale=" << logit_scale);
    std::vector<float> q, k;
    const std::vector<float> scores = make_scores(s, seed, logit_scale, q, k);
    const std::vector<double> ref =
        pd::reference::attention_probabilities(q, k, s.batch, s.heads, s.q_len, s.kv_len, s.head_dim, s.causal);
    pd::DeviceBuffer<float> d(s.score_elements() + kGuard);
    d.fill_bytes(pd::kPoisonByte);
    PD_CHECK_CUDA(cudaMemcpy(d.data(), scores.data(), scores.size() * sizeof(float), cudaMemcpyHostToDevice));
    att::softmax_smem_tree(d.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = d.download();
    const std::span<const float> out(all.data(), scores.size());
    // Probabilities are at most 1: fp32 rounding of exp and of the sum stays far below 1e-5.
    const pd::CompareResult r = pd::compare<float, double>(out, ref, pd::Tolerance{1e-5, 1e-4});
    const std::size_t shape[] = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len),
                                 std::size_t(s.kv_len)};
    INFO(pd::describe(r, "softmax_smem_tree", shape));
    CHECK(r.passed);
    const std::size_t masked = masked_nonzero(out, s);
    INFO(masked << " masked keys (j >= allowed_keys(i)) are not exactly 0: write 0.f there, after the allowed ones");
    CHECK(masked == 0);
    const std::size_t past = pd::testing::guard_written(all, scores.size());
    INFO(past << " of the " << kGuard
              << " floats after the matrix were written: keep every write inside the row, "
                 "j < kv_len");
    CHECK(past == 0);
}

}  // namespace

TEST_CASE("lab01: rows shorter than, equal to and longer than the block", "[lab01]") {
    for (int kv : {1, 2, 17, 255, 256, 257, 1000, 3001}) check_softmax({1, 1, 1, kv, 16, false}, 101 + kv);
}

TEST_CASE("lab01: causal mask, queries the last Sq of Sk positions", "[lab01]") {
    check_softmax({2, 3, 17, 17, 32, true}, 7);
    check_softmax({1, 2, 5, 300, 16, true}, 8);  // Sq < Sk: bottom-right aligned mask
    check_softmax({1, 1, 1, 513, 16, true}, 9);  // one query sees every key
    check_softmax({1, 1, 129, 129, 16, true}, 10);
}

TEST_CASE("lab01: no mask", "[lab01]") {
    check_softmax({2, 1, 33, 97, 32, false}, 11);
}

TEST_CASE("lab01: large logits stay finite (the maximum is subtracted before exp)", "[lab01]") {
    check_softmax({1, 2, 20, 40, 64, true}, 12, 100.f);
}

TEST_CASE("lab01: a case the grader gives", "[.][lab01-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    att::Shape s{};
    s.batch = c.integer("batch");
    s.heads = c.integer("heads");
    s.q_len = c.integer("q_len");
    s.kv_len = c.integer("kv_len");
    s.head_dim = c.integer("head_dim");
    s.causal = c.flag("causal", true);
    check_softmax(s, c.seed(), c.number("logit_scale", 1.f));
}
