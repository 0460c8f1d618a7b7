// Chapter 11's further studies on the cost model: the transfer priced on each link, the placement
// searches of aggregated and disaggregated setups, and the design review. The lesson is main.cu.
#include "chapter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch11 {

using pd::fmt;

/// The options of the studies: the workload, the SLOs, the searches and the review.
void add_study_options(pd::Bench& bench, Options& o) {
    bench.app.add_flag("--layerwise", o.layerwise, "Send the cache layer by layer while the prefill runs");
    bench.option("--requests", o.w.requests, "Requests of the workload (at least; longer runs at high rates)",
                 CLI::Range(1, 100000));
    bench.option("--rate", o.w.rate, "Requests per second of the goodput table and of --review",
                 CLI::Range(0.001, 1e6));
    bench.app
        .add_option("--trace", o.w.trace,
                    "--review: the workload from a CSV trace (arrival seconds, prompt tokens, output tokens)")
        ->check(pd::input_file());
    bench.option("--prompt-len", o.w.prompt_len, "Mean prompt tokens", CLI::Range(1.0, 1e7));
    bench.option("--output-len", o.w.output_len, "Mean output tokens", CLI::Range(1.0, 1e6));
    bench.option("--prompt-dist", o.w.prompt_dist, "fixed, uniform (+-50%) or lognormal (sigma 1)",
                 CLI::IsMember({"fixed", "uniform", "lognormal"}));
    bench.option("--output-dist", o.w.output_dist, "As --prompt-dist",
                 CLI::IsMember({"fixed", "uniform", "lognormal"}));
    bench.option("--slo-ttft-ms", o.slo_ttft_ms, "TTFT bound", CLI::Range(0.001, 1e9));
    bench.option("--slo-tpot-ms", o.slo_tpot_ms, "TPOT bound", CLI::Range(0.001, 1e9));
    bench.option("--target", o.target, "SLO attainment of the capacity (DistServe: 0.9)", CLI::Range(0.01, 1.0));
    bench.option("--max-seqs", o.max_seqs, "Requests an instance runs at once", CLI::Range(1, 4096));
    bench.app.add_option("--budgets", o.budgets, "Token budgets of the aggregated search")
        ->check(CLI::Range(1, 1 << 20));
    bench.app.add_option("--tps", o.tps, "Tensor-parallel degrees of the searches")->check(CLI::Range(1, 64));
    bench.app.add_flag("--review", o.review, "Review the setup --policy, --tp, --token-budget on --gpus GPUs");
    bench.option("--policy", o.policy, "--review: the setup's policy",
                 CLI::IsMember({"static", "continuous", "chunked"}));
    bench.option("--tp", o.tp, "--review: the setup's tensor-parallel degree", CLI::Range(1, 64));
    bench.option("--token-budget", o.token_budget, "--review: the setup's token budget", CLI::Range(1, 1 << 20));
    bench.option("--price", o.price, "--review: US dollars per GPU-hour (a setting)", CLI::Range(0.001, 1e4));
}

/// The rules between the options and the model @p model (exit code 2).
void check_problem(const Options& o, const pd::ModelConfig& model) {
    if (o.w.prompt_len + o.w.output_len > model.max_seq)
        throw std::invalid_argument("--prompt-len + --output-len must fit the model's " +
                                    std::to_string(model.max_seq) + " positions");
    for (int tp : o.tps)
        if (!o.review && tp > o.gpus)
            throw std::invalid_argument("--tps " + std::to_string(tp) + " exceeds --gpus " + std::to_string(o.gpus));
    if (!o.review && !o.w.trace.empty())
        throw std::invalid_argument("--trace needs --review: the searches replay the workload at many rates");
    if (o.review && o.gpus % o.tp != 0)
        throw std::invalid_argument("--tp " + std::to_string(o.tp) + " must divide --gpus " + std::to_string(o.gpus));
    if (!o.review && o.gpus < 2)
        throw std::invalid_argument("--gpus " + std::to_string(o.gpus) +
                                    ": a prefill pool and a decode pool need 2 GPUs at least (or use --review)");
}

/// The cost model's replays, counted before any of them runs: the review's (its requests, the
/// workload @p w's or the trace's, go into @p in) or the placement searches'.
void require_replays(const Options& o, const sv::WorkloadSpec& w, sv::ReviewInput& in) {
    if (o.review) {
        sv::WorkloadSpec ws = w;
        in.requests = o.w.trace.empty() ? sv::workload_at(ws, o.w.rate) : sv::read_trace(o.w.trace);
        pd::require_within(pd::kCostModelBudget, sv::review_work(in), "the review of " + in.setup.name(),
                           "lower --requests, --output-len or --gpus, or shorten the --trace");
    } else {
        const int budget = *std::max_element(o.budgets.begin(), o.budgets.end());
        pd::require_within(
            pd::kCostModelBudget,
            sv::search_work(o.gpus, {sv::Policy::continuous, sv::Policy::chunked}, o.budgets, o.tps, budget, 2, w),
            "the placement searches", "lower --requests, --output-len or --gpus, or search fewer --budgets and --tps");
    }
}

/// --review: the design review of the setup in @p in (its requests drawn by require_replays()),
/// printed; returns its JSON.
nlohmann::json design_review(pd::Bench& bench, const Options& o, const sv::ReviewInput& in) {
    std::ostream& out = bench.out();
    const sv::Review r = sv::review(in);
    out << "\nthe review of " << in.setup.name() << " on "
        << (o.w.trace.empty() ? fmt("%g requests/s", o.w.rate) : "the trace " + o.w.trace) << " (" << in.requests.size()
        << " requests):\n"
        << sv::describe(r, in);
    return sv::to_json(r, in);
}

// [ch11_links]
/// What one prompt's cache costs on each link, beside its prefill on one instance: the transfer
/// after the prefill and layer by layer, both as lab 11's schedule_transfers() times them.
void link_table(std::ostream& out, const Options& o, const sv::Cluster& c) {
    const double per_token = c.cost.model.kv_bytes_per_token(c.cost.kv_bytes_per_element);
    const int P = static_cast<int>(o.w.prompt_len);
    sv::Step prompt;
    prompt.items.push_back({.request = 0, .tokens = P, .context = 0, .prefill = true});
    const double prefill_s = sv::CostModel(sv::instance_cost(c, 1)).run(prompt);
    const std::vector<sv::TransferJob> job = {
        {.prefill_start_s = 0, .prefill_end_s = prefill_s, .bytes = per_token * P, .layers = c.cost.model.layers}};
    pd::Table t({"link", "GB/s", "latency us", "transfer ms", "of the prefill", "layer by layer ms"});
    std::string sources;
    for (const sv::LinkPreset& l : sv::link_presets()) {
        const sv::LinkModel link{.bytes_per_s = l.bytes_per_s, .latency_s = l.latency_s};
        const double after = sv::schedule_transfers(job, link, false)[0].end_s - prefill_s;
        const double layered = sv::schedule_transfers(job, link, true)[0].end_s - prefill_s;
        t.add_row({l.name, fmt("%.1f", l.bytes_per_s / 1e9), fmt("%.0f", l.latency_s * 1e6), fmt("%.2f", after * 1e3),
                   fmt("%.0f%%", after / prefill_s * 100), fmt("%.2f", layered * 1e3)});
        sources += "  " + l.name + ": " + l.source + "\n";
    }
    out << "\nthe transfer: " << pd::format_bytes(per_token) << " of K and V per token, "
        << pd::format_bytes(per_token * P) << " for a " << P << "-token prompt, whose prefill takes "
        << fmt("%.1f ms", prefill_s * 1e3) << " on one " << c.gpu.name << " (cost model):\n"
        << t.render()
        << "GB/s: one direction, per GPU; latency: a transfer's fixed cost (a setting); transfer ms: after the "
           "prefill; layer by layer ms: its end after the prefill's, sent in "
        << c.cost.model.layers << " parts as the layers finish (both by lab 11's schedule_transfers()). Sources:\n"
        << sources;
}
// [ch11_links]

/// The best setup of @p all, or nullptr when none fits.
const sv::Placement* best(const std::vector<sv::Placement>& all) {
    for (const sv::Placement& p : all)
        if (p.fits) return &p;
    return nullptr;
}

pd::Row placement_row(const std::string& name, const sv::Placement* p, double reference, const sv::Cluster& c,
                      const sv::WorkloadSpec& w, const sv::Slo& slo) {
    pd::Row row;
    row.result.kernel = name;
    row.result.passed = p != nullptr;
    if (!p) return row;
    const sv::Served s = sv::serve(sv::workload_at(w, w.rate), p->setup, c);
    const sv::Metrics m = sv::compute_metrics(s.timeline, slo);
    row.point = {{"setup", p->setup.name()},
                 {"gpus", p->setup.gpus()},
                 {"capacity_rps", p->capacity.rate},
                 {"per_gpu_rps", p->capacity.per_gpu},
                 {"vs_best_aggregated", reference > 0 ? p->capacity.per_gpu / reference : 0},
                 {"attainment", sv::slo_attainment(s.timeline, slo)},
                 {"goodput_rps", m.goodput_requests_per_s},
                 {"ttft_p90_ms", m.ttft_s.p90 * 1e3},
                 {"tpot_p90_ms", m.tpot_s.p90 * 1e3}};
    return row;
}

/// The placement searches on --gpus GPUs: the aggregated setups (chapter 05's policies, the budgets,
/// TP) and the disaggregated ones (pools, TP) over each link, printed: the best setup of each kind
/// served at --rate (its rows are returned), then each link's. @p placements gets every setup.
std::vector<pd::Row> setups_section(std::ostream& out, const Options& o, const sv::Cluster& c,
                                    const sv::WorkloadSpec& w, const sv::Slo& slo, const sv::LinkPreset& link,
                                    const sv::LinkPreset& slow, nlohmann::json& placements) {
    const std::vector<sv::Placement> agg = sv::search_aggregated(o.gpus, {sv::Policy::continuous, sv::Policy::chunked},
                                                                 o.budgets, o.tps, o.max_seqs, c, w, slo);
    std::vector<sv::Placement> continuous, chunked;
    for (const sv::Placement& p : agg) (p.setup.policy == sv::Policy::continuous ? continuous : chunked).push_back(p);
    const int budget = *std::max_element(o.budgets.begin(), o.budgets.end());
    const std::vector<sv::Placement> fast =
        sv::search_disaggregated(o.gpus, o.tps, budget, o.max_seqs, link, o.layerwise, c, w, slo);
    const std::vector<sv::Placement> slow_all =
        sv::search_disaggregated(o.gpus, o.tps, budget, o.max_seqs, slow, o.layerwise, c, w, slo);
    if (!best(agg))
        throw std::invalid_argument(c.cost.model.name + " leaves no room for a KV cache on any setup of --tps on " +
                                    c.gpu.name + ": raise --tps");
    const double reference = best(agg) ? best(agg)->capacity.per_gpu : 0;
    std::vector<pd::Row> side = {placement_row("aggregated, continuous", best(continuous), reference, c, w, slo),
                                 placement_row("aggregated, chunked", best(chunked), reference, c, w, slo),
                                 placement_row("disaggregated, " + link.name, best(fast), reference, c, w, slo),
                                 placement_row("disaggregated, " + slow.name, best(slow_all), reference, c, w, slo)};
    using C = pd::Column;
    out << "\nthe best setup of each kind on " << o.gpus << " GPUs (searched: budgets and TP; pools and TP):\n"
        << pd::render(side,
                      {C::name("kind"), C::point("best setup", "setup"), C::point("capacity req/s", "capacity_rps"),
                       C::point("per GPU", "per_gpu_rps"), C::point("vs aggregated", "vs_best_aggregated"),
                       C::percent("attained", "attainment"), C::point("goodput req/s", "goodput_rps"),
                       C::point("TTFT p90 ms", "ttft_p90_ms"), C::point("TPOT p90 ms", "tpot_p90_ms")})
        << "capacity: the highest rate at which " << o.target * 100
        << "% of requests meet both SLOs (DistServe), per GPU; attained, goodput (vLLM's: requests/s meeting both) "
           "and the p90s at --rate "
        << o.w.rate << " requests/s. Times come from the cost model's steps, not from this machine's clock.\n";
    std::vector<pd::Row> search;
    for (const std::vector<sv::Placement>* all : {&fast, &slow_all})
        for (const sv::Placement& p : *all) {
            pd::Row row;
            row.result.kernel = p.setup.name();
            row.result.passed = p.fits;
            row.point = {{"per_gpu_rps", p.capacity.per_gpu},
                         {"capacity_rps", p.capacity.rate},
                         {"vs_best_aggregated", reference > 0 ? p.capacity.per_gpu / reference : 0}};
            search.push_back(row);
        }
    out << "\nthe placement search, (prefill GPUs, decode GPUs) over each link:\n"
        << pd::render(search, {C::name("setup"), C::point("capacity req/s", "capacity_rps"),
                               C::point("per GPU", "per_gpu_rps"), C::point("vs aggregated", "vs_best_aggregated")});

    for (const std::vector<sv::Placement>* all : {&agg, &fast, &slow_all})
        for (const sv::Placement& p : *all) placements.push_back(sv::to_json(p));
    return side;
}

}  // namespace ch11
