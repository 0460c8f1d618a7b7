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
// (and, on the shared-prefix scenario, with and without prefix caching), on chapter 04's model
// (each step one mixed forward pass, timed) or with the roofline cost model, and reports the
// memory reserved and used, the waste, the most requests running at once, the prefill tokens
// computed, and the latencies and throughput. Then it times what the pages cost the kernel:
// decode attention through a block table against chapter 04's contiguous cache, same shape,
// same data. The steps every chapter shares (options, JSON, exit codes) are in pd/bench.hpp;
// the scheduler, the paged cache, the workloads, the metrics and the cost model are in
// pd/serving/; the paged kernels in kernels/model/paged_attention.hpp.
#include "model/decode_attention.hpp"
#include "model/executor.hpp"
#include "model/model.hpp"
#include "model/paged_attention.hpp"
#include "model_reference.hpp"
#include "pd/bench.hpp"
#include "pd/buffer.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/workload_options.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace sv = pd::serving;
namespace md = pd::kernels::model;
using bf16 = __nv_bfloat16;
using pd::DType;
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
    std::string kv_dtype = "fp32";  // the model executor's cache
    DType dtype = DType::fp32;      // the model executor's weights
#if defined(PD_BACKEND_SIM)
    int attn_batch = 3, attn_context = 300;  // seconds on a CPU
#else
    int attn_batch = 16, attn_context = 8192;  // chapter 04's benchmark shape: 512 MiB of bf16 K and V per call
#endif
};

// [ch06_model_defaults]
/// The model executor runs a real model: on the simulator every thread of every kernel runs on
/// the CPU, so its defaults are sized for seconds on the tiny model: a KV memory of four slots
/// of its 512 positions, requests of about 50 + 24 tokens (the shared-prefix scenario: a
/// 96-token system prompt and 16 tokens each). Options given on the command line keep their values.
void model_defaults(Options& o, const CLI::App& app) {
    const auto unset = [&](const char* name) { return app.get_option(name)->count() == 0; };
    if (unset("--preset")) o.preset = "tiny";
    if (unset("--requests")) o.w.requests = 16;
    if (unset("--rate")) o.w.rate = 40;
    if (unset("--prompt-len")) o.w.prompt_len = 40;
    if (unset("--output-len")) o.w.output_len = 16;
    if (unset("--max-seqs")) o.max_seqs = 48;
    if (unset("--token-budget")) o.token_budget = 96;
    if (unset("--kv-memory")) {
        const pd::ModelConfig m = *pd::find_model(o.preset);
        o.kv_memory_gib = 4.0 * m.max_seq * m.kv_bytes_per_token(o.kv_dtype == "bf16" ? 2 : 4) / (1ull << 30);
    }
    o.w.system_tokens = 96;
    o.w.question_tokens = 16;
}
// [ch06_model_defaults]

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

/// One setup on the workload with the model executor: a fresh model (the same seeded weights
/// for every setup) whose cache is the setup's slots or blocks. @p tokens receives what each
/// request generated.
sv::Timeline serve_on_model(const std::vector<sv::Request>& requests, const CacheSetup& setup, const Options& o,
                            pd::Bench& bench, std::vector<std::vector<int>>& tokens) {
    sv::Scheduler scheduler(setup.config);
    const sv::PagedCache* pages = scheduler.paged();
    md::Model model(*pd::find_model(o.preset),
                    {.weights = o.dtype, .kv = o.kv_dtype == "bf16" ? DType::bf16 : DType::fp32,
                     .batch = setup.config.max_seqs, .sm_count = bench.device().sm_count,
                     .block_size = pages ? pages->block_size() : 0, .num_blocks = pages ? pages->num_blocks() : 0});
    model.init_synthetic(bench.options.seed);
    const int first_block[] = {0};
    const md::StepSequence warm{.slot = 0, .context = 0, .tokens = 1,
                                .blocks = pages ? std::span<const int>(first_block) : std::span<const int>()};
    model.step(std::vector<int>{0}, std::span(&warm, 1));  // first-call setup, outside the timings
    md::ModelExecutor executor(model, requests, bench.options.seed, pages);
    sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
    tokens.clear();
    for (const sv::Request& r : requests) tokens.push_back(executor.generated(r.id));
    return t;
}

// [ch06_attention]
/// Decode attention on one layer's cache, contiguous and paged: B sequences of ragged contexts
/// (context, context - 3, ...) with the same K and V in chapter 04's contiguous cache and
/// scattered into shuffled blocks of @p block_size; chapter 04's v4 (the baseline), then every
/// paged version, each checked against the CPU reference and timed.
std::vector<pd::Row> run_attention(pd::Bench& bench, const pd::ModelConfig& c, int B, int context, int block_size,
                                   int sm_count) {
    const std::uint64_t seed = bench.options.seed;
    std::vector<int> lens(static_cast<std::size_t>(B));
    for (int b = 0; b < B; ++b) lens[std::size_t(b)] = std::max(1, context - 3 * b);
    const md::DecodeShape cs{B, c.heads, c.kv_heads, c.head_dim, context, context};
    md::PagedShape ps{.batch = B, .heads = c.heads, .kv_heads = c.kv_heads, .head_dim = c.head_dim,
                      .block_size = block_size, .num_blocks = 0, .max_blocks = pd::ceil_div(context, block_size),
                      .max_kv_len = context};
    for (int len : lens) ps.num_blocks += pd::ceil_div(len, block_size);
    const std::vector<int> table = pd::reference::shuffled_block_table(lens, block_size, ps.num_blocks, ps.max_blocks, seed);
    std::vector<float> q(std::size_t(B) * c.heads * c.head_dim), k(cs.cache().elements()), v(cs.cache().elements());
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 41));
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(seed, 42));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(seed, 43));
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, out(q.size());
    pd::DeviceBuffer<int> dlen{std::span<const int>(lens)}, dtable{std::span<const int>(table)};
    double kv_read = 0, scores = 0;
    for (int l : lens) {
        kv_read += 2.0 * c.kv_heads * double(l) * c.head_dim;  // K and V elements a step reads
        scores += double(c.heads) * l;
    }
    const std::string shape = "B=" + std::to_string(B) + " Hq=" + std::to_string(c.heads) + " Hkv=" +
                              std::to_string(c.kv_heads) + " d=" + std::to_string(c.head_dim) + " context=" +
                              std::to_string(context) + " (ragged) block_size=" + std::to_string(block_size);
    std::vector<pd::Row> rows;
    for (DType d : bench.dtypes()) {
        const std::vector<float> kr = pd::rounded_to(d, k), vr = pd::rounded_to(d, v);
        const std::vector<double> ref = pd::reference::decode_attention(q, kr, vr, lens, B, c.heads, c.kv_heads,
                                                                        c.head_dim, context);
        pd::Expected expected{.values = ref, .row_length = std::size_t(c.head_dim),
                              .dims = {std::size_t(B), std::size_t(c.heads), std::size_t(c.head_dim)}};
        for (std::size_t i = 0; i < ref.size() / c.head_dim; ++i) expected.rows.push_back(i);
        // the same values in blocks; NaN where no position lands (the tails of the last blocks)
        const auto paged = [&](const std::vector<float>& x) {
            return pd::reference::scatter_to_blocks(x, lens, table, c.kv_heads, c.head_dim, context, block_size,
                                                    ps.max_blocks, ps.num_blocks, 0,
                                                    std::numeric_limits<float>::quiet_NaN());
        };
        pd::DeviceBuffer<float> k32, v32, kp32, vp32;
        pd::DeviceBuffer<bf16> k16, v16, kp16, vp16;
        if (d == DType::fp32) {
            k32 = pd::DeviceBuffer<float>(std::span<const float>(kr));
            v32 = pd::DeviceBuffer<float>(std::span<const float>(vr));
            kp32 = pd::DeviceBuffer<float>(std::span<const float>(paged(kr)));
            vp32 = pd::DeviceBuffer<float>(std::span<const float>(paged(vr)));
        } else {
            k16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(kr));
            v16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(vr));
            kp16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(paged(kr)));
            vp16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(paged(vr)));
        }
        const pd::Cost cost{4.0 * scores * c.head_dim,  // q . k and p v: 2 d FLOPs each per score
                            kv_read * pd::size_of(d) + 4.0 * 2 * double(q.size())};  // K, V, then Q in, O out
        // chapter 04's v4 on the contiguous cache: the bandwidth the pages are held to
        pd::DeviceBuffer<float> cws(std::max<std::size_t>(1, md::decode_workspace_floats("v4", cs, sm_count)));
        rows.push_back(bench.measure(
            {.name = "contiguous v4", .dtype = d, .cost = cost,
             .point = {{"block_size", 0}, {"splits", md::decode_splits(cs, sm_count)}}, .context = shape},
            [&] {
                if (d == DType::fp32)
                    md::decode_attention("v4", dq.data(), k32.data(), v32.data(), dlen.data(), out.data(), cws.data(), cs, sm_count);
                else
                    md::decode_attention("v4", dq.data(), k16.data(), v16.data(), dlen.data(), out.data(), cws.data(), cs, sm_count);
            },
            out, expected));
        const std::size_t base_index = rows.size() - 1;
        for (const pd::Version& ver : md::paged_versions()) {
            if (!bench.selects(ver)) continue;
            pd::DeviceBuffer<float> ws(std::max<std::size_t>(1, md::paged_workspace_floats(ver.name, ps, sm_count)));
            const pd::Launch launch = [&] {
                if (d == DType::fp32)
                    md::paged_decode_attention(ver.name, dq.data(), kp32.data(), vp32.data(), dtable.data(), dlen.data(),
                                               out.data(), ws.data(), ps, sm_count);
                else
                    md::paged_decode_attention(ver.name, dq.data(), kp16.data(), vp16.data(), dtable.data(), dlen.data(),
                                               out.data(), ws.data(), ps, sm_count);
            };
            rows.push_back(bench.measure(
                {.name = "paged " + ver.name, .dtype = d, .units = ver.units, .cost = cost, .baseline = &rows[base_index],
                 .point = {{"block_size", block_size}, {"splits", ver.name == "v2" ? md::paged_splits(ps, sm_count) : 1}},
                 .context = shape, .dump = "paged_attention_" + ver.name + (d == DType::fp32 ? "" : "_bf16"),
                 .dump_shape = {std::size_t(B), std::size_t(c.heads), std::size_t(c.head_dim)}},
                launch, out, expected));
        }
    }
    return rows;
}
// [ch06_attention]

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
                    "without prefix caching), on chapter 04's model (--executor model) or with the roofline cost "
                    "model: memory reserved and used, waste, requests at once, prefill tokens, TTFT, ITL and "
                    "throughput. Then decode attention through block tables against chapter 04's contiguous cache.",
                    md::paged_versions()};
    std::vector<std::string> gpus;
    for (const pd::roofline::GpuSpec& g : pd::roofline::gpu_presets()) gpus.push_back(g.name);
    bench.option("--kv", o.kv, "slots, paged, or both (side by side)", CLI::IsMember({"slots", "paged", "both"}));
    bench.option("--executor", o.executor,
                 "model: chapter 04's model runs each step (GPU or simulator, timed); cost: the roofline cost model "
                 "of chapter 05 predicts each step",
                 CLI::IsMember({"model", "cost"}));
    bench.add_dtype_option();
    bench.option("--kv-dtype", o.kv_dtype, "Type of the model executor's KV cache", CLI::IsMember({"fp32", "bf16"}));
    bench.option("--policy", o.policy, "The scheduler's policy (chapter 05)", CLI::IsMember({"static", "continuous", "chunked"}));
    bench.option("--preset", o.preset, "Model shape", CLI::IsMember(pd::model_names()));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(gpus));
    bench.option("--tp", o.tp, "Tensor-parallel GPUs", CLI::Range(1, 64));
    sv::add_workload_options(bench.app, o.w,
                             {{"poisson", "seeded arrivals at --rate"},
                              {"shared-prefix", "every prompt starts with the same 1,000-token system prompt, then 100 "
                                                "tokens of its own (model executor: 96 and 16)"}});
    bench.option("--block-size", o.block_size, "Positions per block of the paged cache (and of the attention benchmark)",
                 CLI::Range(1, 1 << 16));
    bench.option("--kv-memory", o.kv_memory_gib,
                 "The KV cache's memory in GiB, over all GPUs (model executor: four slots of the model's max_seq)",
                 CLI::Range(1e-6, 1e6));
    bench.app.add_flag("--prefix-cache", o.prefix_cache, "Prefix caching on the paged cache (shared-prefix: both)");
    bench.option("--token-budget", o.token_budget, "Tokens per step", CLI::Range(1, 1 << 24));
    bench.option("--max-seqs", o.max_seqs, "Requests running at once, at most", CLI::Range(1, 1 << 16));
    bench.option("--attn-batch", o.attn_batch, "Sequences of the decode attention benchmark", CLI::Range(1, 65535));
    bench.option("--attn-context", o.attn_context, "Longest context of the decode attention benchmark",
                 CLI::Range(1, 1 << 20));
    bench.app.add_option("--timeline", o.timeline, "Write every step and every token time as JSON to this file");
    if (auto code = bench.parse(argc, argv)) return *code;
    const bool on_model = o.executor == "model";
    if (on_model) {
        model_defaults(o, bench.app);
        if (o.max_seqs > 64) throw std::invalid_argument("--max-seqs = " + std::to_string(o.max_seqs) +
                                                         " exceeds the model executor's 64 sequences per step");
        o.dtype = bench.dtypes().size() == 1 ? bench.dtypes().front() : DType::fp32;  // --dtype all: the model runs fp32
    }

    // ---- the setup: model, machine, memory ----
    bench.title();
    std::ostream& out = bench.out();
    const pd::ModelConfig model = *pd::find_model(o.preset);
    const sv::CostModelConfig cost = sv::cost_model_config(model, *pd::roofline::find_gpu(o.gpu), o.tp);
    const double kv_per_token =
        on_model ? model.kv_bytes_per_token(o.kv_dtype == "bf16" ? 2 : 4) : model.kv_bytes_per_token(cost.kv_bytes_per_element);
    const long long positions = static_cast<long long>(o.kv_memory_gib * (1ull << 30) / kv_per_token);
    o.w.max_len = model.max_seq / 2;  // a prompt and its output fit in a slot of max_seq
    const std::vector<sv::Request> requests = sv::make_workload(o.w, o.w.rate, bench.options.seed, model.vocab);
    const sv::Policy policy = sv::policy_from(o.policy);
    const std::vector<CacheSetup> runs = setups(o, policy, positions, model.max_seq);
    std::string executor;
    if (on_model) {
        bench.require_fits(o.kv_memory_gib * (1ull << 30) + model.parameter_count() * pd::size_of(o.dtype),
                           "the model's weights and KV cache", "lower --kv-memory or pick a smaller --preset");
        executor = "model: " + o.preset + ", " + to_string(o.dtype) + " weights, " + o.kv_dtype + " cache, " +
                   bench.device().name + " (wall-clock step times)";
    } else {
        executor = sv::CostModel(cost).describe();
    }
    out << "executor: " << executor << "\n"
        << "KV memory: " << pd::format_bytes(o.kv_memory_gib * (1ull << 30)) << " = " << positions << " positions of "
        << pd::format_bytes(kv_per_token) << "; slots of " << model.max_seq << " positions (" << o.preset
        << "'s max_seq), blocks of " << o.block_size << "; --policy " << o.policy << ", --token-budget "
        << o.token_budget << "\n"
        << "workload: " << requests.size() << " requests (" << sv::describe(o.w) << ")\n\n";

    // ---- every setup on the same workload ----
    std::vector<pd::Row> rows;
    nlohmann::json timelines = nlohmann::json::array(), details = nlohmann::json::array();
    std::vector<std::vector<int>> first_tokens;  // model executor: what the first setup generated
    bool tokens_agree = true;
    for (const CacheSetup& setup : runs) {
        std::optional<sv::Timeline> run;
        std::vector<std::vector<int>> tokens;
        if (on_model) {
            run = serve_on_model(requests, setup, o, bench, tokens);
        } else {
            sv::Scheduler scheduler(setup.config);
            sv::CostModel model_of_steps(cost);
            run = sv::run_engine(requests, scheduler, model_of_steps, true);
        }
        const sv::Timeline& t = *run;
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
        if (on_model) {
            // [ch06_same_tokens]
            // Pages change where K and V live, not what attention computes: every request must
            // generate the tokens it generates with slots (exactly, in fp32; bf16 rounds the same
            // values in a different order of steps, so a near tie may go either way).
            if (first_tokens.empty()) first_tokens = tokens;
            int same = 0;
            for (std::size_t r = 0; r < tokens.size(); ++r) same += tokens[r] == first_tokens[r];
            row.point["same_tokens"] = double(same) / double(std::max<std::size_t>(1, tokens.size()));
            if (same != int(tokens.size()) && o.dtype == DType::fp32 && o.kv_dtype == "fp32") {
                row.result.passed = false;
                tokens_agree = false;
            }
            // [ch06_same_tokens]
        }
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
    std::vector<C> cols = {C("cache", [](const pd::Row& r) { return r.result.kernel; }),
                           C::point("running max", "running_max"), C::point("reserved GiB", "reserved_max_gib"),
                           C::point("used GiB", "used_max_gib"), C("waste", pct("waste")),
                           C::point("preempt", "preemptions"), C::point("prefill tokens", "prefill_tokens"),
                           C("hits", pct("prefix_hit_rate")), C::point("TTFT p50 ms", "ttft_p50_ms"),
                           C::point("ITL p99 ms", "itl_p99_ms"), C::point("E2E p50 s", "e2e_p50_s"),
                           C::point("tok/s", "output_tokens_per_s")};
    if (on_model) cols.push_back(C("same tokens", pct("same_tokens")));
    out << pd::render(rows, cols)
        << "reserved, used: the most at once; waste: 1 - used / reserved over the run, weighted by step time; "
           "hits: prompt positions found in the prefix cache. "
        << (on_model ? std::string("Times are the model's steps, timed on ") +
                           (pd::Bench::sim() ? "the simulator (CPU figures)" : "the GPU") +
                           "; same tokens: requests generating exactly the first setup's tokens.\n"
                     : std::string("Times come from the cost model's steps.\n"));
    if (!tokens_agree) out << "FAILED: with fp32 weights and cache, pages must generate the tokens slots generate\n";
    if (!o.timeline.empty()) {
        std::ofstream f(o.timeline);
        if (!f) throw std::invalid_argument("--timeline " + o.timeline + ": cannot write the file");
        f << nlohmann::json{{"executor", executor}, {"token_budget", o.token_budget}, {"timelines", timelines}}.dump(1)
          << "\n";
        out << "timeline of every setup written to " << o.timeline << "\n";
    }

    // ---- what the block table costs the kernel ----
    const pd::ModelConfig& shape = model;
    const int sm_count = bench.device().sm_count;
    bench.measure_roofs();
    out << "\ndecode attention on one layer's cache, contiguous (chapter 04) and paged: B = " << o.attn_batch
        << ", Hq = " << shape.heads << ", Hkv = " << shape.kv_heads << ", d = " << shape.head_dim << ", contexts "
        << o.attn_context << " down to " << std::max(1, o.attn_context - 3 * (o.attn_batch - 1))
        << " (ragged), blocks of " << o.block_size << " shuffled; reference: CPU, double\n";
    const double attn_bytes = 2.0 * 2 * o.attn_batch * shape.kv_heads * double(o.attn_context) * shape.head_dim * 4;
    bench.require_fits(attn_bytes, "the decode attention benchmark's caches", "lower --attn-batch or --attn-context");
    std::vector<pd::Row> attention = run_attention(bench, shape, o.attn_batch, o.attn_context, o.block_size, sm_count);
    out << pd::render(attention, {"kernel", "dtype", "time ms", "GB/s", "of copy", "vs baseline", "max abs err", "status"})
        << "GB/s counts K and V once per sequence; 'vs baseline': contiguous v4's time over this one's, the same bytes "
           "(the bandwidth ratio; the target is >= 0.9 for v2 at blocks of 16)"
        << (pd::Bench::sim() ? "; on the simulator these are CPU times, not GPU bandwidth" : "") << ".\n";

    nlohmann::json report = bench.report({{"preset", o.preset}, {"gpu", o.gpu}, {"tp", o.tp}, {"executor", o.executor},
                                          {"policy", o.policy}, {"kv", o.kv}, {"block_size", o.block_size},
                                          {"kv_memory_gib", o.kv_memory_gib}, {"kv_positions", positions},
                                          {"scenario", o.w.trace.empty() ? o.w.scenario : "trace"},
                                          {"requests", requests.size()}, {"rate", o.w.rate},
                                          {"token_budget", o.token_budget}, {"max_seqs", o.max_seqs},
                                          {"attn_batch", o.attn_batch}, {"attn_context", o.attn_context}},
                                         rows, bench.device_json());
    report["executor"] = executor;
    report["caches"] = details;
    report["attention"] = bench.json(attention);
    if (!tokens_agree) report["passed"] = false;
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
