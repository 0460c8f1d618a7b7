// Chapter 10: the model split across ranks (Megatron-LM's tensor parallelism) on NCCL, on the
// simulator's virtual devices (PD_SIM_DEVICES=8, set by CTest): the shapes of the ranks' parts,
// the parts of host weights, and the split model against the whole one: logits of prompts,
// mixed steps and decode steps equal (fp32 to 1e-5; bf16 to the rule of chapter 04's bf16
// comparisons) and greedy tokens identical for TP = 2, 4 and 8, with the KV heads divided
// (tiny-tp: 8 of them) and replicated (tiny: 2 KV heads on 4 ranks), on slots and pages, with
// NCCL's all-reduce and with lab 10's ring; the
// engine of chapter 05 on TP = 2 with preemptions; bad splits refused by name.
#include "model_check.hpp"
#include "model_run.hpp"
#include "pd/model/executor.hpp"
#include "pd/model/model.hpp"
#include "pd/model/tensor_parallel.hpp"
#include "pd/serving/scheduler.hpp"

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace md = pd::model;
namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

using pd::test::argmax_of;
using pd::test::logits_of;
using pd::test::max_rel_diff;
using pd::test::need_devices;
using pd::test::random_tokens;

pd::ModelConfig preset(const char* name) {
    return *pd::find_model(name);
}

/// The same passes on the whole model and on the split one: three prompts of ragged lengths
/// (a mixed batch: a prompt beside a prompt's chunk), then decode steps on the greedy tokens.
/// Checks every pass's logits within @p tol and identical tokens.
void same_passes(md::Model& whole, md::Model& split, double tol) {
    const int V = whole.config().vocab;
    const bool paged = whole.options().cache.block_size > 0;
    // pages: sequence s owns blocks s*8 ... (8 blocks of 8 positions each)
    std::vector<int> tables(24);
    for (int i = 0; i < 24; ++i) tables[std::size_t(i)] = (i * 5) % 24;
    const auto table = [&](int s) {
        return paged ? std::span<const int>(tables).subspan(std::size_t(s) * 8, 8) : std::span<const int>();
    };
    const int lens[3] = {7, 13, 3};
    std::vector<int> context = {0, 0, 0};
    // pass 1: prompts of 7 and 13 tokens; pass 2: the third prompt and a chunk... then decodes
    std::vector<std::vector<md::StepSequence>> passes;
    passes.push_back({{.slot = 0, .context = 0, .tokens = lens[0], .blocks = table(0)},
                      {.slot = 1, .context = 0, .tokens = lens[1], .blocks = table(1)}});
    passes.push_back({{.slot = 2, .context = 0, .tokens = lens[2], .blocks = table(2)}});
    std::vector<int> next = {0, 0, 0};
    int pass = 0;
    for (const auto& seqs : passes) {
        std::vector<int> tokens;
        for (const md::StepSequence& q : seqs) {
            const std::vector<int> t = random_tokens(std::size_t(q.tokens), V, 100 + std::uint64_t(q.slot));
            tokens.insert(tokens.end(), t.begin(), t.end());
        }
        whole.forward(tokens, seqs);
        split.forward(tokens, seqs);
        INFO("pass " << pass++);
        CHECK(max_rel_diff(logits_of(split), logits_of(whole)) <= tol);
        const std::vector<int> a = argmax_of(whole), b = argmax_of(split);
        CHECK(a == b);
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            next[std::size_t(seqs[i].slot)] = a[i];
            context[std::size_t(seqs[i].slot)] += seqs[i].tokens;
        }
    }
    for (int step = 0; step < 5; ++step) {
        std::vector<md::StepSequence> seqs;
        for (int s = 0; s < 3; ++s)
            seqs.push_back({.slot = s, .context = context[std::size_t(s)], .tokens = 1, .blocks = table(s)});
        whole.forward(next, seqs);
        split.forward(next, seqs);
        INFO("decode step " << step);
        CHECK(max_rel_diff(logits_of(split), logits_of(whole)) <= tol);
        const std::vector<int> a = argmax_of(whole), b = argmax_of(split);
        REQUIRE(a == b);
        next = a;
        for (int& c : context) ++c;
    }
}

md::ModelOptions split_options(md::ModelOptions o, int tp) {
    o.parallel.ranks = tp;
    o.parallel.collectives = md::nccl_collectives(tp);
    return o;
}

}  // namespace

TEST_CASE("tensor parallel: each rank's part of the model", "[tp]") {
    const pd::ModelConfig c = preset("tiny");  // 4 query heads, 2 KV heads, FFN 344, vocabulary 512
    const pd::ModelConfig p2 = md::shard_config(c, 2), p4 = md::shard_config(c, 4);
    CHECK((p2.heads == 2 && p2.kv_heads == 1 && p2.ffn_dim == 172 && p2.vocab == 256 && p2.d_model == 128));
    CHECK((p4.heads == 1 && p4.kv_heads == 1 && p4.ffn_dim == 86 && p4.vocab == 128));
    // 2 KV heads on 4 ranks: ranks 0 and 1 hold head 0, ranks 2 and 3 head 1 (replicated)
    CHECK((md::first_kv_head(c, 4, 0) == 0 && md::first_kv_head(c, 4, 1) == 0 && md::first_kv_head(c, 4, 2) == 1 &&
           md::first_kv_head(c, 4, 3) == 1));
    CHECK(md::first_kv_head(c, 2, 1) == 1);
    CHECK_THROWS_WITH(md::shard_config(c, 3),
                      Contains("ModelOptions.parallel.ranks = 3 must divide the model's query heads = 4"));
    CHECK_THROWS_WITH(md::shard_config(c, 8), Contains("must divide the model's query heads = 4"));
    pd::ModelConfig odd = c;
    odd.heads = 12, odd.kv_heads = 3;
    CHECK_THROWS_WITH(md::shard_config(odd, 2), Contains("kv_heads = 3 or be a multiple of them"));

    // host weights: Wq by rows, Wo by columns, the embedding by rows, norms whole
    md::Model m(c, {.batch = 1, .max_seq = 16});
    m.init_synthetic(3);
    const pd::ModelWeights w = m.download_weights();
    const pd::ModelWeights r1 = md::shard_weights(w, c, 2, 1);
    const int D = c.d_model, d = c.head_dim, q = c.heads * d;
    CHECK(r1.wq.size() == w.wq.size() / 2);
    CHECK(r1.wq[0] == w.wq[std::size_t(q / 2) * D]);  // layer 0, rank 1's first row
    CHECK(r1.wq[std::size_t(q / 2) * D] == w.wq[std::size_t(q) * D + std::size_t(q / 2) * D]);  // layer 1
    CHECK(r1.wo[0] == w.wo[std::size_t(q / 2)]);                                    // row 0, rank 1's first column
    CHECK(r1.wo[std::size_t(q / 2)] == w.wo[std::size_t(q) + std::size_t(q / 2)]);  // row 1
    CHECK(r1.wk[0] == w.wk[std::size_t(d) * D]);                                    // KV head 1
    CHECK(r1.embed[0] == w.embed[std::size_t(c.vocab / 2) * D]);
    CHECK(r1.final_norm == w.final_norm);
}

TEST_CASE("tensor parallel: the split model computes the whole one's logits and tokens (fp32)", "[tp]") {
    need_devices(8);  // PD_SIM_DEVICES=8 on the simulator (CTest sets it)
    const pd::ModelConfig c = preset("tiny-tp");
    const md::ModelOptions o{.batch = 3, .max_seq = 64, .max_step_tokens = 32};
    md::Model whole(c, o);
    whole.init_synthetic(7);
    for (int tp : {2, 4, 8}) {
        INFO("tensor_parallel = " << tp);
        md::Model split(c, split_options(o, tp));
        split.init_synthetic(7);
        CHECK(split.rank_config().heads == 8 / tp);
        same_passes(whole, split, 1e-5);
        CHECK(split.communication().calls == 2 * c.layers + 2);  // 2 per layer, the embedding's, the logits'
    }
}

TEST_CASE("tensor parallel: KV heads replicated, pages, bf16 and loaded weights", "[tp]") {
    need_devices(4);
    SECTION("tiny: 2 KV heads on 4 ranks, each held twice (fp32, slots)") {
        const pd::ModelConfig c = preset("tiny");
        const md::ModelOptions o{.batch = 3, .max_seq = 64, .max_step_tokens = 32};
        md::Model whole(c, o), split(c, split_options(o, 4));
        whole.init_synthetic(11);
        split.init_synthetic(11);
        same_passes(whole, split, 1e-5);
    }
    SECTION("tiny-tp, TP = 4, every all-reduce lab 10's ring on ncclSend and ncclRecv") {
        const pd::ModelConfig c = preset("tiny-tp");
        md::ModelOptions o{.batch = 3, .max_seq = 64, .max_step_tokens = 32};
        md::Model whole(c, o);
        o.parallel.ranks = 4;
        o.parallel.collectives = md::nccl_collectives(4, false, md::AllReduceAlgorithm::ring);
        md::Model split(c, o);
        whole.init_synthetic(13);
        split.init_synthetic(13);
        same_passes(whole, split, 1e-5);
    }
    SECTION("tiny-tp on pages, TP = 2, weights loaded from the host") {
        const pd::ModelConfig c = preset("tiny-tp");
        const md::ModelOptions o{
            .batch = 3, .max_seq = 64, .max_step_tokens = 32, .cache = {.block_size = 8, .num_blocks = 24}};
        md::Model whole(c, o), split(c, split_options(o, 2));
        whole.init_synthetic(5);
        split.load(whole.download_weights());
        same_passes(whole, split, 1e-5);
    }
    SECTION("tiny-tp in bf16 (weights and cache), TP = 4") {
        const pd::ModelConfig c = preset("tiny-tp");
        const md::ModelOptions o{.weights = pd::DType::bf16,
                                 .batch = 3,
                                 .max_seq = 64,
                                 .max_step_tokens = 32,
                                 .cache = {.kv = pd::DType::bf16}};
        md::Model whole(c, o), split(c, split_options(o, 4));
        whole.init_synthetic(9);
        split.init_synthetic(9);
        // the same bf16 inputs to every projection; only the order of the fp32 sums differs
        same_passes(whole, split, 1e-4);
    }
}

TEST_CASE("tensor parallel: chapter 05's engine drives the split model (TP = 2, preemptions)", "[tp][serving]") {
    need_devices(2);
    const pd::ModelConfig c = preset("tiny-tp");
    std::vector<sv::Request> requests;
    const int prompts[] = {13, 3, 20, 1, 9}, outputs[] = {6, 9, 4, 7, 5};
    for (int i = 0; i < 5; ++i)
        requests.push_back({.id = i, .arrival_s = 0.001 * i, .prompt_tokens = prompts[i], .output_tokens = outputs[i]});
    std::vector<std::vector<int>> want;
    for (int tp : {1, 2}) {
        md::ModelOptions o{.batch = 3, .max_seq = 32};
        if (tp > 1) o = split_options(o, tp);
        md::Model m(c, o);
        m.init_synthetic(10);
        md::ModelExecutor executor(m, requests, 5);
        sv::Scheduler scheduler(
            {.policy = sv::Policy::continuous, .token_budget = 8, .max_seqs = 3, .kv_capacity = 30});
        const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
        int preemptions = 0;
        for (const auto& r : t.requests) preemptions += r.preemptions;
        INFO("TP = " << tp << ": " << t.steps.size() << " steps, " << preemptions << " preemptions");
        CHECK(preemptions > 0);
        for (const sv::Request& r : requests) {
            if (tp == 1)
                want.push_back(executor.generated(r.id));
            else
                CHECK(executor.generated(r.id) == want[std::size_t(r.id)]);
        }
    }
}

TEST_CASE("tensor parallel: bad splits are refused by name", "[tp]") {
    const pd::ModelConfig c = preset("tiny-tp");
    CHECK_THROWS_WITH(md::Model(c, {.batch = 1, .max_seq = 16, .parallel = {.ranks = 2}}),
                      Contains("ModelOptions.parallel.collectives = null is required when parallel.ranks > 1"));
    CHECK_THROWS_WITH(md::Model(c, {.batch = 1, .max_seq = 16, .parallel = {.ranks = 3}}),
                      Contains("ModelOptions.parallel.ranks = 3 must divide the model's query heads = 8"));
    need_devices(4);
    CHECK_THROWS_WITH(md::Model(c, {.weights = pd::DType::bf16,
                                    .batch = 1,
                                    .max_seq = 16,
                                    .quant = {.format = "int8"},
                                    .parallel = {.ranks = 2, .collectives = md::nccl_collectives(2)}}),
                      Contains("ModelOptions.quant.format = int8 is not split across ranks"));
    CHECK_THROWS_WITH(
        md::Model(c, {.batch = 1, .max_seq = 16, .parallel = {.ranks = 2, .collectives = md::nccl_collectives(4)}}),
        Contains("ModelOptions.parallel.collectives = 4 ranks must join parallel.ranks = 2 ranks"));
    CHECK_THROWS_WITH(md::Model(c, {.batch = 1, .max_seq = 16, .parallel = {.ranks = 16}}),
                      Contains("must divide the model's query heads = 8"));
}
