// Chapter 12's problem: the program's options and their rules, and what a run needs (the model's
// options, after the check that the model and every step fit). The lesson is main.cu.
#include "chapter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch12 {

/// The chapter's options, beside the harness's own (--kernel, --dtype, --seed, ...).
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset, "Model shape (tinyllama-1.1b: a ~1B model; llama-3-8b)",
                 CLI::IsMember(pd::model_names()));
    bench.app.add_option("--batches", o.batches, "Decode batches B to run, each one step (1 ... 64)")
        ->check(CLI::Range(1, 64))
        ->delimiter(',')
        ->capture_default_str();
    bench.app.add_option("--prefill-lens", o.prefill_lens, "Prompts P compared eager and replayed (slot 0; none: 0)")
        ->check(CLI::Range(0, 1 << 20))
        ->delimiter(',')
        ->capture_default_str();
    bench.option("--context", o.context, "Positions already in each sequence's cache before the step",
                 CLI::Range(1, 1 << 20));
    bench.add_dtype_option();
    bench.option("--kv-dtype", o.kv_dtype, "Type of the KV cache", CLI::IsMember({"fp32", "bf16"}));
    bench.option("--launch-us", o.launch_us,
                 "Simulator: the host's modelled cost of one launch, in microseconds (a GPU measures it)",
                 CLI::Range(0.01, 1000.0));
}

md::ModelOptions model_options(pd::Bench& bench, Options& o, const pd::ModelConfig& config) {
    std::sort(o.batches.begin(), o.batches.end());
    o.batches.erase(std::unique(o.batches.begin(), o.batches.end()), o.batches.end());
    if (o.context + 1 > config.max_seq)
        throw std::invalid_argument("--context " + std::to_string(o.context) + " leaves no position for the step: " +
                                    config.name + " holds " + std::to_string(config.max_seq));
    o.prefill_lens.erase(std::remove(o.prefill_lens.begin(), o.prefill_lens.end(), 0), o.prefill_lens.end());
    const int B = o.batches.back(),
              P = o.prefill_lens.empty() ? 0 : *std::max_element(o.prefill_lens.begin(), o.prefill_lens.end());
    if (P > config.max_seq)
        throw std::invalid_argument("--prefill-lens " + std::to_string(P) + " is past " + config.name + "'s " +
                                    std::to_string(config.max_seq) + " positions");
    md::ModelOptions mo{.weights = bench.single_dtype(),
                        .batch = B,
                        .max_seq = std::max(o.context + 1, P),
                        .max_step_tokens = std::max({o.context, B, P}),  // a prompt at a time, or a decode batch
                        .cache = {.kv = pd::dtype_named(o.kv_dtype)},
                        .kernels = {.sm_count = std::max(bench.device().sm_count, 1)}};
    mo.graphs = true;
    // the prompts (B of --context tokens), then per batch its eager and replayed checks and, on a
    // GPU, its timed steps: 2 FLOPs per parameter per token
    double tokens = double(B) * o.context;
    for (int b : o.batches) tokens += 2.0 * b;
    for (int p : o.prefill_lens) tokens += 2.0 * p;
    bench.require(pd::Needs{"the decode steps of " + config.name,
                            "choose a smaller --preset, or lower --batches "
                            "or --context"}
                      .device("the model, its cache and the activations", md::Model::device_bytes(config, mo))
                      .work(2.0 * config.parameter_count() * tokens));
    return mo;
}

}  // namespace ch12
