// Chapter 12: what the lesson (main.cu) and its problem (problem.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model/model.hpp"

#include <string>
#include <vector>

namespace ch12 {

namespace md = pd::model;
using pd::DType;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny";  // seconds on a CPU
    std::vector<int> batches{1, 2, 4};
    int context = 16;
#else
    std::string preset = "tinyllama-1.1b";  // the GPU: a small model, whose decode step is launch-bound
    std::vector<int> batches{1, 2, 4, 8, 16, 32, 64};
    int context = 512;
#endif
    std::string kv_dtype = "bf16";
    double launch_us = 5.0;  // the simulator's modelled host cost of one launch
};

/// The two ways a decode step runs: the chapter's "versions".
inline const std::vector<pd::Version>& versions() {
    static const std::vector<pd::Version> list = {
        {"eager", {DType::fp32, DType::bf16}, pd::Units::simt, "each kernel of the step launched by the host"},
        {"graph",
         {DType::fp32, DType::bf16},
         pd::Units::simt,
         "the step captured once per batch bucket, replayed by one launch"},
    };
    return list;
}

// problem.cu
/// Registers the chapter's options on @p bench, into @p o, beside the harness's own.
void add_options(pd::Bench& bench, Options& o);
/// The model's options for the run (every batch in one model of the largest, its buckets' graphs),
/// after the checks between the options and the check that the model and the run fit.
md::ModelOptions model_options(pd::Bench& bench, Options& o, const pd::ModelConfig& config);

}  // namespace ch12
