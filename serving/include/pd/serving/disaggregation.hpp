/// @file disaggregation.hpp
/// @brief Chapter 11: serving setups on a number of GPUs, aggregated (every GPU prefills and
/// decodes, chapters 05 and 06) or disaggregated (a prefill pool and a decode pool, each
/// request's KV cache moved between them over a link), replayed with the cost model; SLO
/// attainment, per-GPU capacity at 90% attainment (DistServe), and the placement searches.
/// Host C++ with no backend.
///
/// How a setup serves a workload (serve()):
///  - **aggregated**: pool.gpus / pool.tp instances, each a Scheduler (chapter 05's policies)
///    with the cost model of pool.tp GPUs; requests go to the instances in turn (request i to
///    instance i mod n).
///  - **disaggregated**: prefill.gpus / prefill.tp prefill instances run whole prompts
///    (chapter 05's continuous policy on requests of one output token); when a prompt is done
///    its K and V (the cost model's bytes per element x 2 L Hkv d per prompt token) cross the
///    link of its prefill instance, scheduled by schedule_transfers() (lab 11): each of the
///    instance's tp GPUs sends its share of the heads over a link of its own, so an instance's
///    link carries tp x the preset's bandwidth. The request then joins a decode instance (in
///    turn, in order of arrival of its cache), which admits it, first come first served, while
///    a batch slot is free and its prompt and output fit in the cache beside the others'
///    (reserved whole, so no decode is ever preempted), and decodes every admitted request one
///    token per step. The first token leaves with the cache: TTFT includes the transfer.
///
/// Not modelled: a prefill instance keeping a request's cache until the decode pool takes it
/// (its memory is not charged), and the decode pool's back-pressure on the prefill pool.
#pragma once

#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/kv_transfer.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/workload.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pd::serving {

/// A link between a prefill GPU and a decode GPU.
struct LinkPreset {
    std::string name;        ///< as `--link` takes it
    double bytes_per_s = 0;  ///< one direction, per GPU
    double latency_s = 0;    ///< fixed cost of one transfer
    std::string source;      ///< where the figures come from
};

/// The links: nvlink, pcie5, ib-ndr and eth-25g.
const std::vector<LinkPreset>& link_presets();
/// The link named @p name (nullopt for none).
std::optional<LinkPreset> find_link(std::string_view name);

/// One pool of GPUs (or the whole setup, aggregated).
struct Pool {
    int gpus = 1;                 ///< GPUs of the pool (a multiple of tp)
    int tp = 1;                   ///< tensor-parallel GPUs per instance
    int token_budget = 512;       ///< tokens per step of an instance
    int max_seqs = 128;           ///< requests an instance runs at once
    int block_size = 0;           ///< aggregated: > 0 for chapter 06's paged cache (SchedulerConfig::block_size)
    bool prefix_caching = false;  ///< aggregated, paged: chapter 06's prefix cache
    /// Aggregated: chapter 09's rule for the requests' drafts (SchedulerConfig::draft_limit).
    std::vector<int> draft_limit;
};

/// A serving setup.
struct Setup {
    bool disaggregated = false;       ///< prefill and decode pools, or one pool doing both
    Policy policy = Policy::chunked;  ///< aggregated: how steps are built
    Pool pool;                        ///< aggregated: the GPUs
    Pool prefill;                     ///< disaggregated: the prefill pool
    Pool decode;                      ///< disaggregated: the decode pool (its token_budget unused)
    LinkPreset link;                  ///< disaggregated: prefill to decode
    bool layerwise = false;           ///< disaggregated: the transfer overlaps the prefill, layer by layer
    /// The GPUs in all.
    int gpus() const { return disaggregated ? prefill.gpus + decode.gpus : pool.gpus; }
    /// "chunked, budget 512, 2 x TP 2" or "2P (TP 1) + 2D (TP 2), nvlink, layer-wise".
    std::string name() const;
};

/// What the GPUs are: the cost model (its machine is replaced by @ref gpu times each pool's TP).
struct Cluster {
    CostModelConfig cost;   ///< model, bytes, efficiencies, all-reduce figures
    roofline::GpuSpec gpu;  ///< one GPU
};

/// The cost model of an instance of @p tp GPUs of @p c.
CostModelConfig instance_cost(const Cluster& c, int tp);

/// One request's way through a disaggregated setup.
struct TransferRecord {
    int request = 0;              ///< Request::id
    int prefill_instance = 0;     ///< where its prompt ran (and the link it took)
    int decode_instance = -1;     ///< where it decoded (-1: one output token, no transfer)
    double prefill_start_s = 0;   ///< the step that finished its prompt began
    double prefill_end_s = 0;     ///< that step ended
    double transfer_start_s = 0;  ///< the link started on its cache
    double transfer_end_s = 0;    ///< its cache arrived: its first token leaves
    double first_decode_s = 0;    ///< its first decode step ended (its second token)
    double bytes = 0;             ///< its cache's bytes
};

/// A replay of a setup.
struct Served {
    /// Every request with its token times (the steps of all instances, for the cost split).
    Timeline timeline;
    std::vector<TransferRecord> transfers;  ///< disaggregated: by request id
    long long kv_capacity = 0;              ///< positions of one instance's cache (decode instances')
};

/// Replays @p requests (ids 0, 1, 2, ... in arrival order) on @p setup.
/// @throws std::invalid_argument naming the field of @p setup out of range (gpus not a multiple of
///         tp, a pool without GPUs), a model that leaves no room for a cache on a pool, or a
///         request that can never fit an instance's cache
Served serve(const std::vector<Request>& requests, const Setup& setup, const Cluster& cluster);

/// The share of @p t's requests meeting every bound of @p slo (as vLLM's goodput counts them:
/// TTFT <= slo.ttft_s and TPOT <= slo.tpot_s, a single-token request's TPOT taken as 0); 0 for
/// no requests.
double slo_attainment(const Timeline& t, const Slo& slo);

/// The highest rate at which a setup meets its SLOs for enough requests.
struct Capacity {
    double rate = 0;        ///< requests per second (0: not even the lowest rate tried)
    double per_gpu = 0;     ///< rate / GPUs: DistServe's per-GPU goodput
    double attainment = 0;  ///< at that rate
    int replays = 0;        ///< rates tried
};

/// The knee of @p attainment_at (rate -> share of requests meeting the SLOs): the highest rate
/// whose attainment is >= @p target, by doubling from @p first until it fails (or reaches
/// @p max_rate), then @p steps bisections. Assumes attainment falls with the rate.
/// @param attainment_at replays the setup at a rate and returns its SLO attainment
/// @param gpus the setup's GPUs (for per_gpu)  @param target the attainment to meet (DistServe: 0.9)
/// @param first the first rate tried  @param max_rate the highest rate tried
/// @param steps bisections after the doubling
Capacity find_capacity(const std::function<double(double)>& attainment_at, int gpus, double target = 0.9,
                       double first = 0.25, double max_rate = 4096, int steps = 10);

/// The workload at @p rate: @p base's lengths and seed, with at least base.requests requests and
/// enough for @p seconds of arrivals (at most 4,000).
std::vector<Request> workload_at(const WorkloadSpec& base, double rate, double seconds = 30);

/// find_capacity() of @p setup on @p base's workload at each rate.
Capacity capacity_of(const Setup& setup, const Cluster& cluster, const WorkloadSpec& base, const Slo& slo,
                     double target = 0.9);

/// One setup of a search with its capacity.
struct Placement {
    Setup setup;        ///< what was replayed
    Capacity capacity;  ///< its knee
    bool fits = true;   ///< false: the weights leave no room for a cache (not replayed)
};

/// The cost model's work of replaying @p requests requests of @p prompt and @p output tokens
/// under a token budget of @p budget, in request-steps: a request takes part in about output +
/// ceil(prompt / budget) steps, and each step costs the scheduler and the cost model about the
/// same per request in it (what pd::kCostModelBudget is checked against).
/// @param requests requests replayed  @param prompt their mean prompt  @param output their mean
/// output  @param budget the token budget of a step
double replay_work(double requests, double prompt, double output, int budget);

/// The work of search_aggregated() on @p policies x @p budgets x @p tps and of
/// search_disaggregated() with @p token_budget over @p links links, on @p base's workload:
/// every setup's find_capacity() replays it at most 25 times (14 doublings from 0.25 to 4,096
/// requests/s and 10 bisections) with up to max(base.requests, 4,000) requests (workload_at()).
/// @param gpus the GPUs  @param policies the policies searched  @param budgets their budgets
/// @param tps the TPs searched  @param token_budget the disaggregated pools' budget
/// @param links how many links are searched  @param base the workload
double search_work(int gpus, const std::vector<Policy>& policies, const std::vector<int>& budgets,
                   const std::vector<int>& tps, int token_budget, int links, const WorkloadSpec& base);

/// Every aggregated setup of @p gpus GPUs with a policy of @p policies, a budget of @p budgets
/// and a TP of @p tps dividing @p gpus, each with its capacity, best first.
std::vector<Placement> search_aggregated(int gpus, const std::vector<Policy>& policies, const std::vector<int>& budgets,
                                         const std::vector<int>& tps, int max_seqs, const Cluster& cluster,
                                         const WorkloadSpec& base, const Slo& slo);

/// Every split of @p gpus GPUs into a prefill pool of p >= 1 and a decode pool of gpus - p >= 1,
/// each with a TP of @p tps dividing its GPUs, over @p link, each with its capacity, best first.
std::vector<Placement> search_disaggregated(int gpus, const std::vector<int>& tps, int token_budget, int max_seqs,
                                            const LinkPreset& link, bool layerwise, const Cluster& cluster,
                                            const WorkloadSpec& base, const Slo& slo);

/// The JSON of a placement: setup (name, disaggregated, gpus, policy or pools, link), fits,
/// rate, per_gpu, attainment.
nlohmann::json to_json(const Placement& p);

}  // namespace pd::serving
