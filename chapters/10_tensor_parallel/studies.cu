// Chapter 10's further studies: the all-reduce alone over message sizes (nccl-tests' table, on GPUs
// the alpha-beta fit), lab 10's ring against NCCL, and the cost model's shares. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/serving/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch10 {

namespace sv = pd::serving;
using pd::fmt;

/// The options of the further studies: the all-reduce benchmark's message sizes, and the cost
/// model's GPU, model, split and context.
void add_study_options(pd::Bench& bench, Options& o) {
    bench.option("--min-bytes", o.min_bytes, "All-reduce benchmark: the smallest message", CLI::Range(4.0, 1e10));
    // the simulator caps a message at 64 MiB per rank (its NCCL keeps every rank's message in host memory)
    bench.option("--max-bytes", o.max_bytes,
                 pd::Bench::sim() ? "All-reduce benchmark: the largest message (0: none; the simulator's NCCL takes "
                                    "up to 64 MiB)"
                                  : "All-reduce benchmark: the largest message (0: none)",
                 CLI::Range(0.0, pd::Bench::sim() ? double(64 << 20) : 1e10));
    bench.option("--step-factor", o.factor, "All-reduce benchmark: each size is the previous one times this",
                 CLI::Range(1.5, 1e3));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(pd::roofline::gpu_names()));
    bench.option("--cost-preset", o.cost_preset, "Model of the cost model's prediction",
                 CLI::IsMember(pd::model_names()));
    bench.option("--cost-tp", o.cost_tp, "GPUs of the cost model's prediction", CLI::Range(1, 64));
    bench.option("--cost-context", o.cost_context, "Context of the cost model's decode step", CLI::Range(1, 1 << 20));
}

/// The cost model's prediction splits --cost-preset over --cost-tp: each power of two up to it
/// must divide the model (exit code 2 naming --cost-preset and --cost-tp).
void check_cost_splits(const Options& o) {
    for (int tp = 1; tp <= o.cost_tp; tp *= 2)  // the cost model's prediction splits --cost-preset over --cost-tp
        try {
            md::shard_config(*pd::find_model(o.cost_preset), tp);
        } catch (const std::invalid_argument& e) {
            std::string why = e.what();
            if (const std::size_t at = why.find("ModelOptions.parallel.ranks"); at != std::string::npos)
                why.replace(at, 28, "a split of " + std::to_string(tp));
            throw std::invalid_argument("--cost-preset " + o.cost_preset + " on --cost-tp " +
                                        std::to_string(o.cost_tp) + ": " + why);
        }
}

/// The all-reduce benchmark's message sizes, nccl-tests' -b, -e and -f: from --min-bytes, each
/// --step-factor times the last, up to --max-bytes, each rounded down to whole fp32 elements (a
/// multiple of 4 bytes) and each once. Throws std::invalid_argument naming the options when no
/// size is left.
std::vector<double> allreduce_sizes(const Options& o) {
    std::vector<double> sizes;
    if (o.max_bytes == 0) return sizes;
    if (o.min_bytes > o.max_bytes) throw std::invalid_argument("--min-bytes must not exceed --max-bytes");
    for (double b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
        const double whole = 4 * std::floor(b / 4);
        if (whole >= 4 && (sizes.empty() || whole > sizes.back())) sizes.push_back(whole);
    }
    if (sizes.empty())
        throw std::invalid_argument("--min-bytes " + fmt("%g", o.min_bytes) + " to --max-bytes " +
                                    fmt("%g", o.max_bytes) + " holds no message of whole fp32 elements (4 bytes)");
    return sizes;
}

/// The cost model's share of communication in a decode step of @p config, @p B sequences at
/// @p context tokens, on @p tp GPUs of --gpu, into @p point; on GPUs, when @p decoded, whether the
/// measured share (@p comm_ms of @p step_ms) is within 20% of it.
void model_comm_share(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, int tp, int B, int context,
                      bool decoded, double comm_ms, double step_ms, nlohmann::json& point) {
    const sv::CostModel cm(sv::cost_model_config(config, *pd::roofline::find_gpu(o.gpu), tp));
    sv::Step step;
    for (int b = 0; b < B; ++b) step.items.push_back({.request = b, .tokens = 1, .context = context});
    const sv::CostModel::Breakdown br = cm.breakdown(step);
    point["model_comm_share"] = br.comm_s / br.total_s;
    if (bench.timing() && !bench.sim() && decoded)
        point["within_20pct"] = std::fabs(comm_ms / step_ms - br.comm_s / br.total_s) <= 0.2 * br.comm_s / br.total_s;
}

/// Lab 10: the same split on NCCL's all-reduce, untimed, to compare the ring's logits (@p g) with,
/// bit for bit.
nlohmann::json ring_vs_nccl(pd::Bench& bench, const pd::ModelConfig& config, const md::ModelOptions& mo, int tp,
                            const std::vector<int>& prompt, int P, int G, const md::Generation& g) {
    md::ModelOptions on_nccl = mo;
    on_nccl.parallel.collectives = md::nccl_collectives(tp, false, md::AllReduceAlgorithm::nccl);
    md::Model twin(config, on_nccl);
    twin.init_synthetic(bench.options.seed);
    const md::Generation n = md::generate_cached(twin, prompt, P, G);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < g.logits.size() && i < n.logits.size(); ++i)
        differ += std::memcmp(&g.logits[i], &n.logits[i], sizeof(float)) != 0;
    return {{"logits", g.logits.size()},
            {"differing_bits", differ},
            {"max_rel_diff", md::max_rel_diff(g.logits, n.logits)},
            {"same_tokens", g.tokens == n.tokens}};
}

/// Lab 10 (--allreduce ring): each split's ring logits against NCCL's.
void print_ring_vs_nccl(pd::Bench& bench, const std::vector<pd::Row>& rows) {
    std::ostream& out = bench.out();
    for (const pd::Row& r : rows)  // --allreduce ring: the ring's logits against NCCL's
        if (r.point.contains("ring_vs_nccl")) {
            const nlohmann::json& c = r.point["ring_vs_nccl"];
            out << "ring against NCCL's all-reduce, " << r.result.kernel << ": "
                << c["differing_bits"].get<std::size_t>() << " of " << c["logits"].get<std::size_t>()
                << " logits differ in their bits, max rel diff " << fmt("%.3g", c["max_rel_diff"].get<double>()) << ", "
                << (c["same_tokens"].get<bool>() ? "the same tokens" : "other tokens") << "\n";
        }
}

// [ch10_allreduce_bench]
/// nccl-tests' all-reduce table on @p ranks ranks, and on GPUs the alpha-beta fit against the
/// cost model's all-reduce term. Returns its JSON.
nlohmann::json allreduce_table(pd::Bench& bench, const Options& o, int ranks, const std::vector<double>& sizes,
                               bool& passed) {
    std::ostream& out = bench.out();
    const std::vector<md::AllReduceRow> rows =
        md::all_reduce_bench(ranks, sizes, bench.options.warmup, std::max(bench.options.iters, 1),
                             o.allreduce == "ring" ? md::AllReduceAlgorithm::ring : md::AllReduceAlgorithm::nccl);
    std::vector<pd::Row> shown;  // one record per message size: the table's cells and the JSON's row
    nlohmann::json table = nlohmann::json::array();
    for (const md::AllReduceRow& r : rows) {
        passed = passed && r.correct;
        shown.push_back({.result = {.kernel = "all-reduce", .passed = r.correct}});
        shown.back().point = {
            {"bytes", r.bytes}, {"seconds", r.seconds}, {"algbw", r.algbw}, {"busbw", r.busbw}, {"passed", r.correct}};
        table.push_back(shown.back().point);
    }
    const double sent = 2.0 * (ranks - 1) / ranks;
    const auto column = [](std::string header, const char* format, const char* key, double times, double over) {
        return pd::Column(std::move(header),
                          [=](const pd::Row& r) { return fmt(format, times * r.point[key].get<double>() / over); });
    };
    out << "\nall-reduce (" << (o.allreduce == "ring" ? "lab 10's ring on ncclSend and ncclRecv" : "ncclAllReduce")
        << ", fp32 sum, out of place, each result checked) on " << ranks << " ranks"
        << (bench.sim() ? " (CPU figures)" : "") << ":\n"
        << pd::render(
               shown,
               {column("bytes", "%.0f", "bytes", 1, 1),
                pd::Column("sent/rank",
                           [=](const pd::Row& r) { return pd::format_bytes(sent * r.point["bytes"].get<double>()); }),
                column("time us", "%.2f", "seconds", 1e6, 1), column("algbw GB/s", "%.3f", "algbw", 1, 1e9),
                column("busbw GB/s", "%.3f", "busbw", 1, 1e9), "status"})
        << "sent/rank: what each rank sends in a ring all-reduce, 2 (n - 1) / n x bytes; algbw = bytes / time; "
           "busbw = algbw x 2 (n - 1) / n, the rate each link carries (nccl-tests' definitions).\n";
    nlohmann::json j{{"ranks", ranks}, {"rows", table}};
    if (bench.sim() || rows.size() < 2) return j;
    // the fit, against the cost model's term: alpha + 2 (n - 1) / n x bytes / busbw
    const md::AlphaBeta fit = md::fit_alpha_beta(rows);
    const sv::CostModelConfig cc =
        sv::cost_model_config(*pd::find_model(o.cost_preset), *pd::roofline::find_gpu(o.gpu), ranks);
    const double bus = fit.beta_bytes_per_s * 2.0 * (ranks - 1) / ranks;
    out << "fit: time = " << fmt("%.1f", 1e6 * fit.alpha_s) << " us + bytes / "
        << fmt("%.1f", fit.beta_bytes_per_s / 1e9) << " GB/s (bus " << fmt("%.1f", bus / 1e9)
        << " GB/s); the cost model's term: " << fmt("%.1f", 1e6 * cc.allreduce_latency_s)
        << " us + 2 (n - 1) / n x bytes / " << fmt("%.0f", cc.allreduce_bus_bytes_per_s / 1e9) << " GB/s bus\n";
    j["fit"] = {{"alpha_s", fit.alpha_s},
                {"beta_bytes_per_s", fit.beta_bytes_per_s},
                {"bus_bytes_per_s", bus},
                {"model_alpha_s", cc.allreduce_latency_s},
                {"model_bus_bytes_per_s", cc.allreduce_bus_bytes_per_s}};
    return j;
}
// [ch10_allreduce_bench]

/// The all-reduce benchmark on @p ranks ranks, or null with a line saying why not: one device, or
/// --check-only (--max-bytes 0: none asked for).
nlohmann::json allreduce_benchmark(pd::Bench& bench, const Options& o, int ranks, const std::vector<double>& sizes,
                                   bool& passed) {
    std::ostream& out = bench.out();
    nlohmann::json allreduce = nullptr;
    if (ranks == 1)
        out << "\none device: no all-reduce to measure (the simulator: PD_SIM_DEVICES=N)\n";
    else if (!bench.timing())
        out << "\n--check-only: the all-reduce benchmark is not run\n";
    else if (o.max_bytes > 0)
        allreduce = allreduce_table(bench, o, ranks, sizes, passed);
    return allreduce;
}

// [ch10_cost_model]
/// The cost model's llama-3-70b (--cost-preset) decode step on --cost-tp GPUs of --gpu: the
/// share of communication at B = 1 and B = 64; and the memory per GPU at each TP.
nlohmann::json cost_model_shares(pd::Bench& bench, const Options& o) {
    std::ostream& out = bench.out();
    const pd::ModelConfig c = *pd::find_model(o.cost_preset);
    const pd::roofline::GpuSpec gpu = *pd::roofline::find_gpu(o.gpu);
    const sv::CostModel cm(sv::cost_model_config(c, gpu, o.cost_tp));
    out << "\n" << cm.describe() << "\ndecode step at a " << o.cost_context << "-token context (prediction):\n";
    nlohmann::json shares = nlohmann::json::array();
    for (int B : {1, 64}) {
        sv::Step step;
        for (int b = 0; b < B; ++b) step.items.push_back({.request = b, .tokens = 1, .context = o.cost_context});
        const sv::CostModel::Breakdown br = cm.breakdown(step);
        out << "  B = " << fmt("%2.0f", B) << ": step " << fmt("%.3f", 1e3 * br.total_s) << " ms = max(compute "
            << fmt("%.3f", 1e3 * br.compute_s) << ", memory " << fmt("%.3f", 1e3 * br.memory_s) << ") + collectives "
            << fmt("%.3f", 1e3 * br.comm_s) << " ms: communication " << fmt("%.1f", 100 * br.comm_s / br.total_s)
            << "% (" << 2 * c.layers + 1 << " all-reduces of " << pd::format_bytes(2.0 * B * c.d_model)
            << ", an all-gather of " << pd::format_bytes(2.0 * B * c.vocab) << ")\n";
        shares.push_back(
            {{"batch", B}, {"total_s", br.total_s}, {"comm_s", br.comm_s}, {"share", br.comm_s / br.total_s}});
    }
    // memory per GPU: the weights' share and the cache's, and the tokens that fit beside them
    out << "memory per " << gpu.name << " (" << fmt("%.0f", gpu.memory_gb)
        << " GB, 90% usable), bf16 weights and cache:\n";
    nlohmann::json memory = nlohmann::json::array();
    for (int tp = 1; tp <= o.cost_tp; tp *= 2) {
        const pd::ModelConfig part = md::shard_config(c, tp);
        const double weights = 2.0 * c.parameter_count() / tp;  // every matrix split (the norms are a rounding error)
        const double kv = part.kv_bytes_per_token(2), free = 0.9 * gpu.memory_gb * 1e9 - weights;
        // what fits is a floor: a token's cache, or a sequence's, either fits whole or not at all
        const double tokens = free > 0 ? std::floor(free / kv) : 0;
        out << "  TP " << tp << ": weights " << pd::format_bytes(weights) << ", KV " << pd::format_bytes(kv)
            << " per token -> "
            << (free > 0 ? fmt("%.0f", tokens) + " tokens (" + fmt("%.0f", std::floor(tokens / o.cost_context)) +
                               " sequences of " + std::to_string(o.cost_context) + ")"
                         : std::string("the weights do not fit"))
            << "\n";
        memory.push_back({{"tp", tp}, {"weights_bytes", weights}, {"kv_bytes_per_token", kv}, {"tokens", tokens}});
    }
    return {{"model", c.name},           {"gpu", gpu.name},  {"tp", o.cost_tp},
            {"context", o.cost_context}, {"decode", shares}, {"memory", memory}};
}
// [ch10_cost_model]

}  // namespace ch10
