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
// pd/bench.hpp; this file holds the lesson.
#include "pd/bench.hpp"
#include "pd/llama2c.hpp"
#include "pd/rng.hpp"
#include "pd/timer.hpp"

#include "model/decode_attention.hpp"
#include "model/model.hpp"
#include "model_reference.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace md = pd::kernels::model;
using bf16 = __nv_bfloat16;
using pd::DType;
using pd::fmt;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny";  // seconds on a CPU
    int batch = 2, prompt_len = 16, gen = 8, attn_batch = 3, attn_context = 300, sweep_max = 64;
#else
    std::string preset = "llama-3-8b";  // the GPU benchmark: a one-layer cache read of 512 MiB per step
    int batch = 1, prompt_len = 512, gen = 32, attn_batch = 16, attn_context = 8192, sweep_max = 4096;
#endif
    std::string mode = "both", kv_dtype = "fp32", attention = "v4";
    bool sweep = false;
    std::string checkpoint, tokenizer, prompt;
};

/// Everything one way of generating produced: step i's logits [B, V] chose tokens[i] [B];
/// ms[0] is the prefill (TTFT), ms[i] the step that produced token i.
struct Generation {
    std::vector<int> tokens;    // [G, B]
    std::vector<float> logits;  // [G, B, V]
    std::vector<double> ms;     // [G]
};

/// Runs @p step once and returns its time in ms (CUDA events; CPU time on the simulator).
template <typename Fn>
double once(Fn&& step) {
    return pd::time_device(step, 0, 1).median_ms;
}

/// Appends the logits of @p m and their argmax (the greedy tokens) to @p g.
void take_step(md::Model& m, pd::DeviceBuffer<int>& next, Generation& g) {
    m.argmax(next.data());
    const std::vector<int> t = next.download();
    const std::vector<float> l = m.logits().download();
    g.tokens.insert(g.tokens.end(), t.begin(), t.end());
    g.logits.insert(g.logits.end(), l.begin(), l.end());
}

// [ch04_cached]
/// With the cache: prefill the prompt once, then each step feeds the last token only.
Generation generate_cached(md::Model& m, const std::vector<int>& prompt, int P, int G) {
    Generation g;
    pd::DeviceBuffer<int> next(static_cast<std::size_t>(m.options().batch));
    g.ms.push_back(once([&] { m.prefill(prompt, P); }));
    take_step(m, next, g);
    for (int i = 1; i < G; ++i) {
        g.ms.push_back(once([&] { m.decode(next.data()); }));  // K, V of positions < P + i - 1 come from the cache
        take_step(m, next, g);
    }
    return g;
}
// [ch04_cached]

// [ch04_recompute]
/// Without a cache: every step runs the whole sequence so far (prompt + generated) through
/// the model again, as a prefill, and keeps only the last position's logits.
Generation generate_recompute(md::Model& m, const std::vector<int>& prompt, int P, int G) {
    Generation g;
    const int B = m.options().batch;
    pd::DeviceBuffer<int> next(static_cast<std::size_t>(B));
    std::vector<int> seq = prompt;  // [B, P + i]
    for (int i = 0; i < G; ++i) {
        g.ms.push_back(once([&] { m.prefill(seq, P + i); }));
        take_step(m, next, g);
        std::vector<int> longer;
        for (int b = 0; b < B; ++b) {
            longer.insert(longer.end(), seq.begin() + std::ptrdiff_t(b) * (P + i), seq.begin() + std::ptrdiff_t(b + 1) * (P + i));
            longer.push_back(g.tokens[std::size_t(i) * B + b]);
        }
        seq = std::move(longer);
    }
    return g;
}
// [ch04_recompute]

/// Rank of @p token among @p row's logits (0: the largest).
int rank_of(std::span<const float> row, int token) {
    int rank = 0;
    for (float x : row) rank += x > row[std::size_t(token)];
    return rank;
}

/// Cache vs recompute. fp32: the same tokens at every step. bf16 (rounding differs between the
/// GEMM and GEMV paths): the same tokens up to a first divergence, where each side's token is
/// among the other side's top 5. Returns a one-line verdict; @p passed is set.
std::string compare_generations(const Generation& a, const Generation& b, int B, int V, DType d, bool& passed,
                                double& max_logit_diff) {
    passed = true;
    max_logit_diff = 0;
    int diverged = 0;
    const int G = int(a.tokens.size()) / B;
    for (int s = 0; s < B; ++s)
        for (int i = 0; i < G; ++i) {
            const std::size_t at = std::size_t(i) * B + s;
            const std::span<const float> la(a.logits.data() + at * V, std::size_t(V)),
                lb(b.logits.data() + at * V, std::size_t(V));
            for (int v = 0; v < V; ++v) max_logit_diff = std::max<double>(max_logit_diff, std::fabs(la[v] - lb[v]));
            if (a.tokens[at] == b.tokens[at]) continue;
            ++diverged;
            passed = d == DType::bf16 && rank_of(la, b.tokens[at]) < 5 && rank_of(lb, a.tokens[at]) < 5 && passed;
            break;  // after a divergence the two sequences differ: nothing more to compare
        }
    const std::string seqs = std::to_string(B) + (B == 1 ? " sequence" : " sequences");
    if (diverged == 0) return "identical tokens at all " + std::to_string(G) + " steps of " + seqs;
    return std::to_string(diverged) + " of " + seqs + " diverged" +
           (passed ? " (each side's token in the other's top 5)" : " (FAILED)");
}

/// The device model against the CPU reference model (double) on the cached generation: the
/// prefill's logits and every decode step's. fp32: |out - ref| <= 1e-3 + 1e-3 |ref|;
/// bf16: ||out - ref|| / ||ref|| <= 2e-2 per step.
pd::CompareResult check_reference(const pd::ModelConfig& c, const pd::ModelWeights& w, const std::vector<int>& prompt,
                                  const Generation& g, int B, int P, DType d) {
    pd::CompareResult r{.passed = true, .max_abs_err = 0, .max_rel_err = 0};
    const int G = int(g.tokens.size()) / B, V = c.vocab;
    for (int b = 0; b < B; ++b) {
        pd::reference::ModelReference ref(c, w);
        std::vector<double> want = ref.forward(std::span(prompt).subspan(std::size_t(b) * P, std::size_t(P))).back();
        for (int i = 0; i < G; ++i) {
            const float* got = g.logits.data() + (std::size_t(i) * B + b) * V;
            double err2 = 0, ref2 = 0;
            for (int v = 0; v < V; ++v) {
                const double e = std::fabs(got[v] - want[v]);
                r.max_abs_err = std::max(r.max_abs_err, e);
                r.max_rel_err = std::max(r.max_rel_err, e / std::max(std::fabs(want[v]), 1e-30));
                err2 += e * e;
                ref2 += want[v] * want[v];
                if (d == DType::fp32 && e > 1e-3 + 1e-3 * std::fabs(want[v])) r.passed = false;
            }
            if (d == DType::bf16 && std::sqrt(err2 / std::max(ref2, 1e-300)) > 2e-2) r.passed = false;
            if (i + 1 < G) want = ref.forward(std::span(&g.tokens[std::size_t(i) * B + b], 1)).back();
        }
    }
    return r;
}

// [ch04_attention_versions]
/// Every selected decode attention version on one layer's cache: B sequences of ragged
/// contexts (the longest @p context, the others shorter), random Q and cache of the model's
/// shapes; validated against the CPU reference, then timed against the copy bandwidth: a
/// step must read each sequence's K and V once.
std::vector<pd::Row> run_attention_versions(pd::Bench& bench, const pd::ModelConfig& c, int B, int context,
                                            int sm_count) {
    const std::uint64_t seed = bench.options.seed;
    md::DecodeShape s{B, c.heads, c.kv_heads, c.head_dim, context, context};
    std::vector<int> lens(static_cast<std::size_t>(B));
    for (int b = 0; b < B; ++b) lens[std::size_t(b)] = std::max(1, context - 3 * b);  // ragged: the last sequence shortest
    std::vector<float> q(std::size_t(B) * c.heads * c.head_dim), k(s.cache().elements()), v(s.cache().elements());
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 41));
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(seed, 42));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(seed, 43));
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, out(q.size());
    pd::DeviceBuffer<int> dlen{std::span<const int>(lens)};
    double kv_read = 0;
    for (int l : lens) kv_read += 2.0 * c.kv_heads * double(l) * c.head_dim;  // K and V elements a step reads
    double scores = 0;
    for (int l : lens) scores += double(c.heads) * l;

    std::vector<pd::Row> rows;
    for (DType d : bench.dtypes()) {
        const std::vector<float> kr = pd::rounded_to(d, k), vr = pd::rounded_to(d, v);
        const std::vector<double> ref = pd::reference::decode_attention(q, kr, vr, lens, B, c.heads, c.kv_heads,
                                                                        c.head_dim, context);
        pd::Expected expected{.values = ref, .row_length = std::size_t(c.head_dim),
                              .dims = {std::size_t(B), std::size_t(c.heads), std::size_t(c.head_dim)}};
        for (std::size_t i = 0; i < ref.size() / c.head_dim; ++i) expected.rows.push_back(i);
        pd::DeviceBuffer<float> k32, v32;
        pd::DeviceBuffer<bf16> k16, v16;
        if (d == DType::fp32) {
            k32 = pd::DeviceBuffer<float>(std::span<const float>(kr));
            v32 = pd::DeviceBuffer<float>(std::span<const float>(vr));
        } else {
            k16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(k));
            v16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(v));
        }
        const pd::Cost cost{4.0 * scores * c.head_dim,  // q . k and p v: 2 d FLOPs each per score
                            kv_read * pd::size_of(d) + 4.0 * 2 * double(q.size())};  // K, V, then Q in, O out
        for (const pd::Version& ver : md::decode_versions()) {
            if (!bench.selects(ver)) continue;
            pd::DeviceBuffer<float> workspace(std::max<std::size_t>(1, md::decode_workspace_floats(ver.name, s, sm_count)));
            pd::Kernel kern{.name = ver.name, .dtype = d, .units = ver.units, .cost = cost,
                            .point = {{"batch", B}, {"context", context}, {"splits", ver.name == "v4" ? md::decode_splits(s, sm_count) : 1}},
                            .context = "B=" + std::to_string(B) + " Hq=" + std::to_string(c.heads) + " Hkv=" +
                                       std::to_string(c.kv_heads) + " d=" + std::to_string(c.head_dim) +
                                       " context=" + std::to_string(context) + " (ragged)",
                            .dump = "attention_" + ver.name + (d == DType::fp32 ? "" : "_bf16"),
                            .dump_shape = {std::size_t(B), std::size_t(c.heads), std::size_t(c.head_dim)}};
            const pd::Launch launch = [&] {
                if (d == DType::fp32)
                    md::decode_attention(ver.name, dq.data(), k32.data(), v32.data(), dlen.data(), out.data(),
                                         workspace.data(), s, sm_count);
                else
                    md::decode_attention(ver.name, dq.data(), k16.data(), v16.data(), dlen.data(), out.data(),
                                         workspace.data(), s, sm_count);
            };
            rows.push_back(bench.measure(kern, launch, out, expected));
        }
    }
    return rows;
}
// [ch04_attention_versions]

/// Random prompts [B, P] (ids in [0, V)), or the tokenizer's encoding of --prompt for every sequence.
std::vector<int> make_prompt(const Options& o, int V, const pd::llama2c::Tokenizer* tok, std::uint64_t seed, int& P) {
    const int B = o.batch;
    std::vector<int> prompt;
    if (tok && !o.prompt.empty()) {
        const std::vector<int> ids = tok->encode(o.prompt, true, false);
        P = int(ids.size());
        for (int b = 0; b < B; ++b) prompt.insert(prompt.end(), ids.begin(), ids.end());
        return prompt;
    }
    prompt.resize(std::size_t(B) * P);
    pd::Rng rng(pd::derive_seed(seed, 7));
    for (int& t : prompt) t = rng.integer(0, V - 1);
    return prompt;
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"04_kv_cache", "KV caching",
                    "Chapter 04: KV caching. A Llama-style model generates greedily, recomputing the whole sequence "
                    "at every step and with a KV cache; both must agree, and the cache's step costs the weights plus "
                    "the K and V it reads. Also validates and times decode attention v1 scores in memory, v2 online "
                    "softmax, v3 one block per KV head, v4 split-KV, on one layer's cache.",
                    md::decode_versions()};
    const std::vector<std::string> presets = pd::model_names();
    bench.option("--preset", o.preset, "Model shape: tiny, stories15M, llama-3-8b, llama-3-70b, llama-2-7b",
                 CLI::IsMember(presets));
    bench.option("--batch", o.batch, "Sequences B generated together", CLI::Range(1, 64));
    bench.option("--prompt-len", o.prompt_len, "Prompt tokens P per sequence (random ids)", CLI::Range(1, 1 << 20));
    bench.option("--gen", o.gen, "Tokens G to generate per sequence", CLI::Range(1, 1 << 20));
    bench.option("--mode", o.mode, "recompute, cache, or both (and check that they agree)",
                 CLI::IsMember({"recompute", "cache", "both"}));
    bench.add_dtype_option();
    bench.option("--kv-dtype", o.kv_dtype, "Type of the KV cache", CLI::IsMember({"fp32", "bf16"}));
    bench.option("--attention", o.attention, "Decode attention version the model uses",
                 CLI::IsMember({"v1", "v2", "v3", "v4"}));
    bench.option("--attn-batch", o.attn_batch, "Sequences of the decode attention benchmark", CLI::Range(1, 65535));
    bench.option("--attn-context", o.attn_context, "Longest context of the decode attention benchmark",
                 CLI::Range(1, 1 << 20));
    bench.app.add_flag("--sweep-context", o.sweep, "Also time one decode step against the context: cache vs recompute");
    bench.option("--sweep-max", o.sweep_max, "Longest context of the sweep", CLI::Range(2, 1 << 20));
    bench.app.add_option("--checkpoint", o.checkpoint, "A llama2.c checkpoint (e.g. stories15M.bin) instead of --preset");
    bench.app.add_option("--tokenizer", o.tokenizer, "Its tokenizer.bin (for --prompt and to print the text)");
    bench.app.add_option("--prompt", o.prompt, "Prompt text (needs --tokenizer)");
    if (auto code = bench.parse(argc, argv)) return *code;
    if (!o.prompt.empty() && o.tokenizer.empty()) throw std::invalid_argument("--prompt needs --tokenizer");
    if (!o.tokenizer.empty() && o.checkpoint.empty()) throw std::invalid_argument("--tokenizer needs --checkpoint");

    // ---- the model and its weights ----
    std::optional<pd::llama2c::Checkpoint> ckpt;
    if (!o.checkpoint.empty()) ckpt = pd::llama2c::read_checkpoint(o.checkpoint);
    const pd::ModelConfig config = ckpt ? ckpt->config : *pd::find_model(o.preset);
    std::optional<pd::llama2c::Tokenizer> tok;
    if (!o.tokenizer.empty()) tok = pd::llama2c::Tokenizer::read(o.tokenizer, config.vocab);
    int P = o.prompt_len;
    const std::vector<int> prompt = make_prompt(o, config.vocab, tok ? &*tok : nullptr, bench.options.seed, P);
    const int B = o.batch, G = o.gen, total = P + G - 1;  // positions in the cache at the end
    if (P + G > config.max_seq)
        throw std::invalid_argument("--prompt-len + --gen = " + std::to_string(P + G) + " exceeds the model's max_seq = " +
                                    std::to_string(config.max_seq) + " (" + config.name + ")");
    const std::vector<DType> dtypes = bench.dtypes();
    const DType kv = o.kv_dtype == "bf16" ? DType::bf16 : DType::fp32;

    std::ostream& out = bench.out();
    const pd::DeviceInfo& dev = bench.device();
    md::ModelOptions mo{.weights = dtypes.front(), .kv = kv, .batch = B,
                        .max_seq = std::max(P + G, o.sweep ? std::min(o.sweep_max, config.max_seq) : 0),
                        .attention = o.attention, .sm_count = std::max(dev.sm_count, 1)};
    const int max_prefill = std::max(P + G, o.sweep ? mo.max_seq : 0);
    bench.require_fits(md::Model::device_bytes(config, mo, max_prefill), "the model, its cache and the activations",
                       "choose a smaller --preset, or lower --batch, --prompt-len, --gen or --sweep-max");
    bench.measure_roofs();

    // [ch04_cost]
    const double kv_token = config.kv_bytes_per_token(pd::size_of(kv));
    out << "model: " << config.name << " (" << config.source << "): V = " << config.vocab << ", D = " << config.d_model
        << ", L = " << config.layers << ", Hq = " << config.heads << ", Hkv = " << config.kv_heads
        << ", d = " << config.head_dim << ", F = " << config.ffn_dim << "; " << fmt("%.3g", config.parameter_count())
        << " parameters\n"
        << "run: B = " << B << (B == 1 ? " sequence" : " sequences") << ", prompt P = " << P << ", generate G = " << G << " (greedy), decode attention "
        << o.attention << ", mode " << o.mode << "\n"
        << "KV cache (" << o.kv_dtype << "): 2 x " << config.layers << " layers x " << config.kv_heads << " KV heads x "
        << config.head_dim << " x " << pd::size_of(kv) << " bytes = " << pd::format_bytes(kv_token) << " per token; "
        << B << " x " << total << " tokens = " << pd::format_bytes(kv_token * B * total) << " at the end of the run\n";
    // [ch04_cost]

    std::vector<pd::Row> steps, sweep;
    nlohmann::json generations = nlohmann::json::array();
    bool all_agree = true;
    for (DType d : dtypes) {
        mo.weights = d;
        md::Model model(config, mo);
        if (ckpt) model.load(ckpt->weights);
        else model.init_synthetic(bench.options.seed);
        const std::string suffix = d == DType::fp32 ? "" : "_bf16";
        out << "\n" << to_string(d) << " weights (" << pd::format_bytes(model.weight_bytes()) << "):\n";

        std::optional<Generation> cached, recomputed;
        if (o.mode != "recompute") cached = generate_cached(model, prompt, P, G);
        if (bench.dumping() || o.mode == "both" || o.mode == "recompute") {
            // the final cache of the cached run, before recompute overwrites it
            if (cached && bench.dumping()) {
                const std::vector<std::size_t> shape{std::size_t(config.layers), std::size_t(B),
                                                     std::size_t(config.kv_heads), std::size_t(total),
                                                     std::size_t(config.head_dim)};
                bench.dump<float>("k_cache" + suffix, model.download_cache(false, total), shape);
                bench.dump<float>("v_cache" + suffix, model.download_cache(true, total), shape);
            }
            if (o.mode != "cache") recomputed = generate_recompute(model, prompt, P, G);
        }

        // ---- checks: the two generations agree; the model matches the reference model ----
        // (a bf16 cache rounds K and V, and prefill attends to the unrounded ones: judged as bf16)
        const DType rule = d == DType::bf16 || kv == DType::bf16 ? DType::bf16 : DType::fp32;
        nlohmann::json gen{{"dtype", to_string(d)}, {"kv_dtype", o.kv_dtype}};
        if (cached && recomputed) {
            bool ok = true;
            double diff = 0;
            const std::string verdict = compare_generations(*cached, *recomputed, B, config.vocab, rule, ok, diff);
            out << "  cache vs recompute: " << verdict << "; largest logit difference " << fmt("%.3g", diff) << "\n";
            gen["agree"] = ok;
            gen["max_logit_diff"] = diff;
            all_agree = all_agree && ok;
        }
        const bool small = config.parameter_count() <= 1e8;  // the reference model in double, on the CPU
        if (cached && small) {
            const pd::CompareResult r = check_reference(config, model.download_weights(), prompt, *cached, B, P, rule);
            out << "  vs the CPU reference model (double): max abs err " << fmt("%.3g", r.max_abs_err) << " over "
                << G << " steps: " << (r.passed ? "ok" : "FAILED") << "\n";
            gen["reference_max_abs_err"] = r.max_abs_err;
            gen["reference_passed"] = r.passed;
            all_agree = all_agree && r.passed;
        } else if (cached) {
            out << "  vs the CPU reference model: skipped (" << fmt("%.3g", config.parameter_count())
                << " parameters is too many for the CPU; the tests run it on the tiny preset)\n";
        }
        if (tok) {
            const Generation& g = cached ? *cached : *recomputed;
            std::vector<int> ids(prompt.begin(), prompt.begin() + P);
            for (int i = 0; i < G; ++i) ids.push_back(g.tokens[std::size_t(i) * B]);
            out << "  text: " << tok->decode_all(ids) << "\n";
        }

        // ---- timeline: TTFT, ITL, each step against its bytes ----
        for (const auto* g : {cached ? &*cached : nullptr, recomputed ? &*recomputed : nullptr}) {
            if (!g) continue;
            const bool is_cache = g == &*cached;
            const std::string mode = is_cache ? "cache" : "recompute";
            if (bench.timing()) {
                const std::vector<double> itl(g->ms.begin() + 1, g->ms.end());
                double sum = 0;
                for (double x : g->ms) sum += x;
                gen[mode] = {{"ttft_ms", g->ms[0]},
                             {"itl_median_ms", itl.empty() ? nlohmann::json(nullptr) : nlohmann::json(pd::percentile(itl, 50))},
                             {"itl_p99_ms", itl.empty() ? nlohmann::json(nullptr) : nlohmann::json(pd::percentile(itl, 99))},
                             {"tokens_per_s", 1e3 * B * G / sum},
                             {"step_ms", g->ms}};
                out << "  " << mode << ": TTFT " << fmt("%.3g", g->ms[0]) << " ms, ITL median "
                    << (itl.empty() ? "-" : fmt("%.3g", pd::percentile(itl, 50))) << " ms (p99 "
                    << (itl.empty() ? "-" : fmt("%.3g", pd::percentile(itl, 99))) << " ms), "
                    << fmt("%.4g", 1e3 * B * G / sum) << " tokens/s\n";
            }
            for (int i : {1, G / 2, G - 1}) {  // the first, middle and last decode steps
                if (i < 1 || i >= G || (i == G / 2 && (i == 1 || i == G - 1))) continue;
                const int context = P + i;  // positions the step attends to, its own included
                pd::Kernel k{.name = mode, .dtype = d, .units = d == DType::bf16 && !is_cache ? pd::Units::tensor_cores : pd::Units::simt,
                             .tokens = double(B), .point = {{"step", i}, {"context", context}}};
                md::Model& m = model;
                k.cost = is_cache ? pd::Cost{m.decode_step_flops(context), m.decode_step_bytes(context)}
                                  : pd::Cost{m.prefill_flops(context), m.prefill_bytes(context)};
                steps.push_back(bench.timed_row(k, bench.timing() ? std::optional<double>(g->ms[std::size_t(i)]) : std::nullopt, true));
            }
        }
        generations.push_back(gen);

        if (bench.dumping()) {
            const Generation& g = cached ? *cached : *recomputed;
            std::vector<std::int32_t> toks(std::size_t(B) * G);  // [B, G]
            for (int i = 0; i < G; ++i)
                for (int b = 0; b < B; ++b) toks[std::size_t(b) * G + i] = g.tokens[std::size_t(i) * B + b];
            bench.dump<std::int32_t>("tokens" + suffix, toks, {std::size_t(B), std::size_t(G)});
            const std::vector<std::size_t> lshape{std::size_t(G), std::size_t(B), std::size_t(config.vocab)};
            if (cached) bench.dump<float>("logits_cache" + suffix, cached->logits, lshape);
            if (recomputed) bench.dump<float>("logits_recompute" + suffix, recomputed->logits, lshape);
            pd::ModelWeights w = model.download_weights();
            for (const pd::ModelWeights::Tensor& t : w.tensors(config)) bench.dump<float>(t.name + suffix, *t.data, t.shape);
        }

        // [ch04_sweep]
        // One decode step against the context C: with the cache it reads the weights and C
        // positions of K and V; recomputing runs the whole prefix of C tokens again.
        if (o.sweep) {
            const int top = std::min(o.sweep_max, model.max_seq());
            pd::DeviceBuffer<int> next(static_cast<std::size_t>(B));
            std::vector<int> seq;
            for (int C = 8; C <= top; C *= 2) {
                seq.resize(std::size_t(B) * C);
                pd::Rng rng(pd::derive_seed(bench.options.seed, 100 + std::uint64_t(C)));
                for (int& t : seq) t = rng.integer(0, config.vocab - 1);
                std::vector<int> prefix, last;  // the first C - 1 tokens of each sequence, and the last
                for (int b = 0; b < B; ++b) {
                    prefix.insert(prefix.end(), seq.begin() + std::ptrdiff_t(b) * C, seq.begin() + std::ptrdiff_t(b) * C + C - 1);
                    last.push_back(seq[std::size_t(b) * C + C - 1]);
                }
                pd::DeviceBuffer<int> dlast{std::span<const int>(last)};
                model.prefill(prefix, C - 1);
                model.decode(dlast.data());
                const std::vector<float> cache_logits = model.logits().download();
                model.prefill(seq, C);
                const std::vector<float> full_logits = model.logits().download();
                double diff = 0, ref = 0;  // the step's logits, cached vs recomputed
                for (std::size_t i = 0; i < full_logits.size(); ++i) {
                    diff = std::max<double>(diff, std::fabs(cache_logits[i] - full_logits[i]));
                    ref = std::max<double>(ref, std::fabs(full_logits[i]));
                }
                const bool ok = diff <= (rule == DType::fp32 ? 1e-3 : 5e-2) * std::max(1.0, ref);
                all_agree = all_agree && ok;
                std::optional<double> cache_ms, recompute_ms;
                if (bench.timing() && ok) {
                    model.prefill(prefix, C - 1);
                    cache_ms = bench.time_ms([&] {
                        model.rewind(C - 1);
                        model.decode(dlast.data());
                    });
                    recompute_ms = bench.time_ms([&] { model.prefill(seq, C); });
                }
                const pd::Cost cache_cost{model.decode_step_flops(C), model.decode_step_bytes(C)};
                const pd::Cost recompute_cost{model.prefill_flops(C), model.prefill_bytes(C)};
                const nlohmann::json point{{"context", C},
                                           {"flops_ratio", recompute_cost.flops / cache_cost.flops},
                                           {"bytes_ratio", recompute_cost.bytes / cache_cost.bytes},
                                           {"max_logit_diff", diff}};
                pd::Row rc = bench.timed_row({.name = "cache", .dtype = d, .cost = cache_cost, .tokens = double(B), .point = point}, cache_ms, ok);
                pd::Row rr = bench.timed_row({.name = "recompute", .dtype = d, .cost = recompute_cost, .tokens = double(B), .point = point}, recompute_ms, ok);
                rc.point["speedup"] = cache_ms && recompute_ms ? nlohmann::json(*recompute_ms / *cache_ms) : nlohmann::json(nullptr);
                rr.point["speedup"] = rc.point["speedup"];
                sweep.push_back(rc);
                sweep.push_back(rr);
            }
        }
        // [ch04_sweep]
    }

    out << "\ndecode steps (context = positions attended, the new token's included; bytes: weights + the KV read):\n"
        << pd::render(steps, {"kernel", "dtype", pd::Column::point("step", "step"), pd::Column::point("context", "context"),
                              "step ms", "GB/s", "floor ms", "of copy", "tokens/s"})
        << "recompute runs the whole prefix as a prefill (its bytes: weights + the cache it writes); 'of copy' is the "
           "step's bytes over its time, as a fraction of the copy bandwidth"
        << (bench.sim() ? " (no copy bandwidth on the simulator)" : "") << ".\n";

    // ---- decode attention versions on one layer's cache ----
    const int attn_context = std::min(o.attn_context, 1 << 20);
    out << "\ndecode attention on one layer's cache: B = " << o.attn_batch << ", Hq = " << config.heads
        << ", Hkv = " << config.kv_heads << ", d = " << config.head_dim;
    if (o.attn_batch == 1) out << ", context " << attn_context;
    else out << ", contexts " << attn_context << " down to " << std::max(1, attn_context - 3 * (o.attn_batch - 1)) << " (ragged)";
    out << "; reference: CPU, double\n";
    const double attn_bytes = 2.0 * o.attn_batch * config.kv_heads * double(attn_context) * config.head_dim * 4 * 2;
    bench.require_fits(attn_bytes, "the decode attention benchmark's caches", "lower --attn-batch or --attn-context");
    std::vector<pd::Row> rows = run_attention_versions(bench, config, o.attn_batch, attn_context, mo.sm_count);
    out << pd::render(rows, {"kernel", "dtype", "time ms", "GB/s", "of copy", "max abs err", "status"})
        << "GB/s counts K and V once per sequence (v1 and v2 read them once per query head: from L2 when they fit); "
           "v4 splits the context in " << md::decode_splits({o.attn_batch, config.heads, config.kv_heads, config.head_dim, attn_context, attn_context}, mo.sm_count)
        << " for " << mo.sm_count << " SMs.\n";

    if (o.sweep)
        out << "\nsweep: one decode step at context C, cached vs recomputed (each point checked: the same logits):\n"
            << pd::render(sweep, {pd::Column::point("C", "context"), "kernel", "dtype", "step ms",
                                  pd::Column::point("speedup", "speedup"), pd::Column::point("FLOPs x", "flops_ratio"),
                                  pd::Column::point("bytes x", "bytes_ratio"), "of copy"})
            << "'speedup' is recompute's step time over the cached step's; 'FLOPs x' and 'bytes x' are the ratios of "
               "their counts: recompute grows with C, the cached step only by the KV it reads.\n";

    if (bench.dumping()) {
        nlohmann::json cfg{{"name", config.name},         {"vocab", config.vocab},       {"d_model", config.d_model},
                           {"layers", config.layers},     {"heads", config.heads},       {"kv_heads", config.kv_heads},
                           {"head_dim", config.head_dim}, {"ffn_dim", config.ffn_dim},   {"max_seq", config.max_seq},
                           {"rope_theta", config.rope_theta}, {"norm_eps", config.norm_eps},
                           {"tied_embeddings", config.tied_embeddings}, {"source", config.source}};
        std::ofstream(bench.dump_dir() + "config.json") << cfg.dump(2) << "\n";
        std::vector<std::int32_t> p32(prompt.begin(), prompt.end());
        bench.dump<std::int32_t>("prompt", p32, {std::size_t(B), std::size_t(P)});
        out << "dumped config.json, the weights, prompt, tokens, logits_cache, logits_recompute, k_cache and v_cache "
               "(bf16: *_bf16.npy) to " << bench.dump_dir() << "\n";
    }

    nlohmann::json report = bench.report({{"preset", config.name}, {"batch", B}, {"prompt_len", P}, {"gen", G},
                                          {"mode", o.mode}, {"kv_dtype", o.kv_dtype}, {"attention", o.attention},
                                          {"attn_batch", o.attn_batch}, {"attn_context", attn_context},
                                          {"dtype", dtypes.size() == 2 ? "all" : to_string(dtypes[0])}},
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

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
