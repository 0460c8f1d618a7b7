/// @file report.hpp
/// @brief What chapters 05 and 06 report of a replay, written once: a run's latencies,
/// throughput and preemptions as a row of the chapter's table and JSON.
#pragma once

#include "pd/report.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/types.hpp"

#include <string>

namespace pd::serving {

/// A replay's row: kernel @p name (a policy, a cache setup), passed (run_engine checked the
/// scheduler's invariants after every step), and in its point: steps, preemptions,
/// ttft_p50_ms, ttft_p99_ms, tpot_mean_ms, itl_p50_ms, itl_p99_ms, itl_max_ms, e2e_p50_s,
/// output_tokens_per_s, requests_per_s, longest_step_ms (what a stream may wait between two
/// tokens). @param name the row's name  @param t the timeline  @param m its metrics
Row replay_row(const std::string& name, const Timeline& t, const Metrics& m);

}  // namespace pd::serving
