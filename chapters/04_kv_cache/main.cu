// Chapter 04: KV caching.
//
// A Llama-style transformer, built from the kernels of chapters 01 to 03 and this chapter's,
// generates tokens two ways: recomputing the whole sequence at every step, and with a KV cache
// (prefill once, then one token per step against the cached K and V). Both must choose the
// same tokens; the cache makes a step's cost grow with the context only through the KV reads,
// while recomputation redoes the whole prefix. The program also validates and times the four
// decode attention versions on one layer's cache, and with --sweep-context shows a step's time
// against the context length, cached and recomputed.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; the model, its two ways of generating and the attention benchmark in model/;
// this file holds the lesson.
#include "chapter.hpp"

#include "pd/llama2c.hpp"

#include <optional>
#include <string>
#include <vector>

namespace ch04 {

namespace at = pd::kernels::attention;

/// Generates with the cache and by recomputation (as --mode says), checks them against each
/// other and the cached one against the CPU reference model, and adds the first, middle and last
/// decode steps to @p steps. Returns the generation's JSON; @p passed falls on a failed check.
nlohmann::json generate(pd::Bench& bench, const Options& o, md::Model& model, const std::vector<int>& prompt, int P,
                        const pd::llama2c::Tokenizer* tok, std::vector<pd::Row>& steps, bool& passed) {
    const int B = o.p.batch, G = o.p.gen, total = P + G - 1;
    const DType d = model.options().weights;
    std::optional<md::Generation> cached, recomputed;
    if (o.mode != "recompute") cached = md::generate_cached(model, prompt, P, G, o.sampling);
    if (cached)
        md::dump_cache(bench, model, total);  // the final cache of the cached run, before recompute overwrites it
    if (o.mode != "cache") recomputed = md::generate_recompute(model, prompt, P, G, o.sampling);

    // ---- checks: the two generations agree; the model matches the reference model ----
    // (a bf16 cache rounds K and V, which the reference model does not: judged as bf16; an 8-bit
    // cache's rounding the reference model repeats, and bf16 activations judge it as bf16 too)
    const DType rule = d == DType::bf16 || o.kv_dtype != "fp32" ? DType::bf16 : DType::fp32;
    std::ostream& out = bench.out();
    nlohmann::json gen = md::check_generations(model, prompt, P, cached ? &*cached : nullptr,
                                               recomputed ? &*recomputed : nullptr, rule, out, passed);
    gen["kv_dtype"] = o.kv_dtype;
    const md::Generation& first = cached ? *cached : *recomputed;
    if (tok) {
        std::vector<int> ids(prompt.begin(), prompt.begin() + P);
        for (int i = 0; i < G; ++i) ids.push_back(first.tokens[std::size_t(i) * B]);
        out << "  text: " << tok->decode_all(ids) << "\n";
    }

    // ---- timeline: TTFT, ITL, each step against its bytes ----
    for (const md::Generation* g : {cached ? &*cached : nullptr, recomputed ? &*recomputed : nullptr}) {
        if (!g) continue;
        const bool is_cache = cached && g == &*cached;
        const std::string mode = is_cache ? "cache" : "recompute";
        if (bench.timing()) {
            gen[mode] = md::timing_json(*g, B);
            out << "  " << mode << ": " << md::describe_timing(*g, B) << "\n";
        }
        for (int i : {1, G / 2, G - 1}) {  // the first, middle and last decode steps
            if (i < 1 || i >= G || (i == G / 2 && (i == 1 || i == G - 1))) continue;
            const int context = P + i;  // positions the step attends to, its own included
            const pd::Kernel k{.name = mode,
                               .dtype = d,
                               .units = d == DType::bf16 && !is_cache ? pd::Units::tensor_cores : pd::Units::simt,
                               .cost = is_cache ? model.cost(context - 1, 1) : model.cost(0, context),
                               .tokens = double(B),
                               .point = {{"step", i}, {"context", context}}};
            steps.push_back(
                bench.timed_row(k, bench.timing() ? std::optional<double>(g->ms[std::size_t(i)]) : std::nullopt, true));
        }
    }
    if (bench.dumping())
        md::dump_generation(bench, model, cached ? &*cached : nullptr, recomputed ? &*recomputed : nullptr);
    return gen;
}

// [ch04_attention_versions]
/// Every selected decode attention version on one layer's cache of the model's shape (ragged
/// contexts, random Q, K and V), validated against the CPU reference, then timed against the
/// copy bandwidth: a step must read each sequence's K and V once.
std::vector<pd::Row> attention_versions(pd::Bench& bench, const Options& o, const pd::ModelConfig& config,
                                        int sm_count) {
    md::DecodeAttentionBench attention(bench, config, o.attn.batch, o.attn.context);
    std::ostream& out = bench.out();
    out << "\ndecode attention on one layer's cache: " << attention.shape_line() << "; reference: CPU, double\n";
    bench.require_fits(attention.device_bytes(), "the decode attention benchmark's caches",
                       "lower --attn-batch or --attn-context");
    std::vector<pd::Row> rows;
    for (DType d : bench.dtypes())
        for (const pd::Version& ver : at::decode_versions()) {
            if (!bench.selects(ver)) continue;
            const int splits = ver.name == "v4" ? at::decode_splits(attention.contiguous(), sm_count) : 1;
            rows.push_back(attention.measure_contiguous(
                ver.name, d,
                {.name = ver.name,
                 .units = ver.units,
                 .point = {{"batch", o.attn.batch}, {"context", o.attn.context}, {"splits", splits}},
                 .dump = "attention_" + ver.name + (d == DType::fp32 ? "" : "_bf16")}));
        }
    out << pd::render(rows, {"kernel", "dtype", "time ms", "GB/s", "of copy", "max abs err", "status"})
        << "GB/s counts K and V once per sequence (v1 and v2 read them once per query head: from L2 when they fit); "
           "v4 splits the context in "
        << at::decode_splits(attention.contiguous(), sm_count) << " for " << sm_count << " SMs.\n";
    return rows;
}
// [ch04_attention_versions]

// [ch04_cost]
/// The run and its cache: a token's K and V in every layer, and the cache of B sequences at the
/// end of the run. @return the cache's bytes per token
double print_cost(std::ostream& out, const Options& o, const pd::ModelConfig& config, int P) {
    const int B = o.p.batch, G = o.p.gen, total = P + G - 1;  // positions in the cache at the end
    const DType kv = pd::dtype_named(o.kv_dtype);
    const double kv_token = config.kv_bytes_per_token(pd::kv_element_bytes(kv, config.head_dim));
    out << "model: " << pd::describe(config) << "\n"
        << "run: B = " << B << (B == 1 ? " sequence" : " sequences") << ", prompt P = " << P << ", generate G = " << G
        << " (" << pd::kernels::layers::describe(o.sampling) << "), decode attention " << o.attention << ", mode "
        << o.mode << "\n"
        << "KV cache (" << o.kv_dtype << "): 2 x " << config.layers << " layers x " << config.kv_heads << " KV heads x "
        << config.head_dim << " x " << pd::size_of(kv) << " bytes"
        << (pd::size_of(kv) == 1 ? " + a 4-byte scale per row of " + std::to_string(config.head_dim) : "") << " = "
        << pd::format_bytes(kv_token) << " per token; " << B << " x " << total
        << " tokens = " << pd::format_bytes(kv_token * B * total) << " at the end of the run\n";
    return kv_token;
}
// [ch04_cost]

/// The decode steps of every --dtype: each step's time against its bytes (weights and KV read).
void print_steps(pd::Bench& bench, const std::vector<pd::Row>& steps) {
    bench.out()
        << "\ndecode steps (context = positions attended, the new token's included; bytes: weights + the KV read):\n"
        << pd::render(steps,
                      {"kernel", "dtype", pd::Column::point("step", "step"), pd::Column::point("context", "context"),
                       "step ms", "GB/s", "floor ms", "of copy", "tokens/s"})
        << "recompute runs the whole prefix as a prefill (its bytes: weights + the cache it writes; its attention is "
           "chapter 07's flash attention, no score matrix); 'of copy' is the "
           "step's bytes over its time, as a fraction of the copy bandwidth"
        << (bench.sim() ? " (no copy bandwidth on the simulator)" : "") << ".\n";
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"04_kv_cache", "KV caching",
                    "Chapter 04: KV caching. A Llama-style model generates greedily, recomputing the whole sequence "
                    "at every step and with a KV cache; both must agree, and the cache's step costs the weights plus "
                    "the K and V it reads. Also validates and times decode attention v1 scores in memory, v2 online "
                    "softmax, v3 one block per KV head, v4 split-KV, on one layer's cache.",
                    at::decode_versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    check_problem(o);

    // ---- the model and its weights ----
    std::optional<pd::llama2c::Checkpoint> ckpt;
    if (!o.checkpoint.empty()) ckpt = pd::llama2c::read_checkpoint(o.checkpoint);
    const pd::ModelConfig config = ckpt ? ckpt->config : *pd::find_model(o.preset);
    o.sampling.seed = bench.options.seed;
    pd::kernels::layers::check_sampling(o.sampling, config.vocab);
    std::optional<pd::llama2c::Tokenizer> tok;
    if (!o.tokenizer.empty()) tok = pd::llama2c::Tokenizer::read(o.tokenizer, config.vocab);
    int P = 0;
    const std::vector<int> prompt = md::make_prompts(o.p, config, tok ? &*tok : nullptr, bench.options.seed, P);
    const int B = o.p.batch, G = o.p.gen, total = P + G - 1;  // positions in the cache at the end
    const std::vector<DType> dtypes = bench.dtypes();
    std::ostream& out = bench.out();
    md::ModelOptions mo = model_options(bench, o, config, P);
    bench.measure_roofs();
    const double kv_token = print_cost(out, o, config, P);

    std::vector<pd::Row> steps, sweep;
    nlohmann::json generations = nlohmann::json::array();
    bool all_agree = true;
    for (DType d : dtypes) {
        mo.weights = d;
        md::Model model(config, mo);
        if (ckpt)
            model.load(ckpt->weights);
        else
            model.init_synthetic(bench.options.seed);
        const std::string weights = mo.quant.format != "none" ? mo.quant.format : to_string(d);
        out << "\n" << weights << " weights (" << pd::format_bytes(model.weight_bytes()) << "):\n";
        generations.push_back(generate(bench, o, model, prompt, P, tok ? &*tok : nullptr, steps, all_agree));
        if (o.sweep) sweep_context(bench, o, model, sweep, all_agree);
    }

    print_steps(bench, steps);
    const std::vector<pd::Row> rows = attention_versions(bench, o, config, mo.kernels.sm_count);
    if (o.sweep) print_sweep(bench, sweep);

    md::dump_inputs(bench, config, prompt, B, P);
    if (bench.dumping())
        out << "dumped config.json, the weights, prompt, tokens, logits_cache, logits_recompute, k_cache and v_cache "
               "(bf16: *_bf16.npy) to "
            << bench.dump_dir() << "\n";

    nlohmann::json report = bench.report({{"preset", config.name},
                                          {"batch", B},
                                          {"prompt_len", P},
                                          {"gen", G},
                                          {"mode", o.mode},
                                          {"kv_dtype", o.kv_dtype},
                                          {"attention", o.attention},
                                          {"temperature", o.sampling.temperature},
                                          {"top_k", o.sampling.top_k},
                                          {"top_p", o.sampling.top_p},
                                          {"attn_batch", o.attn.batch},
                                          {"attn_context", o.attn.context},
                                          {"dtype", mo.quant.format != "none" ? mo.quant.format
                                                    : dtypes.size() == 2      ? "all"
                                                                              : to_string(dtypes[0])}},
                                         rows);
    report["kv_cache"] = {{"bytes_per_token", kv_token}, {"bytes_run", kv_token * B * total}};
    report["generation"] = generations;
    report["steps"] = bench.json(steps);
    report["sweep"] = bench.json(sweep);
    if (!all_agree) {
        out << "FAILED: cache and recompute disagree, or the model does not match its reference\n";
        report["passed"] = false;
    }
    return bench.finish(report);
}

}  // namespace ch04

int main(int argc, char** argv) {
    return pd::guarded_main(ch04::run, argc, argv,
                            {{"ModelOptions.batch", "--batch"},
                             {"ModelOptions.kernels.attention", "--attention"},
                             {"ModelOptions.cache.kv", "--kv-dtype"},
                             {"ModelOptions.quant.format", "--dtype"},
                             {"ModelOptions.max_seq", "--prompt-len + --gen"},
                             {"PromptSpec.length", "--prompt-len"},
                             {"PromptSpec.text", "--prompt"},
                             {"PromptSpec.gen", "--gen"},
                             {"SamplingParams.temperature", "--temperature"},
                             {"SamplingParams.top_k", "--top-k"},
                             {"SamplingParams.top_p", "--top-p"}});
}
