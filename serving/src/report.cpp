// A replay's row (report.hpp).
#include "pd/serving/report.hpp"

#include <algorithm>

namespace pd::serving {

Row replay_row(const std::string& name, const Timeline& t, const Metrics& m) {
    double longest = 0;
    int preempted = 0;
    for (const auto& s : t.steps) longest = std::max(longest, s.end_s - s.start_s);
    for (const auto& r : t.requests) preempted += r.preemptions;
    Row row;
    row.result.kernel = name;
    row.result.passed = true;  // run_engine checked the invariants after every step
    row.point = {{"steps", t.steps.size()},
                 {"preemptions", preempted},
                 {"ttft_p50_ms", m.ttft_s.p50 * 1e3},
                 {"ttft_p99_ms", m.ttft_s.p99 * 1e3},
                 {"tpot_mean_ms", m.tpot_s.mean * 1e3},
                 {"itl_p50_ms", m.itl_s.p50 * 1e3},
                 {"itl_p99_ms", m.itl_s.p99 * 1e3},
                 {"itl_max_ms", m.itl_s.max * 1e3},
                 {"e2e_p50_s", m.e2e_s.p50},
                 {"output_tokens_per_s", m.output_tokens_per_s},
                 {"requests_per_s", m.requests_per_s},
                 {"longest_step_ms", longest * 1e3}};
    return row;
}

}  // namespace pd::serving
