/// @file generate.cpp
/// @brief Greedy generation on chapter 04's model, with the cache and by recomputation, and the
/// checks of what they produced (generate.hpp).
#include "pd/model/generate.hpp"

#include "layers_reference.hpp"

#include "model_reference.hpp"

#include "pd/report.hpp"
#include "pd/rng.hpp"
#include "pd/timer.hpp"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace {

/// Rank of @p token among @p row's logits (0: the largest).
int rank_of(std::span<const float> row, int token) {
    int rank = 0;
    for (float x : row) rank += x > row[std::size_t(token)];
    return rank;
}

}  // namespace

std::vector<int> make_prompts(const PromptSpec& s, const ModelConfig& c, const llama2c::Tokenizer* tok,
                              std::uint64_t seed, int& P) {
    const bool text = tok && !s.text.empty();
    std::vector<int> ids;  // the text's encoding
    if (text) {
        const std::size_t piece = tok->longest_piece(), fewest = 1 + (s.text.size() + piece) / piece;  // BOS too
        if (fewest + std::size_t(s.gen) > std::size_t(c.max_seq))
            throw std::invalid_argument("PromptSpec.text of " + std::to_string(s.text.size()) +
                                        " bytes encodes to at least " + std::to_string(fewest) +
                                        " tokens (BOS, and pieces of at most " + std::to_string(piece) +
                                        " bytes): with PromptSpec.gen " + std::to_string(s.gen) +
                                        " past the model's max_seq = " + std::to_string(c.max_seq) +
                                        "; shorten the prompt or lower PromptSpec.gen");
        ids = tok->encode(s.text, true, false);
    }
    P = text ? int(ids.size()) : s.length;
    if (P + s.gen > c.max_seq)
        throw std::invalid_argument(
            (text ? "PromptSpec.text (" + std::to_string(P) + " tokens)" : std::string("PromptSpec.length")) +
            " + PromptSpec.gen = " + std::to_string(P + s.gen) +
            " exceeds the model's max_seq = " + std::to_string(c.max_seq) + " (" + c.name + ")");
    std::vector<int> prompt;
    if (text) {
        for (int b = 0; b < s.batch; ++b) prompt.insert(prompt.end(), ids.begin(), ids.end());
    } else {
        prompt.resize(std::size_t(s.batch) * std::size_t(P));
        Rng rng(derive_seed(seed, 7));
        for (int& t : prompt) t = rng.integer(0, c.vocab - 1);
    }
    return prompt;
}

double generation_flops(const ModelConfig& c, const PromptSpec& s, int P, bool cached, bool recomputed, int sweep_max) {
    const double B = s.batch, G = s.gen;
    double tokens = (cached ? B * (P + G - 1) : 0) + (recomputed ? B * (G * P + G * (G - 1) / 2) : 0);
    for (int C = 8; C <= std::min(sweep_max, c.max_seq); C *= 2) tokens += B * (C + 1);
    return tokens * 2 * c.parameter_count();
}

void Pass::add(int slot, int context, std::span<const int> new_tokens, int stream, int rows,
               std::span<const int> blocks) {
    const int n = int(new_tokens.size());
    tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
    sequences.push_back({.slot = slot, .context = context, .tokens = n, .blocks = blocks, .logits = rows});
    for (int r = 0; r < rows; ++r) {  // the rows after its last `rows` tokens predict these positions
        streams.push_back(stream);
        positions.push_back(context + n - rows + 1 + r);
    }
}

Pass Pass::batch(std::span<const int> tokens, int B, int context, const std::vector<std::vector<int>>* tables) {
    if (B < 1 || tokens.empty() || tokens.size() % std::size_t(B) != 0)
        throw std::invalid_argument("Pass::batch: " + std::to_string(tokens.size()) +
                                    " tokens are not B = " + std::to_string(B) + " equal rows");
    Pass p;
    const std::size_t n = tokens.size() / std::size_t(B);
    for (int b = 0; b < B; ++b)
        p.add(b, context, tokens.subspan(std::size_t(b) * n, n), b, 1,
              tables ? std::span<const int>(tables->at(std::size_t(b))) : std::span<const int>());
    return p;
}

std::vector<int> choose(Model& m, const Pass& p, const kernels::layers::SamplingParams& sampling,
                        DeviceBuffer<int>& out) {
    if (sampling.greedy())
        m.argmax(out.data());
    else
        m.sample(sampling, p.streams, p.positions, out.data());
    std::vector<int> chosen = out.download();
    chosen.resize(p.streams.size());
    return chosen;
}

// [token_loop]
void token_loop(Model& m, const kernels::layers::SamplingParams& sampling, const std::function<bool(Pass&)>& next,
                const std::function<void(std::span<const int> chosen, double ms)>& take) {
    DeviceBuffer<int> out(std::size_t(std::max(m.max_logit_rows(), m.options().batch)));
    for (Pass p; next(p); p = Pass{}) {
        const double ms = time_device([&] { m.forward(p.tokens, p.sequences); }, 0, 1).median_ms;
        take(choose(m, p, sampling, out), ms);
    }
}
// [token_loop]

namespace {

/// Refuses prompts that are not [B, P] for @p who, as Model::prefill() did.
void check_prompts(std::span<const int> prompt, int B, int P, const char* who) {
    if (P < 1 || prompt.size() != std::size_t(B) * std::size_t(P))
        throw std::invalid_argument(std::string(who) + ": " + std::to_string(prompt.size()) +
                                    " prompt tokens, expected B * P = " + std::to_string(B) + " * " +
                                    std::to_string(P));
}

/// Appends the tokens @p chosen, the logits they were chosen from and the pass's time to @p g.
void keep(const Model& m, Generation& g, std::span<const int> chosen, double ms) {
    std::vector<float> l = m.logits().download();
    l.resize(chosen.size() * std::size_t(m.config().vocab));
    g.tokens.insert(g.tokens.end(), chosen.begin(), chosen.end());
    g.logits.insert(g.logits.end(), l.begin(), l.end());
    g.ms.push_back(ms);
}

}  // namespace

// [generate_cached]
/// With the cache: prefill the prompt once, then each step feeds the last token only.
Generation generate_cached(Model& m, const std::vector<int>& prompt, int P, int G,
                           const kernels::layers::SamplingParams& sampling) {
    Generation g;
    g.sampling = sampling;
    const int B = m.options().batch;
    check_prompts(prompt, B, P, "generate_cached");
    std::vector<int> last;  // [B]: the tokens the last pass chose
    token_loop(
        m, sampling,
        [&](Pass& p) {
            const int i = int(g.ms.size());  // K, V of positions < P + i - 1 come from the cache
            if (i < G) p = i == 0 ? Pass::batch(prompt, B, 0) : Pass::batch(last, B, P + i - 1);
            return i < G;
        },
        [&](std::span<const int> chosen, double ms) {
            keep(m, g, chosen, ms);
            last.assign(chosen.begin(), chosen.end());
        });
    return g;
}
// [generate_cached]

// [teacher_forced_agreement]
namespace {

/// Adds one next-token distribution to @p a: the original's logits @p p against the quantized
/// model's @p q, V each. Both argmaxes and, with the log-softmax of both in double,
/// KL(p || q) = sum p (log p - log q).
void compare_row(const float* p, const float* q, int V, Agreement& a) {
    const int ap = int(std::max_element(p, p + V) - p), aq = int(std::max_element(q, q + V) - q);
    const auto log_norm = [V](const float* l, int arg) {
        double sum = 0;
        for (int v = 0; v < V; ++v) sum += std::exp(double(l[v]) - l[arg]);
        return double(l[arg]) + std::log(sum);
    };
    const double zp = log_norm(p, ap), zq = log_norm(q, aq);
    double kl = 0;
    for (int v = 0; v < V; ++v) {
        const double log_p = p[v] - zp;
        kl += std::exp(log_p) * (log_p - (q[v] - zq));
    }
    kl = std::max(kl, 0.0);  // >= 0 in exact arithmetic; rounding may leave -1e-17
    a.top1 += ap == aq;
    a.mean_kl += kl;
    a.max_kl = std::max(a.max_kl, kl);
    ++a.tokens;
}

}  // namespace

Agreement teacher_forced_agreement(const Generation& original, Model& quantized, const std::vector<int>& prompt,
                                   int P) {
    const int B = quantized.options().batch, V = quantized.config().vocab;
    const int G = B > 0 ? int(original.tokens.size()) / B : 0;
    if (G < 1 || original.logits.size() != std::size_t(G) * B * V)
        throw std::invalid_argument(
            "teacher_forced_agreement: the original's generation is not [G, B] tokens of V logits");
    check_prompts(prompt, B, P, "teacher_forced_agreement");
    Agreement a;
    int i = 0;  // the step; its pass feeds the prompt, then the tokens the original chose at step i - 1
    token_loop(
        quantized, {},
        [&](Pass& p) {
            const std::span<const int> fed =
                i == 0 ? std::span<const int>(prompt) : std::span(original.tokens).subspan(std::size_t(i - 1) * B, B);
            if (i < G) p = Pass::batch(fed, B, i == 0 ? 0 : P + i - 1);
            return i < G;
        },
        [&](std::span<const int>, double) {  // its own choices go unused: it is fed the original's
            const std::vector<float> q = quantized.logits().download();
            for (int b = 0; b < B; ++b)
                compare_row(original.logits.data() + (std::size_t(i) * B + b) * V, q.data() + std::size_t(b) * V, V, a);
            ++i;
        });
    a.top1 /= a.tokens;
    a.mean_kl /= a.tokens;
    return a;
}
// [teacher_forced_agreement]

// [generate_recompute]
/// Without a cache: every step runs the whole sequence so far (prompt + generated) through
/// the model again, as a prefill, and keeps only the last position's logits.
Generation generate_recompute(Model& m, const std::vector<int>& prompt, int P, int G,
                              const kernels::layers::SamplingParams& sampling) {
    Generation g;
    g.sampling = sampling;
    const int B = m.options().batch;
    check_prompts(prompt, B, P, "generate_recompute");
    std::vector<int> seq = prompt;  // [B, P + i]: the prompts and the tokens chosen so far
    token_loop(
        m, sampling,
        [&](Pass& p) {
            const int i = int(g.ms.size());
            if (i < G) p = Pass::batch(seq, B, 0);  // from position 0: nothing is cached
            return i < G;
        },
        [&](std::span<const int> chosen, double ms) {
            keep(m, g, chosen, ms);
            const int n = int(seq.size()) / B;
            std::vector<int> longer;
            for (int b = 0; b < B; ++b) {
                longer.insert(longer.end(), seq.begin() + std::ptrdiff_t(b) * n,
                              seq.begin() + std::ptrdiff_t(b + 1) * n);
                longer.push_back(chosen[std::size_t(b)]);
            }
            seq = std::move(longer);
        });
    return g;
}
// [generate_recompute]

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
            const kernels::layers::SamplingParams& r = a.sampling;
            if (r.greedy()) {
                passed = d == DType::bf16 && rank_of(la, b.tokens[at]) < 5 && rank_of(lb, a.tokens[at]) < 5 && passed;
            } else {  // the same draw fell on either side of an edge the roundings moved: both tokens kept by both
                const auto kept = [&](std::span<const float> l, int token) {
                    return reference::sample_row(l, r.temperature, r.top_k, r.top_p, 0.0).probs[std::size_t(token)] > 0;
                };
                passed = d == DType::bf16 && kept(la, b.tokens[at]) && kept(lb, a.tokens[at]) && passed;
            }
            break;  // after a divergence the two sequences differ: nothing more to compare
        }
    const std::string seqs = std::to_string(B) + (B == 1 ? " sequence" : " sequences");
    if (diverged == 0) return "identical tokens at all " + std::to_string(G) + " steps of " + seqs;
    return std::to_string(diverged) + " of " + seqs + " diverged" +
           (!passed               ? " (FAILED)"
            : a.sampling.greedy() ? " (each side's token in the other's top 5)"
                                  : " (each side's token one the other's rules keep)");
}

// [kv_rounding]
std::function<void(std::span<double>)> kv_rounding(DType kv) {
    if (kv != DType::fp8 && kv != DType::int8) return {};  // fp32 and bf16 rows: the rule allows bf16's rounding
    return [kv](std::span<double> row) {                   // as the append does it in fp32: codes and the row's scale
        float amax = 0;
        for (double x : row) amax = std::max(amax, std::fabs(float(x)));
        const float scale = amax / (kv == DType::fp8 ? kernels::quant::kFp8Max : 127.f);
        for (double& x : row) {
            const float v = float(x);
            x = kv == DType::fp8
                    ? kernels::quant::fp8_e4m3_decode(kernels::quant::fp8_e4m3_encode(scale > 0.f ? v / scale : 0.f)) *
                          scale
                    : float(std::int8_t(kernels::quant::int8_code(v, scale))) * scale;
        }
    };
}
// [kv_rounding]

/// The device model against the CPU reference model (double) on the cached generation: the
/// prefill's logits and every decode step's. fp32: |out - ref| <= 1e-3 + 1e-3 |ref|;
/// bf16: ||out - ref|| / ||ref|| <= 2e-2 per step.
CompareResult check_reference(const ModelConfig& c, const ModelWeights& w, const std::vector<int>& prompt,
                              const Generation& g, int B, int P, DType d, DType kv) {
    CompareResult r{.passed = true, .max_abs_err = 0, .max_rel_err = 0};
    const int G = int(g.tokens.size()) / B, V = c.vocab;
    for (int b = 0; b < B; ++b) {
        reference::ModelReference ref(c, w, kv_rounding(kv));
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

nlohmann::json check_generations(const Model& m, const std::vector<int>& prompt, int P, const Generation* cached,
                                 const Generation* recomputed, DType rule, std::ostream& out, bool& passed) {
    const ModelConfig& c = m.config();
    const int B = m.options().batch;
    nlohmann::json j{{"dtype", to_string(m.options().weights)}};
    if (cached && recomputed) {
        bool ok = true;
        double diff = 0;
        const std::string verdict = compare_generations(*cached, *recomputed, B, c.vocab, rule, ok, diff);
        out << "  cache vs recompute: " << verdict << "; largest logit difference " << fmt("%.3g", diff) << "\n";
        j["agree"] = ok;
        j["max_logit_diff"] = diff;
        passed = passed && ok;
    }
    if (cached && c.parameter_count() <= 1e8) {  // the reference model in double, on the CPU
        const CompareResult r =
            check_reference(c, m.download_weights(), prompt, *cached, B, P, rule, m.options().cache.kv);
        out << "  vs the CPU reference model (double): max abs err " << fmt("%.3g", r.max_abs_err) << " over "
            << cached->ms.size() << " steps: " << (r.passed ? "ok" : "FAILED") << "\n";
        j["reference_max_abs_err"] = r.max_abs_err;
        j["reference_passed"] = r.passed;
        passed = passed && r.passed;
    } else if (cached) {
        out << "  vs the CPU reference model: skipped (" << fmt("%.3g", c.parameter_count())
            << " parameters is too many for the CPU; the tests run it on the tiny preset)\n";
    }
    return j;
}

// [step_at_context]
StepAtContext step_at_context(Bench& bench, Model& m, const std::vector<int>& tokens, int C, double tolerance) {
    const int B = m.options().batch;
    std::vector<int> prefix, last;  // each sequence's first C - 1 tokens, and its last
    for (int b = 0; b < B; ++b) {
        const auto row = tokens.begin() + std::ptrdiff_t(b) * C;
        prefix.insert(prefix.end(), row, row + C - 1);
        last.push_back(row[C - 1]);
    }
    DeviceBuffer<int> dlast{std::span<const int>(last)};
    m.prefill(prefix, C - 1);
    m.decode(dlast.data());
    const std::vector<float> cached = m.logits().download();
    m.prefill(tokens, C);
    const std::vector<float> full = m.logits().download();
    StepAtContext s;
    for (std::size_t i = 0; i < full.size(); ++i) {
        s.max_logit_diff = std::max<double>(s.max_logit_diff, std::fabs(cached[i] - full[i]));
        s.max_logit = std::max<double>(s.max_logit, std::fabs(full[i]));
    }
    s.agree = s.max_logit_diff <= tolerance * std::max(1.0, s.max_logit);
    if (bench.timing() && s.agree) {
        m.prefill(prefix, C - 1);
        s.cached_ms = bench.time_ms([&] {
            m.rewind(C - 1);
            m.decode(dlast.data());
        });
        s.recomputed_ms = bench.time_ms([&] { m.prefill(tokens, C); });
    }
    return s;
}
// [step_at_context]

nlohmann::json timing_json(const Generation& g, int B) {
    const std::vector<double> itl(g.ms.begin() + 1, g.ms.end());
    double sum = 0;
    for (double x : g.ms) sum += x;
    const auto pct = [&](double p) {
        return itl.empty() ? nlohmann::json(nullptr) : nlohmann::json(percentile(itl, p));
    };
    return {{"ttft_ms", g.ms[0]},
            {"itl_median_ms", pct(50)},
            {"itl_p99_ms", pct(99)},
            {"tokens_per_s", 1e3 * B * double(g.ms.size()) / sum},
            {"step_ms", g.ms}};
}

std::string describe_timing(const Generation& g, int B) {
    const std::vector<double> itl(g.ms.begin() + 1, g.ms.end());
    double sum = 0;
    for (double x : g.ms) sum += x;
    return "TTFT " + fmt("%.3g", g.ms[0]) + " ms, ITL median " +
           (itl.empty() ? "-" : fmt("%.3g", percentile(itl, 50))) + " ms (p99 " +
           (itl.empty() ? "-" : fmt("%.3g", percentile(itl, 99))) + " ms), " +
           fmt("%.4g", 1e3 * B * double(g.ms.size()) / sum) + " tokens/s";
}

namespace {

std::string suffix_of(const Model& m) {
    return m.options().weights == DType::fp32 ? "" : "_bf16";
}

}  // namespace

void dump_cache(const Bench& bench, const Model& m, int positions) {
    if (!bench.dumping()) return;
    const ModelConfig& c = m.config();
    const std::vector<std::size_t> shape{std::size_t(c.layers), std::size_t(m.options().batch), std::size_t(c.kv_heads),
                                         std::size_t(positions), std::size_t(c.head_dim)};
    bench.dump<float>("k_cache" + suffix_of(m), m.download_cache(false, positions), shape);
    bench.dump<float>("v_cache" + suffix_of(m), m.download_cache(true, positions), shape);
}

void dump_inputs(const Bench& bench, const ModelConfig& c, const std::vector<int>& prompt, int B, int P) {
    if (!bench.dumping()) return;
    bench.dump_text("config.json", to_json(c).dump(2) + "\n");
    bench.dump<std::int32_t>("prompt", std::vector<std::int32_t>(prompt.begin(), prompt.end()),
                             {std::size_t(B), std::size_t(P)});
}

void dump_generation(const Bench& bench, const Model& m, const Generation* cached, const Generation* recomputed) {
    if (!bench.dumping() || (!cached && !recomputed)) return;
    const ModelConfig& c = m.config();
    const std::string suffix = suffix_of(m);
    const Generation& g = cached ? *cached : *recomputed;
    const int B = m.options().batch, G = int(g.ms.size());
    std::vector<std::int32_t> tokens(std::size_t(B) * G);  // [B, G]
    for (int i = 0; i < G; ++i)
        for (int b = 0; b < B; ++b) tokens[std::size_t(b) * G + i] = g.tokens[std::size_t(i) * B + b];
    bench.dump<std::int32_t>("tokens" + suffix, tokens, {std::size_t(B), std::size_t(G)});
    const std::vector<std::size_t> lshape{std::size_t(G), std::size_t(B), std::size_t(c.vocab)};
    if (cached) bench.dump<float>("logits_cache" + suffix, cached->logits, lshape);
    if (recomputed) bench.dump<float>("logits_recompute" + suffix, recomputed->logits, lshape);
    ModelWeights w = m.download_weights();
    for (const ModelWeights::Tensor& t : w.tensors(c)) bench.dump<float>(t.name + suffix, *t.data, t.shape);
}

}  // namespace pd::model
