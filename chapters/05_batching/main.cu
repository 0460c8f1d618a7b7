// Chapter 05: chunked prefill and continuous batching.
//
// A serving engine runs many requests at once, one step at a time. How it builds each step
// decides who waits: request-level batching (static) holds new requests until a whole batch
// ends; iteration-level batching (continuous) lets them join at every step but prefills their
// prompts whole, pausing every running stream; chunked prefill (stall-free) keeps every decode
// in every step and cuts prompts into pieces that fill a token budget. This program replays
// one workload under the three policies with one of two executors: chapter 04's model, each
// step one mixed forward pass on the GPU (or the simulator), timed; or the roofline cost model
// (large models and long traces in milliseconds, deterministically). It reports TTFT, TPOT,
// ITL and throughput with the definitions of vLLM's serving benchmark, computed from the
// timeline.
//
// The steps every chapter shares (options, JSON, exit codes) are in pd/bench.hpp; the
// scheduler, the executors, the workloads and the metrics are in pd/serving/.
#include "model/executor.hpp"
#include "model/model.hpp"
#include "pd/bench.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/workload.hpp"
#include "pd/serving/workload_options.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace sv = pd::serving;
namespace md = pd::kernels::model;
using pd::fmt;

struct Options {
    std::string policy = "all", executor = "cost";
    std::string preset = "llama-3-70b", gpu = "H100-SXM";
    int tp = 8;
    sv::WorkloadOptions w;  // --scenario, --trace, --requests, --rate, the lengths
    int token_budget = 512, max_seqs = 64;
    long long kv_capacity = 0;  // 0: what the GPUs' memory holds beside the weights
    double slo_ttft_ms = 0, slo_tpot_ms = 0;
    bool find_capacity = false;
    std::string timeline;
    std::string kv_dtype = "fp32";       // the model executor's cache
    pd::DType dtype = pd::DType::fp32;   // the model executor's weights
};

// [ch05_model_defaults]
/// The model executor runs a real model: on the simulator every thread of every kernel runs on
/// the CPU, so its workload defaults are sized for seconds on the tiny model (a budget of 64
/// tokens: 16 decodes beside chunks of 48). Options given on the command line keep their values.
void model_defaults(Options& o, const CLI::App& app) {
    const auto unset = [&](const char* name) { return app.get_option(name)->count() == 0; };
    if (unset("--preset")) o.preset = "tiny";
    if (unset("--requests")) o.w.requests = 24;
    if (unset("--rate")) o.w.rate = 40;
    if (unset("--prompt-len")) o.w.prompt_len = 16;
    if (unset("--output-len")) o.w.output_len = 12;
    if (unset("--output-dist")) o.w.output_dist = "uniform";
    if (unset("--max-seqs")) o.max_seqs = 17;  // the long-prompt scenario's 16 streams and its long prompt
    if (unset("--token-budget")) o.token_budget = 64;
}
// [ch05_model_defaults]

/// The workload of the options: a trace file, the long-prompt scenario, or seeded arrivals at @p rate.
std::vector<sv::Request> make_workload(const Options& o, double rate, std::uint64_t seed) {
    if (o.w.trace.empty() && o.w.scenario == "long-prompt" && o.executor == "model") {
        // the scenario at the simulator's scale: 16 streams of 4-token prompts generating 24
        // tokens each, then a 192-token prompt arriving while they decode
        const int slot = pd::find_model(o.preset)->max_seq, long_output = 4;
        return sv::long_prompt_scenario(16, std::min(192, slot - long_output), 1e-6, 4, std::min(24, slot / 4), long_output);
    }
    return sv::make_workload(o.w, rate, seed, pd::find_model(o.preset)->vocab);
}

/// The model executor's model: one cache slot per running request, seeded synthetic weights.
md::ModelOptions model_options(const Options& o, const pd::DeviceInfo& device) {
    return {.weights = o.dtype, .kv = o.kv_dtype == "bf16" ? pd::DType::bf16 : pd::DType::fp32, .batch = o.max_seqs,
            .sm_count = device.sm_count};
}

/// One policy on one workload: the engine's timeline (invariants checked after every step),
/// with the cost model, or with the model (a fresh cache, the same weights for every policy).
sv::Timeline serve(const std::vector<sv::Request>& requests, sv::Policy p, const Options& o, long long kv_capacity,
                   const sv::CostModelConfig& cost, md::Model* model = nullptr, std::uint64_t seed = 0) {
    sv::Scheduler scheduler({.policy = p, .token_budget = o.token_budget, .max_seqs = o.max_seqs, .kv_capacity = kv_capacity});
    if (model) {
        md::ModelExecutor executor(*model, requests, seed);
        return sv::run_engine(requests, scheduler, executor, true);
    }
    sv::CostModel executor(cost);
    return sv::run_engine(requests, scheduler, executor, true);
}

// [ch05_capacity]
/// Serving capacity (Sarathi-Serve's definition): the highest request rate whose p99 ITL stays
/// within the SLO while the median wait stays below 2 s (without that bound an overloaded
/// queue would pass: the wait shows in TTFT, not in ITL; the median TTFT stands for the
/// scheduling delay here), by bisection on the rate of the same seeded workload, each run at
/// least two minutes of arrivals long.
double find_capacity(const Options& o, sv::Policy p, long long kv, const sv::CostModelConfig& cost, std::uint64_t seed) {
    const double slo = o.slo_tpot_ms * 1e-3;
    const auto ok = [&](double rate) {
        Options steady = o;  // at least two minutes of arrivals, so that an overloaded queue has time to grow
        steady.w.requests = std::max(o.w.requests, static_cast<int>(std::ceil(rate * 120)));
        const sv::Metrics m = sv::compute_metrics(serve(make_workload(steady, rate, seed), p, o, kv, cost));
        return m.itl_s.p99 <= slo && m.ttft_s.p50 <= 2.0;
    };
    double lo = 0, hi = 0.25;
    while (ok(hi) && hi < 4096) {
        lo = hi;
        hi *= 2;
    }
    for (int i = 0; i < 12; ++i) {
        const double mid = (lo + hi) / 2;
        (ok(mid) ? lo : hi) = mid;
    }
    return lo;
}
// [ch05_capacity]

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"05_batching", "chunked prefill and continuous batching",
                    "Chapter 05: chunked prefill and continuous batching. Replays a workload under the static, "
                    "continuous and chunked policies, on chapter 04's model (--executor model) or with the roofline "
                    "cost model, and reports TTFT, TPOT, ITL, end-to-end latency and throughput as vLLM's serving "
                    "benchmark defines them.",
                    {}};
    std::vector<std::string> gpus;
    for (const pd::roofline::GpuSpec& g : pd::roofline::gpu_presets()) gpus.push_back(g.name);
    bench.option("--policy", o.policy, "static, continuous, chunked, or all (side by side on the same workload)",
                 CLI::IsMember({"static", "continuous", "chunked", "all"}));
    bench.option("--executor", o.executor,
                 "model: chapter 04's model runs each step (GPU or simulator, timed); cost: the roofline cost model "
                 "predicts each step",
                 CLI::IsMember({"model", "cost"}));
    bench.add_dtype_option();
    bench.option("--kv-dtype", o.kv_dtype, "Type of the model executor's KV cache", CLI::IsMember({"fp32", "bf16"}));
    bench.option("--preset", o.preset, "Model shape", CLI::IsMember(pd::model_names()));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(gpus));
    bench.option("--tp", o.tp, "Tensor-parallel GPUs", CLI::Range(1, 64));
    sv::add_workload_options(bench.app, o.w,
                             {{"poisson", "seeded arrivals at --rate"},
                              {"long-prompt", "16 streams, then one 50,000-token prompt"}});
    bench.option("--token-budget", o.token_budget, "Tokens per step (chunked; continuous's prefill steps)", CLI::Range(1, 1 << 24));
    bench.option("--max-seqs", o.max_seqs, "Requests running at once (cache slots)", CLI::Range(1, 1 << 16));
    bench.option("--kv-capacity", o.kv_capacity, "Cache positions (0: the GPUs' memory beside the weights)",
                 CLI::Range(0LL, 1LL << 40));
    bench.option("--slo-ttft-ms", o.slo_ttft_ms, "TTFT bound of the goodput (0: none)", CLI::Range(0.0, 1e9));
    bench.option("--slo-tpot-ms", o.slo_tpot_ms, "TPOT bound of the goodput and ITL bound of --find-capacity (0: none)",
                 CLI::Range(0.0, 1e9));
    bench.app.add_flag("--find-capacity", o.find_capacity, "Bisect the highest rate whose p99 ITL meets --slo-tpot-ms with a median TTFT below 2 s");
    bench.app.add_option("--timeline", o.timeline, "Write every step and every token time as JSON to this file");
    if (auto code = bench.parse(argc, argv)) return *code;
    if (o.find_capacity && (o.slo_tpot_ms <= 0 || o.w.scenario != "poisson" || !o.w.trace.empty()))
        throw std::invalid_argument("--find-capacity needs --slo-tpot-ms > 0 and the poisson scenario (no --trace)");
    const bool on_model = o.executor == "model";
    if (on_model) {
        model_defaults(o, bench.app);
        if (o.find_capacity) throw std::invalid_argument("--find-capacity runs with --executor cost (hundreds of replays)");
        if (o.max_seqs > 64) throw std::invalid_argument("--max-seqs = " + std::to_string(o.max_seqs) +
                                                         " exceeds the model executor's 64 cache slots");
        if (bench.dtypes().size() != 1) o.dtype = pd::DType::fp32;  // --dtype all: the model runs in one type
        else o.dtype = bench.dtypes().front();
    }

    // ---- the setup: model, machine, cache ----
    bench.title();
    std::ostream& out = bench.out();
    const pd::ModelConfig model = *pd::find_model(o.preset);
    const sv::CostModelConfig cost = sv::cost_model_config(model, *pd::roofline::find_gpu(o.gpu), o.tp);
    std::optional<md::Model> real;  // the model executor's model
    std::string executor;
    long long kv = o.kv_capacity;
    double kv_per_token = 0;
    if (on_model) {
        // [ch05_model_setup]
        real.emplace(model, model_options(o, bench.device()));
        real->init_synthetic(bench.options.seed);
        const md::StepSequence warm{.slot = 0, .context = 0, .tokens = 1};  // first-call setup, outside the timings
        real->step(std::vector<int>{0}, std::span(&warm, 1));
        // each running request owns a slot of max_seq positions, reserved whether used or not
        const long long slots = static_cast<long long>(o.max_seqs) * real->max_seq();
        if (kv > slots)
            throw std::invalid_argument("--kv-capacity " + std::to_string(kv) + " exceeds the model's " +
                                        std::to_string(o.max_seqs) + " slots x " + std::to_string(real->max_seq()) +
                                        " positions");
        if (kv == 0) kv = slots;
        kv_per_token = real->kv_bytes_per_token();
        executor = md::ModelExecutor(*real, {}, 0).describe();
        // [ch05_model_setup]
    } else {
        kv_per_token = model.kv_bytes_per_token(cost.kv_bytes_per_element);
        const double weights = model.parameter_count() * cost.weight_bytes_per_param;
        if (kv == 0) {
            const double free_bytes = 0.9 * cost.machine.memory_bytes - weights;  // 10% kept for activations
            if (free_bytes < kv_per_token)
                throw std::invalid_argument(o.preset + " (" + pd::format_bytes(weights) + " of weights) leaves no room for a "
                                            "cache on " + cost.machine.name + ": raise --tp or set --kv-capacity");
            kv = static_cast<long long>(free_bytes / kv_per_token);
        }
        executor = sv::CostModel(cost).describe();
    }
    const std::vector<sv::Request> requests = make_workload(o, o.w.rate, bench.options.seed);
    // a slot holds the longest sequence: the model's max_seq (the cost model also stretches it to
    // the longest request, as the 50,000-token prompt of the long-prompt scenario)
    long long slot_len = on_model ? real->max_seq() : model.max_seq;
    for (const sv::Request& r : requests) if (!on_model) slot_len = std::max<long long>(slot_len, r.prompt_tokens + r.output_tokens);
    out << "executor: " << executor << "\n"
        << "cache: " << kv << " positions (" << pd::format_bytes(double(kv) * kv_per_token) << ", "
        << pd::format_bytes(kv_per_token) << " per token); --max-seqs " << o.max_seqs << ", --token-budget "
        << o.token_budget << "\n"
        << "workload: " << requests.size() << " requests ("
        << sv::describe(o.w) << ")\n\n";

    // ---- every policy on the same workload ----
    std::vector<sv::Policy> policies;
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        if (o.policy == "all" || o.policy == sv::to_string(p)) policies.push_back(p);
    const sv::Slo slo{o.slo_ttft_ms * 1e-3, o.slo_tpot_ms * 1e-3};
    std::vector<pd::Row> rows;
    nlohmann::json timelines = nlohmann::json::array(), metrics = nlohmann::json::array();
    for (sv::Policy p : policies) {
        const sv::Timeline t = serve(requests, p, o, kv, cost, real ? &*real : nullptr, bench.options.seed);
        const sv::Metrics m = sv::compute_metrics(t, slo);
        double longest = 0;  // the longest step: what a stream may wait between two tokens
        int preempted = 0;
        for (const auto& s : t.steps) longest = std::max(longest, s.end_s - s.start_s);
        for (const auto& r : t.requests) preempted += r.preemptions;
        // the cache as slots: each running request reserves a slot of the longest sequence
        const sv::CacheStats cache = sv::cache_stats(t, 0, slot_len);
        pd::Row row;
        row.result.kernel = sv::to_string(p);
        row.result.passed = true;  // run_engine checked the invariants after every step
        row.point = {{"steps", t.steps.size()},        {"preemptions", preempted},
                     {"ttft_p50_ms", m.ttft_s.p50 * 1e3}, {"ttft_p99_ms", m.ttft_s.p99 * 1e3},
                     {"tpot_mean_ms", m.tpot_s.mean * 1e3}, {"itl_p50_ms", m.itl_s.p50 * 1e3},
                     {"itl_p99_ms", m.itl_s.p99 * 1e3},   {"itl_max_ms", m.itl_s.max * 1e3},
                     {"e2e_p50_s", m.e2e_s.p50},          {"output_tokens_per_s", m.output_tokens_per_s},
                     {"requests_per_s", m.requests_per_s}, {"longest_step_ms", longest * 1e3},
                     {"running_peak", cache.running_max}, {"kv_used_peak", cache.used_max},
                     {"kv_reserved_peak", cache.reserved_max}, {"kv_unused_share", cache.waste}};
        if (o.find_capacity) row.point["capacity_rps"] = find_capacity(o, p, kv, cost, bench.options.seed);
        rows.push_back(row);
        nlohmann::json mj = sv::to_json(m);
        mj["policy"] = sv::to_string(p);
        metrics.push_back(mj);
        if (!o.timeline.empty()) timelines.push_back(sv::to_json(t));
    }
    using C = pd::Column;
    std::vector<C> cols = {C("policy", [](const pd::Row& r) { return r.result.kernel; }), C::point("steps", "steps"), C::point("preempt", "preemptions"),
                           C::point("TTFT p50 ms", "ttft_p50_ms"), C::point("TTFT p99 ms", "ttft_p99_ms"),
                           C::point("TPOT ms", "tpot_mean_ms"), C::point("ITL p50 ms", "itl_p50_ms"),
                           C::point("ITL p99 ms", "itl_p99_ms"), C::point("ITL max ms", "itl_max_ms"),
                           C::point("E2E p50 s", "e2e_p50_s"), C::point("tok/s", "output_tokens_per_s")};
    if (o.find_capacity) cols.push_back(C::point("capacity req/s", "capacity_rps"));
    out << pd::render(rows, cols)
        << "TTFT: first token - arrival; TPOT: (E2E - TTFT) / (output - 1), mean over "
           "requests; ITL: every gap between a request's tokens, pooled; E2E: last token - arrival (vLLM's "
           "definitions). "
        << (on_model ? std::string("Times are the model's steps, timed on ") + (pd::Bench::sim() ? "the simulator (CPU figures)" : "the GPU") + ".\n"
                     : std::string("Times come from the cost model's steps, not from this machine's clock.\n"));
    if (o.find_capacity)
        out << "capacity: the highest rate whose p99 ITL is within --slo-tpot-ms " << o.slo_tpot_ms
            << " ms with a median TTFT below 2 s (bisection)\n";
    out << "\nthe cache as slots of " << slot_len << " positions (" << pd::format_bytes(slot_len * kv_per_token)
        << ") per running request:\n"
        << pd::render(rows, {C("policy", [](const pd::Row& r) { return r.result.kernel; }),
                             C::point("running max", "running_peak"), C::point("used max", "kv_used_peak"),
                             C::point("reserved max", "kv_reserved_peak"),
                             C("unused", [](const pd::Row& r) {
                                 return fmt("%.1f%%", 100 * r.point.at("kv_unused_share").get<double>());
                             })})
        << "used: positions holding K and V; reserved: running requests x slot; unused: 1 - used / reserved "
           "over the run, weighted by step time (what chapter 06's paged cache gives back).\n";
    if (!o.timeline.empty()) {
        std::ofstream f(o.timeline);
        if (!f) throw std::invalid_argument("--timeline " + o.timeline + ": cannot write the file");
        f << nlohmann::json{{"executor", executor}, {"token_budget", o.token_budget}, {"timelines", timelines}}.dump(1) << "\n";
        out << "timeline of every policy written to " << o.timeline << "\n";
    }

    nlohmann::json report = bench.report({{"preset", o.preset}, {"gpu", o.gpu}, {"tp", o.tp}, {"executor", o.executor},
                                          {"scenario", o.w.trace.empty() ? o.w.scenario : "trace"},
                                          {"requests", requests.size()}, {"rate", o.w.rate},
                                          {"token_budget", o.token_budget}, {"max_seqs", o.max_seqs},
                                          {"kv_capacity", kv}},
                                         rows, on_model ? bench.device_json() : nlohmann::json{{"executor", executor}});
    report["executor"] = executor;
    report["metrics"] = metrics;
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
