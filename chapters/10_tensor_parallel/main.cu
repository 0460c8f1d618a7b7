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
#include "chapter.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ch10 {

using pd::DType;
using pd::fmt;

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
    if (tp > 1) mo.parallel = {.ranks = tp, .collectives = comms = md::nccl_collectives(tp, bench.timing(), algorithm)};
    md::Model model(config, mo);
    model.init_synthetic(bench.options.seed);
    model.warm_up();
    if (comms) comms->reset();
    const md::Generation g = tp > 1 ? md::generate_cached(model, prompt, P, G) : ref;
    nlohmann::json point{{"tp", tp}};
    if (tp > 1 && algorithm == md::AllReduceAlgorithm::ring)  // lab 10: its logits against NCCL's, bit for bit
        point["ring_vs_nccl"] = ring_vs_nccl(bench, config, mo, tp, prompt, P, G, g);
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
    if (tp > 1) model_comm_share(bench, o, config, tp, B, P + G / 2, G > 1, comm_ms, step_ms, point);
    // the step's cost on one rank: its share of the weights and of the cache
    const pd::Kernel k{.name = "tp " + std::to_string(tp),
                       .dtype = mo.weights,
                       .cost = model.cost(P + G / 2, 1),
                       .tokens = double(B),
                       .point = point};
    return bench.timed_row(k, bench.timing() && G > 1 ? std::optional<double>(step_ms) : std::nullopt, ok);
}
// [ch10_split_run]

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
    add_study_options(bench, o);
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
    check_cost_splits(o);
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
    print_ring_vs_nccl(bench, rows);
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
    bench.no_dump();  // its results are the tables and --json
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
    const md::ModelOptions mo{.weights = bench.single_dtype(),
                              .batch = B,
                              .max_seq = P + G,
                              .kernels = {.sm_count = std::max(dev.sm_count, 1)}};
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

    const nlohmann::json allreduce = allreduce_benchmark(bench, o, tps.back(), sizes, passed);
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

}  // namespace ch10

int main(int argc, char** argv) {
    return pd::guarded_main(ch10::run, argc, argv,
                            {{"ModelOptions.batch", "--batch"},
                             {"ModelOptions.parallel.ranks", "--tp"},
                             {"ModelOptions.max_seq", "--prompt-len + --gen"},
                             {"PromptSpec.length", "--prompt-len"},
                             {"PromptSpec.gen", "--gen"}});
}
