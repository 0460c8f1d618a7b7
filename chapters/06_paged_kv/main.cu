// Chapter 06: paged KV cache and prefix caching.
//
// Chapter 05 gives each running request a cache slot as long as the longest sequence the
// model accepts, reserved whether the request uses it or not. A paged cache hands out blocks
// of a few positions as a sequence grows and finds them through a block table, so almost
// nothing is reserved and unused, and the memory holds more requests at once: the decode
// batch, the lever of decode throughput, follows the memory. Blocks can also be shared: with
// prefix caching, a prompt that starts like an earlier one (a shared system prompt) takes the
// cached blocks of that beginning and computes only the rest.
//
// This program replays one workload under one KV memory budget with slots and with pages
// (and, on the shared-prefix scenario, with and without prefix caching), and reports the
// memory reserved and used, the waste, the most requests running at once, the prefill tokens
// computed, and the latencies and throughput. The steps every chapter shares (options, JSON,
// exit codes) are in pd/bench.hpp; the scheduler, the paged cache, the workloads, the metrics
// and the cost model are in pd/serving/.
#include "pd/bench.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/workload_options.hpp"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace sv = pd::serving;
using pd::fmt;

struct Options {
    std::string kv = "both", executor = "cost", policy = "chunked";
    std::string preset = "llama-3-8b", gpu = "H100-SXM";
    int tp = 1;
    sv::WorkloadOptions w;
    int block_size = 16, token_budget = 512, max_seqs = 256;
    double kv_memory_gib = 16;
    bool prefix_cache = false;
    std::string timeline;
};

/// One way to hold the cache: slots, or pages with or without prefix caching.
struct CacheSetup {
    std::string name;            ///< "slots", "paged", "paged + prefix"
    sv::SchedulerConfig config;  ///< what the scheduler is given
    long long slot_positions;    ///< slots: positions per slot (0: paged)
};

// [ch06_setups]
/// The setups to compare under one memory budget of @p positions positions. Slots: as many
/// slots of the model's longest sequence as the memory holds (at most --max-seqs). Pages:
/// blocks of --block-size over the whole memory, and up to --max-seqs requests at once.
std::vector<CacheSetup> setups(const Options& o, sv::Policy policy, long long positions, int max_seq) {
    std::vector<CacheSetup> out;
    const sv::SchedulerConfig base{.policy = policy, .token_budget = o.token_budget, .max_seqs = o.max_seqs};
    if (o.kv != "paged") {
        const long long slots = std::min<long long>(o.max_seqs, positions / max_seq);
        if (slots < 1)
            throw std::invalid_argument("--kv-memory holds " + std::to_string(positions) + " positions, not one slot of " +
                                        std::to_string(max_seq) + " (the model's max_seq): raise --kv-memory");
        sv::SchedulerConfig c = base;
        c.max_seqs = static_cast<int>(slots);
        c.kv_capacity = slots * max_seq;
        out.push_back({"slots", c, max_seq});
    }
    if (o.kv != "slots") {
        sv::SchedulerConfig c = base;
        c.kv_capacity = positions;
        c.block_size = o.block_size;
        const bool both = o.w.scenario == "shared-prefix" && o.w.trace.empty();  // with and without, side by side
        if (!o.prefix_cache || both) out.push_back({"paged", c, 0});
        if (o.prefix_cache || both) {
            c.prefix_caching = true;
            out.push_back({"paged + prefix", c, 0});
        }
    }
    return out;
}
// [ch06_setups]

int run(int argc, char** argv) {
    Options o;
    o.w.requests = 400;
    o.w.rate = 20;
    o.w.prompt_len = 600;
    o.w.output_len = 250;
    o.w.prompt_dist = "lognormal";
    o.w.output_dist = "lognormal";
    pd::Bench bench{"06_paged_kv", "paged KV cache and prefix caching",
                    "Chapter 06: paged KV cache and prefix caching. Replays one workload under one KV memory budget "
                    "with a slot per request and with a paged cache (and, on the shared-prefix scenario, with and "
                    "without prefix caching): memory reserved and used, waste, requests at once, prefill tokens, "
                    "TTFT, ITL and throughput.",
                    {}};
    std::vector<std::string> gpus;
    for (const pd::roofline::GpuSpec& g : pd::roofline::gpu_presets()) gpus.push_back(g.name);
    bench.option("--kv", o.kv, "slots, paged, or both (side by side)", CLI::IsMember({"slots", "paged", "both"}));
    bench.option("--executor", o.executor, "cost: the roofline cost model of chapter 05 predicts each step",
                 CLI::IsMember({"cost"}));
    bench.option("--policy", o.policy, "The scheduler's policy (chapter 05)", CLI::IsMember({"static", "continuous", "chunked"}));
    bench.option("--preset", o.preset, "Model shape", CLI::IsMember(pd::model_names()));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(gpus));
    bench.option("--tp", o.tp, "Tensor-parallel GPUs", CLI::Range(1, 64));
    sv::add_workload_options(bench.app, o.w,
                             {{"poisson", "seeded arrivals at --rate"},
                              {"shared-prefix", "every prompt starts with the same 1,000-token system prompt, then 100 "
                                                "tokens of its own"}});
    bench.option("--block-size", o.block_size, "Positions per block of the paged cache", CLI::Range(1, 1 << 16));
    bench.option("--kv-memory", o.kv_memory_gib, "The KV cache's memory in GiB, over all GPUs", CLI::Range(1e-6, 1e6));
    bench.app.add_flag("--prefix-cache", o.prefix_cache, "Prefix caching on the paged cache (shared-prefix: both)");
    bench.option("--token-budget", o.token_budget, "Tokens per step", CLI::Range(1, 1 << 24));
    bench.option("--max-seqs", o.max_seqs, "Requests running at once, at most", CLI::Range(1, 1 << 16));
    bench.app.add_option("--timeline", o.timeline, "Write every step and every token time as JSON to this file");
    if (auto code = bench.parse(argc, argv)) return *code;

    // ---- the setup: model, machine, memory ----
    bench.title();
    std::ostream& out = bench.out();
    const pd::ModelConfig model = *pd::find_model(o.preset);
    const sv::CostModelConfig cost = sv::cost_model_config(model, *pd::roofline::find_gpu(o.gpu), o.tp);
    const double kv_per_token = model.kv_bytes_per_token(cost.kv_bytes_per_element);
    const long long positions = static_cast<long long>(o.kv_memory_gib * (1ull << 30) / kv_per_token);
    o.w.max_len = model.max_seq / 2;  // a prompt and its output fit in a slot of max_seq
    const std::vector<sv::Request> requests = sv::make_workload(o.w, o.w.rate, bench.options.seed, model.vocab);
    const sv::Policy policy = sv::policy_from(o.policy);
    const std::vector<CacheSetup> runs = setups(o, policy, positions, model.max_seq);
    sv::CostModel executor(cost);
    out << "executor: " << executor.describe() << "\n"
        << "KV memory: " << pd::format_bytes(o.kv_memory_gib * (1ull << 30)) << " = " << positions << " positions of "
        << pd::format_bytes(kv_per_token) << "; slots of " << model.max_seq << " positions (" << o.preset
        << "'s max_seq), blocks of " << o.block_size << "; --policy " << o.policy << ", --token-budget "
        << o.token_budget << "\n"
        << "workload: " << requests.size() << " requests (" << sv::describe(o.w) << ")\n\n";

    // ---- every setup on the same workload ----
    std::vector<pd::Row> rows;
    nlohmann::json timelines = nlohmann::json::array(), details = nlohmann::json::array();
    for (const CacheSetup& setup : runs) {
        sv::Scheduler scheduler(setup.config);
        const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
        const sv::Metrics m = sv::compute_metrics(t);
        const sv::CacheStats c = sv::cache_stats(t, setup.config.block_size, setup.slot_positions);
        int preempted = 0;
        for (const auto& r : t.requests) preempted += r.preemptions;
        pd::Row row;
        row.result.kernel = setup.name;
        row.result.passed = true;  // run_engine checked the scheduler's and the cache's invariants after every step
        row.point = {{"running_max", c.running_max},   {"reserved_max_gib", double(c.reserved_max) * kv_per_token / (1ull << 30)},
                     {"used_max_gib", double(c.used_max) * kv_per_token / (1ull << 30)},
                     {"waste", c.waste},               {"preemptions", preempted},
                     {"prefill_tokens", c.prefill_tokens},
                     {"prefix_hit_rate", c.prompt_tokens ? double(c.prefix_hits) / double(c.prompt_tokens) : 0.0},
                     {"ttft_p50_ms", m.ttft_s.p50 * 1e3}, {"itl_p99_ms", m.itl_s.p99 * 1e3},
                     {"e2e_p50_s", m.e2e_s.p50},      {"output_tokens_per_s", m.output_tokens_per_s}};
        rows.push_back(row);
        nlohmann::json d{{"cache", setup.name}, {"metrics", sv::to_json(m)}, {"kv", sv::to_json(c)},
                         {"block_size", setup.config.block_size}, {"slot_positions", setup.slot_positions},
                         {"max_seqs", setup.config.max_seqs}};
        details.push_back(d);
        if (!o.timeline.empty()) {
            nlohmann::json tj = sv::to_json(t);
            tj["policy"] = setup.name + " (" + o.policy + ")";
            timelines.push_back(tj);
        }
    }
    using C = pd::Column;
    const auto pct = [](const char* key) {
        return [key](const pd::Row& r) { return fmt("%.1f%%", 100 * r.point.at(key).get<double>()); };
    };
    out << pd::render(rows, {C("cache", [](const pd::Row& r) { return r.result.kernel; }),
                             C::point("running max", "running_max"), C::point("reserved GiB", "reserved_max_gib"),
                             C::point("used GiB", "used_max_gib"), C("waste", pct("waste")),
                             C::point("preempt", "preemptions"), C::point("prefill tokens", "prefill_tokens"),
                             C("hits", pct("prefix_hit_rate")), C::point("TTFT p50 ms", "ttft_p50_ms"),
                             C::point("ITL p99 ms", "itl_p99_ms"), C::point("E2E p50 s", "e2e_p50_s"),
                             C::point("tok/s", "output_tokens_per_s")})
        << "reserved, used: the most at once; waste: 1 - used / reserved over the run, weighted by step time; "
           "hits: prompt positions found in the prefix cache. Times come from the cost model's steps.\n";
    if (!o.timeline.empty()) {
        std::ofstream f(o.timeline);
        if (!f) throw std::invalid_argument("--timeline " + o.timeline + ": cannot write the file");
        f << nlohmann::json{{"executor", executor.describe()}, {"token_budget", o.token_budget}, {"timelines", timelines}}.dump(1)
          << "\n";
        out << "timeline of every setup written to " << o.timeline << "\n";
    }

    nlohmann::json report = bench.report({{"preset", o.preset}, {"gpu", o.gpu}, {"tp", o.tp}, {"executor", o.executor},
                                          {"policy", o.policy}, {"kv", o.kv}, {"block_size", o.block_size},
                                          {"kv_memory_gib", o.kv_memory_gib}, {"kv_positions", positions},
                                          {"scenario", o.w.trace.empty() ? o.w.scenario : "trace"},
                                          {"requests", requests.size()}, {"rate", o.w.rate},
                                          {"token_budget", o.token_budget}, {"max_seqs", o.max_seqs}},
                                         rows, nlohmann::json{{"executor", executor.describe()}});
    report["caches"] = details;
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
