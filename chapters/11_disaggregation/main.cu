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
#include "chapter.hpp"

#include "pd/model/generate.hpp"
#include "pd/model/kv_transfer_device.hpp"
#include "pd/model/model.hpp"
#include "pd/rng.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ch11 {

namespace md = pd::model;

// [ch11_transfer]
/// Chapter 04's model prefills a batch on device 0 and decodes it on device 1: the cache moves
/// block by block (device 1's blocks numbered differently, so the tables are remapped), and the
/// tokens must be one device's. Returns the row, or nothing with fewer than two devices.
pd::Row real_transfer(pd::Bench& bench, const Options& o, const sv::LinkPreset& link, bool& passed) {
    const pd::ModelConfig config = *pd::find_model(o.transfer_preset);
    const int B = o.transfer_prompts, P = o.transfer_prompt_len, G = o.transfer_gen;
    const int block = 16, per_seq = (P + G + block - 1) / block;
    md::ModelOptions mo{.weights = bench.single_dtype(),
                        .batch = B,
                        .max_seq = P + G,
                        .cache = {.kv = bench.single_dtype(), .block_size = block, .num_blocks = B * per_seq + 1},
                        .kernels = {.sm_count = std::max(bench.device().sm_count, 1)}};
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
            dst[b].push_back(mo.cache.num_blocks - 1 - (b * per_seq + i));
        }
    const auto prefill = [&](md::Model& m, const std::vector<std::vector<int>>& tables) {
        m.forward(tokens, md::Pass::batch(tokens, B, 0, &tables).sequences);
    };
    const auto decode = [&](md::Model& m, const std::vector<std::vector<int>>& tables, std::vector<int> next) {
        std::vector<int> out = next;  // every sequence's tokens, step after step
        md::token_loop(
            m, {},
            [&](md::Pass& p) {  // step out.size() / B feeds the last tokens at context P + step - 1
                if (int(out.size()) < B * G) p = md::Pass::batch(next, B, P + int(out.size()) / B - 1, &tables);
                return int(out.size()) < B * G;
            },
            [&](std::span<const int> chosen, double) {
                next.assign(chosen.begin(), chosen.end());
                out.insert(out.end(), chosen.begin(), chosen.end());
            });
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
    row.dtype = mo.cache.kv;
    const double per_token = config.kv_bytes_per_token(pd::kv_element_bytes(mo.cache.kv, config.head_dim));
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
    bench.no_dump();  // its results are the tables and --json
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
        const nlohmann::json review = design_review(bench, o, in);
        nlohmann::json report = bench.report({{"preset", model.name}, {"gpu", gpu.name}, {"gpus", o.gpus}}, {});
        report["review"] = review;
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

}  // namespace ch11

int main(int argc, char** argv) {
    return pd::guarded_main(ch11::run, argc, argv,
                            {{"Setup.pool.tp", "--tp"},
                             {"Setup.pool.gpus", "--gpus"},
                             {"ModelOptions.batch", "--transfer-prompts"},
                             {"ModelOptions.max_seq", "--transfer-prompt-len + --transfer-gen"}});
}
