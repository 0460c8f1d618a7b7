// Chapter 05: chunked prefill and continuous batching.
//
// A serving engine runs many requests at once, one step at a time. How it builds each step
// decides who waits: request-level batching (static) holds new requests until a whole batch
// ends; iteration-level batching (continuous) lets them join at every step but prefills their
// prompts whole, pausing every running stream; chunked prefill (stall-free) keeps every decode
// in every step and cuts prompts into pieces that fill a token budget. This program replays
// one workload under the three policies with one of two executors: chapter 04's model, each
// step one forward pass on the GPU (or the simulator), timed; or the roofline cost model
// (large models and long traces in milliseconds, deterministically). It reports TTFT, TPOT,
// ITL and throughput with the definitions of vLLM's serving benchmark, computed from the
// timeline.
//
// The steps every chapter shares (options, JSON, exit codes) are in pd/bench.hpp; the
// scheduler, the workloads, the metrics, the cost model and the serving options are in
// serving/; the model and its executor in model/.
#include "chapter.hpp"

#include "pd/model/executor.hpp"
#include "pd/model/model.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/report.hpp"
#include "pd/serving/timeline.hpp"
#include "pd/serving/workload.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch05 {

namespace md = pd::model;

// [ch05_model_defaults]
/// The model executor's workload on the simulator: seconds on the tiny model, a budget of 64
/// tokens (16 decodes beside chunks of 48), and 17 slots (the long-prompt scenario's 16
/// streams and its long prompt).
const sv::ModelExecutorDefaults kModelDefaults{.requests = 24,
                                               .rate = 40,
                                               .prompt_len = 16,
                                               .output_len = 12,
                                               .output_dist = "uniform",
                                               .max_seqs = 17,
                                               .token_budget = 64};
// [ch05_model_defaults]

/// The workload of the options: a trace file, the long-prompt scenario, or seeded arrivals at @p rate.
std::vector<sv::Request> make_workload(const Options& o, double rate, std::uint64_t seed) {
    const pd::ModelConfig m = *pd::find_model(o.s.preset);
    if (o.s.w.trace.empty() && o.s.w.scenario == "long-prompt" && o.s.on_model()) return long_prompt_on_model(m);
    return sv::make_workload(o.s.w, rate, seed, m.vocab);
}

/// One policy's scheduler: its limits from the options.
sv::SchedulerConfig scheduler_config(const Options& o, sv::Policy p, long long kv_capacity) {
    return {.policy = p, .token_budget = o.s.token_budget, .max_seqs = o.s.max_seqs, .kv_capacity = kv_capacity};
}

/// The chapter's options, beside the harness's and the serving options of serving/options.hpp.
void add_options(pd::Bench& bench, Options& o) {
    sv::add_serving_options(
        bench.app, o.s,
        {{"static", ""}, {"continuous", ""}, {"chunked", ""}, {"all", "side by side on the same workload"}},
        {{"poisson", "seeded arrivals at --rate"}, {"long-prompt", "16 streams, then one 50,000-token prompt"}});
    bench.add_dtype_option(true);
    bench.option("--kv-capacity", o.kv_capacity, "Cache positions (0: the GPUs' memory beside the weights)",
                 CLI::Range(0LL, 1LL << 40));
    bench.option("--slo-ttft-ms", o.slo_ttft_ms, "TTFT bound of the goodput (0: none)", CLI::Range(0.0, 1e9));
    bench.option("--slo-tpot-ms", o.slo_tpot_ms, "TPOT bound of the goodput and ITL bound of --find-capacity (0: none)",
                 CLI::Range(0.0, 1e9));
    bench.app.add_flag("--find-capacity", o.find_capacity,
                       "Bisect the highest rate whose p99 ITL meets --slo-tpot-ms with a median TTFT below 2 s");
}

/// The cache the policies share, and what runs their steps.
struct Cache {
    long long positions;   ///< the scheduler's kv_capacity
    double per_token;      ///< bytes of K and V per position
    std::string executor;  ///< what runs the steps, for the header and the JSON
};

/// On the model, one slot of max_seq positions per running request, reserved whether used or
/// not; with the cost model, the GPUs' memory beside the weights (or --kv-capacity).
Cache cache_for(const Options& o, const pd::ModelConfig& model, const sv::CostModelConfig& cost,
                const std::vector<sv::Request>& requests, sv::Policy first, pd::Bench& bench) {
    long long kv = o.kv_capacity;
    double kv_per_token = 0;
    std::string executor;
    if (o.s.on_model()) {
        // [ch05_model_setup]
        const long long slots = static_cast<long long>(o.s.max_seqs) * model.max_seq;
        if (kv > slots)
            throw std::invalid_argument("--kv-capacity " + std::to_string(kv) + " exceeds the model's " +
                                        std::to_string(o.s.max_seqs) + " slots x " + std::to_string(model.max_seq) +
                                        " positions");
        if (kv == 0) kv = slots;
        kv_per_token = model.kv_bytes_per_token(pd::kv_element_bytes(pd::dtype_named(o.s.kv_dtype), model.head_dim));
        executor =
            md::prepare_engine_models(bench, model, {scheduler_config(o, first, kv)}, requests,
                                      pd::dtype_named(o.s.kv_dtype), "choose a smaller --preset, or lower --max-seqs");
        // [ch05_model_setup]
    } else {
        kv_per_token = model.kv_bytes_per_token(cost.kv_bytes_per_element);
        const double weights = model.parameter_count() * cost.weight_bytes_per_param;
        if (kv == 0) {
            kv = sv::kv_positions(cost);  // 10% of the memory kept for activations
            if (kv == 0)
                throw std::invalid_argument(o.s.preset + " (" + pd::format_bytes(weights) +
                                            " of weights) leaves no room for a cache on " + cost.machine.name +
                                            ": raise --tp or set --kv-capacity");
        }
        executor = sv::CostModel(cost).describe();
    }
    return {kv, kv_per_token, executor};
}

/// The rules between the options (exit code 2); with --executor model, kModelDefaults for the
/// options not given.
void check_options(pd::Bench& bench, Options& o) {
    sv::check_executor_types(o.s, bench.weight_quant());  // quantized weights, an 8-bit cache: the model's
    if (o.find_capacity && (o.slo_tpot_ms <= 0 || o.s.w.scenario != "poisson" || !o.s.w.trace.empty()))
        throw std::invalid_argument("--find-capacity needs --slo-tpot-ms > 0 and the poisson scenario (no --trace)");
    if (bench.options.profile && !o.s.on_model())
        throw std::invalid_argument(
            "--profile counts the kernels of the model's steps: with --executor cost no "
            "kernel runs (add --executor model)");
    if (o.s.on_model()) {
        sv::apply_model_defaults(bench.app, o.s, kModelDefaults);
        if (o.find_capacity)
            throw std::invalid_argument("--find-capacity runs with --executor cost (hundreds of replays)");
    }
}

/// The policies side by side: TTFT, TPOT, ITL and throughput (and --find-capacity's rate).
void print_policies(pd::Bench& bench, const Options& o, const std::vector<pd::Row>& rows) {
    std::ostream& out = bench.out();
    using C = pd::Column;
    const C policy = C::name("policy");
    std::vector<C> cols = {policy,
                           C::point("steps", "steps"),
                           C::point("preempt", "preemptions"),
                           C::point("TTFT p50 ms", "ttft_p50_ms"),
                           C::point("TTFT p99 ms", "ttft_p99_ms"),
                           C::point("TPOT ms", "tpot_mean_ms"),
                           C::point("ITL p50 ms", "itl_p50_ms"),
                           C::point("ITL p99 ms", "itl_p99_ms"),
                           C::point("ITL max ms", "itl_max_ms"),
                           C::point("E2E p50 s", "e2e_p50_s"),
                           C::point("tok/s", "output_tokens_per_s")};
    if (o.find_capacity) cols.push_back(C::point("capacity req/s", "capacity_rps"));
    out << pd::render(rows, cols)
        << "TTFT: first token - arrival; TPOT: (E2E - TTFT) / (output - 1), mean over "
           "requests; ITL: every gap between a request's tokens, pooled; E2E: last token - arrival (vLLM's "
           "definitions). "
        << sv::step_times_note(o.s.on_model(), pd::Bench::sim()) << ".\n";
    if (o.find_capacity)
        out << "capacity: the highest rate whose p99 ITL is within --slo-tpot-ms " << o.slo_tpot_ms
            << " ms with a median TTFT below 2 s (bisection)\n";
}

int run(int argc, char** argv) {
    Options o;
    o.s.policy = "all";
    o.s.preset = "llama-3-70b";
    o.s.tp = 8;
    pd::Bench bench{"05_batching",
                    "chunked prefill and continuous batching",
                    "Chapter 05: chunked prefill and continuous batching. Replays a workload under the static, "
                    "continuous and chunked policies, on chapter 04's model (--executor model) or with the roofline "
                    "cost model, and reports TTFT, TPOT, ITL, end-to-end latency and throughput as vLLM's serving "
                    "benchmark defines them.",
                    {}};
    add_options(bench, o);
    bench.no_dump();  // its results are the tables and --json
    if (auto code = bench.parse(argc, argv)) return *code;
    check_options(bench, o);
    const bool on_model = o.s.on_model();

    // ---- the setup: model, machine, cache ----
    bench.title();
    std::ostream& out = bench.out();
    const pd::ModelConfig model = *pd::find_model(o.s.preset);
    const sv::CostModelConfig cost = sv::cost_model_config(o.s);
    const std::vector<sv::Request> requests = make_workload(o, o.s.w.rate, bench.options.seed);
    std::vector<sv::Policy> policies;
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        if (o.s.policy == "all" || o.s.policy == sv::to_string(p)) policies.push_back(p);
    const Cache cache = cache_for(o, model, cost, requests, policies.front(), bench);  // the model fits, first
    sv::check_budgets(requests, int(policies.size()), o.s.on_model() && bench.sim() ? model.parameter_count() : 0);
    const long long kv = cache.positions;
    const double kv_per_token = cache.per_token;
    const std::string& executor = cache.executor;
    // a slot holds the longest sequence: the model's max_seq (the cost model also stretches it to
    // the longest request, as the 50,000-token prompt of the long-prompt scenario)
    long long slot_len = model.max_seq;
    for (const sv::Request& r : requests)
        if (!on_model) slot_len = std::max<long long>(slot_len, r.prompt_tokens + r.output_tokens);
    out << "executor: " << executor << "\n"
        << "cache: " << kv << " positions (" << pd::format_bytes(double(kv) * kv_per_token) << ", "
        << pd::format_bytes(kv_per_token) << " per token); --max-seqs " << o.s.max_seqs << ", --token-budget "
        << o.s.token_budget << "\n"
        << "workload: " << requests.size() << " requests (" << sv::describe(o.s.w) << ")\n\n";

    // ---- every policy on the same workload ----
    const sv::Slo slo{o.slo_ttft_ms * 1e-3, o.slo_tpot_ms * 1e-3};
    const sv::Request* long_request =  // the long-prompt scenario's last request
        o.s.w.trace.empty() && o.s.w.scenario == "long-prompt" ? &requests.back() : nullptr;
    std::vector<pd::Row> rows;
    nlohmann::json timelines = nlohmann::json::array(), metrics = nlohmann::json::array();
    for (sv::Policy p : policies) {
        nlohmann::json profile;  // --profile: the kernels of the replay's steps
        const sv::Timeline t = md::replay(o.s, bench, cost, scheduler_config(o, p, kv), requests, nullptr, &profile);
        const sv::Metrics m = sv::compute_metrics(t, slo);
        pd::Row row = sv::replay_row(sv::to_string(p), t, m);
        bench.add_profile(row, std::move(profile));
        add_slots_and_long_prompt(row, t, slot_len, long_request);
        rows.push_back(row);
        if (o.find_capacity) rows.back().point["capacity_rps"] = find_capacity(o, p, kv, cost, bench);
        nlohmann::json mj = sv::to_json(m);
        mj["policy"] = sv::to_string(p);
        metrics.push_back(mj);
        if (!o.s.timeline.empty()) timelines.push_back(sv::to_json(t));
    }
    print_policies(bench, o, rows);
    print_long_prompt_and_slots(bench, rows, long_request, slot_len, kv_per_token);
    sv::write_timelines(o.s, executor, timelines, out, "policy");

    nlohmann::json problem = sv::problem_json(o.s, requests.size());
    problem["kv_capacity"] = kv;
    nlohmann::json report =
        bench.report(problem, rows, on_model ? bench.device_json() : nlohmann::json{{"executor", executor}});
    report["executor"] = executor;
    report["metrics"] = metrics;
    return bench.finish(report);
}

}  // namespace ch05

int main(int argc, char** argv) {
    return pd::guarded_main(ch05::run, argc, argv, pd::serving::serving_flag_names());
}
