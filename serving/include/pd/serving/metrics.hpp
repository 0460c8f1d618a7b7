/// @file metrics.hpp
/// @brief Chapter 05's serving metrics with the definitions of vLLM's serving benchmark
/// (`benchmark_serving.py`): TTFT, TPOT, ITL and E2E latency, throughput and goodput, computed
/// from a Timeline alone (the executor's step times, not the host's clock).
#pragma once

#include "pd/serving/types.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pd::serving {

/// Summary of a set of values: mean, linear-interpolated percentiles (pd::percentile, numpy's
/// default, as vLLM reports them) and maximum. All zero with count 0 for no values.
struct Stats {
    double mean = 0;  ///< arithmetic mean
    double p50 = 0;   ///< median
    double p90 = 0;   ///< 90th percentile
    double p99 = 0;   ///< 99th percentile
    double max = 0;   ///< largest value
    int count = 0;    ///< number of values
};

/// The statistics of @p values.
/// @param values any order; taken by value because the percentiles sort it
/// @return mean, p50, p90, p99, max and count; all zero for an empty set
Stats stats_of(std::vector<double> values);

/// Service-level objectives for goodput; 0 leaves a bound out.
struct Slo {
    double ttft_s = 0;  ///< largest acceptable time to first token, seconds (0: no bound)
    double tpot_s = 0;  ///< largest acceptable time per output token, seconds (0: no bound)
    /// True when at least one bound is set (goodput is then defined).
    bool any() const { return ttft_s > 0 || tpot_s > 0; }
};

/// A run's serving metrics. Per request, with t_a its arrival and t_1 .. t_n its n token times:
/// TTFT = t_1 - t_a; E2E = t_n - t_a; TPOT = (E2E - TTFT) / (n - 1), for n > 1 only; ITL = every
/// gap t_(k+1) - t_k. TTFT, TPOT and E2E are summarized over requests, ITL over all gaps of all
/// requests pooled (so long outputs weigh more in ITL than in TPOT).
struct Metrics {
    Stats ttft_s;  ///< time to first token, seconds
    Stats tpot_s;  ///< time per output token after the first, seconds (requests with n > 1)
    Stats itl_s;   ///< inter-token latency, seconds (every gap, pooled)
    Stats e2e_s;   ///< end-to-end latency, seconds
    /// From the first arrival to the last token, seconds. vLLM measures from the benchmark's
    /// start to its end on the client's clock; on a timeline the run starts with the first
    /// arrival and ends with the last token, so this is the same span without the client.
    double duration_s = 0;
    double output_tokens_per_s = 0;  ///< output_tokens / duration_s (0 for a zero duration)
    double requests_per_s = 0;       ///< completed / duration_s (0 for a zero duration)
    int completed = 0;               ///< requests in the timeline, less the cancelled (chapter 13)
    int output_tokens = 0;           ///< output tokens of all requests
    /// Requests meeting every bound of @ref slo, per second of duration_s (as vLLM's
    /// `--goodput`: a request counts when TTFT <= slo.ttft_s and TPOT <= slo.tpot_s, a
    /// single-token request's TPOT taken as 0); 0 when no SLO is set.
    double goodput_requests_per_s = 0;
    Slo slo;  ///< the objectives the goodput was computed for
};

/// Computes the metrics of a run from its timeline.
/// @param timeline the run; only its requests' arrivals and token times are read
/// @param slo the bounds for goodput (default: none, goodput 0)
/// @return the metrics; every field zero for a timeline without requests
/// @throws std::invalid_argument naming the request when its number of token times differs from
///         its output tokens, a time is not finite, its first token precedes its arrival or its
///         token times decrease; or for a negative or non-finite SLO bound
Metrics compute_metrics(const Timeline& timeline, const Slo& slo = {});

/// The JSON of @p s: {"mean", "p50", "p90", "p99", "max", "count"}, the values null for an
/// empty set.
/// @param s statistics
/// @return a JSON object
nlohmann::json to_json(const Stats& s);

/// The JSON of @p m: "completed", "output_tokens", "duration_s", "output_tokens_per_s",
/// "requests_per_s", "ttft_s", "tpot_s", "itl_s", "e2e_s" (each to_json(Stats), in seconds),
/// "slo" {"ttft_s", "tpot_s"} and "goodput_requests_per_s". A bound not set, the goodput
/// without an SLO and the rates of a zero duration are null.
/// @param m metrics
/// @return a JSON object
nlohmann::json to_json(const Metrics& m);

/// A few lines of text: the counts and throughput, then a table of TTFT, TPOT, ITL and E2E
/// (mean, p50, p90, p99, max, in milliseconds), then the goodput when an SLO is set.
/// @param m metrics
/// @return the text, each line ending with a newline
std::string describe(const Metrics& m);

/// One request's way through a run (chapter 05's long prompt, lab 05's questions).
struct RequestPath {
    int admitted_step = 0;  ///< the first step that ran its prompt, counting from 1 (0: none did)
    int prefill_steps = 0;  ///< steps that ran some of its prompt (a recomputation's included)
    double ttft_s = 0;      ///< its first token - its arrival (0 without a token)
};

/// The way of request @p id through @p t.
/// @throws std::invalid_argument when @p t has no request @p id
RequestPath request_path(const Timeline& t, int id);

/// How a run used its KV cache (chapters 05 and 06), from the timeline's step records.
struct CacheStats {
    long long running_max = 0;   ///< the most requests holding cache at once
    long long used_max = 0;      ///< the most positions holding K and V at once
    long long reserved_max = 0;  ///< the most positions reserved at once (slots, or whole blocks)
    /// 1 - used / reserved over the run, each weighted by its step's time: the share of the
    /// reserved memory that held nothing.
    double waste = 0;
    long long prefill_tokens = 0;  ///< prompt positions computed (prefill items, recomputations included)
    long long prompt_tokens = 0;   ///< the requests' prompt positions
    long long prefix_hits = 0;     ///< prompt positions found in the prefix cache instead of computed
};

/// The cache statistics of @p t: reserved is blocks x @p block_size for a paged cache
/// (block_size > 0), else the running requests x @p slot_positions (a slot per request).
/// @param t the timeline  @param block_size the paged cache's block size (0: slots)
/// @param slot_positions positions of one slot (slots)
CacheStats cache_stats(const Timeline& t, int block_size, long long slot_positions);

/// The statistics as JSON: running_max, used_max, reserved_max, waste, prefill_tokens,
/// prompt_tokens, prefix_hits, prefix_hit_rate.
/// @param c the statistics
nlohmann::json to_json(const CacheStats& c);

}  // namespace pd::serving
