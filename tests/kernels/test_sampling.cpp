// Chapter 09's sampling kernel (kernels/layers/sampling.hpp) against its CPU reference
// (ref::sample_row, a sort where the kernel bisects): temperature, top-k, top-p and their
// combinations over ragged vocabularies, every row's token and kept distribution, the draws
// recomputed on the host from the same Philox stream; greedy as the argmax; ties at the top-k
// edge; poisoned outputs with guards; bitwise repeatability; bad parameters named.
#include "guard_check.hpp"
#include "layers/sampling.hpp"
#include "layers_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/philox.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace ly = pd::kernels::layers;
namespace ref = pd::reference;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t kSeed = 20261204;
constexpr std::size_t kGuard = 32;

/// What one launch wrote: tokens [R] and probs [R, V], each followed by kGuard poisoned elements.
struct Sampled {
    std::vector<int> tokens;
    std::vector<float> probs;
};

Sampled run(const std::vector<float>& logits, const std::vector<int>& streams, const std::vector<int>& positions, int V,
            const ly::SamplingParams& p) {
    const int R = int(streams.size());
    pd::DeviceBuffer<float> d_logits{std::span<const float>(logits)};
    pd::DeviceBuffer<int> d_streams{std::span<const int>(streams)}, d_positions{std::span<const int>(positions)};
    pd::DeviceBuffer<float> probs(std::size_t(R) * V + kGuard);
    pd::DeviceBuffer<int> tokens(std::size_t(R) + kGuard);
    probs.fill_bytes(pd::kPoisonByte);
    tokens.fill_bytes(pd::kPoisonByte);
    ly::sample(d_logits.data(), probs.data(), tokens.data(), d_streams.data(), d_positions.data(), R, V, p);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return {tokens.download(), probs.download()};
}

bool int_guard_intact(const std::vector<int>& v, std::size_t n) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = n * sizeof(int); i < v.size() * sizeof(int); ++i)
        if (bytes[i] != pd::kPoisonByte) return false;
    return true;
}

}  // namespace

TEST_CASE("sampling: temperature, top-k and top-p draw the reference's token from the same Philox draw", "[sampling]") {
    const ly::SamplingParams rules[] = {
        {.temperature = 1.f},
        {.temperature = 0.7f, .top_k = 5},
        {.temperature = 1.3f, .top_p = 0.9f},
        {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f},
        {.temperature = 2.f, .top_k = 1},
        {.temperature = 1.f, .top_p = 0.3f},
    };
    std::uint64_t c = 0;
    for (int V : {1, 2, 3, 17, 33, 257, 1000, 4099}) {
        for (const ly::SamplingParams& rule : rules) {
            ly::SamplingParams p = rule;
            p.seed = pd::derive_seed(kSeed, c++);
            if (p.top_k > V) p.top_k = V;
            const int R = 3;
            std::vector<float> logits(std::size_t(R) * V);
            pd::fill_uniform<float>(logits, -4.f, 4.f, p.seed);
            const std::vector<int> streams = {0, 7, 123456}, positions = {0, 4095, 17 + V};
            std::ostringstream what;
            what << "seed " << p.seed << ", V = " << V << ", " << ly::describe(p);
            INFO(what.str());
            const Sampled got = run(logits, streams, positions, V, p);
            for (int r = 0; r < R; ++r) {
                INFO("row " << r);
                const float u = pd::philox_uniform(p.seed, std::uint64_t(streams[std::size_t(r)]),
                                                   std::uint64_t(positions[std::size_t(r)]));
                const ref::SampledRow want =
                    ref::sample_row(std::span<const float>(logits).subspan(std::size_t(r) * V, std::size_t(V)),
                                    p.temperature, p.top_k, p.top_p, u);
                const int token = got.tokens[std::size_t(r)];
                REQUIRE(token >= 0);
                REQUIRE(token < V);
                if (want.margin > 1e-5) CHECK(token == want.token);  // else fp32 may take the neighbour
                CHECK(want.probs[std::size_t(token)] > 0);           // never a token the rules dropped
                double max_err = 0;
                int kept = 0, want_kept = 0;
                for (int j = 0; j < V; ++j) {
                    const double g = got.probs[std::size_t(r) * V + std::size_t(j)];
                    REQUIRE(!std::isnan(g));
                    max_err = std::max(max_err, std::abs(g - want.probs[std::size_t(j)]));
                    kept += g > 0, want_kept += want.probs[std::size_t(j)] > 0;
                }
                CHECK(max_err <= 1e-5);
                CHECK(kept == want_kept);
                if (p.top_k > 0) CHECK(kept <= p.top_k);  // distinct random logits: no tie at the edge
            }
            CHECK(int_guard_intact(got.tokens, std::size_t(R)));
            CHECK(pd::testing::guard_intact(got.probs, std::size_t(R) * V));
        }
    }
}

TEST_CASE("sampling: temperature 0 is the argmax with a one-hot distribution, and ties at the k-th value are kept",
          "[sampling]") {
    const int V = 300;
    std::vector<float> logits(2 * V);
    pd::fill_uniform<float>(logits, -3.f, 3.f, kSeed + 1);
    logits[299] = 5.f;                      // row 0's maximum at the last index
    logits[V + 3] = logits[V + 259] = 5.f;  // row 1: a tie, the lowest index wins
    const Sampled greedy = run(logits, {0, 1}, {0, 0}, V, {});
    CHECK(greedy.tokens[0] == 299);
    CHECK(greedy.tokens[1] == 3);
    for (int r = 0; r < 2; ++r)
        for (int j = 0; j < V; ++j)
            CHECK(greedy.probs[std::size_t(r) * V + std::size_t(j)] ==
                  (j == greedy.tokens[std::size_t(r)] ? 1.f : 0.f));

    // top-k = 2 over a row whose 2nd and 3rd largest are equal: all three are kept, by hand
    std::vector<float> row(V, -10.f);
    row[10] = 2.f, row[20] = 1.f, row[30] = 1.f;
    const ly::SamplingParams p{.temperature = 1.f, .top_k = 2, .seed = kSeed};
    const Sampled tied = run(row, {0}, {0}, V, p);
    const double e = std::exp(-1.0), total = 1 + 2 * e;
    CHECK(tied.probs[10] == Approx(1 / total).epsilon(1e-6));
    CHECK(tied.probs[20] == Approx(e / total).epsilon(1e-6));
    CHECK(tied.probs[30] == Approx(e / total).epsilon(1e-6));
    int kept = 0;
    for (int j = 0; j < V; ++j) kept += tied.probs[std::size_t(j)] > 0;
    CHECK(kept == 3);
}

TEST_CASE("sampling: a second run gives the same bits, and another seed or position draws anew", "[sampling]") {
    const int V = 1000, R = 16;
    std::vector<float> logits(std::size_t(R) * V);
    pd::fill_uniform<float>(logits, -1.f, 1.f, kSeed + 2);  // flat rows: many tokens are likely
    std::vector<int> streams(R), positions(R);
    for (int r = 0; r < R; ++r) streams[std::size_t(r)] = r, positions[std::size_t(r)] = 100;
    const ly::SamplingParams p{.temperature = 1.f, .top_p = 0.9f, .seed = kSeed};
    const Sampled a = run(logits, streams, positions, V, p), b = run(logits, streams, positions, V, p);
    CHECK(a.tokens == b.tokens);
    CHECK(pd::testing::same_bits(a.probs, b.probs));
    ly::SamplingParams other = p;
    other.seed = kSeed + 1;
    const Sampled c = run(logits, streams, positions, V, other);
    int differ = 0;
    for (int r = 0; r < R; ++r) differ += a.tokens[std::size_t(r)] != c.tokens[std::size_t(r)];
    CHECK(differ >= R / 2);  // about 1 - 1/700 of the draws change over ~700 likely tokens
}

TEST_CASE("sampling: bad parameters are refused by name", "[sampling]") {
    CHECK_THROWS_WITH(ly::check_sampling({.temperature = -1.f}, 10), Contains("SamplingParams.temperature"));
    CHECK_THROWS_WITH(ly::check_sampling({.temperature = 1.f, .top_k = 11}, 10),
                      Contains("SamplingParams.top_k = 11 must be in 0 .. V = 10"));
    CHECK_THROWS_WITH(ly::check_sampling({.temperature = 1.f, .top_p = 0.f}, 10), Contains("SamplingParams.top_p"));
    CHECK_THROWS_WITH(ly::check_sampling({.temperature = 1.f, .top_p = 1.5f}, 10), Contains("SamplingParams.top_p"));
    CHECK_NOTHROW(ly::check_sampling({.temperature = 0.f, .top_k = 10, .top_p = 1.f}, 10));
    CHECK(ly::describe({}) == "greedy");
    CHECK(ly::describe({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f}) == "temperature 0.8, top-k 40, top-p 0.95");
}
