// Chapter 11: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/serving/disaggregation.hpp"
#include "pd/serving/options.hpp"
#include "pd/serving/review.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace ch11 {

namespace sv = pd::serving;

/// The options, the real transfer's defaults per backend.
struct Options {
    std::string preset = "llama-2-13b", gpu = "H100-SXM";
    int gpus = 4;
    std::string link = "nvlink", slow_link = "eth-25g";
    bool layerwise = false;
    sv::WorkloadOptions w;
    double slo_ttft_ms = 200, slo_tpot_ms = 40, target = 0.9;
    int max_seqs = 128;
    std::vector<int> budgets = {256, 512, 1024, 2048, 4096};
    std::vector<int> tps = {1, 2};
    bool review = false;
    std::string policy = "chunked";
    int tp = 1, token_budget = 512;
    double price = 2.0;
    // the real transfer
#if defined(PD_BACKEND_SIM)
    std::string transfer_preset = "tiny";  // seconds on a CPU
    int transfer_prompts = 3, transfer_prompt_len = 24, transfer_gen = 8;
#else
    std::string transfer_preset = "llama-3-8b";  // 1 GiB of K and V in fp32: the link, not the calls
    int transfer_prompts = 8, transfer_prompt_len = 512, transfer_gen = 16;
#endif
};

// problem.cu
/// The options: the cost model's model, GPUs and links, --dtype, the studies' options, then the real transfer's.
void add_options(pd::Bench& bench, Options& o);

// studies.cu
/// The options of the studies (--layerwise to --price), after --dtype.
void add_study_options(pd::Bench& bench, Options& o);
/// The rules between the options and the model @p model (exit code 2).
void check_problem(const Options& o, const pd::ModelConfig& model);
/// The cost model's replays, counted before any of them runs: the review's (its requests go into
/// @p in) or the placement searches'.
void require_replays(const Options& o, const sv::WorkloadSpec& w, sv::ReviewInput& in);
/// --review: the design review of the setup in @p in, printed, as JSON.
nlohmann::json design_review(pd::Bench& bench, const Options& o, const sv::ReviewInput& in);
/// What one prompt's cache costs on each link, beside its prefill on one instance, printed.
void link_table(std::ostream& out, const Options& o, const sv::Cluster& c);
/// The placement searches on --gpus GPUs, printed: the best setup of each kind (its rows are
/// returned), then each link's; @p placements gets every setup.
std::vector<pd::Row> setups_section(std::ostream& out, const Options& o, const sv::Cluster& c,
                                    const sv::WorkloadSpec& w, const sv::Slo& slo, const sv::LinkPreset& link,
                                    const sv::LinkPreset& slow, nlohmann::json& placements);

}  // namespace ch11
