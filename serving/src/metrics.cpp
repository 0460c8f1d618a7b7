// Chapter 05's serving metrics, as vLLM's serving benchmark defines them, from a timeline.
#include "pd/serving/metrics.hpp"

#include "pd/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

void check_bound(double v, const char* name) {
    if (!(v >= 0) || !std::isfinite(v))
        throw std::invalid_argument(std::string("slo: ") + name + " must be >= 0 and finite, got " + std::to_string(v));
}

/// Checks one request record: a token time for each output token (up to its stop token, for a
/// request that stopped early), finite, none before the arrival, in order.
void check_record(const Timeline::RequestRecord& r) {
    const std::string who = "timeline: request " + std::to_string(r.request.id);
    const bool stopped =
        r.finish == Finish::stop && static_cast<long long>(r.token_s.size()) <= r.request.output_tokens;
    if (!stopped && static_cast<long long>(r.token_s.size()) != r.request.output_tokens)
        throw std::invalid_argument(who + " has " + std::to_string(r.token_s.size()) + " token times for " +
                                    std::to_string(r.request.output_tokens) + " output tokens");
    if (r.token_s.empty()) throw std::invalid_argument(who + " has no output tokens");
    if (!std::isfinite(r.request.arrival_s)) throw std::invalid_argument(who + " has a non-finite arrival time");
    for (std::size_t k = 0; k < r.token_s.size(); ++k) {
        const double t = r.token_s[k];
        if (!std::isfinite(t))
            throw std::invalid_argument(who + ": token " + std::to_string(k) + " has a non-finite time");
        const double before = k == 0 ? r.request.arrival_s : r.token_s[k - 1];
        if (t < before)
            throw std::invalid_argument(who + ": token " + std::to_string(k) + " at " + std::to_string(t) +
                                        " s comes before " + (k == 0 ? "its arrival" : "the previous token") + " at " +
                                        std::to_string(before) + " s");
    }
}

nlohmann::json or_null(double v, bool defined) {
    return defined ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

Stats stats_of(std::vector<double> values) {
    Stats s;
    if (values.empty()) return s;
    s.count = static_cast<int>(values.size());
    s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
    // sorted once for the three (pd::percentile() sorts its copy: three sorts of every
    // inter-token latency of a replay were a fifth of a long review's time)
    std::sort(values.begin(), values.end());
    s.max = values.back();
    s.p50 = sorted_percentile(values, 50);
    s.p90 = sorted_percentile(values, 90);
    s.p99 = sorted_percentile(values, 99);
    return s;
}

Metrics compute_metrics(const Timeline& timeline, const Slo& slo) {
    check_bound(slo.ttft_s, "ttft_s");
    check_bound(slo.tpot_s, "tpot_s");
    Metrics m;
    m.slo = slo;
    if (timeline.requests.empty()) return m;

    std::vector<double> ttft, tpot, itl, e2e;
    double first_arrival = timeline.requests.front().request.arrival_s;
    double last_token = timeline.requests.front().request.arrival_s;
    int good = 0;
    for (const Timeline::RequestRecord& r : timeline.requests) {
        if (r.finish == Finish::cancelled) continue;  // not completed (chapter 13)
        check_record(r);
        const int n = static_cast<int>(r.token_s.size());  // output_tokens, or fewer up to a stop token
        const double t_ttft = r.token_s.front() - r.request.arrival_s;
        const double t_e2e = r.token_s.back() - r.request.arrival_s;
        // vLLM: TPOT is defined for more than one output token; for goodput a single-token
        // request's TPOT counts as 0.
        const double t_tpot = n > 1 ? (t_e2e - t_ttft) / (n - 1) : 0.0;
        ttft.push_back(t_ttft);
        e2e.push_back(t_e2e);
        if (n > 1) tpot.push_back(t_tpot);
        for (std::size_t k = 1; k < r.token_s.size(); ++k) itl.push_back(r.token_s[k] - r.token_s[k - 1]);
        if ((slo.ttft_s == 0 || t_ttft <= slo.ttft_s) && (slo.tpot_s == 0 || t_tpot <= slo.tpot_s)) ++good;

        first_arrival = std::min(first_arrival, r.request.arrival_s);
        last_token = std::max(last_token, r.token_s.back());
        ++m.completed;
        m.output_tokens += n;
    }
    m.ttft_s = stats_of(std::move(ttft));
    m.tpot_s = stats_of(std::move(tpot));
    m.itl_s = stats_of(std::move(itl));
    m.e2e_s = stats_of(std::move(e2e));
    m.duration_s = last_token - first_arrival;
    if (m.duration_s > 0) {
        m.output_tokens_per_s = m.output_tokens / m.duration_s;
        m.requests_per_s = m.completed / m.duration_s;
        if (slo.any()) m.goodput_requests_per_s = good / m.duration_s;
    }
    return m;
}

nlohmann::json to_json(const Stats& s) {
    const bool some = s.count > 0;
    return {{"mean", or_null(s.mean, some)}, {"p50", or_null(s.p50, some)}, {"p90", or_null(s.p90, some)},
            {"p99", or_null(s.p99, some)},   {"max", or_null(s.max, some)}, {"count", s.count}};
}

nlohmann::json to_json(const Metrics& m) {
    const bool timed = m.duration_s > 0;
    return {
        {"completed", m.completed},
        {"output_tokens", m.output_tokens},
        {"duration_s", m.duration_s},
        {"output_tokens_per_s", or_null(m.output_tokens_per_s, timed)},
        {"requests_per_s", or_null(m.requests_per_s, timed)},
        {"ttft_s", to_json(m.ttft_s)},
        {"tpot_s", to_json(m.tpot_s)},
        {"itl_s", to_json(m.itl_s)},
        {"e2e_s", to_json(m.e2e_s)},
        {"slo",
         {{"ttft_s", or_null(m.slo.ttft_s, m.slo.ttft_s > 0)}, {"tpot_s", or_null(m.slo.tpot_s, m.slo.tpot_s > 0)}}},
        {"goodput_requests_per_s", or_null(m.goodput_requests_per_s, timed && m.slo.any())}};
}

std::string describe(const Metrics& m) {
    std::string out;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%d requests, %d output tokens in %.3f s (first arrival to last token): %.2f requests/s, "
                  "%.1f output tokens/s\n",
                  m.completed, m.output_tokens, m.duration_s, m.requests_per_s, m.output_tokens_per_s);
    out += buf;
    std::snprintf(buf, sizeof buf, "%-6s %10s %10s %10s %10s %10s %7s\n", "ms", "mean", "p50", "p90", "p99", "max",
                  "count");
    out += buf;
    const auto line = [&](const char* name, const Stats& s) {
        std::snprintf(buf, sizeof buf, "%-6s %10.2f %10.2f %10.2f %10.2f %10.2f %7d\n", name, 1e3 * s.mean, 1e3 * s.p50,
                      1e3 * s.p90, 1e3 * s.p99, 1e3 * s.max, s.count);
        out += buf;
    };
    line("TTFT", m.ttft_s);
    line("TPOT", m.tpot_s);
    line("ITL", m.itl_s);
    line("E2E", m.e2e_s);
    if (m.slo.any()) {
        std::string bounds;
        const auto bound = [&](const char* name, double s) {
            if (s <= 0) return;
            char b[64];
            std::snprintf(b, sizeof b, "%s%s <= %g ms", bounds.empty() ? "" : ", ", name, 1e3 * s);
            bounds += b;
        };
        bound("TTFT", m.slo.ttft_s);
        bound("TPOT", m.slo.tpot_s);
        std::snprintf(buf, sizeof buf, "goodput %.2f requests/s (%s)\n", m.goodput_requests_per_s, bounds.c_str());
        out += buf;
    }
    return out;
}

RequestPath request_path(const Timeline& t, int id) {
    if (id < 0 || std::size_t(id) >= t.requests.size())
        throw std::invalid_argument("request_path: id = " + std::to_string(id) + " is not a request of the timeline (" +
                                    std::to_string(t.requests.size()) + " requests)");
    RequestPath p;
    for (std::size_t i = 0; i < t.steps.size(); ++i)
        for (const BatchItem& item : t.steps[i].step.items)
            if (item.request == id && item.prefill) {
                if (p.admitted_step == 0) p.admitted_step = int(i) + 1;
                ++p.prefill_steps;
            }
    const Timeline::RequestRecord& r = t.requests[std::size_t(id)];
    if (!r.token_s.empty()) p.ttft_s = r.token_s.front() - r.request.arrival_s;
    return p;
}

// [cache_stats]
CacheStats cache_stats(const Timeline& t, int block_size, long long slot_positions) {
    CacheStats c;
    double used_time = 0, reserved_time = 0;
    for (const Timeline::StepRecord& s : t.steps) {
        const long long reserved = block_size > 0 ? s.kv_blocks * block_size : s.running * slot_positions;
        const double dt = s.end_s - s.start_s;
        used_time += dt * static_cast<double>(s.kv_used);
        reserved_time += dt * static_cast<double>(reserved);
        c.running_max = std::max<long long>(c.running_max, s.running);
        c.used_max = std::max(c.used_max, s.kv_used);
        c.reserved_max = std::max(c.reserved_max, reserved);
        for (const BatchItem& i : s.step.items) c.prefill_tokens += i.prefill ? i.tokens : 0;
    }
    c.waste = reserved_time > 0 ? 1 - used_time / reserved_time : 0;
    for (const Timeline::RequestRecord& r : t.requests) {
        c.prompt_tokens += r.request.prompt_tokens;
        c.prefix_hits += r.prefix_hit;
    }
    return c;
}
// [cache_stats]

nlohmann::json to_json(const CacheStats& c) {
    return {{"running_max", c.running_max},
            {"used_max", c.used_max},
            {"reserved_max", c.reserved_max},
            {"waste", c.waste},
            {"prefill_tokens", c.prefill_tokens},
            {"prompt_tokens", c.prompt_tokens},
            {"prefix_hits", c.prefix_hits},
            {"prefix_hit_rate", c.prompt_tokens > 0 ? double(c.prefix_hits) / double(c.prompt_tokens) : 0.0}};
}

}  // namespace pd::serving
