// Chapter 06: paged KV cache and prefix caching.
//
// Chapter 05 gives each running request a cache slot as long as the longest sequence the
// model accepts, reserved whether the request uses it or not. A paged cache hands out blocks
// of a few positions as a sequence grows and finds them through a block table, so almost
// nothing is reserved and unused, and the memory holds more requests at once: the decode
// batch, the lever of decode throughput, follows the memory. With prefix caching, a prompt
// that starts like an earlier one takes the cached blocks of that beginning.
//
// This program replays one workload under one KV memory budget with slots and with pages
// (and, on the shared-prefix scenario, with and without prefix caching), on chapter 04's model
// or with the roofline cost model: memory reserved and used, waste, requests at once, prefill
// tokens, latencies, throughput. Then it times decode attention through a block table against
// chapter 04's contiguous cache, same shape, same data. The harness is pd/bench.hpp; the
// engine is in serving/, the model and its executor in model/, the kernels in kernels/.
#include "chapter.hpp"

#include "pd/model/executor.hpp"
#include "pd/model/model.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/report.hpp"
#include "pd/serving/timeline.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch06 {

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
    const sv::SchedulerConfig base{.policy = policy, .token_budget = o.s.token_budget, .max_seqs = o.s.max_seqs};
    if (o.kv != "paged") {
        const long long slots = std::min<long long>(o.s.max_seqs, positions / max_seq);
        if (slots < 1)
            throw std::invalid_argument("--kv-memory holds " + std::to_string(positions) +
                                        " positions, not one slot of " + std::to_string(max_seq) +
                                        " (the model's max_seq): raise --kv-memory");
        sv::SchedulerConfig c = base;
        c.max_seqs = static_cast<int>(slots);
        c.kv_capacity = slots * max_seq;
        out.push_back({"slots", c, max_seq});
    }
    if (o.kv != "slots") {
        sv::SchedulerConfig c = base;
        c.kv_capacity = positions;
        c.block_size = o.block_size;
        const bool both = o.s.w.scenario == "shared-prefix" && o.s.w.trace.empty();  // with and without, side by side
        if (!o.prefix_cache || both) out.push_back({"paged", c, 0});
        if (o.prefix_cache || both) {
            c.prefix_caching = true;
            out.push_back({"paged + prefix", c, 0});
        }
    }
    return out;
}
// [ch06_setups]

/// The chapter's options, beside the harness's and the serving options of serving/options.hpp.
void add_options(pd::Bench& bench, Options& o) {
    sv::add_serving_options(bench.app, o.s, {{"static", ""}, {"continuous", ""}, {"chunked", ""}},
                            {{"poisson", "seeded arrivals at --rate"},
                             {"shared-prefix",
                              "every prompt starts with the same 1,000-token system prompt, then 100 "
                              "tokens of its own (model executor on the simulator: 96 and 16)"}});
    bench.add_dtype_option(true);
    bench.option("--kv", o.kv, "slots, paged, or both (side by side)", CLI::IsMember({"slots", "paged", "both"}));
    bench.option("--block-size", o.block_size,
                 "Positions per block of the paged cache (and of the attention benchmark)", CLI::Range(1, 1 << 16));
    bench.option("--kv-memory", o.kv_memory_gib,
                 "The KV cache's memory in GiB, over all GPUs (model executor: four slots of the model's max_seq)",
                 CLI::Range(1e-6, 1e6));
    bench.app.add_flag("--prefix-cache", o.prefix_cache, "Prefix caching on the paged cache (shared-prefix: both)");
    bench.option("--attn-batch", o.attn.batch, "Sequences of the decode attention benchmark", CLI::Range(1, 65535));
    bench.option("--attn-context", o.attn.context, "Longest context of the decode attention benchmark",
                 CLI::Range(1, 1 << 20));
}

/// What the setups' replays give: a row each (the memory reserved and used, the waste, the
/// latencies and throughput), their metrics and cache statistics and their timelines for the
/// JSON, and whether the model generated the same tokens in every setup.
struct Replays {
    std::vector<pd::Row> rows;
    nlohmann::json details = nlohmann::json::array(), timelines = nlohmann::json::array();
    bool tokens_agree = true;
};

/// Every setup on the same workload (run_engine checks the scheduler's and the cache's invariants).
Replays replay(const std::vector<sv::Request>& requests, const std::vector<CacheSetup>& runs, const Options& o,
               pd::Bench& bench, const sv::CostModelConfig& cost, double kv_per_token) {
    Replays r;
    std::vector<std::vector<int>> first_tokens, tokens;  // model executor: what each setup generated
    const double gib = kv_per_token / (1ull << 30);
    for (const CacheSetup& setup : runs) {
        nlohmann::json profile;  // --profile on the model: the kernels of the replay's steps
        const sv::Timeline t = md::replay(o.s, bench, cost, setup.config, requests, &tokens, &profile);
        const sv::Metrics m = sv::compute_metrics(t);
        const sv::CacheStats c = sv::cache_stats(t, setup.config.block_size, setup.slot_positions);
        pd::Row row = sv::replay_row(setup.name, t, m);
        bench.add_profile(row, std::move(profile));
        row.point.update(
            {{"running_max", c.running_max},
             {"reserved_max_gib", double(c.reserved_max) * gib},
             {"used_max_gib", double(c.used_max) * gib},
             {"waste", c.waste},
             {"prefill_tokens", c.prefill_tokens},
             {"prefix_hit_rate", c.prompt_tokens ? double(c.prefix_hits) / double(c.prompt_tokens) : 0.0}});
        r.details.push_back({{"cache", setup.name},
                             {"metrics", sv::to_json(m)},
                             {"kv", sv::to_json(c)},
                             {"block_size", setup.config.block_size},
                             {"slot_positions", setup.slot_positions},
                             {"max_seqs", setup.config.max_seqs}});
        if (o.s.on_model() && !same_tokens(bench, o, tokens, first_tokens, row)) r.tokens_agree = false;
        r.rows.push_back(row);
        if (!o.s.timeline.empty()) {
            nlohmann::json tj = sv::to_json(t);
            tj["policy"] = setup.name + " (" + o.s.policy + ")";
            r.timelines.push_back(tj);
        }
    }
    return r;
}

int run(int argc, char** argv) {
    Options o;
    o.s.w = {.requests = 400,
             .rate = 20,
             .prompt_len = 600,
             .output_len = 250,
             .prompt_dist = "lognormal",
             .output_dist = "lognormal"};
    o.s.max_seqs = 256;
    pd::Bench bench{"06_paged_kv", "paged KV cache and prefix caching",
                    "Chapter 06: paged KV cache and prefix caching. Replays one workload under one KV memory budget "
                    "with a slot per request and with a paged cache (and, on the shared-prefix scenario, with and "
                    "without prefix caching), on chapter 04's model (--executor model) or with the roofline cost "
                    "model: memory reserved and used, waste, requests at once, prefill tokens, TTFT, ITL and "
                    "throughput. Then decode attention through block tables against chapter 04's contiguous cache.",
                    at::paged_versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    sv::check_executor_types(o.s, bench.weight_quant());  // quantized weights, an 8-bit cache: the model's
    if (o.prefix_cache && o.kv == "slots")
        return pd::bad_input(bench.app,
                             "--prefix-cache needs the paged cache (--kv paged or both): slots share no blocks");
    const bool on_model = o.s.on_model();
    if (on_model) model_defaults(o, bench.app);

    // ---- the setup: model, machine, memory ----
    bench.title();
    std::ostream& out = bench.out();
    const pd::ModelConfig model = *pd::find_model(o.s.preset);
    const sv::CostModelConfig cost = sv::cost_model_config(o.s);
    const double kv_per_token = model.kv_bytes_per_token(
        on_model ? pd::kv_element_bytes(pd::dtype_named(o.s.kv_dtype), model.head_dim) : cost.kv_bytes_per_element);
    if (!on_model) sv::check_kv_memory(o.s, model, cost, o.kv_memory_gib * (1ull << 30));
    const long long positions = static_cast<long long>(o.kv_memory_gib * (1ull << 30) / kv_per_token);
    o.s.w.max_len = model.max_seq / 2;  // a prompt and its output fit in a slot of max_seq
    const std::vector<sv::Request> requests = sv::make_workload(o.s.w, o.s.w.rate, bench.options.seed, model.vocab);
    const std::vector<CacheSetup> runs = setups(o, sv::policy_from(o.s.policy), positions, model.max_seq);
    std::vector<sv::SchedulerConfig> configs;
    for (const CacheSetup& setup : runs) configs.push_back(setup.config);
    const std::string executor =
        on_model ? md::prepare_engine_models(bench, model, configs, requests, pd::dtype_named(o.s.kv_dtype),
                                             "lower --kv-memory or --max-seqs, or pick a smaller --preset")
                 : sv::CostModel(cost).describe();
    sv::check_budgets(requests, int(runs.size()), on_model && bench.sim() ? model.parameter_count() : 0);
    out << "executor: " << executor << "\n"
        << "KV memory: " << pd::format_bytes(o.kv_memory_gib * (1ull << 30)) << " = " << positions << " positions of "
        << pd::format_bytes(kv_per_token) << "; slots of " << model.max_seq << " positions (" << o.s.preset
        << "'s max_seq), blocks of " << o.block_size << "; --policy " << o.s.policy << ", --token-budget "
        << o.s.token_budget << "\n"
        << "workload: " << requests.size() << " requests (" << sv::describe(o.s.w) << ")\n\n";

    // ---- every setup on the same workload ----
    const Replays r = replay(requests, runs, o, bench, cost, kv_per_token);
    using C = pd::Column;
    std::vector<C> cols = {C::name("cache"),
                           C::point("running max", "running_max"),
                           C::point("reserved GiB", "reserved_max_gib"),
                           C::point("used GiB", "used_max_gib"),
                           C::percent("waste", "waste"),
                           C::point("preempt", "preemptions"),
                           C::point("prefill tokens", "prefill_tokens"),
                           C::percent("hits", "prefix_hit_rate"),
                           C::point("TTFT p50 ms", "ttft_p50_ms"),
                           C::point("ITL p99 ms", "itl_p99_ms"),
                           C::point("E2E p50 s", "e2e_p50_s"),
                           C::point("tok/s", "output_tokens_per_s")};
    if (on_model) cols.push_back(C::percent("same tokens", "same_tokens"));
    out << pd::render(r.rows, cols)
        << "reserved, used: the most at once; waste: 1 - used / reserved over the run, weighted by step time; "
           "hits: prompt positions found in the prefix cache. "
        << sv::step_times_note(on_model, pd::Bench::sim())
        << (on_model ? "; same tokens: requests generating exactly the first setup's tokens.\n" : ".\n");
    if (!r.tokens_agree) out << "FAILED: with fp32 weights and cache, pages must generate the tokens slots generate\n";
    sv::write_timelines(o.s, executor, r.timelines, out, "setup");

    const std::vector<pd::Row> arows = attention_rows(bench, o, model);  // what the block table costs the kernel

    nlohmann::json problem = sv::problem_json(o.s, requests.size());
    problem.update({{"policy", o.s.policy},
                    {"kv", o.kv},
                    {"block_size", o.block_size},
                    {"kv_memory_gib", o.kv_memory_gib},
                    {"kv_positions", positions},
                    {"attn_batch", o.attn.batch},
                    {"attn_context", o.attn.context}});
    nlohmann::json report = bench.report(problem, r.rows, bench.device_json());
    report["executor"] = executor;
    report["caches"] = r.details;
    report["attention"] = bench.json(arows);
    if (!r.tokens_agree) report["passed"] = false;
    return bench.finish(report);
}

}  // namespace ch06

int main(int argc, char** argv) {
    pd::FlagNames flags = {{"SchedulerConfig.kv_capacity", "--kv-memory"}};  // here the memory sets the capacity
    for (const auto& f : pd::serving::serving_flag_names()) flags.push_back(f);
    return pd::guarded_main(ch06::run, argc, argv, flags);
}
