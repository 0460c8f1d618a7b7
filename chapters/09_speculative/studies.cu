// Chapter 09's further studies: Leviathan's formula alone (beside the oracle's runs),
// the speed-up against the batch (--sweep-batch) and chapter 05's engine speculating (--engine). The lesson is main.cu.
#include "chapter.hpp"

#include "pd/model/executor.hpp"
#include "pd/model/speculative.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/speculative.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch09 {

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

// [ch09_sweep]
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
// [ch09_sweep]

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

}  // namespace ch09
