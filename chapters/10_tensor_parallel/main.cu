// Chapter 10: tensor parallelism on NCCL.
//
// A model too large for one GPU, or a decode step bound by reading its weights, is split across
// N GPUs as Megatron-LM splits it: each rank holds 1/N of every layer (its query and KV heads,
// its columns of the FFN, its rows of the vocabulary) and reads only those, and the ranks add
// their partial results with two all-reduces per layer. The program generates with N = 1 and
// with each N of --tp, checks that every split run chooses the same tokens from the same logits,
// and shows per decode step the time in computation and in the collectives side by side. It
// then measures the all-reduce alone over message sizes as nccl-tests does (algbw, busbw) and,
// on GPUs, fits latency + bytes / bandwidth to it against the cost model's all-reduce term; and
// it asks the cost model what share of a llama-3-70b decode step on 8 GPUs is communication,
// at B = 1 and B = 64, and how much memory per GPU the split frees for the cache.
//
// On the simulator the ranks are PD_SIM_DEVICES virtual devices whose kernels take turns on the
// CPU, and NCCL's API is the simulator's own: every check is the real one, and the times are CPU
// figures. The steps every chapter shares are in pd/bench.hpp; the split model in model/; the
// collectives in pd/model/tensor_parallel.hpp; this file holds the lesson.
#include "pd/bench.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/model/tensor_parallel.hpp"
#include "pd/serving/cost_model.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace md = pd::model;
namespace sv = pd::serving;
using pd::DType;
using pd::fmt;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny-tp";  // 8 query and 8 KV heads: TP = 8 in seconds on a CPU
    md::PromptSpec p{.batch = 2, .length = 16, .gen = 8};
    double max_bytes = 4 << 20, factor = 8;  // CPU figures: a few sizes
#else
    std::string preset = "llama-3-8b";  // 32 query, 8 KV heads: TP up to 8
    md::PromptSpec p{.batch = 8, .length = 512, .gen = 32};
    double max_bytes = 1 << 30, factor = 2;  // nccl-tests' -b 8 -e 1G -f 2
#endif
    std::vector<int> tp;             // empty: 1, 2, 4, 8 up to the devices present
    std::string allreduce = "nccl";  // or lab 10's ring
    double min_bytes = 8;
    std::string gpu = "H100-SXM", cost_preset = "llama-3-70b";  // chapter 05's worked example
    int cost_tp = 8, cost_context = 1024;
};

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

/// The all-reduces of one forward pass: two per layer, the embedding's (vocabulary-parallel rows),
/// and the all-gather of the logits.
int collectives_per_pass(const pd::ModelConfig& c) {
    return 2 * c.layers + 2;
}

// [ch10_split_run]
/// Generates on @p tp ranks (tp = 1: the whole model, @p ref itself), checks the tokens and
/// logits against @p ref, and returns the row: the mean decode step, its collectives' time
/// and share, the prefill, and what one GPU holds.
pd::Row split_run(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, md::ModelOptions mo, int tp,
                  const std::vector<int>& prompt, int P, const md::Generation& ref, bool& passed) {
    const int B = mo.batch, G = int(ref.ms.size());
    std::shared_ptr<md::NcclCollectives> comms;
    const md::AllReduceAlgorithm algorithm =
        o.allreduce == "ring" ? md::AllReduceAlgorithm::ring : md::AllReduceAlgorithm::nccl;
    if (tp > 1) mo.tensor_parallel = tp, mo.collectives = comms = md::nccl_collectives(tp, bench.timing(), algorithm);
    md::Model model(config, mo);
    model.init_synthetic(bench.options.seed);
    model.warm_up();
    if (comms) comms->reset();
    const md::Generation g = tp > 1 ? md::generate_cached(model, prompt, P, G) : ref;
    nlohmann::json point{{"tp", tp}};
    if (tp > 1 && algorithm == md::AllReduceAlgorithm::ring) {
        // lab 10: the same split on NCCL's all-reduce, untimed, to compare the ring's logits with, bit for bit
        md::ModelOptions on_nccl = mo;
        on_nccl.collectives = md::nccl_collectives(tp, false, md::AllReduceAlgorithm::nccl);
        md::Model twin(config, on_nccl);
        twin.init_synthetic(bench.options.seed);
        const md::Generation n = md::generate_cached(twin, prompt, P, G);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < g.logits.size() && i < n.logits.size(); ++i)
            differ += std::memcmp(&g.logits[i], &n.logits[i], sizeof(float)) != 0;
        point["ring_vs_nccl"] = {{"logits", g.logits.size()},
                                 {"differing_bits", differ},
                                 {"max_rel_diff", md::max_rel_diff(g.logits, n.logits)},
                                 {"same_tokens", g.tokens == n.tokens}};
    }
    // the check: fp32 within the rounding of the reordered sums (md::split_fp32_tolerance()) and
    // identical tokens; bf16 by chapter 04's rule for two generations
    bool ok = true;
    double diff = 0;
    md::compare_generations(g, ref, B, config.vocab, mo.weights, ok, diff);
    const double rel = md::max_rel_diff(g.logits, ref.logits);
    if (mo.weights == DType::fp32) ok = ok && rel <= md::split_fp32_tolerance(config);
    passed = passed && ok;
    // per pass: the collectives' calls in order; pass 0 is the prefill
    const std::vector<double> calls = comms ? comms->call_seconds() : std::vector<double>();
    const auto pass_comm_ms = [&](int pass) {
        double s = 0;
        for (int k = pass * collectives_per_pass(config); k < (pass + 1) * collectives_per_pass(config); ++k)
            if (std::size_t(k) < calls.size()) s += calls[std::size_t(k)];
        return 1e3 * s;
    };
    double step_ms = 0, comm_ms = 0;
    for (int i = 1; i < G; ++i) step_ms += g.ms[std::size_t(i)] / (G - 1), comm_ms += pass_comm_ms(i) / (G - 1);
    point["max_rel_diff"] = rel;
    point["weights_gpu"] = pd::format_bytes(model.weight_bytes());
    point["kv_token_gpu"] = pd::format_bytes(model.kv_bytes_per_token());
    point["comm_bytes"] = model.communication().bytes;
    if (bench.timing()) {
        point["prefill_ms"] = fmt("%.3f", g.ms[0]);
        point["prefill_comm_ms"] = fmt("%.3f", pass_comm_ms(0));
        if (G > 1) {  // --gen 1 makes no decode step
            point["comm_ms"] = fmt("%.3f", comm_ms);
            point["compute_ms"] = fmt("%.3f", step_ms - comm_ms);
            point["comm_share"] = comm_ms / step_ms;
        }
    }
    // the cost model's share for this model, batch and context on tp GPUs of --gpu: the target
    // on a multi-GPU machine is a measured share within 20% of it
    if (tp > 1) {
        const sv::CostModel cm(sv::cost_model_config(config, *pd::roofline::find_gpu(o.gpu), tp));
        sv::Step step;
        for (int b = 0; b < B; ++b) step.items.push_back({.request = b, .tokens = 1, .context = P + G / 2});
        const sv::CostModel::Breakdown br = cm.breakdown(step);
        point["model_comm_share"] = br.comm_s / br.total_s;
        if (bench.timing() && !bench.sim() && G > 1)
            point["within_20pct"] =
                std::fabs(comm_ms / step_ms - br.comm_s / br.total_s) <= 0.2 * br.comm_s / br.total_s;
    }
    // the step's cost on one rank: its share of the weights and of the cache
    const pd::Kernel k{.name = "tp " + std::to_string(tp),
                       .dtype = mo.weights,
                       .cost = model.cost(P + G / 2, 1),
                       .tokens = double(B),
                       .point = point};
    return bench.timed_row(k, bench.timing() && G > 1 ? std::optional<double>(step_ms) : std::nullopt, ok);
}
// [ch10_split_run]

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

void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset, "Model shape (tiny-tp: 8 query and 8 KV heads)",
                 CLI::IsMember(pd::model_names()));
    bench.option("--batch", o.p.batch, "Sequences B generated together", CLI::Range(1, 64));
    bench.option("--prompt-len", o.p.length, "Prompt tokens P per sequence (random ids)", CLI::Range(1, 1 << 20));
    bench.option("--gen", o.p.gen, "Tokens G to generate per sequence", CLI::Range(1, 1 << 20));
    bench.app.add_option("--tp", o.tp, "Ranks to split the model across (default: 1 2 4 8 up to the devices present)")
        ->check(CLI::Range(1, 8));
    bench.add_dtype_option();
    bench.option("--allreduce", o.allreduce,
                 "How the all-reduces run: NCCL's, or lab 10's ring (ring_all_reduce on ncclSend and ncclRecv)",
                 CLI::IsMember({"nccl", "ring"}));
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

/// The --tp list (default: 1, 2, 4, 8 up to @p devices), sorted and each once, after the rules
/// (exit code 2): each split has its devices and divides the model; --cost-tp divides --cost-preset.
std::vector<int> splits(const pd::Bench& bench, const Options& o, const pd::ModelConfig& config, int devices) {
    std::vector<int> tps = o.tp;
    if (tps.empty())
        for (int n = 1; n <= std::min(devices, 8); n *= 2) tps.push_back(n);
    std::sort(tps.begin(), tps.end());
    tps.erase(std::unique(tps.begin(), tps.end()), tps.end());
    for (int tp : tps) {
        if (tp > devices)
            throw std::invalid_argument(
                "--tp " + std::to_string(tp) + " needs " + std::to_string(tp) + " devices, " + std::to_string(devices) +
                " present" + (bench.sim() ? " (the simulator: PD_SIM_DEVICES=" + std::to_string(tp) + ")" : ""));
        md::shard_config(config, tp);  // names --tp when a size does not divide
    }
    for (int tp = 1; tp <= o.cost_tp; tp *= 2)  // the cost model's prediction splits --cost-preset over --cost-tp
        try {
            md::shard_config(*pd::find_model(o.cost_preset), tp);
        } catch (const std::invalid_argument& e) {
            std::string why = e.what();
            if (const std::size_t at = why.find("ModelOptions.tensor_parallel"); at != std::string::npos)
                why.replace(at, 28, "a split of " + std::to_string(tp));
            throw std::invalid_argument("--cost-preset " + o.cost_preset + " on --cost-tp " +
                                        std::to_string(o.cost_tp) + ": " + why);
        }
    return tps;
}

/// The splits' decode steps: the time in computation and in the collectives beside the cost
/// model's share, each split checked against TP = 1; with --allreduce ring, its logits against NCCL's.
void print_splits(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, const std::vector<pd::Row>& rows,
                  int G, DType weights) {
    std::ostream& out = bench.out();
    std::vector<pd::Column> columns = {pd::Column::name("run"),
                                       "dtype",
                                       "step ms",
                                       pd::Column::point("compute ms", "compute_ms"),
                                       pd::Column::point("comm ms", "comm_ms"),
                                       pd::Column::percent("comm", "comm_share"),
                                       pd::Column::percent("model comm", "model_comm_share"),
                                       pd::Column::point("prefill ms", "prefill_ms"),
                                       pd::Column::point("its comm ms", "prefill_comm_ms"),
                                       pd::Column::point("weights/GPU", "weights_gpu"),
                                       pd::Column::point("KV/token/GPU", "kv_token_gpu"),
                                       pd::Column::point("max rel diff", "max_rel_diff"),
                                       "status"};
    if (!bench.sim())  // on GPUs: the target, a measured share within 20% of the cost model's
        columns.insert(columns.begin() + 7, pd::Column::point("within 20%", "within_20pct"));
    out << "\ndecode steps (mean of " << G - 1 << "), each split checked against TP = 1: the same tokens, logits to "
        << (weights == DType::fp32 ? fmt("%.3g", md::split_fp32_tolerance(config)) +
                                         " (the rounding of the reordered sums: 8 u sqrt(K) sqrt(2 L + 1))"
                                   : std::string("chapter 04's bf16 rule"))
        << ":\n"
        << pd::render(rows, columns, bench.options.check_only)
        << "comm ms: the collectives' own time (each rank synchronizes before and after a call; the last to arrive "
           "waits for no one, so the least of the ranks' times is taken)"
        << (bench.sim() ? "; on the simulator the ranks' kernels take turns on the CPU, so these are CPU figures" : "")
        << "; model comm: the cost model's share for this model and batch on as many " << o.gpu
        << " GPUs (the target: a measured share within 20% of it, on a multi-GPU machine).\n";
    for (const pd::Row& r : rows)  // --allreduce ring: the ring's logits against NCCL's
        if (r.point.contains("ring_vs_nccl")) {
            const nlohmann::json& c = r.point["ring_vs_nccl"];
            out << "ring against NCCL's all-reduce, " << r.result.kernel << ": "
                << c["differing_bits"].get<std::size_t>() << " of " << c["logits"].get<std::size_t>()
                << " logits differ in their bits, max rel diff " << fmt("%.3g", c["max_rel_diff"].get<double>()) << ", "
                << (c["same_tokens"].get<bool>() ? "the same tokens" : "other tokens") << "\n";
        }
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"10_tensor_parallel",
                    "tensor parallelism on NCCL",
                    "Chapter 10: tensor parallelism. The model split across ranks as Megatron-LM splits it (Q, K, V, "
                    "gate and up by columns, O and down by rows, two all-reduces per layer; the vocabulary by rows), "
                    "on NCCL: the same tokens and logits as one rank, the time in computation and in collectives per "
                    "step, the all-reduce benchmark (algbw, busbw), and the cost model's communication share.",
                    {}};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const pd::ModelConfig config = *pd::find_model(o.preset);
    const pd::DeviceInfo& dev = bench.device();
    int devices = 0;
    PD_CHECK_CUDA(cudaGetDeviceCount(&devices));
    const std::vector<int> tps = splits(bench, o, config, devices);
    const std::vector<double> sizes = allreduce_sizes(o);
    if (!sizes.empty() && tps.back() > 1)  // each rank's send and receive buffers of the largest message
        bench.require_fits(2 * sizes.back(), "the all-reduce benchmark's largest message, sent and received",
                           "lower --max-bytes");
    int P = 0;
    const std::vector<int> prompt = md::make_prompts(o.p, config, nullptr, bench.options.seed, P);
    const int B = o.p.batch, G = o.p.gen;
    const md::ModelOptions mo{
        .weights = bench.single_dtype(), .batch = B, .max_seq = P + G, .sm_count = std::max(dev.sm_count, 1)};
    bench.require(pd::Needs{"generating with " + config.name,
                            "choose a smaller --preset, or lower --batch, --prompt-len or --gen, or give fewer --tp"}
                      .device("the whole model (TP = 1, the reference), its cache and activations",
                              md::Model::device_bytes(config, mo))
                      .work(double(tps.size() + 1) * md::generation_flops(config, o.p, P, true, false, 0)));
    bench.measure_roofs();
    std::ostream& out = bench.out();
    out << "model: " << pd::describe(config) << "\n"
        << "run: B = " << B << ", prompt P = " << P << ", generate G = " << G << ", " << to_string(mo.weights) << "; "
        << devices << (devices == 1 ? " device" : " devices") << "; per pass " << collectives_per_pass(config)
        << " collectives (2 all-reduces per layer, the embedding's, the logits' all-gather); all-reduce: "
        << (o.allreduce == "ring" ? "lab 10's ring" : "NCCL's") << "\n";

    // ---- the reference (the whole model on device 0), then each split ----
    md::Model whole(config, mo);
    whole.init_synthetic(bench.options.seed);
    whole.warm_up();
    const md::Generation ref = md::generate_cached(whole, prompt, P, G);
    std::vector<pd::Row> rows;
    bool passed = true;
    for (int tp : tps) rows.push_back(split_run(bench, o, config, mo, tp, prompt, P, ref, passed));
    print_splits(bench, o, config, rows, G, mo.weights);

    nlohmann::json allreduce = nullptr;
    if (tps.back() == 1)
        out << "\none device: no all-reduce to measure (the simulator: PD_SIM_DEVICES=N)\n";
    else if (!bench.timing())
        out << "\n--check-only: the all-reduce benchmark is not run\n";
    else if (o.max_bytes > 0)
        allreduce = allreduce_table(bench, o, tps.back(), sizes, passed);
    const nlohmann::json cost = cost_model_shares(bench, o);

    nlohmann::json report = bench.report({{"preset", config.name},
                                          {"batch", B},
                                          {"prompt_len", P},
                                          {"gen", G},
                                          {"tp", tps},
                                          {"allreduce", o.allreduce},
                                          {"dtype", to_string(mo.weights)}},
                                         rows);
    report["allreduce"] = allreduce;
    report["cost_model"] = cost;
    if (!passed) {
        out << "FAILED: a split run's tokens or logits differ from the whole model's, or an all-reduce's result from "
               "the sum\n";
        report["passed"] = false;
    }
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv,
                            {{"ModelOptions.batch", "--batch"},
                             {"ModelOptions.tensor_parallel", "--tp"},
                             {"ModelOptions.max_seq", "--prompt-len + --gen"},
                             {"PromptSpec.length", "--prompt-len"},
                             {"PromptSpec.gen", "--gen"}});
}
