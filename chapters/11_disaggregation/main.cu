// Chapter 11: prefill and decode on separate GPUs, and the design review of a serving setup.
//
// Prefill is compute-bound and decode is bound by memory; chunked prefill (chapter 05) runs both
// on the same GPUs, so a prefill chunk lengthens the decode steps it shares. Disaggregation runs
// them on separate pools and moves each request's KV cache from the prefill pool to the decode
// pool when its prompt is done. This program:
//  1. moves a real cache: chapter 04's model prefills on device 0 and decodes on device 1, the
//     cache copied block by block with cudaMemcpyPeer and its block tables remapped, and checks
//     the tokens against one device's, with the transfer's bytes and time beside the links';
//  2. prices the transfer on each link (bytes per token x prompt tokens);
//  3. searches the aggregated setups (chapter 05's policies, token budgets, TP) and the
//     disaggregated ones (prefill GPUs, decode GPUs, TP) of the same GPUs with the cost model for
//     their per-GPU capacity at 90% SLO attainment (DistServe's goodput), over a fast link and a
//     slow one, side by side;
//  4. with --review, reviews a setup as a design review would: the complaint, the workload, what
//     binds, the remedies of chapters 00 to 11 ranked by the cost model, and the cost per million
//     prompt and generated tokens.
//
// The steps every chapter shares are in pd/bench.hpp; the setups, the searches and the review in
// serving/ (disaggregation.hpp, review.hpp, lab 11's kv_transfer.hpp); the model and the peer
// copy in model/.
#include "pd/bench.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/kv_transfer_device.hpp"
#include "pd/model/model.hpp"
#include "pd/rng.hpp"
#include "pd/serving/disaggregation.hpp"
#include "pd/serving/options.hpp"
#include "pd/serving/review.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace {

namespace md = pd::model;
namespace sv = pd::serving;
using pd::fmt;

struct Options {
    std::string preset = "llama-2-13b", gpu = "H100-SXM";
    int gpus = 4;
    std::string link = "nvlink", slow_link = "eth-25g";
    bool layerwise = false;
    sv::WorkloadOptions w;
    double slo_ttft_ms = 200, slo_tpot_ms = 40, target = 0.9;
    int max_seqs = 128;
    std::vector<int> budgets = {256, 512, 1024, 2048, 4096};
    std::vector<int> tps = {1, 2};
    bool review = false;
    std::string policy = "chunked";
    int tp = 1, token_budget = 512;
    double price = 2.0;
    // the real transfer
#if defined(PD_BACKEND_SIM)
    std::string transfer_preset = "tiny";  // seconds on a CPU
    int transfer_prompts = 3, transfer_prompt_len = 24, transfer_gen = 8;
#else
    std::string transfer_preset = "llama-3-8b";  // 1 GiB of K and V in fp32: the link, not the calls
    int transfer_prompts = 8, transfer_prompt_len = 512, transfer_gen = 16;
#endif
};

// [ch11_transfer]
/// Chapter 04's model prefills a batch on device 0 and decodes it on device 1: the cache moves
/// block by block (device 1's blocks numbered differently, so the tables are remapped), and the
/// tokens must be one device's. Returns the row, or nothing with fewer than two devices.
pd::Row real_transfer(pd::Bench& bench, const Options& o, const sv::LinkPreset& link, bool& passed) {
    const pd::ModelConfig config = *pd::find_model(o.transfer_preset);
    const int B = o.transfer_prompts, P = o.transfer_prompt_len, G = o.transfer_gen;
    const int block = 16, per_seq = (P + G + block - 1) / block;
    md::ModelOptions mo{.weights = bench.single_dtype(),
                        .kv = bench.single_dtype(),
                        .batch = B,
                        .max_seq = P + G,
                        .sm_count = std::max(bench.device().sm_count, 1),
                        .block_size = block,
                        .num_blocks = B * per_seq + 1};
    // the same model on each device, and two generations: checked before either is built
    const std::string advice =
        "choose a smaller --transfer-preset, or lower --transfer-prompts, "
        "--transfer-prompt-len or --transfer-gen";
    if (P + G > config.max_seq)
        throw std::invalid_argument("--transfer-prompt-len + --transfer-gen = " + std::to_string(P + G) + " pass the " +
                                    std::to_string(config.max_seq) + " positions of " + config.name);
    bench.require(
        pd::Needs{"the real transfer", advice}
            .device("the real transfer's model, its cache and activations", md::Model::device_bytes(config, mo))
            .work(2 * md::generation_flops(config, {.batch = B, .length = P, .gen = G}, P, true, false, 0)));
    pd::Rng rng(bench.options.seed);
    std::vector<int> tokens(std::size_t(B) * P);
    for (int& t : tokens) t = static_cast<int>(rng.next() % std::uint64_t(config.vocab));
    // device 0's tables: sequence b holds blocks b * per_seq ...; device 1's: the last blocks first
    std::vector<std::vector<int>> src(B), dst(B);
    for (int b = 0; b < B; ++b)
        for (int i = 0; i < per_seq; ++i) {
            src[b].push_back(b * per_seq + i);
            dst[b].push_back(mo.num_blocks - 1 - (b * per_seq + i));
        }
    const auto prefill = [&](md::Model& m, const std::vector<std::vector<int>>& tables) {
        std::vector<md::StepSequence> seqs;
        for (int b = 0; b < B; ++b) seqs.push_back({.slot = b, .context = 0, .tokens = P, .blocks = tables[b]});
        m.forward(tokens, seqs);
    };
    const auto decode = [&](md::Model& m, const std::vector<std::vector<int>>& tables, std::vector<int> next) {
        std::vector<int> out = next;  // every sequence's tokens, step after step
        for (int step = 1; step < G; ++step) {
            std::vector<md::StepSequence> seqs;
            for (int b = 0; b < B; ++b)
                seqs.push_back({.slot = b, .context = P + step - 1, .tokens = 1, .blocks = tables[b]});
            m.forward(next, seqs);
            next = m.greedy_tokens();
            out.insert(out.end(), next.begin(), next.end());
        }
        return out;
    };
    // one device: prefill and decode on device 0; its prompt blocks then travel as they are (a
    // decode step writes its position before attending to it, so what it left past the prompt in
    // the last block is never read on device 1)
    PD_CHECK_CUDA(cudaSetDevice(0));
    md::Model pre(config, mo);
    pre.init_synthetic(bench.options.seed);
    prefill(pre, src);
    const std::vector<int> first = pre.greedy_tokens();
    const std::vector<int> reference = decode(pre, src, first);
    // two devices: the prompt's blocks to device 1, numbered differently, and the decode there
    PD_CHECK_CUDA(cudaSetDevice(1));
    md::Model dec(config, mo);
    dec.init_synthetic(bench.options.seed);
    md::KvTransferStats moved;
    for (int b = 0; b < B; ++b) {
        const int used = (P + block - 1) / block;  // the prompt's blocks
        const md::KvTransferStats s =
            md::transfer_blocks(pre, std::span(src[b]).first(used), dec, std::span(dst[b]).first(used));
        moved.bytes += s.bytes, moved.seconds += s.seconds, moved.copies += s.copies;
        moved.peer_access = s.peer_access, moved.performance_rank = s.performance_rank;
    }
    const std::vector<int> split = decode(dec, dst, first);
    PD_CHECK_CUDA(cudaSetDevice(0));
    const bool same = split == reference;
    passed = passed && same;

    pd::Row row;
    row.result.kernel = "prefill 0 -> decode 1";
    row.result.passed = same;
    row.dtype = mo.kv;
    const double per_token = config.kv_bytes_per_token(pd::kv_element_bytes(mo.kv, config.head_dim));
    row.point = {{"transfer_bytes", moved.bytes},
                 {"expected_bytes", per_token * B * ((P + block - 1) / block) * block},
                 {"copies", moved.copies},
                 {"transfer_ms", moved.seconds * 1e3},
                 {"gb_per_s", moved.seconds > 0 ? moved.bytes / moved.seconds / 1e9 : 0},
                 {"peer_access", moved.peer_access},
                 {"p2p_rank", moved.peer_access ? nlohmann::json(moved.performance_rank) : nlohmann::json(nullptr)},
                 {"link_model_ms", (link.latency_s * B + moved.bytes / link.bytes_per_s) * 1e3},
                 {"tokens_equal", same}};
    return row;
}
// [ch11_transfer]

void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset, "Model of the cost model (llama-2-13b: the chapter's case)",
                 CLI::IsMember(pd::model_names()));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(pd::roofline::gpu_names()));
    bench.option("--gpus", o.gpus, "GPUs in all, shared by the setups compared", CLI::Range(1, 64));
    std::vector<std::string> links;
    for (const sv::LinkPreset& l : sv::link_presets()) links.push_back(l.name);
    bench.option("--link", o.link, "Link from the prefill pool to the decode pool", CLI::IsMember(links));
    bench.option("--slow-link", o.slow_link, "A second link, to show where disaggregation loses", CLI::IsMember(links));
    bench.add_dtype_option();
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
    bench.option("--transfer-preset", o.transfer_preset, "Model of the real transfer",
                 CLI::IsMember(pd::model_names()));
    bench.option("--transfer-prompts", o.transfer_prompts, "Real transfer: sequences", CLI::Range(1, 64));
    bench.option("--transfer-prompt-len", o.transfer_prompt_len, "Real transfer: prompt tokens",
                 CLI::Range(1, 1 << 16));
    bench.option("--transfer-gen", o.transfer_gen, "Real transfer: tokens generated", CLI::Range(1, 1 << 16));
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

/// The real transfer between two devices (real_transfer()), printed: its row, or none with fewer
/// than two devices.
std::vector<pd::Row> transfer_section(pd::Bench& bench, const Options& o, const sv::LinkPreset& link, bool& passed) {
    std::ostream& out = bench.out();
    std::vector<pd::Row> rows;
    int devices = 0;
    PD_CHECK_CUDA(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        out << "\nthe real transfer needs two devices, " << devices << " present"
            << (bench.sim() ? " (the simulator: PD_SIM_DEVICES=2)" : "") << "\n";
        return rows;
    }
    rows.push_back(real_transfer(bench, o, link, passed));
    using C = pd::Column;
    out << "\nthe real transfer: " << o.transfer_preset << ", " << o.transfer_prompts << " prompts of "
        << o.transfer_prompt_len << " tokens prefilled on device 0, the cache moved block by block to device 1 "
        << "(its blocks numbered in reverse), " << o.transfer_gen << " tokens generated there:\n"
        << pd::render(rows,
                      {C::name("run"), "dtype", C::point("bytes", "transfer_bytes"), C::point("copies", "copies"),
                       C::point("ms", "transfer_ms"), C::point("GB/s", "gb_per_s"),
                       C("peer", [](const pd::Row& r) { return r.point["peer_access"] ? "on" : "off"; }),
                       C::point("p2p rank", "p2p_rank"), C::point(o.link + " model ms", "link_model_ms"), "status"},
                      bench.options.check_only)
        << "peer: peer access between the devices (off: every copy is staged through host memory, and GB/s "
           "measures that); p2p rank: cudaDevP2PAttrPerformanceRank (0: the machine's fastest kind of link); "
           "status: the tokens equal one device's (prefill and decode on device 0)"
        << (bench.sim() ? "; on the simulator a copy is a host memcpy, so its time is a CPU figure" : "") << ".\n";
    return rows;
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

int run(int argc, char** argv) {
    Options o;
    o.w.requests = 200;
    o.w.rate = 100;
    o.w.prompt_len = 512;
    o.w.output_len = 64;
    pd::Bench bench{"11_disaggregation",
                    "disaggregated prefill and decode, and the design review",
                    "Chapter 11: prefill and decode on separate GPUs. Moves a real KV cache from a prefill device "
                    "to a decode device and checks the tokens, prices the transfer on each link, searches "
                    "aggregated and disaggregated setups of the same GPUs for their per-GPU capacity at 90% SLO "
                    "attainment, and, with --review, reviews a setup: the complaint, what binds, the remedies and "
                    "the cost per million tokens.",
                    {}};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const pd::ModelConfig model = *pd::find_model(o.preset);
    const pd::roofline::GpuSpec gpu = *pd::roofline::find_gpu(o.gpu);
    const sv::Cluster cluster{.cost = sv::cost_model_config(model, gpu, 1), .gpu = gpu};
    const sv::Slo slo{o.slo_ttft_ms * 1e-3, o.slo_tpot_ms * 1e-3};
    const sv::LinkPreset link = *sv::find_link(o.link), slow = *sv::find_link(o.slow_link);
    o.w.max_len = model.max_seq;
    const sv::WorkloadSpec w = sv::workload_spec(o.w, o.w.rate, bench.options.seed);
    check_problem(o, model);
    sv::ReviewInput in{.cluster = cluster, .slo = slo, .usd_per_gpu_hour = o.price, .link = link};
    in.setup.policy = sv::policy_from(o.policy);
    in.setup.pool = {.gpus = o.gpus, .tp = o.tp, .token_budget = o.token_budget, .max_seqs = o.max_seqs};
    require_replays(o, w, in);
    bench.title();
    std::ostream& out = bench.out();
    out << "model: " << pd::describe(model) << "\n"
        << "GPUs: " << o.gpus << " x " << gpu.name << "; workload: poisson, prompts of " << o.w.prompt_len
        << " and outputs of " << o.w.output_len << " tokens (" << o.w.prompt_dist << ", " << o.w.output_dist
        << "); SLOs: TTFT " << o.slo_ttft_ms << " ms, TPOT " << o.slo_tpot_ms << " ms, at " << o.target * 100
        << "% attainment\n"
        << sv::CostModel(sv::instance_cost(cluster, 1)).describe() << "\n";

    if (o.review) {
        // ---- the design review of one setup ----
        const sv::Review r = sv::review(in);
        out << "\nthe review of " << in.setup.name() << " on "
            << (o.w.trace.empty() ? fmt("%g requests/s", o.w.rate) : "the trace " + o.w.trace) << " ("
            << in.requests.size() << " requests):\n"
            << sv::describe(r, in);
        nlohmann::json report = bench.report({{"preset", model.name}, {"gpu", gpu.name}, {"gpus", o.gpus}}, {});
        report["review"] = sv::to_json(r, in);
        return bench.finish(report);
    }

    // ---- 1. a real transfer between two devices ----
    bool passed = true;
    std::vector<pd::Row> rows = transfer_section(bench, o, link, passed);
    // ---- 2. what the transfer costs ----
    link_table(out, o, cluster);
    // ---- 3. the setups side by side, and the placement search ----
    nlohmann::json placements = nlohmann::json::array();
    const std::vector<pd::Row> side = setups_section(out, o, cluster, w, slo, link, slow, placements);
    rows.insert(rows.end(), side.begin(), side.end());
    nlohmann::json report = bench.report({{"preset", model.name},
                                          {"gpu", gpu.name},
                                          {"gpus", o.gpus},
                                          {"link", link.name},
                                          {"slow_link", slow.name},
                                          {"rate", o.w.rate},
                                          {"prompt_len", o.w.prompt_len},
                                          {"output_len", o.w.output_len},
                                          {"slo_ttft_ms", o.slo_ttft_ms},
                                          {"slo_tpot_ms", o.slo_tpot_ms}},
                                         rows);
    report["placements"] = placements;
    if (!passed) {
        out << "FAILED: the tokens decoded after the transfer differ from one device's\n";
        report["passed"] = false;
    }
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv,
                            {{"Setup.pool.tp", "--tp"},
                             {"Setup.pool.gpus", "--gpus"},
                             {"ModelOptions.batch", "--transfer-prompts"},
                             {"ModelOptions.max_seq", "--transfer-prompt-len + --transfer-gen"}});
}
