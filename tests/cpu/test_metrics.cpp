// Chapter 05's serving metrics (vLLM's definitions) on a hand-built timeline whose every value is
// computed by hand below, single-token requests, goodput under SLOs, one request's path through
// the steps, the JSON and text, and the timelines that are rejected.
#include "pd/serving/metrics.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
using pd::serving::Metrics;
using pd::serving::Slo;
using pd::serving::Stats;
using pd::serving::Timeline;

namespace {

Timeline::RequestRecord record(int id, double arrival, std::vector<double> tokens) {
    Timeline::RequestRecord r;
    r.request.id = id;
    r.request.arrival_s = arrival;
    r.request.prompt_tokens = 10;
    r.request.output_tokens = static_cast<int>(tokens.size());
    r.token_s = std::move(tokens);
    return r;
}

/// Three requests, times in binary fractions so that every difference below is exact:
///   A: arrives 0,    tokens 0.5, 0.75, 1.0, 1.5   TTFT 0.5   E2E 1.5   TPOT (1.5 - 0.5) / 3 = 1/3
///                                                  ITL 0.25, 0.25, 0.5
///   B: arrives 0.25, token  1.25                   TTFT 1.0   E2E 1.0   no TPOT, no ITL
///   C: arrives 1.0,  tokens 1.25, 1.5, 2.25        TTFT 0.25  E2E 1.25  TPOT (1.25 - 0.25) / 2 = 0.5
///                                                  ITL 0.25, 0.75
Timeline hand_built() {
    Timeline t;
    t.policy = "continuous";
    t.requests.push_back(record(0, 0.0, {0.5, 0.75, 1.0, 1.5}));
    t.requests.push_back(record(1, 0.25, {1.25}));
    t.requests.push_back(record(2, 1.0, {1.25, 1.5, 2.25}));
    return t;
}

/// Checks @p s against the expected values, to 1e-12.
void check_stats(const Stats& s, double mean, double p50, double p90, double p99, double max, int count) {
    CHECK(s.count == count);
    CHECK(s.mean == Approx(mean).epsilon(1e-12));
    CHECK(s.p50 == Approx(p50).epsilon(1e-12));
    CHECK(s.p90 == Approx(p90).epsilon(1e-12));
    CHECK(s.p99 == Approx(p99).epsilon(1e-12));
    CHECK(s.max == Approx(max).epsilon(1e-12));
}

std::string error_of(const Timeline& t, const Slo& slo = {}) {
    try {
        pd::serving::compute_metrics(t, slo);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("stats_of: mean, linear-interpolated percentiles, max", "[metrics]") {
    // 1, 2, 4, 8 (given out of order): mean 15/4; rank x = p/100 * 3 between sorted values:
    // p50 x = 1.5 -> 2 + 0.5 * 2 = 3; p90 x = 2.7 -> 4 + 0.7 * 4 = 6.8; p99 x = 2.97 -> 4 + 0.97 * 4 = 7.88.
    check_stats(pd::serving::stats_of({8, 1, 4, 2}), 3.75, 3, 6.8, 7.88, 8, 4);
    check_stats(pd::serving::stats_of({0.5}), 0.5, 0.5, 0.5, 0.5, 0.5, 1);
    check_stats(pd::serving::stats_of({}), 0, 0, 0, 0, 0, 0);
}

TEST_CASE("compute_metrics on a hand-built timeline", "[metrics]") {
    const Metrics m = pd::serving::compute_metrics(hand_built());
    CHECK(m.completed == 3);
    CHECK(m.output_tokens == 8);  // 4 + 1 + 3

    // TTFT {0.5, 1.0, 0.25}, sorted 0.25, 0.5, 1.0: mean 1.75 / 3; rank x = p/100 * 2:
    // p50 = 0.5; p90 x = 1.8 -> 0.5 + 0.8 * 0.5 = 0.9; p99 x = 1.98 -> 0.5 + 0.98 * 0.5 = 0.99.
    check_stats(m.ttft_s, 1.75 / 3, 0.5, 0.9, 0.99, 1.0, 3);
    // TPOT {1/3, 0.5} (B has one token and is left out): mean 5/12; x = p/100:
    // p50 = 1/3 + 0.5 * (1/6); p90 = 1/3 + 0.9 / 6; p99 = 1/3 + 0.99 / 6.
    check_stats(m.tpot_s, 5.0 / 12, 1.0 / 3 + 0.5 / 6, 1.0 / 3 + 0.9 / 6, 1.0 / 3 + 0.99 / 6, 0.5, 2);
    // ITL pooled {0.25, 0.25, 0.5, 0.25, 0.75}, sorted 0.25, 0.25, 0.25, 0.5, 0.75: mean 2.0 / 5;
    // x = p/100 * 4: p50 x = 2 -> 0.25; p90 x = 3.6 -> 0.5 + 0.6 * 0.25 = 0.65;
    // p99 x = 3.96 -> 0.5 + 0.96 * 0.25 = 0.74.
    check_stats(m.itl_s, 0.4, 0.25, 0.65, 0.74, 0.75, 5);
    // E2E {1.5, 1.0, 1.25}, sorted 1.0, 1.25, 1.5: mean 1.25; p90 x = 1.8 -> 1.25 + 0.8 * 0.25 = 1.45;
    // p99 x = 1.98 -> 1.25 + 0.98 * 0.25 = 1.495.
    check_stats(m.e2e_s, 1.25, 1.25, 1.45, 1.495, 1.5, 3);

    // From the first arrival (A, 0) to the last token (C, 2.25): 8 tokens and 3 requests in 2.25 s.
    CHECK(m.duration_s == 2.25);
    CHECK(m.output_tokens_per_s == Approx(8 / 2.25));
    CHECK(m.requests_per_s == Approx(3 / 2.25));
    CHECK(m.goodput_requests_per_s == 0);  // no SLO

    // The order of the records does not matter.
    Timeline shuffled = hand_built();
    std::swap(shuffled.requests[0], shuffled.requests[2]);
    const Metrics s = pd::serving::compute_metrics(shuffled);
    CHECK(s.duration_s == 2.25);
    CHECK(s.ttft_s.p90 == Approx(0.9));
    CHECK(s.itl_s.p90 == Approx(0.65));

    // Nor does the origin of time: shifted by 10 s, the run still lasts 2.25 s (from the first
    // arrival, not from t = 0) and every latency is unchanged.
    Timeline later = hand_built();
    for (auto& r : later.requests) {
        r.request.arrival_s += 10;
        for (double& x : r.token_s) x += 10;
    }
    const Metrics l = pd::serving::compute_metrics(later);
    CHECK(l.duration_s == Approx(2.25));
    CHECK(l.requests_per_s == Approx(3 / 2.25));
    CHECK(l.e2e_s.p99 == Approx(1.495));
}

TEST_CASE("compute_metrics: goodput counts requests within every SLO given", "[metrics]") {
    const Timeline t = hand_built();
    // TTFT <= 0.5 and TPOT <= 0.4: A (0.5, 1/3) passes, at the bound; B (TTFT 1.0) fails;
    // C (TPOT 0.5) fails. 1 request in 2.25 s.
    CHECK(pd::serving::compute_metrics(t, Slo{0.5, 0.4}).goodput_requests_per_s == Approx(1 / 2.25));
    // TTFT <= 1.0 alone: all three (B exactly at the bound). 3 in 2.25 s.
    CHECK(pd::serving::compute_metrics(t, Slo{1.0, 0}).goodput_requests_per_s == Approx(3 / 2.25));
    // TPOT <= 0.4 alone: A and B (a single-token request's TPOT counts as 0, as in vLLM), not C.
    CHECK(pd::serving::compute_metrics(t, Slo{0, 0.4}).goodput_requests_per_s == Approx(2 / 2.25));
    // TTFT <= 0.2: none.
    CHECK(pd::serving::compute_metrics(t, Slo{0.2, 0}).goodput_requests_per_s == 0);
    CHECK_THAT(error_of(t, Slo{-1, 0}), Contains("ttft_s"));
    CHECK_THAT(error_of(t, Slo{0, -0.1}), Contains("tpot_s"));
}

TEST_CASE("compute_metrics: single-token requests have a TTFT and no TPOT or ITL", "[metrics]") {
    Timeline t;
    t.requests.push_back(record(0, 0.0, {0.5}));
    t.requests.push_back(record(1, 0.5, {2.0}));
    const Metrics m = pd::serving::compute_metrics(t);
    check_stats(m.ttft_s, 1.0, 1.0, 1.4, 1.49, 1.5, 2);  // {0.5, 1.5}: p90 = 0.5 + 0.9, p99 = 0.5 + 0.99
    CHECK(m.tpot_s.count == 0);
    CHECK(m.itl_s.count == 0);
    CHECK(m.duration_s == 2.0);
    const nlohmann::json j = pd::serving::to_json(m);
    CHECK(j["tpot_s"]["mean"].is_null());  // not invented: there is no TPOT
    CHECK(j["tpot_s"]["count"] == 0);
    CHECK(j["ttft_s"]["p50"] == 1.0);
}

TEST_CASE("compute_metrics of an empty timeline is all zero", "[metrics]") {
    const Metrics m = pd::serving::compute_metrics(Timeline{}, Slo{1, 1});
    CHECK(m.completed == 0);
    CHECK(m.duration_s == 0);
    CHECK(m.ttft_s.count == 0);
    CHECK(m.output_tokens_per_s == 0);
    CHECK(pd::serving::to_json(m)["goodput_requests_per_s"].is_null());
}

TEST_CASE("request_path: the admission step, the prefill's steps and the TTFT of one request", "[metrics]") {
    // request 1 (arrives 0.25, its token at 1.25) is prefilled in steps 2 and 3, preempted, and
    // recomputed in step 5; request 2 only decodes here (its prompt ran before the timeline)
    Timeline t = hand_built();
    const auto step = [](std::vector<pd::serving::BatchItem> items) {
        Timeline::StepRecord r;
        r.step.items = std::move(items);
        return r;
    };
    t.steps = {step({{.request = 0, .tokens = 10, .prefill = true}}),
               step({{.request = 0, .tokens = 1}, {.request = 1, .tokens = 4, .prefill = true, .emits = false}}),
               step({{.request = 1, .tokens = 6, .context = 4, .prefill = true}}),
               step({{.request = 2, .tokens = 1, .context = 10}}),
               step({{.request = 1, .tokens = 11, .prefill = true}})};
    const pd::serving::RequestPath one = pd::serving::request_path(t, 1);
    CHECK(one.admitted_step == 2);
    CHECK(one.prefill_steps == 3);
    CHECK(one.ttft_s == 1.0);
    const pd::serving::RequestPath two = pd::serving::request_path(t, 2);
    CHECK(two.admitted_step == 0);
    CHECK(two.prefill_steps == 0);
    CHECK(two.ttft_s == 0.25);
    CHECK_THROWS_WITH(pd::serving::request_path(t, 3), Contains("id = 3"));
}

TEST_CASE("compute_metrics rejects an inconsistent timeline, naming the request", "[metrics]") {
    Timeline t = hand_built();
    t.requests[1].request.output_tokens = 2;  // B wants 2 tokens but has 1 time
    CHECK_THAT(error_of(t), Contains("request 1 has 1 token times for 2 output tokens"));

    t = hand_built();
    t.requests[2].token_s.push_back(3.0);  // C: 4 times for 3 tokens
    CHECK_THAT(error_of(t), Contains("request 2 has 4 token times for 3 output tokens"));

    t = hand_built();
    t.requests[2].token_s[0] = 0.75;  // C's first token before its arrival at 1.0
    CHECK_THAT(error_of(t), Contains("request 2: token 0"));
    CHECK_THAT(error_of(t), Contains("its arrival"));

    t = hand_built();
    t.requests[0].token_s[2] = 0.6;  // A's tokens out of order: 0.75, then 0.6
    CHECK_THAT(error_of(t), Contains("request 0: token 2"));

    t = hand_built();
    t.requests[0].token_s[3] = std::nan("");
    CHECK_THAT(error_of(t), Contains("request 0: token 3"));

    CHECK(error_of(hand_built()).empty());
}

TEST_CASE("to_json and describe of the metrics", "[metrics]") {
    const Metrics m = pd::serving::compute_metrics(hand_built(), Slo{0.5, 0.4});
    const nlohmann::json j = pd::serving::to_json(m);
    CHECK(j["completed"] == 3);
    CHECK(j["output_tokens"] == 8);
    CHECK(j["duration_s"] == 2.25);
    CHECK(j["itl_s"]["p90"].get<double>() == Approx(0.65));
    CHECK(j["e2e_s"]["max"] == 1.5);
    CHECK(j["tpot_s"]["count"] == 2);
    CHECK(j["slo"]["ttft_s"] == 0.5);
    CHECK(j["goodput_requests_per_s"].get<double>() == Approx(1 / 2.25));
    for (const char* key : {"output_tokens_per_s", "requests_per_s", "ttft_s"}) CHECK(j.contains(key));

    const nlohmann::json no_slo = pd::serving::to_json(pd::serving::compute_metrics(hand_built()));
    CHECK(no_slo["goodput_requests_per_s"].is_null());
    CHECK(no_slo["slo"]["tpot_s"].is_null());

    const std::string text = pd::serving::describe(m);
    CHECK_THAT(text, Contains("3 requests, 8 output tokens in 2.250 s"));
    CHECK_THAT(text, Contains("TTFT"));
    // ITL in ms: mean 400, p50 250, p90 650, p99 740, max 750, 5 gaps.
    CHECK_THAT(text, Contains("ITL        400.00     250.00     650.00     740.00     750.00       5"));
    CHECK_THAT(text, Contains("goodput 0.44 requests/s (TTFT <= 500 ms, TPOT <= 400 ms)"));
}
