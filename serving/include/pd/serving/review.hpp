/// @file review.hpp
/// @brief Chapter 11's design review of a serving setup: given a model, GPUs, a workload and
/// SLOs, what the complaint is, what the workload asks for, which work binds, which remedy of
/// chapters 00 to 11 moves it (each predicted by replaying the workload with the cost model),
/// and what a million prompt and generated tokens cost. Host C++ with no backend.
///
/// The order is a reviewer's:
///  1. **the complaint**, the first that holds of: out of memory (the weights leave no room
///     for a cache, or the cache preempts or runs over 95% full); low throughput (the queue
///     grows: the last quarter of the requests waits longer for its first token than the first
///     quarter, by more than the TTFT bound); slow first token (p90 TTFT over
///     the SLO); slow streaming (p90 TPOT over the SLO); none;
///  2. **the workload**: the offered rate, prompt and generated tokens per second, the mean
///     context a decode attends to;
///  3. **what binds**: each step's time goes to the roofline term that sets it (compute: the
///     dense GEMMs and attention, by their FLOPs; memory: weight reads and KV reads, by their
///     bytes), its all-reduces to communication; the shares of the busy time, the cache's peak
///     use and preemptions;
///  4. **the remedies**, each a change of the setup replayed on the same workload and ranked by
///     goodput (vLLM's: requests per second meeting both SLOs, in steps of 1% of the offered
///     rate), then by the complaint's metric (p90 TPOT for slow streaming, memory per GPU for
///     out of memory, p90 TTFT otherwise);
///  5. **the cost** per million prompt and generated tokens at a price per GPU-hour: the run's
///     GPU-hours (every GPU, first arrival to last token) split between prefill and decode as
///     their work splits each step's time (a mixed step's time in proportion to the cost
///     model's times for its prefill items alone and its decode items alone).
#pragma once

#include "pd/serving/disaggregation.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pd::serving {

/// What the review is asked about.
struct ReviewInput {
    Cluster cluster;                ///< the model, the cost model's settings and the GPU
    Setup setup;                    ///< the setup as served (aggregated)
    std::vector<Request> requests;  ///< the workload, ids 0, 1, 2, ... in arrival order
    Slo slo;                        ///< both bounds set
    double usd_per_gpu_hour = 2;    ///< the price of one GPU for one hour
    LinkPreset link;                ///< the link a disaggregated setup would use
};

/// What a setup does with the workload.
struct Outcome {
    bool fits = true;           ///< false: the weights leave no room for a cache
    double ttft_p90_s = 0;      ///< p90 time to first token
    double tpot_p90_s = 0;      ///< p90 time per output token
    double itl_p90_s = 0;       ///< p90 inter-token latency
    double goodput_rps = 0;     ///< requests per second meeting both SLOs (vLLM's goodput)
    double attainment = 0;      ///< the share of requests meeting both
    double requests_per_s = 0;  ///< completed requests per second
    /// The last quarter of the arrivals' mean TTFT less the first quarter's: how much the queue
    /// grew over the run.
    double wait_growth_s = 0;
    int preemptions = 0;              ///< of all requests
    double kv_peak_share = 0;         ///< the busiest instance's peak cache use over its capacity
    double memory_per_gpu_bytes = 0;  ///< weights / TP plus the peak cache / TP
};

/// One remedy and what the cost model predicts it does.
struct Remedy {
    std::string name;     ///< "8-bit weights and cache"
    std::string chapter;  ///< the chapter that teaches it: "08"
    std::string change;   ///< what was changed: "weights 1 byte, cache 1 byte"
    Setup setup;          ///< the setup replayed
    Outcome outcome;      ///< its prediction
};

/// Where the busy time went, as shares (summing to 1 when anything ran).
struct WorkShares {
    double dense = 0;      ///< compute-bound steps' GEMMs
    double attention = 0;  ///< compute-bound steps' attention
    double weights = 0;    ///< memory-bound steps' weight reads
    double kv = 0;         ///< memory-bound steps' KV reads and writes
    double comm = 0;       ///< tensor-parallel all-reduces
};

/// The review.
struct Review {
    std::string complaint;   ///< "out of memory", "low throughput", "slow first token", "slow streaming" or "none"
    std::string why;         ///< the numbers behind it
    double offered_rps = 0;  ///< requests / their arrival span
    double prompt_tokens_per_s = 0;  ///< offered prompt tokens per second
    double output_tokens_per_s = 0;  ///< offered generated tokens per second
    double mean_prompt = 0;          ///< tokens
    double mean_output = 0;          ///< tokens
    double mean_context = 0;         ///< the mean context a decode step attends to
    WorkShares work;                 ///< what the busy time went to
    std::string binds;  ///< the binding work: "compute (dense GEMMs)", "weight reads", "KV reads", "KV capacity", ...
    Outcome baseline;   ///< the setup as served
    std::vector<Remedy> remedies;  ///< ranked, best first
    double usd_per_m_prompt = 0;   ///< per million prompt tokens
    double usd_per_m_output = 0;   ///< per million generated tokens
    double prefill_share = 0;      ///< of the GPU time, prefill's
};

/// The cost model's work of review() on @p in, in request-steps (replay_work()): the setup, each
/// remedy and every split of its GPUs for the disaggregation remedy, each replayed once on the
/// workload. What pd::kCostModelBudget is checked against before a review.
/// @param in what review() takes
double review_work(const ReviewInput& in);

/// Reviews @p in (see the file's description).
/// @throws std::invalid_argument for a setup that is not aggregated, an SLO without both
///         bounds, a price <= 0 or an empty workload
Review review(const ReviewInput& in);

/// The review as text, in the reviewer's order (five numbered parts and the remedies' table).
std::string describe(const Review& r, const ReviewInput& in);

/// The review as JSON with the same content: complaint, why, workload, work, binds, baseline,
/// remedies [...], cost.
nlohmann::json to_json(const Review& r, const ReviewInput& in);

}  // namespace pd::serving
