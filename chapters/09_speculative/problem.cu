// Chapter 09's problem: the options and their rules, the target and draft models read or built.
// The lesson is main.cu.
#include "chapter.hpp"

#include "pd/model/speculative.hpp"
#include "pd/serving/speculative.hpp"

#include <stdexcept>
#include <string>

namespace ch09 {

void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset, "Target model shape", CLI::IsMember(pd::model_names()));
    bench.option("--batch", o.p.batch, "Sequences B generated together", CLI::Range(1, 64));
    bench.option("--prompt-len", o.p.length, "Prompt tokens P per sequence (random ids)", CLI::Range(1, 1 << 20));
    bench.option("--gen", o.p.gen, "Tokens G to generate per sequence", CLI::Range(2, 1 << 20));
    bench.add_dtype_option();
    bench.app.add_option("--k", o.ks, "Draft tokens per step, one run each (1 ... 16)")
        ->delimiter(',')
        ->check(CLI::Range(1, md::kMaxDraft))
        ->capture_default_str();
    bench.option("--accept-rate", o.accept_rate, "The oracle's probability a of proposing the target's choice",
                 CLI::Range(0.0, 1.0));
    bench.option("--draft-layers", o.draft_layers, "The draft model: the target's first layers", CLI::Range(1, 200));
    bench.add_sampling_options(o.sampling.temperature, o.sampling.top_k, o.sampling.top_p);
    bench.option("--gpu", o.gpu, "GPU preset of the cost model's prediction", CLI::IsMember(pd::roofline::gpu_names()));
    bench.option("--cost-preset", o.cost_preset, "Model shape of the cost model's prediction",
                 CLI::IsMember(pd::model_names()));
    bench.option("--cost-context", o.cost_context, "Context of the cost model's prediction", CLI::Range(1, 1 << 20));
    bench.app.add_flag("--sweep-batch", o.sweep,
                       "Also the speed-up against the batch, B = 1 ... 64, on the cost model");
    bench.app.add_option("--checkpoint", o.checkpoint, "A llama2.c checkpoint as the target (e.g. stories110M.bin)")
        ->excludes("--preset")
        ->check(pd::input_file());
    bench.app
        .add_option("--draft-checkpoint", o.draft_checkpoint,
                    "A smaller llama2.c checkpoint with the same tokenizer as the draft model (e.g. stories15M.bin)")
        ->check(pd::input_file());
    bench.app.add_option("--tokenizer", o.tokenizer, "The checkpoints' tokenizer.bin (for --prompt)")
        ->check(pd::input_file());
    bench.app.add_option("--prompt", o.p.text, "Prompt text (needs --tokenizer)");
    bench.app.add_flag("--engine", o.engine,
                       "Also chapter 05's engine with speculative decoding: plain, always and under the rule, against "
                       "the batch, on the cost model and the model");
}

/// Reads the files the options name, after the rules between those options (exit code 2).
Target read_target(const Options& o) {
    if (!o.draft_checkpoint.empty() && o.checkpoint.empty())
        throw std::invalid_argument("--draft-checkpoint needs --checkpoint");
    if (!o.tokenizer.empty() && o.checkpoint.empty()) throw std::invalid_argument("--tokenizer needs --checkpoint");
    if (!o.p.text.empty() && o.tokenizer.empty()) throw std::invalid_argument("--prompt needs --tokenizer");
    Target t;
    if (!o.checkpoint.empty()) t.ckpt = pd::llama2c::read_checkpoint(o.checkpoint);
    if (!o.draft_checkpoint.empty()) t.draft_ckpt = pd::llama2c::read_checkpoint(o.draft_checkpoint);
    t.config = t.ckpt ? t.ckpt->config : *pd::find_model(o.preset);
    if (t.draft_ckpt && t.draft_ckpt->config.vocab != t.config.vocab)
        throw std::invalid_argument("--draft-checkpoint has a vocabulary of " +
                                    std::to_string(t.draft_ckpt->config.vocab) + " tokens, the target " +
                                    std::to_string(t.config.vocab) + ": a draft needs the target's tokenizer");
    if (!o.tokenizer.empty()) t.tok = pd::llama2c::Tokenizer::read(o.tokenizer, t.config.vocab);
    return t;
}

/// The rules between the proposers and the problem (exit code 2). @return whether the draft
/// model runs: selected, and either a checkpoint or a target small enough to copy (2e9 parameters)
bool check_problem(const pd::Bench& bench, const Options& o, const Target& t, int P, int G, int k_max) {
    const pd::ModelConfig& config = t.config;
    if (!o.sampling.greedy() && bench.options.kernel == "oracle")
        throw std::invalid_argument("--kernel oracle proposes the target's greedy choice: it needs --temperature 0");
    pd::kernels::layers::check_sampling(o.sampling, config.vocab);
    const bool draft_fits = t.draft_ckpt || config.parameter_count() <= 2e9;
    if (bench.options.kernel == "draft" && !draft_fits)
        throw std::invalid_argument("--kernel draft copies the target's weights through the host: " + config.name +
                                    " is too large; choose ngram or oracle, or a smaller --preset");
    const bool use_draft = bench.selects(sv::proposer_versions()[1]) && draft_fits;
    if (use_draft && !t.draft_ckpt) md::draft_config(config, o.draft_layers);  // names --draft-layers when out of range
    // each sequence holds its prompt, its tokens and a verify pass's k drafts past them
    if (P + G + k_max > config.max_seq)
        throw std::invalid_argument("--prompt-len + --gen + the largest --k = " + std::to_string(P + G + k_max) +
                                    " pass the " + std::to_string(config.max_seq) + " positions of " + config.name);
    // the oracle proposes another token than the target's with probability 1 - a: it needs two
    if (config.vocab < 2 && bench.selects("oracle") && o.sampling.greedy())
        throw std::invalid_argument("--checkpoint " + config.name +
                                    " has a vocabulary of 1 token: the oracle (--kernel "
                                    "all or oracle) proposes other tokens than the target's; choose --kernel ngram "
                                    "or draft");
    return use_draft;
}

/// The draft model of the target @p target (built with @p mo): the draft checkpoint, or the
/// target's first --draft-layers layers.
md::Model make_draft(const Options& o, const Target& t, md::Model& target, const md::ModelOptions& mo) {
    const md::ModelOptions dmo{
        .weights = mo.weights, .batch = mo.batch, .max_seq = mo.max_seq, .max_step_tokens = mo.max_step_tokens};
    if (t.draft_ckpt) {
        md::Model draft(t.draft_ckpt->config, dmo);
        draft.load(t.draft_ckpt->weights);
        return draft;
    }
    md::Model draft(md::draft_config(t.config, o.draft_layers), dmo);
    draft.load(md::draft_weights(target.download_weights(), t.config, o.draft_layers));
    return draft;
}

}  // namespace ch09
