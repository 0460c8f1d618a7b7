// Chapter 06: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model/attention_bench.hpp"
#include "pd/model_config.hpp"
#include "pd/serving/options.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ch06 {

namespace sv = pd::serving;
namespace md = pd::model;
namespace at = pd::kernels::attention;

struct Options {
    sv::ServingOptions s;  // the executor, the policy, the model, the workload, the scheduler's limits
    std::string kv = "both";
    int block_size = 16;
    double kv_memory_gib = 16;
    bool prefix_cache = false;
    md::AttentionBenchOptions attn;  // --attn-batch, --attn-context
};

// studies.cu
/// --executor model: its defaults (on the simulator, sized for seconds) for the options not given.
void model_defaults(Options& o, const CLI::App& app);
/// --executor model: into @p row, the share of requests generating the first setup's tokens; false if that fails it.
bool same_tokens(const pd::Bench& bench, const Options& o, const std::vector<std::vector<int>>& tokens,
                 std::vector<std::vector<int>>& first_tokens, pd::Row& row);
/// Decode attention on one layer's cache: every selected paged version against chapter 04's contiguous v4.
std::vector<pd::Row> attention_rows(pd::Bench& bench, const Options& o, const pd::ModelConfig& model);

}  // namespace ch06
