// Chapter 12 on chapter 04's model: the decode pass replayed as a CUDA graph (ModelOptions::graphs)
// against the same model run eagerly. With the bucket's split count equal to the batch's, the
// replay gives the eager pass's logits bit for bit: on slots and on pages, fp32 and bf16 weights
// and caches (and an 8-bit cache), one graph replayed across a split boundary of the context,
// batches padded to their bucket. Where the bucket changes the decode attention's split count,
// the tokens by compare_generations()'s rule. Greedy and sampled generations through decode(),
// chapter 05's engine on slots and pages, the buckets, and the options refused by name.
#include "model_check.hpp"
#include "pd/model/executor.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/scheduler.hpp"

#include "attention/decode_attention.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace md = pd::model;
namespace sv = pd::serving;
namespace at = pd::kernels::attention;
using Catch::Matchers::Contains;
using pd::DType;

namespace {

using pd::test::random_tokens;
using pd::test::tiny;

/// What one run of passes produced: the logits of every pass [passes, S, V], and each row's argmax.
struct Passes {
    std::vector<float> logits;
    std::vector<int> tokens;
};

/// S sequences (in slots 0 ... S - 1, or with block tables of their own) prefilled with P tokens
/// in one pass, then @p steps decode passes on seeded tokens: every pass's logits.
Passes run(md::Model& m, int S, int P, int steps, std::uint64_t seed) {
    const int V = m.config().vocab, bs = m.options().cache.block_size;
    const int per = bs > 0 ? pd::ceil_div(m.max_seq(), bs) : 0;  // blocks of each sequence, disjoint
    std::vector<int> blocks(std::size_t(S) * std::size_t(std::max(per, 1)));
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = int(blocks.size() - 1 - i);  // not in order
    std::vector<md::StepSequence> rows(static_cast<std::size_t>(S));
    const auto table = [&](int s) {
        return bs > 0 ? std::span<const int>(blocks).subspan(std::size_t(s) * per, std::size_t(per))
                      : std::span<const int>();
    };
    for (int s = 0; s < S; ++s) rows[std::size_t(s)] = {.slot = s, .context = 0, .tokens = P, .blocks = table(s)};
    m.forward(random_tokens(std::size_t(S) * P, V, seed), rows);
    Passes out;
    for (int step = 0; step <= steps; ++step) {
        const std::vector<float> l = m.logits().download();
        out.logits.insert(out.logits.end(), l.begin(), l.begin() + std::ptrdiff_t(S) * V);
        const std::vector<int> g = m.greedy_tokens();
        out.tokens.insert(out.tokens.end(), g.begin(), g.begin() + S);
        if (step == steps) break;
        for (int s = 0; s < S; ++s)
            rows[std::size_t(s)] = {.slot = s, .context = P + step, .tokens = 1, .blocks = table(s)};
        m.forward(random_tokens(std::size_t(S), V, seed + 1 + std::uint64_t(step)), rows);
    }
    return out;
}

md::ModelOptions options(bool graphs, DType w, DType kv, int block_size, int sm_count) {
    md::ModelOptions o{.weights = w, .batch = 4, .max_seq = 160};
    o.cache = {
        .kv = kv, .block_size = block_size, .num_blocks = block_size > 0 ? 4 * pd::ceil_div(160, block_size) : 0};
    o.kernels.sm_count = sm_count;
    o.graphs = graphs;
    return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("graphs: a replayed decode pass gives the eager pass's logits bit for bit", "[model][graphs]") {
    const pd::ModelConfig c = tiny();
    struct Case {
        DType w, kv;
        int block_size, S, P, steps;
    };
    // P = 126, 4 steps: contexts 127 ... 130, where chapter 04's rule goes from 1 split to 2
    // (sm_count 8): one graph replayed across the boundary, its splits chosen on the device
    const Case cases[] = {{DType::fp32, DType::fp32, 0, 4, 126, 4}, {DType::fp32, DType::fp32, 0, 3, 126, 4},
                          {DType::bf16, DType::bf16, 0, 1, 7, 3},   {DType::bf16, DType::int8, 0, 2, 7, 3},
                          {DType::fp32, DType::fp32, 8, 3, 126, 4}, {DType::bf16, DType::bf16, 4, 4, 9, 3},
                          {DType::bf16, DType::fp8, 16, 1, 7, 3}};
    for (const Case& k : cases) {
        INFO("weights " << to_string(k.w) << ", cache " << to_string(k.kv)
                        << (k.block_size ? " in pages of " : " in slots")
                        << (k.block_size ? std::to_string(k.block_size) : "") << ", S = " << k.S << ", P = " << k.P);
        md::Model eager(c, options(false, k.w, k.kv, k.block_size, 8)),
            graph(c, options(true, k.w, k.kv, k.block_size, 8));
        eager.init_synthetic(21);
        graph.init_synthetic(21);
        const Passes want = run(eager, k.S, k.P, k.steps, 5), got = run(graph, k.S, k.P, k.steps, 5);
        CHECK(same_bits(got.logits, want.logits));
        const int bucket = graph.graph_bucket(k.S);
        CHECK(graph.graph_stats().replays == k.steps);
        CHECK(graph.graph_stats().last_bucket == bucket);
        CHECK(graph.graph_stats().padded == std::int64_t(bucket - k.S) * k.steps);
        CHECK(eager.graph_stats().replays == 0);
        if (k.P == 126 && k.block_size == 0) {  // the boundary is crossed: 1 split, then 2
            CHECK(at::decode_splits({k.S, c.heads, c.kv_heads, c.head_dim, 160, 128}, 8) == 1);
            CHECK(at::decode_splits({k.S, c.heads, c.kv_heads, c.head_dim, 160, 130}, 8) == 2);
        }
    }
}

TEST_CASE("graphs: a bucket that changes the split count gives the tokens by compare_generations' rule",
          "[model][graphs]") {
    const pd::ModelConfig c = tiny();
    // 3 sequences run in the bucket of 4: with 2 SMs chapter 04's rule gives 3 sequences 2
    // splits past 128 positions, and the bucket's 4 rows 1 (the sums' order differs)
    REQUIRE(at::decode_splits({3, c.heads, c.kv_heads, c.head_dim, 160, 140}, 2) == 2);
    REQUIRE(at::split_rule(4, c.kv_heads, 140, 2) == 1);
    md::Model eager(c, options(false, DType::fp32, DType::fp32, 0, 2)),
        graph(c, options(true, DType::fp32, DType::fp32, 0, 2));
    eager.init_synthetic(22);
    graph.init_synthetic(22);
    const int S = 3, steps = 6;
    const Passes want = run(eager, S, 133, steps, 9), got = run(graph, S, 133, steps, 9);
    md::Generation a, b;
    a.tokens = want.tokens, a.logits = want.logits;
    b.tokens = got.tokens, b.logits = got.logits;
    bool passed = false;
    double diff = 0;
    const std::string verdict = md::compare_generations(b, a, S, c.vocab, DType::fp32, passed, diff);
    INFO(verdict);
    CHECK(passed);
    CHECK(graph.graph_stats().last_bucket == 4);
}

TEST_CASE("graphs: greedy and sampled generations through decode() give the eager tokens and logits",
          "[model][graphs]") {
    const pd::ModelConfig c = tiny();
    for (const float temperature : {0.f, 0.8f}) {
        INFO("temperature " << temperature);
        const pd::kernels::layers::SamplingParams sampling{.temperature = temperature, .top_k = 40, .seed = 3};
        md::Model eager(c, options(false, DType::bf16, DType::bf16, 0, 8)),
            graph(c, options(true, DType::bf16, DType::bf16, 0, 8));
        eager.init_synthetic(23);
        graph.init_synthetic(23);
        const std::vector<int> prompt = random_tokens(4 * 6, c.vocab, 4);
        const md::Generation want = md::generate_cached(eager, prompt, 6, 8, sampling);
        const md::Generation got = md::generate_cached(graph, prompt, 6, 8, sampling);
        CHECK(got.tokens == want.tokens);
        CHECK(same_bits(got.logits, want.logits));
        CHECK(graph.graph_stats().replays == 7);
    }
}

TEST_CASE("graphs: chapter 05's engine generates the eager engine's tokens, on slots and on pages",
          "[model][graphs][serving]") {
    const pd::ModelConfig c = tiny();
    std::vector<sv::Request> requests;
    const int prompts[] = {13, 3, 20, 1, 9, 17, 6}, outputs[] = {6, 9, 4, 7, 2, 5, 8};
    for (int i = 0; i < 7; ++i)
        requests.push_back({.id = i, .arrival_s = 0.001 * i, .prompt_tokens = prompts[i], .output_tokens = outputs[i]});
    for (const int block_size : {0, 4}) {
        INFO((block_size ? "pages" : "slots"));
        std::vector<std::vector<int>> generated[2];
        long long replays = 0;
        for (const bool graphs : {false, true}) {
            md::ModelOptions o{.batch = 3, .max_seq = 32};
            if (block_size) o.cache = {.block_size = 4, .num_blocks = 12};
            o.graphs = graphs;
            md::Model m(c, o);
            m.init_synthetic(10);
            sv::Scheduler scheduler({.policy = sv::Policy::continuous,
                                     .token_budget = 8,
                                     .max_seqs = 3,
                                     .kv_capacity = block_size ? 48 : 30,
                                     .block_size = block_size});
            md::ModelExecutor executor(m, requests, 5, scheduler.paged());
            sv::run_engine(requests, scheduler, executor, true);
            for (const sv::Request& r : requests) generated[graphs].push_back(executor.generated(r.id));
            if (graphs) replays = m.graph_stats().replays;
        }
        INFO(replays << " decode passes replayed");
        CHECK(generated[1] == generated[0]);
        CHECK(replays > 0);
    }
}

TEST_CASE("graphs: a padded row writes nothing: the sequence whose slot it reads keeps its cache", "[model][graphs]") {
    // 4 sequences prefilled; 3 of them stepped (bucket 4: row 3 padded, reading slot 3, or with
    // pages a table row of no block), then all 4: the eager model never pads, so the replays match
    // it only if the padded row wrote no K or V (lab 12's position -1) over the fourth sequence's
    const pd::ModelConfig c = tiny();
    for (const int block_size : {0, 4}) {
        INFO((block_size ? "pages" : "slots"));
        std::vector<float> logits[2];
        for (const bool graphs : {false, true}) {
            md::Model m(c, options(graphs, DType::fp32, DType::fp32, block_size, 1));
            m.init_synthetic(21);
            std::vector<int> blocks(40);
            for (int i = 0; i < 40; ++i) blocks[std::size_t(i)] = i;
            const auto table = [&](int s) {
                return block_size > 0 ? std::span<const int>(blocks).subspan(std::size_t(s) * 10, 10)
                                      : std::span<const int>();
            };
            std::vector<md::StepSequence> rows(4);
            for (int s = 0; s < 4; ++s)
                rows[std::size_t(s)] = {.slot = s, .context = 0, .tokens = 5, .blocks = table(s)};
            m.forward(random_tokens(20, c.vocab, 22), rows);
            for (int s = 0; s < 4; ++s)
                rows[std::size_t(s)] = {.slot = s, .context = 5, .tokens = 1, .blocks = table(s)};
            m.forward(random_tokens(3, c.vocab, 23), std::span(rows).first(3));
            if (graphs) CHECK(m.graph_stats().padded == 1);
            for (int s = 0; s < 3; ++s) rows[std::size_t(s)].context = 6;
            m.forward(random_tokens(4, c.vocab, 24), rows);  // the fourth at position 5, after 0 ... 4
            logits[graphs] = m.logits().download();
        }
        CHECK(same_bits(logits[1], logits[0]));
    }
}

TEST_CASE("graphs: the buckets, their capture, and the options refused by name", "[model][graphs]") {
    const pd::ModelConfig c = tiny();
    md::ModelOptions o{.batch = 6, .max_seq = 16};
    o.graphs = true;
    md::Model m(c, o);
    CHECK(m.graph_buckets() == std::vector<int>{1, 2, 4, 6});
    CHECK(m.graph_bucket(1) == 1);
    CHECK(m.graph_bucket(3) == 4);
    CHECK(m.graph_bucket(5) == 6);
    CHECK_THROWS_WITH(m.graph_bucket(7), Contains("sequences = 7"));
    CHECK(m.stream() != nullptr);
    m.init_synthetic(1);
    m.warm_up();  // captures every bucket
    CHECK(m.graph_stats().captured == 4);
    // what a replay runs, worked out from forward_pass(): the split plan and the embedding, then
    // per layer 2 norms, 7 projections (GEMV), 2 RoPEs, the append, the attention (one kernel:
    // a grid of one split on 1 SM), the residual's 2 adds and SwiGLU; then the final norm and
    // the LM head; and the 5 copies of the inputs (slots: no block table)
    const md::Model::GraphNodes nodes = m.graph_nodes(4);
    CHECK(nodes.kernels == 2 + 16 * c.layers + 2);
    CHECK(nodes.copies == 5);
    CHECK_THROWS_WITH(m.graph_nodes(3), Contains("bucket = 3"));
    // replay_graphs(false): the same passes eagerly, the same bits (4 sequences: a whole bucket)
    std::vector<md::StepSequence> rows(4);
    for (int s = 0; s < 4; ++s) rows[std::size_t(s)] = {.slot = s, .context = 0, .tokens = 3};
    m.forward(random_tokens(12, c.vocab, 2), rows);
    for (int s = 0; s < 4; ++s) rows[std::size_t(s)] = {.slot = s, .context = 3, .tokens = 1};
    const std::vector<int> next = random_tokens(4, c.vocab, 3);
    const long long replays = m.graph_stats().replays;
    m.forward(next, rows);
    const std::vector<float> replayed = m.logits().download();
    CHECK(m.graph_stats().replays == replays + 1);
    m.replay_graphs(false);
    m.forward(next, rows);  // position 3 written again, with the same K and V
    CHECK(m.graph_stats().replays == replays + 1);
    CHECK(m.graph_stats().last_bucket == 0);
    CHECK(same_bits(m.logits().download(), replayed));
    // with bf16 weights, the attention's output cast once per layer: chapter 05's cost model
    // counts these kernels for a pass (pass_kernels(): the graph's besides the split plan)
    md::ModelOptions b16 = o;
    b16.weights = DType::bf16;
    md::Model mb(c, b16);
    mb.init_synthetic(1);
    mb.capture_graphs();
    CHECK(mb.graph_nodes(1).kernels == sv::pass_kernels(c) + 1);
    CHECK(sv::pass_kernels(c) == nodes.kernels - 1 + c.layers);
    md::Model plain(c, {.batch = 2, .max_seq = 16});
    CHECK(plain.graph_buckets().empty());
    CHECK(plain.stream() == nullptr);
    CHECK_THROWS_WITH(plain.graph_bucket(1), Contains("ModelOptions.graphs"));
    CHECK_THROWS_WITH(plain.replay_graphs(true), Contains("ModelOptions.graphs"));

    md::ModelOptions v3 = o;
    v3.kernels.attention = "v3";
    CHECK_THROWS_WITH(md::Model(c, v3), Contains("kernels.attention") && Contains("v4"));
    md::ModelOptions paged_v1 = o;
    paged_v1.cache = {.block_size = 4, .num_blocks = 24};
    paged_v1.kernels.paged_attention = "v1";
    CHECK_THROWS_WITH(md::Model(c, paged_v1), Contains("kernels.paged_attention") && Contains("v2"));
    md::ModelOptions split = o;
    split.parallel.ranks = 2;
    CHECK_THROWS_WITH(md::Model(c, split), Contains("ModelOptions.graphs = true"));
}

TEST_CASE("graphs: a prompt captured alone replays the eager pass's logits bit for bit", "[model][graphs]") {
    const pd::ModelConfig c = tiny();
    for (const int block_size : {0, 4}) {
        INFO((block_size ? "pages" : "slots"));
        md::ModelOptions o = options(true, DType::bf16, DType::bf16, block_size, 8);
        md::Model m(c, o);
        m.init_synthetic(24);
        std::vector<int> blocks(40);
        for (int i = 0; i < 40; ++i) blocks[std::size_t(i)] = 39 - i;
        const md::StepSequence prompt{.slot = 0,
                                      .context = 0,
                                      .tokens = 37,
                                      .blocks = block_size ? std::span<const int>(blocks) : std::span<const int>()};
        const std::vector<int> tokens = random_tokens(37, c.vocab, 6);
        CHECK_THROWS_WITH(m.replay_pass(), Contains("no pass was captured"));
        m.forward(tokens, std::span(&prompt, 1));
        const std::vector<float> eager = m.logits().download();
        const md::Model::GraphNodes nodes = m.capture_pass(tokens, std::span(&prompt, 1));
        CHECK(nodes.kernels > 2 * 16);
        CHECK(nodes.copies == 0);
        m.logits().fill_bytes(0xFF);
        m.replay_pass();
        const std::vector<float> replayed = m.logits().download();
        CHECK(std::memcmp(eager.data(), replayed.data(), std::size_t(c.vocab) * sizeof(float)) == 0);
        CHECK(m.graph_stats().replays == 0);  // the decode buckets' graphs are untouched
    }
    md::Model plain(c, {.batch = 1, .max_seq = 16});
    const md::StepSequence one{.slot = 0, .context = 0, .tokens = 2};
    CHECK_THROWS_WITH(plain.capture_pass(std::vector<int>{1, 2}, std::span(&one, 1)), Contains("ModelOptions.graphs"));
}
