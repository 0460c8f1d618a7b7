// Chapter 05: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model_config.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/options.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/types.hpp"

#include <cstdint>
#include <vector>

namespace ch05 {

namespace sv = pd::serving;

struct Options {
    sv::ServingOptions s;       // the executor, the policy, the model, the workload, the scheduler's limits
    long long kv_capacity = 0;  // 0: what the GPUs' memory holds beside the weights
    double slo_ttft_ms = 0, slo_tpot_ms = 0;
    bool find_capacity = false;
};

// main.cu
/// The workload of the options: a trace file, the long-prompt scenario, or seeded arrivals at @p rate.
std::vector<sv::Request> make_workload(const Options& o, double rate, std::uint64_t seed);
/// One policy's scheduler: its limits from the options.
sv::SchedulerConfig scheduler_config(const Options& o, sv::Policy p, long long kv_capacity);

// studies.cu
/// The long-prompt scenario with --executor model: at the simulator's scale, or on a GPU at the model's positions.
std::vector<sv::Request> long_prompt_on_model(const pd::ModelConfig& m);
/// --find-capacity: the highest rate whose p99 ITL meets --slo-tpot-ms under policy @p p (bisection).
double find_capacity(const Options& o, sv::Policy p, long long kv, const sv::CostModelConfig& cost, pd::Bench& bench);
/// Into @p row: what slots of @p slot_len positions reserve over @p t, and the path of @p long_request (or none).
void add_slots_and_long_prompt(pd::Row& row, const sv::Timeline& t, long long slot_len,
                               const sv::Request* long_request);
/// The tables of the long prompt's path (when @p long_request) and of the cache as slots of @p slot_len.
void print_long_prompt_and_slots(pd::Bench& bench, const std::vector<pd::Row>& rows, const sv::Request* long_request,
                                 long long slot_len, double kv_per_token);

}  // namespace ch05
