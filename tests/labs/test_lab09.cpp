// Lab 09: the rejection sampler of speculative decoding (rejection_sample, in
// <lab tree>/09_speculative/rejection_sampler.cpp): hand-made distributions and uniforms, each
// with the exact verdict it must give (a draft token kept when u * q(x) < p(x), and not at the
// boundary; the correction drawn from the residual max(p - q, 0) with the last uniform; the
// bonus token from the last row of p; no draft; one-hot draft rows), and the distribution of the
// tokens it adds against the target's over seeded draws.
#include "pd/philox.hpp"
#include "pd/serving/speculative.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace sv = pd::serving;

namespace {

constexpr const char* kWhere = "lab 09: rejection_sample in <lab tree>/09_speculative/rejection_sampler.cpp";

/// The rows of a [rows, V] matrix as text, one row per `[...]`.
std::string rows_text(const std::vector<float>& m, int V) {
    std::ostringstream os;
    for (std::size_t i = 0; i < m.size(); ++i) os << (i % std::size_t(V) == 0 ? (i ? "] [" : "[") : " ") << m[i];
    os << (m.empty() ? "(none)" : "]");
    return os.str();
}

/// Runs the sampler and compares its verdict with {@p accepted, @p token}.
void check_verdict(const std::vector<float>& p, const std::vector<float>& q, const std::vector<int>& draft, int V,
                   const std::vector<float>& u, int accepted, int token) {
    INFO(kWhere);
    std::ostringstream os;
    os << "V = " << V << ", draft:";
    for (const int x : draft) os << " " << x;
    if (draft.empty()) os << " (none)";
    os << "; u:";
    for (const float x : u) os << " " << x;
    INFO(os.str());
    INFO("p: " << rows_text(p, V));
    INFO("q: " << rows_text(q, V));
    const sv::SpecVerdict v = sv::rejection_sample(p, q, draft, V, u);
    INFO("got {accepted " << v.accepted << ", token " << v.token << "}, expected {accepted " << accepted << ", token "
                          << token << "}");
    CHECK(v.accepted == accepted);
    CHECK(v.token == token);
}

/// Distributions over @p V tokens, @p rows of them (row-major), from Philox stream @p stream of
/// @p seed: cubes of uniforms (peaked), with about a quarter of the entries 0 when @p zeros
/// (never a whole row), normalized.
std::vector<float> lab09_rows(int rows, int V, std::uint64_t seed, std::uint64_t stream, bool zeros) {
    std::vector<float> m(std::size_t(rows) * std::size_t(V));
    std::vector<double> w(static_cast<std::size_t>(V));
    for (int r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int j = 0; j < V; ++j) {
            const std::uint64_t at = 2 * (std::uint64_t(r) * std::uint64_t(V) + std::uint64_t(j));
            const double x = pd::philox_uniform(seed, stream, at);
            const bool zero = zeros && j != r % V && pd::philox_uniform(seed, stream, at + 1) < 0.25f;
            w[std::size_t(j)] = zero ? 0.0 : 1e-3 + x * x * x;
            sum += w[std::size_t(j)];
        }
        for (int j = 0; j < V; ++j) m[std::size_t(r) * V + j] = float(w[std::size_t(j)] / sum);
    }
    return m;
}

/// What lab09_run() found: the frequencies of the first token a step adds, how often the
/// first draft token was kept, and the first trial that broke a rule (empty when none).
struct Lab09Run {
    std::vector<double> first;
    double first_kept = 0.0;
    std::string broken;
};

/// @p trials verify steps over the fixed rows p ([k + 1, V]) and q ([k, V]): the draft tokens
/// drawn from q, the uniforms from Philox. Every verdict is checked against the rule where the
/// rule is clear-cut (a decision whose u * q is within 1e-6 of p may go either way in float): the
/// tokens kept are those with u * q < p, up to the first rejection; a correction has p > q, a
/// bonus token p > 0.
Lab09Run lab09_run(const std::vector<float>& p, const std::vector<float>& q, int k, int V, int trials,
                   std::uint64_t seed) {
    Lab09Run run;
    std::vector<std::vector<double>> q_rows;
    for (int i = 0; i < k; ++i)
        q_rows.emplace_back(q.begin() + std::ptrdiff_t(i) * V, q.begin() + std::ptrdiff_t(i + 1) * V);
    std::vector<long long> first(std::size_t(V), 0);
    long long kept = 0;
    std::vector<int> draft(static_cast<std::size_t>(k));
    std::vector<float> u(std::size_t(k) + 1);
    for (int t = 0; t < trials; ++t) {
        const std::uint64_t base = std::uint64_t(t) * 32;
        for (int i = 0; i < k; ++i)
            draft[std::size_t(i)] = sv::sample_index(q_rows[std::size_t(i)], pd::philox_uniform(seed, 101, base + i));
        for (int i = 0; i <= k; ++i) u[std::size_t(i)] = pd::philox_uniform(seed, 102, base + i);
        const sv::SpecVerdict v = sv::rejection_sample(p, q, draft, V, u);
        std::string why;
        if (v.accepted < 0 || v.accepted > k || v.token < 0 || v.token >= V) {
            why = "out of range";
        } else {
            for (int i = 0; i < k && i <= v.accepted && why.empty(); ++i) {
                const double uq = double(u[std::size_t(i)]) * q[std::size_t(i) * V + draft[std::size_t(i)]];
                const double pi = p[std::size_t(i) * V + draft[std::size_t(i)]];
                if (i < v.accepted && uq > pi + 1e-6) why = "draft[" + std::to_string(i) + "] kept although u * q >= p";
                if (i == v.accepted && uq < pi - 1e-6)
                    why = "draft[" + std::to_string(i) + "] rejected although u * q < p";
            }
            const std::size_t at = std::size_t(v.accepted) * V + std::size_t(v.token);
            if (why.empty() && v.accepted < k && !(p[at] > q[at]))
                why = "a correction where p <= q (not in the residual)";
            if (why.empty() && v.accepted == k && !(p[at] > 0.f)) why = "a bonus token of probability 0";
        }
        if (!why.empty()) {
            std::ostringstream os;
            os << "trial " << t << ": " << why << "; draft:";
            for (const int x : draft) os << " " << x;
            os << "; u:";
            for (const float x : u) os << " " << x;
            os << "; got {accepted " << v.accepted << ", token " << v.token << "}";
            run.broken = os.str();
            return run;
        }
        ++first[std::size_t(v.accepted >= 1 ? draft[0] : v.token)];
        kept += v.accepted >= 1;
    }
    for (const long long c : first) run.first.push_back(double(c) / trials);
    run.first_kept = double(kept) / trials;
    return run;
}

/// The total-variation distance between frequencies @p f and the first row of @p p, and the
/// distance that sampling noise alone gives on average over @p trials draws (sum of the
/// expected |f - p| / 2 of each token, normal approximation).
std::pair<double, double> lab09_tv(const std::vector<double>& f, const std::vector<float>& p, int V, int trials) {
    double tv = 0.0, noise = 0.0;
    for (int j = 0; j < V; ++j) {
        const double pj = p[std::size_t(j)];
        tv += std::abs(f[std::size_t(j)] - pj) / 2;
        noise += std::sqrt(2.0 * pj * (1.0 - pj) / (3.14159265358979 * trials)) / 2;
    }
    return {tv, noise};
}

}  // namespace

TEST_CASE("lab09: a draft token is kept when u < p(x) / q(x), and rejected at the boundary", "[lab09]") {
    // V = 4, k = 1. Token 1: p = 1/2 >= q = 1/4, kept whatever u; the bonus token then comes from
    // p_1 = uniform with u[1] = 0.6 (cumulative 0.25 0.5 0.75 1): token 2
    const std::vector<float> p = {0.125f, 0.5f, 0.25f, 0.125f, 0.25f, 0.25f, 0.25f, 0.25f};
    const std::vector<float> q = {0.25f, 0.25f, 0.25f, 0.25f};
    check_verdict(p, q, {1}, 4, {0.96875f, 0.6f}, 1, 2);
    // token 0: p = 1/8, q = 1/4, kept with probability 1/2: u = 7/16 keeps it (7/64 < 8/64) ...
    check_verdict(p, q, {0}, 4, {0.4375f, 0.6f}, 1, 2);
    // ... u = 1/2 rejects it (1/8 < 1/8 is false); the residual max(p - q, 0) = {0, 1/4, 0, 0}
    // leaves token 1 alone, whatever u[1]
    check_verdict(p, q, {0}, 4, {0.5f, 0.6f}, 0, 1);
    check_verdict(p, q, {0}, 4, {0.5625f, 0.0f}, 0, 1);
}

TEST_CASE("lab09: at the first rejection the token is drawn from the residual max(p - q, 0)", "[lab09]") {
    // V = 4, k = 1: token 0 has p = 1/8, q = 1/2 (kept with probability 1/4); u = 3/4 rejects it.
    // The residual is {0, 1/4, 1/4, 0}: u[1] = 0.1 draws token 1 (p itself would give 0), 0.9
    // token 2 (p: 3)
    const std::vector<float> p = {0.125f, 0.375f, 0.375f, 0.125f, 0.25f, 0.25f, 0.25f, 0.25f};
    const std::vector<float> q = {0.5f, 0.125f, 0.125f, 0.25f};
    check_verdict(p, q, {0}, 4, {0.75f, 0.1f}, 0, 1);
    check_verdict(p, q, {0}, 4, {0.75f, 0.9f}, 0, 2);
    // k = 3: draft[0] = 1 kept (p >= q), draft[1] = 0 rejected; the step stops there (draft[2]
    // and u[2] do not count) and the correction comes from row 1's residual with u[3] = u[k]
    const std::vector<float> p3 = {0.125f, 0.375f, 0.375f, 0.125f, 0.125f, 0.375f, 0.375f, 0.125f,
                                   0.25f,  0.25f,  0.25f,  0.25f,  0.25f,  0.25f,  0.25f,  0.25f};
    const std::vector<float> q3 = {0.5f,   0.125f, 0.125f, 0.25f, 0.5f,  0.125f,
                                   0.125f, 0.25f,  0.25f,  0.25f, 0.25f, 0.25f};
    check_verdict(p3, q3, {1, 0, 2}, 4, {0.9f, 0.75f, 0.1f, 0.9f}, 1, 2);
    check_verdict(p3, q3, {1, 0, 2}, 4, {0.9f, 0.75f, 0.9f, 0.1f}, 1, 1);
}

TEST_CASE("lab09: when every draft token is kept, the bonus token is drawn from p_k", "[lab09]") {
    // k = 2, both draft tokens have p >= q; row 2 of p is {0, 0, 1/2, 1/2}: u[2] = 0.25 draws
    // token 2, 0.75 token 3 (rows 0 and 1 would give others)
    const std::vector<float> p = {0.5f, 0.25f, 0.125f, 0.125f, 0.125f, 0.125f, 0.25f, 0.5f, 0.f, 0.f, 0.5f, 0.5f};
    const std::vector<float> q = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
    check_verdict(p, q, {0, 3}, 4, {0.99f, 0.99f, 0.25f}, 2, 2);
    check_verdict(p, q, {0, 3}, 4, {0.0f, 0.5f, 0.75f}, 2, 3);
    check_verdict(p, q, {1, 2}, 4, {0.3f, 0.7f, 0.0f}, 2, 2);  // p = q: kept for every u < 1
}

TEST_CASE("lab09: with no draft (k = 0) the token is drawn from p_0", "[lab09]") {
    // p_0 = {1/4, 0, 1/2, 1/4}, cumulative 0.25 0.25 0.75 1
    const std::vector<float> p = {0.25f, 0.f, 0.5f, 0.25f};
    check_verdict(p, {}, {}, 4, {0.1f}, 0, 0);
    check_verdict(p, {}, {}, 4, {0.3f}, 0, 2);
    check_verdict(p, {}, {}, 4, {0.8f}, 0, 3);
    check_verdict({1.f}, {}, {}, 1, {0.5f}, 0, 0);  // V = 1
}

TEST_CASE("lab09: a one-hot draft (a greedy or n-gram proposer) is kept with probability p(x)", "[lab09]") {
    // q_0 is one-hot at the draft token 1 (q = 1): kept when u < p(1) = 1/2. On a rejection the
    // residual is p without token 1, {1/8, 0, 1/4, 1/8}: u[1] = 0.5 draws token 2, 0.2 token 0
    const std::vector<float> p = {0.125f, 0.5f, 0.25f, 0.125f, 0.f, 0.f, 0.f, 1.f};
    const std::vector<float> q = {0.f, 1.f, 0.f, 0.f};
    check_verdict(p, q, {1}, 4, {0.4375f, 0.5f}, 1, 3);  // kept; the bonus from {0, 0, 0, 1}
    check_verdict(p, q, {1}, 4, {0.5f, 0.5f}, 0, 2);
    check_verdict(p, q, {1}, 4, {0.75f, 0.2f}, 0, 0);
}

TEST_CASE("lab09: the tokens it adds are distributed as the target's", "[lab09]") {
    // V = 8, k = 2, p and q far apart: 200,000 seeded verify steps. The first token a step adds
    // (the first draft token when kept, else the correction) must follow p_0, and the first
    // draft token must be kept with probability sum_x min(p_0(x), q_0(x)).
    INFO(kWhere);
    constexpr int V = 8, k = 2, trials = 200000;
    const std::vector<float> p = lab09_rows(k + 1, V, 5, 1, true), q = lab09_rows(k, V, 5, 2, true);
    INFO("p: " << rows_text(p, V));
    INFO("q: " << rows_text(q, V));
    const Lab09Run run = lab09_run(p, q, k, V, trials, 77);
    INFO(run.broken);
    REQUIRE(run.broken.empty());
    const auto [tv, noise] = lab09_tv(run.first, p, V, trials);
    double overlap = 0.0;
    for (int j = 0; j < V; ++j) overlap += std::min(p[std::size_t(j)], q[std::size_t(j)]);
    INFO("total variation to p_0: " << tv << " (sampling noise alone: about " << noise << "); first draft token kept "
                                    << run.first_kept << ", expected " << overlap);
    CHECK(tv <= 0.01);
    CHECK(run.first_kept == Approx(overlap).margin(0.006));
}

TEST_CASE("lab09: a case the grader gives", "[.][lab09-case]") {
    // {vocab, k, zeros, seed}: seeded target and draft rows (with zero entries when zeros), 100,000
    // verify steps with seeded draft tokens and uniforms. Every verdict keeps the rule (what is
    // kept, a correction from the residual, a bonus token possible under p_k), and the first
    // token a step adds follows p_0 (total variation within 4 times what sampling noise gives, + 0.002).
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO(kWhere);
    INFO("the grader's case " << c.text());
    const int V = c.integer("vocab"), k = c.integer("k"), trials = 100000;
    REQUIRE(V >= 1);
    REQUIRE(k >= 0);
    const bool zeros = c.flag("zeros", false);
    const std::vector<float> p = lab09_rows(k + 1, V, c.seed(), 1, zeros), q = lab09_rows(k, V, c.seed(), 2, zeros);
    const Lab09Run run = lab09_run(p, q, k, V, trials, c.seed());
    INFO(run.broken);
    REQUIRE(run.broken.empty());
    const auto [tv, noise] = lab09_tv(run.first, p, V, trials);
    INFO("total variation to p_0: " << tv << " (sampling noise alone: about " << noise << ")");
    CHECK(tv <= 4 * noise + 2e-3);
}
