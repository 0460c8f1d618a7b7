// Chapter 11: a real transfer of the KV cache between two devices (the simulator's virtual
// devices, PD_SIM_DEVICES=2, set by CTest; two GPUs on a GPU machine, skipped (77) with one).
// Chapter 04's model prefills three prompts of ragged lengths on device 0 in one pass; their
// paged cache moves block by block (cudaMemcpyPeer) into the same model on device 1, whose
// blocks have other ids (the block tables remapped); the greedy decode steps there generate the
// tokens, with the logits, of the model run on device 0 alone (fp32, bf16 and int8 caches), and
// the bytes moved are the blocks'. A wrong mapping of blocks changes the generation (the check
// can fail). Mismatched models and block lists are refused by name, before any copy.
#include "model_check.hpp"
#include "model_run.hpp"
#include "pd/common.hpp"
#include "pd/model/kv_transfer_device.hpp"
#include "pd/model/model.hpp"

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace md = pd::model;
using Catch::Matchers::Contains;
using pd::test::max_rel_diff;
using pd::test::need_devices;
using pd::test::random_tokens;

namespace {

constexpr int kBlockSize = 4;     // positions per block
constexpr int kNumBlocks = 24;    // blocks of each model's cache
constexpr int kSteps = 6;         // decode steps after the prefill
const int kLens[3] = {5, 9, 13};  // the prompts: a block and a bit, two and a bit, three and a bit

/// Makes @p m's device current: every call on a model runs on its device.
void use(const md::Model& m) {
    REQUIRE(cudaSetDevice(m.device()) == cudaSuccess);
}

/// The logits of @p m's last pass, on its device.
std::vector<float> logits_of(const md::Model& m) {
    use(m);
    return pd::test::logits_of(m);
}

/// The greedy tokens of @p m's last pass, on its device.
std::vector<int> argmax_of(const md::Model& m) {
    use(m);
    return pd::test::argmax_of(m);
}

/// The tiny model with a paged cache on @p device, its weights seeded alike on every device.
md::Model paged_model(int device, pd::DType kv) {
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    md::Model m(pd::test::tiny(),
                {.batch = 3, .max_seq = 32, .cache = {.kv = kv, .block_size = kBlockSize, .num_blocks = kNumBlocks}});
    m.init_synthetic(11);
    return m;
}

/// A cache's free blocks, handed out in a fixed order.
struct Pool {
    std::vector<int> order;
    std::size_t next = 0;
    int take() { return order.at(next++); }
};
/// The sender's blocks: 0, 1, 2 ...
Pool in_order() {
    Pool p;
    for (int i = 0; i < kNumBlocks; ++i) p.order.push_back(i);
    return p;
}
/// The receiver's: 3, 10, 17, 0, 7 ... (7 i + 3 mod 24), never the id the sender gives the same block.
Pool scattered() {
    Pool p;
    for (int i = 0; i < kNumBlocks; ++i) p.order.push_back((7 * i + 3) % kNumBlocks);
    return p;
}

/// Three sequences as one model holds them: their block tables, positions cached and next tokens.
struct Batch {
    std::vector<std::vector<int>> tables;
    std::vector<int> context, next;
};

/// The batch's StepSequences, one token each (decode) or @p lens tokens from position 0.
std::vector<md::StepSequence> steps_of(const Batch& b, const int* lens) {
    std::vector<md::StepSequence> seqs;
    for (int s = 0; s < 3; ++s)
        seqs.push_back({.slot = s,
                        .context = b.context[std::size_t(s)],
                        .tokens = lens ? lens[s] : 1,
                        .blocks = b.tables[std::size_t(s)]});
    return seqs;
}

/// The three prompts prefilled on @p m in one pass, in blocks from @p pool; the first tokens argmaxed.
Batch prefill(md::Model& m, Pool& pool) {
    Batch b;
    b.context.assign(3, 0);
    std::vector<int> tokens;
    for (int s = 0; s < 3; ++s) {
        b.tables.emplace_back();
        for (int i = 0; i < pd::ceil_div(kLens[s], kBlockSize); ++i) b.tables.back().push_back(pool.take());
        const std::vector<int> t = random_tokens(std::size_t(kLens[s]), m.config().vocab, 40 + std::uint64_t(s));
        tokens.insert(tokens.end(), t.begin(), t.end());
    }
    use(m);
    m.forward(tokens, steps_of(b, kLens));
    b.next = argmax_of(m);
    for (int s = 0; s < 3; ++s) b.context[std::size_t(s)] = kLens[s];
    return b;
}

/// What the decode steps produced: each step's tokens and logits.
struct Generation {
    std::vector<std::vector<int>> tokens;
    std::vector<std::vector<float>> logits;
};

/// kSteps greedy decode steps of @p b on @p m; a sequence whose next position starts a block takes
/// one from @p pool.
Generation decode(md::Model& m, Batch b, Pool& pool) {
    Generation g;
    for (int step = 0; step < kSteps; ++step) {
        for (int s = 0; s < 3; ++s) {
            std::vector<int>& table = b.tables[std::size_t(s)];
            if (b.context[std::size_t(s)] == int(table.size()) * kBlockSize) table.push_back(pool.take());
        }
        use(m);
        m.forward(b.next, steps_of(b, nullptr));
        g.logits.push_back(logits_of(m));
        b.next = argmax_of(m);
        g.tokens.push_back(b.next);
        for (int& c : b.context) ++c;
    }
    return g;
}

/// Moves the batch @p b of @p from into @p to, each sequence into blocks of @p pool: the batch
/// as @p to holds it. @p swap_first: the wrong mapping, sequences 0 and 1 given each other's
/// first block. Adds the transfers' figures to @p total.
Batch transfer(md::Model& from, const Batch& b, md::Model& to, Pool& pool, md::KvTransferStats& total,
               bool swap_first = false) {
    Batch out = b;
    std::vector<std::vector<int>> sources = b.tables;
    if (swap_first) std::swap(sources[0][0], sources[1][0]);
    for (int s = 0; s < 3; ++s) {
        std::vector<int>& table = out.tables[std::size_t(s)];
        for (int& id : table) id = pool.take();
        use(from);  // the caller's device: transfer_blocks leaves it as it was
        const md::KvTransferStats t = md::transfer_blocks(from, sources[std::size_t(s)], to, table);
        int current = -1;
        REQUIRE(cudaGetDevice(&current) == cudaSuccess);
        CHECK(current == from.device());
        total.bytes += t.bytes;
        total.seconds += t.seconds;
        total.copies += t.copies;
    }
    return out;
}

}  // namespace

TEST_CASE("kv transfer: prefilled on device 0, decoded on device 1 in other blocks, the same tokens", "[kv_transfer]") {
    need_devices(2);  // PD_SIM_DEVICES=2 on the simulator (CTest sets it)
    const pd::DType kv = GENERATE(pd::DType::fp32, pd::DType::bf16, pd::DType::int8);
    INFO("cache " << pd::to_string(kv));
    md::Model a = paged_model(0, kv), b = paged_model(1, kv);
    REQUIRE((a.device() == 0 && b.device() == 1));

    Pool a_pool = in_order(), b_pool = scattered();
    const Batch on_a = prefill(a, a_pool);
    md::KvTransferStats stats;
    const Batch on_b = transfer(a, on_a, b, b_pool, stats);
    for (int s = 0; s < 3; ++s) CHECK(on_b.tables[std::size_t(s)] != on_a.tables[std::size_t(s)]);

    // bytes: every layer's K and V of the 2 + 3 + 4 blocks (and an 8-bit cache's scales, a float per row)
    const pd::ModelConfig& c = a.config();
    const bool eight_bit = kv == pd::DType::int8;
    const double blocks = 2 + 3 + 4, rows = double(c.kv_heads) * kBlockSize,
                 elem = eight_bit ? 1 : (kv == pd::DType::bf16 ? 2 : 4), scales = eight_bit ? 4 : 0;
    CHECK(stats.bytes == c.layers * 2 * blocks * rows * (c.head_dim * elem + scales));
    CHECK(stats.copies == c.layers * 2 * int(blocks) * (eight_bit ? 2 : 1));
    CHECK(stats.seconds >= 0);

    // device 1 decodes from the transferred blocks; device 0 goes on alone (the reference)
    const Generation moved = decode(b, on_b, b_pool);
    const Generation alone = decode(a, on_a, a_pool);
    for (int step = 0; step < kSteps; ++step) {
        INFO("decode step " << step);
        CHECK(moved.tokens[std::size_t(step)] == alone.tokens[std::size_t(step)]);
        CHECK(max_rel_diff(moved.logits[std::size_t(step)], alone.logits[std::size_t(step)]) <= 1e-6);
    }
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("kv transfer: a wrong block mapping changes the generation", "[kv_transfer]") {
    need_devices(2);
    md::Model a = paged_model(0, pd::DType::fp32), b = paged_model(1, pd::DType::fp32);
    Pool a_pool = in_order(), wrong_pool = scattered();
    const Batch on_a = prefill(a, a_pool);
    md::KvTransferStats stats;
    // sequences 0 and 1 each receive the other's first block (4 positions of another prompt)
    const Batch on_b = transfer(a, on_a, b, wrong_pool, stats, true);
    const Generation wrong = decode(b, on_b, wrong_pool);
    const Generation alone = decode(a, on_a, a_pool);
    double worst = 0;
    bool same_tokens = true;
    for (int step = 0; step < kSteps; ++step) {
        worst = std::max(worst, max_rel_diff(wrong.logits[std::size_t(step)], alone.logits[std::size_t(step)]));
        same_tokens = same_tokens && wrong.tokens[std::size_t(step)] == alone.tokens[std::size_t(step)];
    }
    INFO("largest logit difference " << worst << ", tokens " << (same_tokens ? "identical" : "differ"));
    CHECK(worst > 1e-3);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("kv transfer: mismatched models and block lists are refused by name", "[kv_transfer]") {
    // on the current device: the checks come before any copy
    const pd::ModelConfig c = pd::test::tiny();
    const md::ModelOptions paged{.batch = 1, .max_seq = 16, .cache = {.block_size = kBlockSize, .num_blocks = 8}};
    md::Model from(c, paged), to(c, paged);
    const std::vector<int> two = {0, 1}, one = {0}, past = {0, 8}, twice = {3, 3};
    CHECK_THROWS_WITH(md::transfer_blocks(from, two, to, one),
                      Contains("from_blocks has 2 blocks, to_blocks 1: one destination per block"));
    CHECK_THROWS_WITH(md::transfer_blocks(from, two, to, past),
                      Contains("to_blocks[1] = 8 is not one of the cache's 8 blocks"));
    CHECK_THROWS_WITH(md::transfer_blocks(from, past, to, two),
                      Contains("from_blocks[1] = 8 is not one of the cache's 8 blocks"));
    CHECK_THROWS_WITH(md::transfer_blocks(from, two, to, twice), Contains("to_blocks[1] = 3 repeats to_blocks[0]"));
    CHECK_THROWS_WITH(to.cache().block_span(2, 0), Contains("block_span: layer = 2 must be in 0 .. 1"));
    CHECK_THROWS_WITH(to.cache().block_span(0, -1), Contains("block_span: block = -1 must be in 0 .. 7"));

    // a cache in slots has no blocks to copy
    md::Model slots(c, {.batch = 1, .max_seq = 16});
    CHECK_THROWS_WITH(md::transfer_blocks(slots, one, to, one),
                      Contains("ModelOptions.cache.block_size = 0 on the sender: the cache is not paged"));
    CHECK_THROWS_WITH(md::transfer_blocks(from, one, slots, one),
                      Contains("ModelOptions.cache.block_size = 0 on the receiver: the cache is not paged"));
    CHECK_THROWS_WITH(slots.cache().block_span(0, 0), Contains("the cache is not paged"));

    // another cache type, block size or shape
    md::ModelOptions bf16 = paged, eight = paged;
    bf16.cache.kv = pd::DType::bf16;
    eight.cache.block_size = 8;
    md::Model other_type(c, bf16), other_size(c, eight);
    CHECK_THROWS_WITH(md::transfer_blocks(from, one, other_type, one),
                      Contains("ModelOptions.cache.kv = fp32 on the sender, bf16 on the receiver"));
    CHECK_THROWS_WITH(md::transfer_blocks(from, one, other_size, one),
                      Contains("ModelOptions.cache.block_size = 4 on the sender, 8 on the receiver"));
    pd::ModelConfig deeper = c;
    deeper.layers = 3;
    md::Model other_shape(deeper, paged);
    CHECK_THROWS_WITH(md::transfer_blocks(other_shape, one, to, one),
                      Contains("ModelConfig.layers = 3 on the sender, 2 on the receiver"));
}
