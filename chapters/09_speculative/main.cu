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
// loop in model/ and kernels/layers/; the acceptance rules in pd_serving. This file holds the lesson;
// the options and the models read or built are in problem.cu, the further studies in studies.cu.
#include "chapter.hpp"

#include "pd/model/speculative.hpp"
#include "pd/serving/speculative.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch09 {

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

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"09_speculative", "sampling and speculative decoding",
                    "Chapter 09: speculative decoding. Proposers guess k tokens; the target verifies them in one pass "
                    "of k + 1 positions. Reports tokens per target step, acceptance, the verify pass's cost c_v and "
                    "the speed-up over plain decoding, beside the cost model's prediction.",
                    sv::proposer_versions()};
    add_options(bench, o);
    bench.no_dump();  // its results are the tables and --json
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

}  // namespace ch09

int main(int argc, char** argv) {
    return pd::guarded_main(ch09::run, argc, argv,
                            {{"SpecOptions.draft_layers", "--draft-layers"},
                             {"SpecOptions.k", "--k"},
                             {"SamplingParams.temperature", "--temperature"},
                             {"SamplingParams.top_k", "--top-k"},
                             {"SamplingParams.top_p", "--top-p"},
                             {"ModelOptions.batch", "--batch"},
                             {"PromptSpec.length", "--prompt-len"},
                             {"PromptSpec.gen", "--gen"}});
}
