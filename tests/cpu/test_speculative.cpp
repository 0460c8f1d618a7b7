// Chapter 09's host pieces (pd/serving/speculative.hpp, pd/philox.hpp): Philox4x32-10 against
// Random123's known answers; greedy acceptance and the inverse-CDF draw on hand-made inputs; the
// rejection sampler keeps the target's distribution (a million seeded draws, total variation
// <= 0.01), and two wrong acceptance rules measured by the same harness fail that bound; the
// oracle draft's tokens per target step against Leviathan et al.'s formula; prompt lookup, the
// acceptance metrics and the formulas on hand values, and their bad arguments.
#include <cstdio>
#include "pd/philox.hpp"
#include "pd/serving/speculative.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace speculative_test {

/// A rejection sampler: pd::serving::rejection_sample, or one of the wrong rules below.
using Sampler = sv::SpecVerdict (*)(std::span<const float>, std::span<const float>, std::span<const int>, int,
                                    std::span<const float>);

/// Row @p i of the row-major [rows, V] matrix @p m, as doubles (the weights of sample_index()).
std::vector<double> row_of(const std::vector<float>& m, int i, int V) {
    return std::vector<double>(m.begin() + std::ptrdiff_t(i) * V, m.begin() + std::ptrdiff_t(i + 1) * V);
}

/// Wrong rule 1: the correction drawn from p_i instead of the residual max(p_i - q_i, 0).
sv::SpecVerdict wrong_correction_from_p(std::span<const float> p, std::span<const float> q, std::span<const int> draft,
                                        int V, std::span<const float> u) {
    const int k = int(draft.size());
    std::vector<double> w(std::size_t(V), 0.0);
    for (int i = 0; i <= k; ++i) {
        const std::size_t at = std::size_t(i) * std::size_t(V);
        if (i < k && double(u[i]) * q[at + draft[i]] < p[at + draft[i]]) continue;
        for (int j = 0; j < V; ++j) w[std::size_t(j)] = p[at + std::size_t(j)];
        return {i, sv::sample_index(w, u[std::size_t(k)])};
    }
    return {};
}

/// Wrong rule 2: a draft token kept with probability min(1, q/p) (the ratio upside down).
sv::SpecVerdict wrong_ratio_inverted(std::span<const float> p, std::span<const float> q, std::span<const int> draft,
                                     int V, std::span<const float> u) {
    const int k = int(draft.size());
    std::vector<double> w(std::size_t(V), 0.0);
    for (int i = 0; i <= k; ++i) {
        const std::size_t at = std::size_t(i) * std::size_t(V);
        if (i < k && double(u[i]) * p[at + draft[i]] < q[at + draft[i]]) continue;
        for (int j = 0; j < V; ++j)
            w[std::size_t(j)] = i < k ? std::max(double(p[at + j]) - double(q[at + j]), 0.0) : double(p[at + j]);
        return {i, sv::sample_index(w, u[std::size_t(k)])};
    }
    return {};
}

/// @p rows distributions over @p V tokens, row-major, peaked (cubes of uniforms, normalized),
/// from Philox stream @p stream of seed 2024.
std::vector<float> peaked_rows(int rows, int V, std::uint64_t stream) {
    std::vector<float> m(std::size_t(rows) * std::size_t(V));
    for (int r = 0; r < rows; ++r) {
        double sum = 0.0;
        std::vector<double> w(static_cast<std::size_t>(V));
        for (int j = 0; j < V; ++j) {
            const double x = pd::philox_uniform(2024, stream, std::uint64_t(r) * V + j);
            w[std::size_t(j)] = 0.01 + x * x * x;
            sum += w[std::size_t(j)];
        }
        for (int j = 0; j < V; ++j) m[std::size_t(r) * V + j] = float(w[std::size_t(j)] / sum);
    }
    return m;
}

/// What the harness measured: the first token a step adds, the second given the first was a
/// kept draft token, and how often the first draft token was kept.
struct Emitted {
    std::vector<double> first, second;  // frequencies
    double first_kept = 0.0;            // fraction of the trials
};

/// Runs @p sampler @p trials times over fixed p ([k + 1, V]) and q ([k, V]): each trial draws
/// its k draft tokens from the rows of q and its k + 1 uniforms from Philox (seeded, so every
/// rule sees the same draws).
Emitted measure(Sampler sampler, const std::vector<float>& p, const std::vector<float>& q, int k, int V, int trials) {
    std::vector<std::vector<double>> q_rows;
    for (int i = 0; i < k; ++i) q_rows.push_back(row_of(q, i, V));
    std::vector<long long> first(std::size_t(V), 0), second(std::size_t(V), 0);
    long long kept = 0;
    std::vector<int> draft(static_cast<std::size_t>(k));
    std::vector<float> u(std::size_t(k) + 1);
    for (int t = 0; t < trials; ++t) {
        const std::uint64_t base = std::uint64_t(t) * 16;
        for (int i = 0; i < k; ++i)
            draft[std::size_t(i)] = sv::sample_index(q_rows[std::size_t(i)], pd::philox_uniform(7, 1, base + i));
        for (int i = 0; i <= k; ++i) u[std::size_t(i)] = pd::philox_uniform(7, 2, base + i);
        const sv::SpecVerdict v = sampler(p, q, draft, V, u);
        const int y0 = v.accepted >= 1 ? draft[0] : v.token;
        ++first[std::size_t(y0)];
        if (v.accepted >= 1) {
            ++kept;
            ++second[std::size_t(v.accepted >= 2 ? draft[1] : v.token)];
        }
    }
    Emitted e;
    for (int j = 0; j < V; ++j) {
        e.first.push_back(double(first[std::size_t(j)]) / trials);
        e.second.push_back(kept > 0 ? double(second[std::size_t(j)]) / double(kept) : 0.0);
    }
    e.first_kept = double(kept) / trials;
    return e;
}

/// The total-variation distance between frequencies @p f and row @p i of @p p.
double tv_to_row(const std::vector<double>& f, const std::vector<float>& p, int i, int V) {
    double d = 0.0;
    for (int j = 0; j < V; ++j) d += std::abs(f[std::size_t(j)] - double(p[std::size_t(i) * V + j]));
    return d / 2;
}

/// sum_x min(p_0(x), q_0(x)): the probability that the first draft token is kept.
double overlap(const std::vector<float>& p, const std::vector<float>& q, int V) {
    double s = 0.0;
    for (int j = 0; j < V; ++j) s += std::min(double(p[std::size_t(j)]), double(q[std::size_t(j)]));
    return s;
}

}  // namespace speculative_test

TEST_CASE("philox: Random123's known-answer vectors of Philox4x32-10", "[speculative][philox]") {
    const auto check = [](pd::Philox4 c, std::uint32_t k0, std::uint32_t k1, pd::Philox4 want) {
        const pd::Philox4 got = pd::philox4x32_10(c, k0, k1);
        for (int i = 0; i < 4; ++i) CHECK(got.w[i] == want.w[i]);
    };
    check(pd::Philox4{{0, 0, 0, 0}}, 0, 0, pd::Philox4{{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
    check(pd::Philox4{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
          pd::Philox4{{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
    check(pd::Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
          pd::Philox4{{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
    // a uniform is the first word's top 24 bits: in [0, 1), a multiple of 2^-24
    const float u = pd::philox_uniform(5, 6, 7);
    CHECK(u >= 0.f);
    CHECK(u < 1.f);
    CHECK(u * 16777216.f == std::floor(u * 16777216.f));
}

TEST_CASE("speculative: greedy acceptance keeps the longest agreeing prefix", "[speculative]") {
    CHECK(sv::accept_greedy(std::vector<int>{5, 6, 7}, std::vector<int>{5, 6, 9, 1}) == 2);  // correction 9
    CHECK(sv::accept_greedy(std::vector<int>{5, 6, 7}, std::vector<int>{5, 6, 7, 8}) == 3);  // bonus 8
    CHECK(sv::accept_greedy(std::vector<int>{1, 6}, std::vector<int>{2, 6, 3}) == 0);        // a later match counts not
    CHECK(sv::accept_greedy(std::vector<int>{}, std::vector<int>{4}) == 0);
    CHECK_THROWS_WITH(sv::accept_greedy(std::vector<int>{1, 2}, std::vector<int>{1, 2}), Contains("target_choice"));
}

TEST_CASE("speculative: sample_index draws by the cumulative weights in index order", "[speculative]") {
    const std::vector<double> w = {0.0, 1.0, 0.0, 3.0};  // cumulative 0, 1, 1, 4
    CHECK(sv::sample_index(w, 0.0) == 1);                // a zero weight is never drawn, even at u = 0
    CHECK(sv::sample_index(w, 0.2499) == 1);
    CHECK(sv::sample_index(w, 0.25) == 3);  // the first cumulative sum > u * 4 = 1
    CHECK(sv::sample_index(w, 0.9999999) == 3);
    CHECK(sv::sample_index(std::vector<double>{1.0, 0.0}, 0.9999999) == 0);
    CHECK(sv::sample_index(std::vector<double>{0.5, 0.25, 0.25}, 0.6) == 1);  // unnormalized weights work too
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{}, 0.5), Contains("positive sum"));
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{0.0, 0.0}, 0.5), Contains("positive sum"));
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{-1.0, 2.0}, 0.5), Contains(">= 0"));
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{NAN, 2.0}, 0.5), Contains(">= 0"));
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{1.0}, 1.0), Contains("u = 1"));
    CHECK_THROWS_WITH(sv::sample_index(std::vector<double>{1.0}, -0.5), Contains("u = -0.5"));
}

TEST_CASE("speculative: the rejection sampler names its bad arguments", "[speculative]") {
    const std::vector<float> p2(8, 0.25f), q1(4, 0.25f), u2 = {0.5f, 0.5f};
    CHECK_THROWS_WITH(sv::rejection_sample(p2, q1, std::vector<int>{1}, 0, u2), Contains("V = 0"));
    CHECK_THROWS_WITH(sv::rejection_sample(std::vector<float>(4, 0.25f), q1, std::vector<int>{1}, 4, u2),
                      Contains("p must have (k + 1) * V values (has 4)"));
    CHECK_THROWS_WITH(sv::rejection_sample(p2, std::vector<float>(8, 0.25f), std::vector<int>{1}, 4, u2),
                      Contains("q k * V (has 8)"));
    CHECK_THROWS_WITH(sv::rejection_sample(p2, q1, std::vector<int>{1}, 4, std::vector<float>{0.5f}),
                      Contains("u k + 1 (has 1)"));
    CHECK_THROWS_WITH(sv::rejection_sample(p2, q1, std::vector<int>{4}, 4, u2), Contains("draft[0] = 4"));
}

TEST_CASE("speculative: the rejection sampler keeps the target's distribution, and wrong rules do not",
          "[speculative]") {
    using namespace speculative_test;
    // p and q far apart (the first draft token kept in 29% of the steps at k = 1, 42% at k = 3):
    // many rejections, so the residual matters
    constexpr int V = 24, trials = 1000000;
    for (const int k : {1, 3}) {
        INFO("k = " << k << ", V = " << V << ", " << trials << " trials");
        const std::vector<float> p = peaked_rows(k + 1, V, 10 + k), q = peaked_rows(k, V, 20 + k);
        const Emitted right = measure(sv::rejection_sample, p, q, k, V, trials);
        const double tv0 = tv_to_row(right.first, p, 0, V), tv1 = tv_to_row(right.second, p, 1, V);
        INFO("the first token's TV to p_0 " << tv0 << ", the second's (first kept) to p_1 " << tv1 << "; first kept "
                                            << right.first_kept << " of an expected " << overlap(p, q, V));
        CHECK(tv0 <= 0.01);
        CHECK(tv1 <= 0.01);
        CHECK(right.first_kept == Approx(overlap(p, q, V)).margin(0.003));  // sum min(p, q); 6 sigma
        // the same harness on two wrong rules: the bound catches both
        const Emitted from_p = measure(wrong_correction_from_p, p, q, k, V, trials);
        const Emitted inverted = measure(wrong_ratio_inverted, p, q, k, V, trials);
        INFO("wrong rules: the correction from p: TV " << tv_to_row(from_p.first, p, 0, V) << "; min(1, q/p): TV "
                                                       << tv_to_row(inverted.first, p, 0, V));
        CHECK(tv_to_row(from_p.first, p, 0, V) > 0.01);
        CHECK(tv_to_row(inverted.first, p, 0, V) > 0.01);
        // what chapter 09's page points its question at: the measurement beside the bound
        std::printf(
            "k = %d, %d steps: the first token's TV to p_0 %.4f, the second's to p_1 %.4f (bound 0.01); "
            "first draft token kept %.4f, expected sum min(p, q) = %.4f; wrong rules: the correction from "
            "p, TV %.3f; min(1, q/p), TV %.3f\n",
            k, trials, tv0, tv1, right.first_kept, overlap(p, q, V), tv_to_row(from_p.first, p, 0, V),
            tv_to_row(inverted.first, p, 0, V));
    }
}

TEST_CASE("speculative: the oracle draft gives Leviathan et al.'s tokens per target step", "[speculative]") {
    // each step: k tokens of the oracle against the truth, greedy acceptance, then the
    // correction or bonus token; the next step starts after the tokens the step added
    constexpr int V = 50, steps = 20000;
    for (const double a : {0.6, 0.8, 0.9}) {
        for (const int k : {1, 2, 4, 8}) {
            sv::AcceptanceStats stats;
            long long tokens = 0, pos = 0;
            std::vector<int> truth(std::size_t(k) + 1);
            for (int s = 0; s < steps; ++s) {
                for (int i = 0; i <= k; ++i) truth[std::size_t(i)] = int(pd::philox_uniform(3, 9, pos + i) * V);
                const std::vector<int> draft = sv::propose_oracle(std::span<const int>(truth).first(std::size_t(k)), V,
                                                                  a, 42, 1, std::uint64_t(s) * 2 * k);
                const int n = sv::accept_greedy(draft, truth);
                stats.record(k, n);
                tokens += n + 1;
                pos += n + 1;
            }
            const double per_step = double(tokens) / steps;
            INFO("a = " << a << ", k = " << k << ": " << per_step << " tokens per step, formula "
                        << sv::expected_tokens_per_step(a, k));
            CHECK(per_step == Approx(sv::expected_tokens_per_step(a, k)).epsilon(0.03));
            CHECK(stats.mean_acceptance_length() == Approx(per_step).epsilon(1e-12));
            CHECK(stats.per_position()[0] == Approx(a).margin(0.02));
        }
    }
}

TEST_CASE("speculative: the oracle draft is reproducible and proposes other tokens uniformly", "[speculative]") {
    const std::vector<int> truth = {3, 0, 4, 4, 1, 2, 0, 3};
    CHECK(sv::propose_oracle(truth, 5, 1.0, 1, 2, 3) == truth);
    CHECK(sv::propose_oracle(truth, 5, 0.6, 1, 2, 3) == sv::propose_oracle(truth, 5, 0.6, 1, 2, 3));
    CHECK(sv::propose_oracle(truth, 5, 0.6, 1, 2, 3) != sv::propose_oracle(truth, 5, 0.6, 1, 2, 1000));
    // a = 0: never the truth; the V - 1 others equally often
    std::vector<long long> seen(5, 0);
    const std::vector<int> zeros(1000, 2);
    for (const int t : sv::propose_oracle(zeros, 5, 0.0, 9, 9, 0)) ++seen[std::size_t(t)];
    CHECK(seen[2] == 0);
    for (const int j : {0, 1, 3, 4}) CHECK(seen[std::size_t(j)] == Approx(250).margin(60));
    CHECK_THROWS_WITH(sv::propose_oracle(truth, 1, 0.5, 1, 2, 3), Contains("V = 1"));
    CHECK_THROWS_WITH(sv::propose_oracle(truth, 5, 1.5, 1, 2, 3), Contains("a = 1.5"));
    CHECK_THROWS_WITH(sv::propose_oracle(truth, 4, 0.5, 1, 2, 3), Contains("truth[2] = 4"));
}

TEST_CASE("speculative: prompt lookup proposes what followed the latest longest match", "[speculative]") {
    // the suffix 1 2 3 occurs at 0 (then 4) and at 4 (then 5): the latest wins
    CHECK(sv::propose_ngram(std::vector<int>{1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3}, 3) == std::vector<int>{5, 1, 2});
    // the longest n first: "8 9" at 1 (then 1 9 0) beats the later "9" at 4 (then 0 8 9)
    const std::vector<int> t = {7, 8, 9, 1, 9, 0, 8, 9};
    CHECK(sv::propose_ngram(t, 3, 2) == std::vector<int>{1, 9, 0});
    CHECK(sv::propose_ngram(t, 3, 1) == std::vector<int>{0, 8, 9});
    // fewer than k tokens before the end: what there is
    CHECK(sv::propose_ngram(std::vector<int>{5, 6, 7, 5, 6}, 5) == std::vector<int>{7, 5, 6});
    CHECK(sv::propose_ngram(std::vector<int>{4, 4}, 3) == std::vector<int>{4});
    // no match: nothing
    CHECK(sv::propose_ngram(std::vector<int>{1, 2, 3}, 4).empty());
    CHECK(sv::propose_ngram(std::vector<int>{}, 4).empty());
    CHECK(sv::propose_ngram(std::vector<int>{6}, 4).empty());
    // min_n: the suffix 9 3 never occurred before; with min_n = 1 the "3" at 2 does
    CHECK(sv::propose_ngram(std::vector<int>{1, 2, 3, 9, 3}, 2, 3, 2).empty());
    CHECK(sv::propose_ngram(std::vector<int>{1, 2, 3, 9, 3}, 2, 3, 1) == std::vector<int>{9, 3});
    CHECK_THROWS_WITH(sv::propose_ngram(t, 0), Contains("k = 0"));
    CHECK_THROWS_WITH(sv::propose_ngram(t, 2, 3, 0), Contains("min_n = 0"));
    CHECK_THROWS_WITH(sv::propose_ngram(t, 2, 1, 2), Contains("max_n = 1"));
}

TEST_CASE("speculative: the acceptance metrics of hand-made steps", "[speculative]") {
    sv::AcceptanceStats s;
    CHECK(s.acceptance_rate() == 0.0);
    CHECK(s.mean_acceptance_length() == 1.0);
    CHECK(s.per_position().empty());
    s.record(3, 1);
    s.record(3, 3);
    s.record(0, 0);  // no draft: not counted
    s.record(2, 0);
    CHECK(s.drafts == 3);
    CHECK(s.draft_tokens == 8);
    CHECK(s.accepted == 4);
    CHECK(s.acceptance_rate() == Approx(0.5));
    CHECK(s.mean_acceptance_length() == Approx(1.0 + 4.0 / 3.0));
    CHECK(s.proposed_at == std::vector<long long>{3, 3, 2});
    CHECK(s.accepted_at == std::vector<long long>{2, 1, 1});
    const std::vector<double> rates = s.per_position();
    REQUIRE(rates.size() == 3);
    CHECK(rates[0] == Approx(2.0 / 3.0));
    CHECK(rates[1] == Approx(1.0 / 3.0));
    CHECK(rates[2] == Approx(0.5));
    sv::AcceptanceStats other;
    other.record(5, 4);
    s.merge(other);
    CHECK(s.drafts == 4);
    CHECK(s.draft_tokens == 13);
    CHECK(s.accepted == 8);
    CHECK(s.proposed_at == std::vector<long long>{4, 4, 3, 1, 1});
    CHECK(s.accepted_at == std::vector<long long>{3, 2, 2, 1, 0});
    other.merge(sv::AcceptanceStats{});
    CHECK(other.draft_tokens == 5);
    CHECK_THROWS_WITH(s.record(2, 3), Contains("accepted = 3"));
    CHECK_THROWS_WITH(s.record(2, -1), Contains("accepted = -1"));
}

TEST_CASE("speculative: expected tokens per step and the predicted speed-up", "[speculative]") {
    CHECK(sv::expected_tokens_per_step(0.5, 1) == Approx(1.5));
    CHECK(sv::expected_tokens_per_step(0.5, 2) == Approx(1.75));
    CHECK(sv::expected_tokens_per_step(0.8, 4) == Approx(3.3616));  // (1 - 0.8^5) / 0.2
    CHECK(sv::expected_tokens_per_step(0.0, 5) == 1.0);
    CHECK(sv::expected_tokens_per_step(1.0, 4) == 5.0);
    CHECK(sv::expected_tokens_per_step(0.7, 0) == 1.0);
    // Leviathan et al.'s form with c_verify = 1; a verify pass 10% slower than a decode step
    CHECK(sv::predicted_speedup(0.8, 4, 0.05, 1.0) == Approx((1 - std::pow(0.8, 5)) / ((1 - 0.8) * (4 * 0.05 + 1))));
    CHECK(sv::predicted_speedup(0.8, 4, 0.05, 1.1) == Approx(3.3616 / 1.3));
    CHECK(sv::predicted_speedup(0.0, 3, 0.1, 1.0) == Approx(1.0 / 1.3));  // nothing kept: slower than plain
    CHECK_THROWS_WITH(sv::expected_tokens_per_step(-0.1, 2), Contains("a = -0.1"));
    CHECK_THROWS_WITH(sv::expected_tokens_per_step(1.5, 2), Contains("a = 1.5"));
    CHECK_THROWS_WITH(sv::expected_tokens_per_step(NAN, 2), Contains("a = nan"));
    CHECK_THROWS_WITH(sv::expected_tokens_per_step(0.5, -1), Contains("k = -1"));
    CHECK_THROWS_WITH(sv::predicted_speedup(0.5, 2, -1.0, 1.0), Contains("c_draft = -1"));
    CHECK_THROWS_WITH(sv::predicted_speedup(0.5, 2, 0.1, 0.0), Contains("c_verify = 0"));
    CHECK_THROWS_WITH(sv::predicted_speedup(0.5, -2, 0.1, 1.0), Contains("k = -2"));
}
