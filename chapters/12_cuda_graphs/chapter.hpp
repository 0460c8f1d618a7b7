// Chapter 12: what the lesson (main.cu), its problem (problem.cu) and its second experiment (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model/model.hpp"

#include <cstdint>
#include <functional>
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
#if defined(PD_BACKEND_SIM)
    std::vector<int> prefill_lens{64};
#else
    std::vector<int> prefill_lens{512, 2048};  // TinyLlama holds 2,048 positions (llama-3-8b: 512,4096)
#endif
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

// main.cu
/// The host's time to issue @p step (the call returns before the GPU is done), averaged over
/// --iters calls, each after the GPU is idle, in microseconds.
double host_us(pd::Bench& bench, const std::function<void()>& step);
/// The simulator's modelled times of a row: the host's @p launches at --launch-us each, the GPU's
/// floor (--gpu's roofline) plus the profiler's 2 us to start each of the row's kernels, and the
/// step, the longer of the two (into @p k's point: host_us, modelled_floor_us, modelled_gpu_us,
/// modelled_step_us). @param gpu_name the --gpu preset
void model_times(pd::Kernel& k, const Options& o, int launches, const std::string& gpu_name);
/// The columns of a table of steps: @p leading, then the kernels and launches, then the
/// measured (GPU) or modelled (simulator) times and the status.
std::vector<pd::Column> step_columns(const pd::Bench& bench, std::vector<pd::Column> leading);

// problem.cu
/// Registers the chapter's options on @p bench, into @p o, beside the harness's own.
void add_options(pd::Bench& bench, Options& o);
/// The model's options for the run (every batch in one model of the largest, its buckets' graphs),
/// after the checks between the options and the check that the model and the run fit.
md::ModelOptions model_options(pd::Bench& bench, Options& o, const pd::ModelConfig& config);

// studies.cu
/// A prompt of each of --prefill-lens, eager and replayed from a graph captured for it alone (in
/// slot 0, after the decode steps): checked bit for bit, then on a GPU timed; its rows printed.
/// @return the rows
std::vector<pd::Row> prefill_comparison(pd::Bench& bench, const Options& o, md::Model& m);

}  // namespace ch12
