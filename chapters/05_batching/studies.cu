// Chapter 05's further studies: the long-prompt scenario (on the model, and the long prompt's own path),
// what the slots of a contiguous cache waste, and --find-capacity. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/model/executor.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/workload.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace ch05 {

namespace md = pd::model;
using pd::fmt;

/// The long-prompt scenario on the model executor's scale.
std::vector<sv::Request> long_prompt_on_model(const pd::ModelConfig& m) {
    // On the simulator, at its scale: 16 streams of 4-token prompts generating 24 tokens
    // each, then a 192-token prompt arriving while they decode. On a GPU, the scenario's
    // real prompt (50,000 tokens, or as many as the model's positions hold): the prompt's
    // attention is chapter 07's flash attention, so no buffer grows with its square.
    const int long_output = 4;
    if (std::string_view(pd::backend_name()) == "sim")
        return sv::long_prompt_scenario(16, std::min(192, m.max_seq - long_output), 1e-6, 4,
                                        std::min(24, m.max_seq / 4), long_output);
    return sv::long_prompt_scenario(16, std::min(50000, m.max_seq - 16));  // the cost model's lengths
}

// [ch05_capacity]
/// Serving capacity (Sarathi-Serve's definition): the highest request rate whose p99 ITL stays
/// within the SLO while the median wait stays below 2 s (without that bound an overloaded
/// queue would pass: the wait shows in TTFT, not in ITL; the median TTFT stands for the
/// scheduling delay here), by bisection on the rate of the same seeded workload, each run at
/// least two minutes of arrivals long.
double find_capacity(const Options& o, sv::Policy p, long long kv, const sv::CostModelConfig& cost, pd::Bench& bench) {
    const double slo = o.slo_tpot_ms * 1e-3;
    const auto ok = [&](double rate) {
        Options steady = o;  // at least two minutes of arrivals, so that an overloaded queue has time to grow
        steady.s.w.requests = std::max(o.s.w.requests, static_cast<int>(std::ceil(rate * 120)));
        const std::vector<sv::Request> requests = make_workload(steady, rate, bench.options.seed);
        const sv::Metrics m = sv::compute_metrics(md::replay(o.s, bench, cost, scheduler_config(o, p, kv), requests));
        return m.itl_s.p99 <= slo && m.ttft_s.p50 <= 2.0;
    };
    double lo = 0, hi = 0.25;
    while (ok(hi) && hi < 4096) {
        lo = hi;
        hi *= 2;
    }
    for (int i = 0; i < 12; ++i) {
        const double mid = (lo + hi) / 2;
        (ok(mid) ? lo : hi) = mid;
    }
    return lo;
}
// [ch05_capacity]

/// Into @p row: the cache as slots (each running request reserves one of @p slot_len positions) over
/// @p t, and the path of @p long_request (the long-prompt scenario's last, or none).
void add_slots_and_long_prompt(pd::Row& row, const sv::Timeline& t, long long slot_len,
                               const sv::Request* long_request) {
    const sv::CacheStats cache = sv::cache_stats(t, 0, slot_len);  // each running request reserves a slot
    row.point.update({{"running_peak", cache.running_max},
                      {"kv_used_peak", cache.used_max},
                      {"kv_reserved_peak", cache.reserved_max},
                      {"kv_unused_share", cache.waste}});
    if (long_request) {
        const sv::RequestPath path = sv::request_path(t, long_request->id);
        row.point.update({{"long_admitted_step", path.admitted_step},
                          {"long_prefill_steps", path.prefill_steps},
                          {"long_ttft_s", path.ttft_s}});
    }
}

/// The path of @p long_request (the long-prompt scenario's last, or none) under each policy, and
/// the cache as slots of @p slot_len.
void print_long_prompt_and_slots(pd::Bench& bench, const std::vector<pd::Row>& rows, const sv::Request* long_request,
                                 long long slot_len, double kv_per_token) {
    std::ostream& out = bench.out();
    using C = pd::Column;
    const C policy = C::name("policy");
    if (long_request) {
        const sv::Request& r = *long_request;
        out << "\nthe long prompt (request " << r.id << ": " << r.prompt_tokens << " tokens, arriving at "
            << fmt("%g", r.arrival_s) << " s):\n"
            << pd::render(rows, {policy, C::point("admitted at step", "long_admitted_step"),
                                 C::point("prefill steps", "long_prefill_steps"), C::point("TTFT s", "long_ttft_s")})
            << "admitted at step: the first step that runs its prompt (counting from 1); TTFT: its own.\n";
    }
    out << "\nthe cache as slots of " << slot_len << " positions (" << pd::format_bytes(slot_len * kv_per_token)
        << ") per running request:\n"
        << pd::render(rows, {policy, C::point("running max", "running_peak"), C::point("used max", "kv_used_peak"),
                             C::point("reserved max", "kv_reserved_peak"), C::percent("unused", "kv_unused_share")})
        << "used: positions holding K and V; reserved: running requests x slot; unused: 1 - used / reserved "
           "over the run, weighted by step time (what chapter 06's paged cache gives back).\n";
}

}  // namespace ch05
