// Chapter 12: CUDA graphs.
//
// A decode step of a small batch reads the weights once and does little else: a few hundred
// kernels of a few microseconds each. Launched one by one, each costs the host a few
// microseconds too, and the GPU waits between them: the step is launch-bound. A CUDA graph
// records the step's launches once (a stream capture) and replays them with one call, so the
// host's cost of a step no longer grows with its kernels. The model (ModelOptions::graphs)
// captures its decode pass once per batch bucket (1, 2, 4, ...), its inputs in fixed buffers
// that the graph fills from a pinned host buffer, and replays the bucket's graph at every step.
// This program runs the decode step of each batch both ways on one model and one cache: the
// replay must give the eager step's logits bit for bit; on a GPU both are timed against the
// step's byte floor, with the host's time per step; on the simulator, whose times are CPU
// figures, the launches per step and a modelled host cost per launch carry the lesson.
//
// The steps every chapter shares (options, tables, JSON, exit codes) are in pd/bench.hpp; the
// model and its graphs in model/ (model/src/graphs.cpp); this file holds the lesson.
#include "chapter.hpp"

#include "pd/cuda_check.hpp"
#include "pd/model/executor.hpp"
#include "pd/roofline.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ch12 {

/// Sequence s in slot s, with @p context positions cached, one token each.
std::vector<md::StepSequence> decode_rows(int B, int context) {
    std::vector<md::StepSequence> rows(static_cast<std::size_t>(B));
    for (int s = 0; s < B; ++s) rows[std::size_t(s)] = {.slot = s, .context = context, .tokens = 1};
    return rows;
}

double host_us(pd::Bench& bench, const std::function<void()>& step) {
    double total = 0;
    for (int i = 0; i < bench.options.iters; ++i) {
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        step();
        total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return total / bench.options.iters;
}

void model_times(pd::Kernel& k, const Options& o, int launches, const std::string& gpu_name) {
    // the host issues --launch-us per launch; the GPU runs the step at the roofline of --gpu and
    // starts each kernel in the profiler's 2 us; the longer wins
    const pd::roofline::GpuSpec gpu = *pd::roofline::find_gpu(gpu_name);
    const double peak = k.dtype == DType::bf16 ? gpu.tensor_tflops : gpu.fp32_tflops;
    const double floor = std::max(k.cost.bytes / (gpu.bandwidth_gbps * 1e3), k.cost.flops / (peak * 1e6));
    const double host = launches * o.launch_us,
                 device = floor + k.point["kernels"].get<int>() * pd::roofline::kModelLaunchSeconds * 1e6;
    k.point["host_us"] = host;
    k.point["modelled_floor_us"] = floor;
    k.point["modelled_gpu_us"] = device;
    k.point["modelled_step_us"] = std::max(host, device);
}

// [ch12_step]
/// Batch @p B's decode step, eager and replayed, on @p m (its cache holds --context positions
/// of every slot): checked (the replay's logits are the eager step's bits when B fills its
/// bucket; otherwise the same greedy tokens), then on a GPU timed. Appends the two rows.
void measure_batch(pd::Bench& bench, const Options& o, md::Model& m, int B, std::vector<pd::Row>& rows) {
    const std::vector<md::StepSequence> seqs = decode_rows(B, o.context);
    const std::vector<int> tokens = md::synthetic_prompt(B, m.config().vocab, bench.options.seed, 1000 + B);
    const std::size_t V = std::size_t(m.config().vocab);
    const int bucket = m.graph_bucket(B);
    const md::Model::GraphNodes nodes = m.graph_nodes(bucket);

    m.replay_graphs(false);  // the step as the model runs it without graphs: every kernel launched
    m.forward(tokens, seqs);
    std::vector<float> eager = m.logits().download();
    const std::vector<int> eager_tokens = m.greedy_tokens();
    m.replay_graphs(true);  // the same step, its bucket's graph replayed (the same position rewritten)
    bench.begin_profile();
    m.forward(tokens, seqs);
    nlohmann::json profile = bench.end_profile(m.cost(seqs), pd::Units::simt);
    std::vector<float> replayed = m.logits().download();
    eager.resize(B * V), replayed.resize(B * V);
    bench.dump<float>("logits_eager_B" + std::to_string(B), eager, {std::size_t(B), V});  // --dump: both, [B, V]
    bench.dump<float>("logits_graph_B" + std::to_string(B), replayed, {std::size_t(B), V});
    const bool same_bits = std::memcmp(eager.data(), replayed.data(), eager.size() * sizeof(float)) == 0;
    const bool passed = bucket == B ? same_bits : m.greedy_tokens() == eager_tokens;

    for (const bool graph : {false, true}) {
        const std::string name = graph ? "graph" : "eager";
        if (!bench.selects(name)) continue;
        const int launches = graph ? 1 : nodes.kernels - 1;  // (the split plan is the graph's own kernel)
        pd::Kernel k{.name = name,
                     .dtype = m.options().weights,
                     .units = pd::Units::simt,
                     .cost = m.cost(seqs),
                     .tokens = double(B),
                     .point = {{"batch", B},
                               {"bucket", bucket},
                               {"kernels", nodes.kernels - (graph ? 0 : 1)},
                               {"host_launches", launches},
                               {"bitwise", same_bits}}};
        std::optional<double> ms;
        if (bench.timing() && !bench.sim()) {  // a GPU: the step's time, and the host's share of it
            m.replay_graphs(graph);
            ms = bench.time_ms([&] { m.forward(tokens, seqs); });
            k.point["host_us"] = host_us(bench, [&] { m.forward(tokens, seqs); });
            m.replay_graphs(true);
        } else {
            model_times(k, o, launches, bench.options.gpu);
        }
        rows.push_back(bench.timed_row(k, ms, passed));
        if (graph) bench.add_profile(rows.back(), profile);
    }
}
// [ch12_step]

/// "1.73x": a row's time over its byte floor ("-" untimed).
std::string over_floor(const pd::Row& r) {
    return r.result.time_ms && r.floor_ms && *r.floor_ms > 0 ? pd::fmt("%.2fx", *r.result.time_ms / *r.floor_ms) : "-";
}

std::vector<pd::Column> step_columns(const pd::Bench& bench, std::vector<pd::Column> columns) {
    const auto us = [](const char* key) {
        return [key](const pd::Row& r) {
            return r.point.contains(key) ? pd::fmt("%.1f", r.point[key].get<double>()) : "-";
        };
    };
    columns.insert(columns.end(),
                   {pd::Column::point("kernels", "kernels"), pd::Column::point("launches", "host_launches")});
    if (bench.sim())  // modelled figures, labelled
        columns.insert(columns.end(), {pd::Column("host us*", us("host_us")),
                                       pd::Column("floor us* (" + bench.options.gpu + ")", us("modelled_floor_us")),
                                       pd::Column("GPU us*", us("modelled_gpu_us")),
                                       pd::Column("step us*", us("modelled_step_us")), "status"});
    else
        columns.insert(columns.end(), {pd::Column("host us", us("host_us")), "step ms", "floor ms",
                                       pd::Column("x floor", over_floor), "tokens/s", "status"});
    return columns;
}

/// The table, and the batch where eager and replayed steps meet (within 5%) on a GPU.
void print_steps(pd::Bench& bench, const Options& o, const std::vector<pd::Row>& rows) {
    std::ostream& out = bench.out();
    const std::vector<pd::Column> columns = step_columns(
        bench, {pd::Column::name("step"), pd::Column::point("B", "batch"), pd::Column::point("bucket", "bucket")});
    out << "\n"
        << pd::render(rows, columns, bench.options.check_only)
        << "kernels: what a step runs on the GPU (the graph's include the split plan of the decode attention); "
           "launches: the host's launches of the pass (eager: beside them the batch's bookkeeping, a scan and a "
           "kernel); floor: the weights and the KV read once"
        << (bench.sim() ? " at " + bench.options.gpu + "'s bandwidth" : ", over the copy bandwidth") << ".\n";
    if (bench.sim()) {
        out << "* modelled: each launch costs the host " << o.launch_us
            << " us (--launch-us; 4 to 6 us measured on an RTX 5070 Ti with CUDA 13.0, "
               "susun-blog.com/blog/pegainfer-3-cuda-graph), a replay one launch; the GPU's time is the floor plus "
               "2 us to start each kernel (the profiler's lead for back-to-back launches, docs/simulator.md), which "
               "a graph does not remove; a step takes the longer of the two. A GPU measures them.\n";
        return;
    }
    for (std::size_t i = 0; i + 1 < rows.size(); i += 2) {
        const pd::Row &e = rows[i], &g = rows[i + 1];
        if (e.result.time_ms && g.result.time_ms && *e.result.time_ms <= 1.05 * *g.result.time_ms) {
            out << "eager and replayed steps meet (within 5%) at B = " << e.point["batch"].get<int>() << "\n";
            return;
        }
    }
    out << "the replayed step stays more than 5% faster at every batch run\n";
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"12_cuda_graphs", "CUDA graphs",
                    "Chapter 12: CUDA graphs. The model's decode step at each batch of --batches, eager (every "
                    "kernel launched by the host) and replayed (captured once per batch bucket as a CUDA graph): "
                    "the replay must give the eager step's logits; a GPU times both against the step's byte floor, "
                    "with the host's time per step; the simulator counts the launches and models their cost.",
                    versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const pd::ModelConfig config = *pd::find_model(o.preset);
    const md::ModelOptions mo = model_options(bench, o, config);
    bench.measure_roofs();
    std::ostream& out = bench.out();

    // [ch12_cost]
    md::Model m(config, mo);
    m.init_synthetic(bench.options.seed);
    out << "model: " << pd::describe(config) << "\n"
        << "weights " << to_string(mo.weights) << " (" << pd::format_bytes(m.weight_bytes()) << "), cache "
        << o.kv_dtype << " (" << pd::format_bytes(m.kv_bytes_per_token()) << " per token); each step: B sequences of "
        << o.context << " cached positions, one token each; buckets";
    for (int b : m.graph_buckets()) out << " " << b;
    out << "\n";
    // [ch12_cost]

    for (int s = 0; s < mo.batch; ++s) {  // every slot's prompt, one prefill at a time (eager)
        const md::StepSequence prompt{.slot = s, .context = 0, .tokens = o.context};
        m.forward(md::synthetic_prompt(o.context, config.vocab, bench.options.seed, s), std::span(&prompt, 1));
    }
    m.capture_graphs();  // before anything is timed

    // [ch12_versions]
    std::vector<pd::Row> rows;
    for (int B : o.batches) measure_batch(bench, o, m, B, rows);
    // [ch12_versions]
    print_steps(bench, o, rows);
    if (bench.dumping())
        out << "dumped logits_eager_B<B> and logits_graph_B<B> (each [B, vocab], fp32) of every batch to "
            << bench.dump_dir() << "\n";
    const std::vector<pd::Row> prefill = prefill_comparison(bench, o, m);

    nlohmann::json report = bench.report({{"preset", config.name},
                                          {"batches", o.batches},
                                          {"context", o.context},
                                          {"dtype", to_string(mo.weights)},
                                          {"kv_dtype", o.kv_dtype},
                                          {"prefill_lens", o.prefill_lens},
                                          {"launch_us", o.launch_us}},
                                         rows);
    report["graphs"] = {{"buckets", m.graph_buckets()}, {"captured", m.graph_stats().captured}};
    report["prefill"] = bench.json(prefill);
    for (const pd::Row& r : prefill)
        if (!r.result.passed) report["passed"] = false;
    return bench.finish(report);
}

}  // namespace ch12

int main(int argc, char** argv) {
    return pd::guarded_main(ch12::run, argc, argv,
                            {{"ModelOptions.batch", "--batches"},
                             {"ModelOptions.max_seq", "--context"},
                             {"ModelOptions.cache.kv", "--kv-dtype"}});
}
