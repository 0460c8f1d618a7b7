// Chapter 10: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/model/tensor_parallel.hpp"

#include <string>
#include <vector>

namespace ch10 {

namespace md = pd::model;

/// The options, their defaults per backend.
struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny-tp";  // 8 query and 8 KV heads: TP = 8 in seconds on a CPU
    md::PromptSpec p{.batch = 2, .length = 16, .gen = 8};
    double max_bytes = 4 << 20, factor = 8;  // CPU figures: a few sizes
#else
    std::string preset = "llama-3-8b";  // 32 query, 8 KV heads: TP up to 8
    md::PromptSpec p{.batch = 8, .length = 512, .gen = 32};
    double max_bytes = 1 << 30, factor = 2;  // nccl-tests' -b 8 -e 1G -f 2
#endif
    std::vector<int> tp;             // empty: 1, 2, 4, 8 up to the devices present
    std::string allreduce = "nccl";  // or lab 10's ring
    double min_bytes = 8;
    std::string gpu = "H100-SXM", cost_preset = "llama-3-70b";  // chapter 05's worked example
    int cost_tp = 8, cost_context = 1024;
};

// studies.cu
/// The options of the further studies (--min-bytes to --cost-context), after --allreduce.
void add_study_options(pd::Bench& bench, Options& o);
/// Throws std::invalid_argument naming --cost-preset and --cost-tp when a split of the cost
/// model's prediction does not divide the model.
void check_cost_splits(const Options& o);
/// The all-reduce benchmark's message sizes (--min-bytes, --max-bytes, --step-factor); throws
/// std::invalid_argument naming the options when no size is left.
std::vector<double> allreduce_sizes(const Options& o);
/// The cost model's communication share of a split's decode step (and on GPUs whether the measured
/// share is within 20% of it), into @p point.
void model_comm_share(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, int tp, int B, int context,
                      bool decoded, double comm_ms, double step_ms, nlohmann::json& point);
/// Lab 10: the split's logits on the ring (@p g) against the same split on NCCL's all-reduce.
nlohmann::json ring_vs_nccl(pd::Bench& bench, const pd::ModelConfig& config, const md::ModelOptions& mo, int tp,
                            const std::vector<int>& prompt, int P, int G, const md::Generation& g);
/// Lab 10 (--allreduce ring): prints each split's ring logits against NCCL's.
void print_ring_vs_nccl(pd::Bench& bench, const std::vector<pd::Row>& rows);
/// nccl-tests' all-reduce table (on GPUs with the alpha-beta fit) when there is one to run (more
/// than one rank, timing), as JSON, else null.
nlohmann::json allreduce_benchmark(pd::Bench& bench, const Options& o, int ranks, const std::vector<double>& sizes,
                                   bool& passed);
/// The cost model's communication share of a decode step and memory per GPU, printed, as JSON.
nlohmann::json cost_model_shares(pd::Bench& bench, const Options& o);

}  // namespace ch10
