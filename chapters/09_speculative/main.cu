// Chapter 09: sampling and speculative decoding.
//
// A decode step reads every weight for one token per sequence. Speculative decoding guesses k
// tokens cheaply and checks them all in one pass of the target model over k + 1 positions, a
// small prefill that costs about one decode step while the weights stay memory-bound; each
// accepted guess is a token for free. The program runs plain decoding, then each proposer
// (prompt lookup, a draft model, the oracle of the formula) at every k: it checks that greedy
// speculation chooses plain decoding's tokens, and reports tokens per target step, vLLM's
// acceptance metrics, the verify pass's cost against a decode step (c_v) and the speed-up, beside
// the cost model's prediction for a GPU. --sweep-batch shows the gain fall as the batch grows.
//
// The steps every chapter shares are in pd/bench.hpp; the model, sampling and the speculative
// loop in model/ and kernels/layers/; the acceptance rules in pd_serving. This file holds the lesson.
#include "pd/bench.hpp"
#include "pd/llama2c.hpp"
#include "pd/model/executor.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/model/speculative.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/speculative.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

namespace md = pd::model;
namespace sv = pd::serving;
using pd::DType;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny";  // seconds on a CPU
    md::PromptSpec p{.batch = 2, .length = 16, .gen = 16};
#else
    std::string preset = "llama-3-8b";  // the GPU benchmark: a verify pass at a 4k context
    md::PromptSpec p{.batch = 1, .length = 4096, .gen = 64};
#endif
    std::vector<int> ks = {1, 2, 4, 8};
    double accept_rate = 0.8;
    int draft_layers = 1;
    std::string gpu = "H200";
    std::string cost_preset = "llama-3-8b";  // the cost model's model: the lesson is about a real one
    int cost_context = 1024;
    bool sweep = false, engine = false;
    std::string checkpoint, draft_checkpoint, tokenizer;  // llama2.c files instead of --preset
    pd::kernels::layers::SamplingParams sampling;
};

/// The cost model's time of one pass on the GPU preset: B sequences of @p tokens after @p context
/// cached positions, every token's logits.
double modelled_s(const sv::CostModel& cm, int B, int tokens, int context) {
    sv::Step step;
    for (int b = 0; b < B; ++b)
        step.items.push_back({.request = b, .tokens = tokens, .context = context, .logits = tokens});
    return cm.breakdown(step).total_s;
}

// [ch09_formula]
/// The oracle's expected mean acceptance length for the drafts it made: a draft of n tokens keeps
/// a + a^2 + ... + a^n of them on average (token i only if every one before it was kept), so 1 +
/// sum over positions i of (drafts with a token i) a^(i+1) / drafts; with every draft of k tokens,
/// (1 - a^(k+1)) / (1 - a). Near the end of a generation the drafts are shorter.
double expected_length(const sv::AcceptanceStats& s, double a) {
    double kept = 0, ai = 1;
    for (long long drafts_at : s.proposed_at) kept += double(drafts_at) * (ai *= a);
    return s.drafts > 0 ? 1 + kept / double(s.drafts) : 1.0;
}
// [ch09_formula]

/// Leviathan's formula alone, at a = --accept-rate and a verify pass that costs a decode step
/// (c_v = 1): the speed-up at k = 1 ... 12 for a draft step of 5% and of 20% of a target step,
/// and the best k of each. The runs' `formula` column is the same formula for the drafts they
/// made (shorter near the end of a run), their `model x` the cost model's c_draft and c_v.
std::vector<pd::Row> formula_rows(double a) {
    std::vector<pd::Row> rows;
    for (double c_draft : {0.05, 0.20}) {
        pd::Row r;
        r.result.kernel = "oracle";
        r.result.passed = true;
        int best = 1;
        std::vector<std::string> speedup;  // at k = 1 ... 12
        for (int k = 1; k <= 12; ++k) {
            const double x = sv::predicted_speedup(a, k, c_draft, 1.0);
            speedup.push_back(pd::fmt("%.2f", x));
            if (x > sv::predicted_speedup(a, best, c_draft, 1.0)) best = k;
        }
        r.point = {{"c_draft", pd::fmt("%.2f", c_draft)},
                   {"speedup", speedup},
                   {"best_k", best},
                   {"best_speedup", pd::fmt("%.2f", sv::predicted_speedup(a, best, c_draft, 1.0))}};
        rows.push_back(r);
    }
    return rows;
}

// [ch09_cv]
/// c_v = T(k + 1 tokens) / T(1 token): one verify pass of B sequences at context P against one
/// decode step, both timed on the model (null when not timing).
std::optional<double> measured_cv(pd::Bench& bench, md::Model& m, int B, int P, int k) {
    if (!bench.timing()) return std::nullopt;
    std::vector<double> ms;
    for (int tokens : {1, k + 1}) {
        std::vector<md::StepSequence> items;
        for (int b = 0; b < B; ++b) items.push_back({.slot = b, .context = P, .tokens = tokens, .logits = tokens});
        const std::vector<int> ids(std::size_t(B) * tokens, 1);
        ms.push_back(bench.time_ms([&] { m.forward(ids, items); }));
    }
    return ms[1] / ms[0];
}
// [ch09_cv]

/// --sweep-batch on the cost model: the oracle's speed-up at a and k = 1, 2, 4, 8 as the batch
/// grows, from c_v(B) = T(B (k + 1) tokens) / T(B tokens) on the GPU preset (an oracle costs nothing).
std::vector<pd::Row> sweep_batch(pd::Bench& bench, const sv::CostModel& cm, const Options& o,
                                 const pd::ModelConfig& config, DType weights, int P) {
    const int C = o.cost_context, k_meas = 4;
    // the measurement: verify passes of k + 1 = 5 tokens against decode steps on a model of 64 slots
    std::optional<md::Model> m;
    if (bench.timing()) {
        const md::ModelOptions mo{.weights = weights,
                                  .batch = 64,
                                  .max_seq = P + k_meas + 1,
                                  .max_step_tokens = 64 * (k_meas + 1),
                                  .max_logit_rows = 64 * (k_meas + 1)};
        bench.require_fits(md::Model::device_bytes(config, mo), "the sweep's model of 64 slots",
                           "lower --prompt-len or choose a smaller --preset");
        m.emplace(config, mo);
        m->init_synthetic(bench.options.seed);
    }
    std::vector<pd::Row> rows;
    for (int B = 1; B <= 64; B *= 2) {
        pd::Row r;
        r.result.kernel = "oracle";
        r.result.passed = true;
        std::vector<double> c_v, speedup;  // at k = 1, 2, 4, 8
        for (int k : {1, 2, 4, 8}) {
            c_v.push_back(modelled_s(cm, B, k + 1, C) / modelled_s(cm, B, 1, C));
            speedup.push_back(sv::predicted_speedup(o.accept_rate, k, 0.0, c_v.back()));
        }
        nlohmann::json measured = nullptr, measured_speedup = nullptr;  // k = 4 on the model
        if (const std::optional<double> cv = m ? measured_cv(bench, *m, B, P, k_meas) : std::nullopt; cv)
            measured = *cv, measured_speedup = sv::predicted_speedup(o.accept_rate, k_meas, 0.0, *cv);
        r.point = {{"B", B},
                   {"k", {1, 2, 4, 8}},
                   {"c_v", c_v},
                   {"speedup", speedup},
                   {"c_v_measured_k4", measured},
                   {"speedup_measured_k4", measured_speedup}};
        rows.push_back(r);
    }
    return rows;
}

// [ch09_engine]
/// --engine: chapter 05's engine (chunked, B slots, 2B requests at once, each asking k = 4 draft
/// tokens) replayed three ways: plain decoding, every request drafting, and under the rule, which
/// drafts only as much as the cost model predicts gains at each step's batch (speculation_limits()
/// with acceptance a). On the cost model the drafts are the oracle's (a = --accept-rate); on the
/// model, prompt lookup's, and the rule takes the acceptance the drafting run measured.
pd::Row engine_row(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, DType weights, bool on_model,
                   int B) {
    const int k = 4, prompt = on_model ? o.p.length : o.cost_context, output = on_model ? o.p.gen : 256;
    const pd::ModelConfig& shape = on_model ? config : *pd::find_model(o.cost_preset);
    sv::CostModelConfig cc = sv::cost_model_config(shape, *pd::roofline::find_gpu(o.gpu), 1);
    cc.accept_rate = o.accept_rate;
    std::vector<sv::Request> requests;
    for (int i = 0; i < 2 * B; ++i) requests.push_back({.id = i, .prompt_tokens = prompt, .output_tokens = output});
    sv::SchedulerConfig sc{.token_budget = std::max(512, B * (k + 1)),
                           .max_seqs = B,
                           .kv_capacity = on_model ? (long long)B * (prompt + output) : 1LL << 40};
    const auto replay = [&](int speculate, std::vector<int> rule, double& accepted) {
        for (sv::Request& r : requests) r.speculate = speculate;
        sc.draft_limit = std::move(rule);
        sv::Timeline t;
        if (on_model) {
            t = md::serve_on_model(config, sc, requests, weights, DType::fp32, 1, "none", bench.options.seed);
        } else {
            sv::Scheduler scheduler(sc);
            sv::CostModel cm(cc);
            t = sv::run_engine(requests, scheduler, cm, true);
        }
        long long drafted = 0, decodes = 0;  // kept drafts: the tokens beyond one per decode and prefill
        for (const auto& st : t.steps)
            for (const sv::BatchItem& i : st.step.items) drafted += i.draft, decodes += !i.prefill;
        accepted = drafted > 0 ? double(2LL * B * (output - 1) - decodes) / double(drafted) : 0.0;
        return sv::compute_metrics(t).output_tokens_per_s;
    };
    double a_plain = 0, a_always = 0, a_rule = 0;
    const double plain = replay(0, {}, a_plain), always = replay(k, {}, a_always);
    if (on_model) cc.accept_rate = std::clamp(a_always, 0.0, 1.0);  // the rule learns the proposer's acceptance
    const std::vector<int> rule = sv::speculation_limits(sv::CostModel(cc), k, prompt, B);
    const double ruled = replay(k, rule, a_rule);
    pd::Row r;
    r.result.kernel = on_model ? "ngram" : "oracle";
    r.result.passed = true;
    r.point = {{"B", B},
               {"executor", on_model ? "model" : "cost"},
               {"acceptance", on_model ? a_always : o.accept_rate},
               {"rule_k", rule[std::size_t(B)]},
               {"plain_tps", plain},
               {"always_x", always / plain},
               {"rule_x", ruled / plain}};
    return r;
}
// [ch09_engine]

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

/// The target's shape and files: a preset with synthetic weights, or a llama2.c checkpoint (and
/// its draft: the target's first layers, or a smaller checkpoint of the same vocabulary).
struct Target {
    pd::ModelConfig config;
    std::optional<pd::llama2c::Checkpoint> ckpt, draft_ckpt;
    std::optional<pd::llama2c::Tokenizer> tok;
};

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

/// What every proposer's row needs: the problem, the baseline's tokens and the cost model.
struct Problem {
    const Options& o;
    const Target& t;
    std::span<const int> prompt;
    int P, G;
    const sv::CostModel& cm;
    double decode_s;  // the cost model's decode step at --cost-context
};

// [ch09_versions]
/// Each selected proposer at each k, after plain decoding (the baseline and, greedy, the
/// oracle's truth): greedy speculation must choose plain decoding's tokens (fp32: every one;
/// bf16: up to a near tie, compare_spec_tokens()). @p notes gets the near ties, @p passed the verdict.
std::vector<pd::Row> run_proposers(pd::Bench& bench, const Problem& pb, md::Model& target, md::Model* draft,
                                   std::vector<std::string>& notes, bool& passed) {
    const Options& o = pb.o;
    const int B = target.options().batch;
    const DType weights = target.options().weights;
    const md::SpecGeneration plain =
        md::generate_speculative(target, nullptr, pb.prompt, pb.P, pb.G, {.sampling = o.sampling});
    const double tokens = double(B) * (pb.G - 1);  // after each sequence's first, from the prefill
    std::vector<pd::Row> rows = {bench.timed_row(
        {.name = "plain", .dtype = weights, .tokens = tokens, .point = {{"k", 0}, {"tokens_per_step", 1.0}}},
        bench.timing() ? std::optional<double>(plain.target_ms) : std::nullopt, true)};
    for (const pd::Version& v : sv::proposer_versions()) {
        if (!bench.selects(v)) continue;
        if (v.name == "oracle" && !o.sampling.greedy()) continue;  // it proposes the greedy choice
        if (v.name == "draft" && !draft) {
            bench.out() << "draft: skipped (" << pb.t.config.name << " is too large to copy through the host)\n";
            continue;
        }
        for (int k : o.ks) {
            const md::SpecOptions so{.proposer = v.name,
                                     .k = k,
                                     .accept_rate = o.accept_rate,
                                     .draft_layers = o.draft_layers,
                                     .sampling = o.sampling};
            const md::SpecGeneration g = md::generate_speculative(target, v.name == "draft" ? draft : nullptr,
                                                                  pb.prompt, pb.P, pb.G, so, plain.tokens);
            bool same = true;
            const std::string verdict =
                o.sampling.greedy() ? md::compare_spec_tokens(plain, g, B, weights, same) : std::string();
            passed = passed && same;
            if (!verdict.empty() && !verdict.starts_with("identical"))  // bf16: left plain decoding's at a near tie
                notes.push_back(v.name + " k = " + std::to_string(k) + ": " + verdict +
                                (v.name == "oracle" ? "; its acceptance counts the steps before" : ""));
            const std::optional<double> cv = measured_cv(bench, target, B, pb.P, k);
            const double c_draft = v.name != "draft" ? 0.0  // its share of the target's parameters
                                   : pb.t.draft_ckpt
                                       ? pb.t.draft_ckpt->config.parameter_count() / pb.t.config.parameter_count()
                                       : double(o.draft_layers) / pb.t.config.layers;
            const double cv_model = modelled_s(pb.cm, B, k + 1, o.cost_context) / pb.decode_s;
            nlohmann::json point{
                {"k", k},
                {"tokens_per_step", g.tokens_per_step()},
                {"acceptance_rate", g.stats.acceptance_rate()},  // vLLM's: accepted / drafted
                {"mean_acceptance_length", g.stats.mean_acceptance_length()},
                {"per_position", g.stats.per_position()},
                {"formula", v.name == "oracle" ? nlohmann::json(expected_length(g.stats, o.accept_rate))
                                               : nlohmann::json(nullptr)},
                {"c_verify", cv ? nlohmann::json(*cv) : nlohmann::json(nullptr)},
                {"c_verify_model", cv_model},
                {"tokens", verdict.empty() ? nlohmann::json(nullptr) : nlohmann::json(verdict)},
                {"off_truth", g.off_truth.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.off_truth)},
                {"speedup_model", g.tokens_per_step() / (k * c_draft + cv_model)}};
            rows.push_back(bench.timed_row(
                {.name = v.name, .dtype = weights, .tokens = tokens, .baseline = &rows.front(), .point = point},
                bench.timing() ? std::optional<double>(g.target_ms + g.draft_ms) : std::nullopt, same));
        }
    }
    return rows;
}
// [ch09_versions]

/// The proposers' table, its legend and the near ties.
void print_proposers(std::ostream& out, const Options& o, const std::vector<pd::Row>& rows,
                     const std::vector<std::string>& notes) {
    out << "\n"
        << pd::render(rows,
                      {"kernel", pd::Column::point("k", "k"), pd::Column::point("tok/step", "tokens_per_step"),
                       pd::Column::percent("accept", "acceptance_rate"),
                       pd::Column::point("mean len", "mean_acceptance_length"), pd::Column::point("formula", "formula"),
                       pd::Column::point("c_v", "c_verify"), pd::Column::point("c_v " + o.gpu, "c_verify_model"),
                       "time ms", "vs baseline", pd::Column::point("model x", "speedup_model"), "status"})
        << "tok/step: tokens per target pass of a sequence (the bonus token counted); accept: accepted / drafted; mean "
           "len: "
           "1 + accepted / drafts (vLLM); formula: the oracle's expected mean len, (1 - a^(k+1)) / (1 - a) for drafts "
           "of k (shorter near the end); c_v: a verify pass of k + 1 tokens over a "
           "decode step, measured"
        << (pd::Bench::sim() ? " (CPU time on the simulator)" : "")
        << " and modelled; vs baseline: the measured speed-up over plain decoding; model x: "
           "tok/step / (k c_draft + c_v), modelled for "
        << o.cost_preset << " on " << o.gpu << ".\n";
    for (const std::string& n : notes) out << n << "\n";
}

/// The formula alone (formula_rows()), printed.
std::vector<pd::Row> formula_section(std::ostream& out, const Options& o) {
    std::vector<pd::Row> formula = formula_rows(o.accept_rate);
    std::vector<pd::Column> columns = {pd::Column::point("c_draft", "c_draft")};
    for (std::size_t k = 1; k <= 12; ++k)
        columns.push_back(pd::Column::element("k=" + std::to_string(k), "speedup", k - 1));
    columns.push_back(pd::Column::point("best k", "best_k"));
    columns.push_back(pd::Column::point("speed-up", "best_speedup"));
    out << "\nthe formula alone at a = " << o.accept_rate
        << ", a verify pass as dear as a decode step: speed-up (1 - a^(k+1)) / ((1 - a)(k c_draft + 1))\n"
        << pd::render(formula, columns);
    return formula;
}

/// --sweep-batch (sweep_batch()), printed.
std::vector<pd::Row> sweep_section(pd::Bench& bench, const Problem& pb, DType weights) {
    const Options& o = pb.o;
    std::vector<pd::Row> sweep = sweep_batch(bench, pb.cm, o, pb.t.config, weights, pb.P);
    std::vector<pd::Column> columns = {pd::Column::point("B", "B")};
    for (std::size_t i = 0; i < 4; ++i)
        columns.push_back(pd::Column::element(i ? "k=" + std::to_string(1 << i) : "c_v k=1", "c_v", i));
    for (std::size_t i = 0; i < 4; ++i)
        columns.push_back(pd::Column::element(i ? "k=" + std::to_string(1 << i) : "speed-up k=1", "speedup", i));
    columns.push_back(pd::Column::point("measured c_v k=4", "c_v_measured_k4"));
    columns.push_back(pd::Column::point("speed-up", "speedup_measured_k4"));
    bench.out() << "\nsweep: the oracle at a = " << o.accept_rate << " against the batch; modelled for "
                << o.cost_preset << " on " << o.gpu << " at a " << o.cost_context
                << "-token context, and k = 4 measured on " << pb.t.config.name << " at its prompt's context"
                << (bench.sim() ? " (CPU time on the simulator)" : "") << ":\n"
                << pd::render(sweep, columns)
                << "a verify pass moves B (k + 1) tokens through weights read once: cheap while B (k + 1) stays under "
                   "the ridge, then as dear as k + 1 steps.\n";
    return sweep;
}

/// --engine (engine_row()) at several batches, on the cost model and on the model, printed.
std::vector<pd::Row> engine_section(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, DType weights) {
    std::vector<pd::Row> engine;
    for (int B : {1, 4, 16, 64}) engine.push_back(engine_row(bench, o, config, weights, false, B));
    for (int B : bench.sim() ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 4, 16})
        engine.push_back(engine_row(bench, o, config, weights, true, B));
    bench.out() << "\nthe engine (chunked, B slots, 2B requests at once asking k = 4): output tokens/s plain, and each "
                   "way over plain\n"
                << pd::render(engine,
                              {pd::Column::point("executor", "executor"), "kernel", pd::Column::point("B", "B"),
                               pd::Column::point("accept", "acceptance"), pd::Column::point("rule k", "rule_k"),
                               pd::Column::point("plain tok/s", "plain_tps"), pd::Column::point("always x", "always_x"),
                               pd::Column::point("rule x", "rule_x")})
                << "cost: " << o.cost_preset << " on " << o.gpu << ", prompts of " << o.cost_context
                << " tokens, 256 out, the oracle at --accept-rate; model: " << config.name << ", prompt lookup"
                << (bench.sim() ? " (CPU time on the simulator)" : "")
                << ", its acceptance measured by the always run. rule k: the draft tokens the rule allows at B.\n";
    return engine;
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"09_speculative", "sampling and speculative decoding",
                    "Chapter 09: speculative decoding. Proposers guess k tokens; the target verifies them in one pass "
                    "of k + 1 positions. Reports tokens per target step, acceptance, the verify pass's cost c_v and "
                    "the speed-up over plain decoding, beside the cost model's prediction.",
                    sv::proposer_versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const Target t = read_target(o);
    const pd::ModelConfig& config = t.config;
    int P = 0;
    const std::vector<int> prompt = md::make_prompts(o.p, config, t.tok ? &*t.tok : nullptr, bench.options.seed, P);
    const int B = o.p.batch, G = o.p.gen, k_max = *std::max_element(o.ks.begin(), o.ks.end());
    o.sampling.seed = bench.options.seed;
    const bool use_draft = check_problem(bench, o, t, P, G, k_max);
    const md::ModelOptions mo{.weights = bench.dtypes().front(),
                              .batch = B,
                              .max_seq = P + G + k_max,
                              .max_step_tokens = B * std::max(P, k_max + 1),
                              .max_logit_rows = B * (k_max + 1)};
    bench.require(  // every proposer at every k runs about P + G + k G tokens per sequence through the model
        pd::Needs{"speculating with " + config.name,
                  "choose a smaller --preset, or lower --batch, --prompt-len, --gen or the --k list"}
            .device(use_draft ? "the target and draft models" : "the target model",
                    md::Model::device_bytes(config, mo) * (use_draft ? 2 : 1))
            .work(2 * config.parameter_count() * B * (P + G) * (1 + 3.0 * double(o.ks.size())) * 2));
    bench.device();
    bench.measure_roofs();
    std::ostream& out = bench.out();
    const sv::CostModel cm(sv::cost_model_config(*pd::find_model(o.cost_preset), *pd::roofline::find_gpu(o.gpu), 1));
    const int C = o.cost_context;

    // [ch09_cost]
    const double decode_s = modelled_s(cm, B, 1, C);
    out << "model: " << pd::describe(config) << "\n"
        << "run: B = " << B << ", prompt P = " << P << ", generate G = " << G << ", "
        << pd::kernels::layers::describe(o.sampling) << "\nmodelled: " << o.cost_preset << " on " << o.gpu
        << ", B = " << B << ": a decode step at context " << C << " takes " << pd::fmt("%.1f", decode_s * 1e6)
        << " us; a verify pass of k + 1 tokens, c_v = T(k + 1) / T(1) = ";
    for (int k : o.ks)
        out << (k == o.ks.front() ? "" : ", ") << pd::fmt("%.3f", modelled_s(cm, B, k + 1, C) / decode_s)
            << " (k = " << k << ")";
    out << "\n";
    // [ch09_cost]

    md::Model target(config, mo);
    if (t.ckpt)
        target.load(t.ckpt->weights);
    else
        target.init_synthetic(bench.options.seed);
    std::optional<md::Model> draft;
    if (use_draft) draft.emplace(make_draft(o, t, target, mo));
    const Problem pb{o, t, prompt, P, G, cm, decode_s};
    std::vector<std::string> notes;
    bool passed = true;
    const std::vector<pd::Row> rows = run_proposers(bench, pb, target, draft ? &*draft : nullptr, notes, passed);
    print_proposers(out, o, rows, notes);
    const bool oracle =
        std::any_of(rows.begin(), rows.end(), [](const pd::Row& r) { return r.result.kernel == "oracle"; });

    nlohmann::json report = bench.report({{"preset", config.name},
                                          {"batch", B},
                                          {"prompt_len", P},
                                          {"gen", G},
                                          {"k", o.ks},
                                          {"accept_rate", o.accept_rate},
                                          {"draft_layers", o.draft_layers},
                                          {"temperature", o.sampling.temperature},
                                          {"top_k", o.sampling.top_k},
                                          {"top_p", o.sampling.top_p},
                                          {"gpu", o.gpu},
                                          {"cost_preset", o.cost_preset},
                                          {"cost_context", C},
                                          {"dtype", to_string(mo.weights)}},
                                         rows);
    report["formula"] = bench.json(oracle ? formula_section(out, o) : std::vector<pd::Row>{});
    report["sweep"] = bench.json(o.sweep ? sweep_section(bench, pb, mo.weights) : std::vector<pd::Row>{});
    report["engine"] = bench.json(o.engine ? engine_section(bench, o, config, mo.weights) : std::vector<pd::Row>{});
    if (!passed) {
        out << "FAILED: greedy speculation did not choose plain decoding's tokens\n";
        report["passed"] = false;
    }
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv,
                            {{"SpecOptions.draft_layers", "--draft-layers"},
                             {"SpecOptions.k", "--k"},
                             {"SamplingParams.temperature", "--temperature"},
                             {"SamplingParams.top_k", "--top-k"},
                             {"SamplingParams.top_p", "--top-p"},
                             {"ModelOptions.batch", "--batch"},
                             {"PromptSpec.length", "--prompt-len"},
                             {"PromptSpec.gen", "--gen"}});
}
