// Chapter 04: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model/attention_bench.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"

#include <string>
#include <vector>

namespace ch04 {

namespace md = pd::model;
using pd::DType;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny";  // seconds on a CPU
    md::PromptSpec p{.batch = 2, .length = 16, .gen = 8};
    int sweep_max = 64;
#else
    std::string preset = "llama-3-8b";  // the GPU benchmark: a one-layer cache read of 512 MiB per step
    md::PromptSpec p{.batch = 1, .length = 512, .gen = 32};
    int sweep_max = 4096;
#endif
    std::string mode = "both", kv_dtype = "fp32", attention = "v4";
    bool sweep = false;
    std::string checkpoint, tokenizer;
    md::AttentionBenchOptions attn;                // --attn-batch, --attn-context
    pd::kernels::layers::SamplingParams sampling;  // --temperature, --top-k, --top-p (chapter 09)
};

// problem.cu
/// Registers the chapter's options on @p bench, into @p o, beside the harness's own.
void add_options(pd::Bench& bench, Options& o);
/// Throws std::invalid_argument where --prompt comes without --tokenizer, or --tokenizer without --checkpoint.
void check_problem(const Options& o);
/// The model's options for a prompt of @p P tokens, after requiring that the model and every generation fit.
md::ModelOptions model_options(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, int P);

// studies.cu
/// --sweep-context: a decode step of @p model at each context C, cached and recomputed, each point
/// checked then timed; its rows go into @p sweep, and @p passed falls on a disagreement.
void sweep_context(pd::Bench& bench, const Options& o, md::Model& model, std::vector<pd::Row>& sweep, bool& passed);
/// --sweep-context's table: a decode step at each context C, cached and recomputed.
void print_sweep(pd::Bench& bench, const std::vector<pd::Row>& sweep);

}  // namespace ch04
