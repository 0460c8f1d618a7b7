// Chapter 04's problem: the program's options and their rules, and what a run needs (the model's
// options, after the check that the model and every generation fit). The lesson is main.cu.
#include "chapter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch04 {

/// The chapter's options, beside the harness's own (--kernel, --dtype, --seed, ...).
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset,
                 "Model shape: tiny, stories15M, llama-3-8b, llama-3-70b, llama-2-7b, llama-3.1-8b, llama-2-13b, "
                 "tinyllama-1.1b",
                 CLI::IsMember(pd::model_names()));
    bench.option("--batch", o.p.batch, "Sequences B generated together", CLI::Range(1, 64));
    bench.option("--prompt-len", o.p.length, "Prompt tokens P per sequence (random ids)", CLI::Range(1, 1 << 20));
    bench.option("--gen", o.p.gen, "Tokens G to generate per sequence", CLI::Range(1, 1 << 20));
    bench.option("--mode", o.mode, "recompute, cache, or both (and check that they agree)",
                 CLI::IsMember({"recompute", "cache", "both"}));
    bench.add_dtype_option(true);
    bench.option("--kv-dtype", o.kv_dtype, "Type of the KV cache (fp8 and int8: codes and a scale per row, chapter 08)",
                 CLI::IsMember({"fp32", "bf16", "fp8", "int8"}));
    bench.option("--attention", o.attention, "Decode attention version the model uses",
                 CLI::IsMember({"v1", "v2", "v3", "v4"}));
    bench.option("--attn-batch", o.attn.batch, "Sequences of the decode attention benchmark", CLI::Range(1, 65535));
    bench.option("--attn-context", o.attn.context, "Longest context of the decode attention benchmark",
                 CLI::Range(1, 1 << 20));
    bench.app.add_flag("--sweep-context", o.sweep, "Also time one decode step against the context: cache vs recompute");
    bench.option("--sweep-max", o.sweep_max, "Longest context of the sweep", CLI::Range(2, 1 << 20));
    bench.app
        .add_option("--checkpoint", o.checkpoint, "A llama2.c checkpoint (e.g. stories15M.bin) instead of --preset")
        ->excludes("--preset")
        ->check(pd::input_file());
    bench.app.add_option("--tokenizer", o.tokenizer, "Its tokenizer.bin (for --prompt and to print the text)")
        ->check(pd::input_file());
    bench.app.add_option("--prompt", o.p.text, "Prompt text (needs --tokenizer)");
    bench.add_sampling_options(o.sampling.temperature, o.sampling.top_k, o.sampling.top_p);
}

/// The rules between the options that the options cannot express.
void check_problem(const Options& o) {
    if (!o.p.text.empty() && o.tokenizer.empty()) throw std::invalid_argument("--prompt needs --tokenizer");
    if (!o.tokenizer.empty() && o.checkpoint.empty()) throw std::invalid_argument("--tokenizer needs --checkpoint");
}

/// The model's options: the first --dtype's weights, a cache of the prompt and the generation (or
/// of the sweep's longest context), after the check that the model and every generation fit.
md::ModelOptions model_options(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, int P) {
    if (o.sweep && bench.app.count("--sweep-max") && o.sweep_max > config.max_seq)
        throw std::invalid_argument("--sweep-max " + std::to_string(o.sweep_max) + " is past the model's context (" +
                                    std::to_string(config.max_seq) + " positions)");
    const std::vector<DType> dtypes = bench.dtypes();
    const pd::DeviceInfo& dev = bench.device();
    md::ModelOptions mo{.weights = dtypes.front(),
                        .batch = o.p.batch,
                        .max_seq = std::max(P + o.p.gen, o.sweep ? std::min(o.sweep_max, config.max_seq) : 0),
                        .cache = {.kv = pd::dtype_named(o.kv_dtype)},
                        .kernels = {.attention = o.attention, .sm_count = std::max(dev.sm_count, 1)}};
    mo.quant.format = bench.weight_quant();  // --dtype int8, int4 or fp8: quantized from bf16 (chapter 08)
    bench.require(  // on the simulator, every token through the model, 2 FLOPs per parameter, per dtype
        pd::Needs{"generating with " + config.name,
                  "choose a smaller --preset, or lower --batch, --prompt-len, --gen or --sweep-max"}
            .device("the model, its cache and the activations", md::Model::device_bytes(config, mo))
            .work(double(dtypes.size()) * md::generation_flops(config, o.p, P, o.mode != "recompute", o.mode != "cache",
                                                               o.sweep ? o.sweep_max : 0)));
    return mo;
}

}  // namespace ch04
