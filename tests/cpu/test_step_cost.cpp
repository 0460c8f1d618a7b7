// The one count of a forward pass (pd/step_cost.hpp) on hand-computed cases: the dense layers per
// token and the LM head per emitting item, the attention's pairs (causal, and every score of the
// square as chapter 01's kernels compute them), the weights read once (the embedding as a gather,
// nothing more for a tied head that is read anyway), the cache read and written; items counted
// several times; and the errors.
#include "pd/step_cost.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace {

/// V = 10, D = 4, L = 2, Hq = 2, Hkv = 1, d = 2, F = 8: layer matrices 4*4 + 2*4*2 + 4*4 +
/// 3*4*8 = 144, norms 2*2*4 + 4 = 20, a cache of 2 * 2 * 1 * 2 = 8 elements per position.
pd::ModelConfig toy(bool tied) {
    return {.name = "toy",
            .vocab = 10,
            .d_model = 4,
            .layers = 2,
            .heads = 2,
            .kv_heads = 1,
            .head_dim = 2,
            .ffn_dim = 8,
            .max_seq = 64,
            .tied_embeddings = tied,
            .source = "test"};
}

}  // namespace

TEST_CASE("step cost: a prefill chunk and a decode, counted by hand", "[step_cost]") {
    // weights 2 bytes, cache 1 byte, norms 4 bytes
    const pd::StepCostShape s = pd::step_cost_shape(toy(false), 2, 1, 4);
    CHECK(s.dense_flops_per_token == 2 * 2 * 144);
    CHECK(s.head_flops == 2 * 10 * 4);
    CHECK(s.attention_flops_per_pair == 4 * 2 * 2 * 2);
    CHECK(s.resident_bytes == 2 * 144 * 2 + 20 * 4);
    CHECK(s.kv_bytes_per_position == 8);
    // a chunk of 3 tokens after 2 cached that emits nothing, a decode after 5
    const std::vector<pd::StepItem> items = {{.tokens = 3, .context = 2, .emits = false}, {.tokens = 1, .context = 5}};
    const pd::StepCost c = pd::step_cost(s, items);
    // pairs: 3 * 2 + 3 * 4 / 2 = 12 and 5 + 1 = 6
    CHECK(c.dense_flops == 4 * 576 + 80);
    CHECK(c.attention_flops == 18 * 32);
    CHECK(c.flops == c.dense_flops + c.attention_flops);
    // weights: resident 656, the head 80 (an item emits), 4 embedding rows of 8 bytes
    CHECK(c.weight_bytes == 656 + 80 + 4 * 8);
    // cache: (2 + 5) read and 4 written, 8 bytes each
    CHECK(c.kv_bytes == (7 + 4) * 8);
    CHECK(c.bytes == c.weight_bytes + c.kv_bytes);
    CHECK(pd::step_cost(s, std::vector<pd::StepItem>{}).flops == 0);
}

TEST_CASE("step cost: chapter 01's attention counts every score of its square", "[step_cost]") {
    const pd::StepCostShape s = pd::step_cost_shape(toy(false), 4, 4, 4);
    const pd::StepItem prompt{.tokens = 6, .context = 0};
    const pd::StepCost causal = pd::step_cost(s, std::span(&prompt, 1));
    const pd::StepCost all = pd::step_cost(s, std::span(&prompt, 1), pd::AttentionCount::all_scores);
    // causal: 6 * 7 / 2 = 21 pairs of 4 d Hq L; all: 36 scores of 2 d Hq L, and P V over the 21
    CHECK(causal.attention_flops == 21 * 32);
    CHECK(all.attention_flops == 36 * 16 + 21 * 16);
    CHECK(all.dense_flops == causal.dense_flops);
    CHECK(all.bytes == causal.bytes);
}

TEST_CASE("step cost: a tied head reads the table once; gathers stop at the table", "[step_cost]") {
    const pd::StepCostShape tied = pd::step_cost_shape(toy(true), 2, 2, 2);
    const pd::StepItem emits{.tokens = 3}, silent{.tokens = 3, .emits = false}, many{.tokens = 30, .emits = false};
    // emitting: the head is the table, read whole; the gathers add nothing
    CHECK(pd::step_cost(tied, std::span(&emits, 1)).weight_bytes == tied.resident_bytes + 80);
    // not emitting: 3 rows of the table
    CHECK(pd::step_cost(tied, std::span(&silent, 1)).weight_bytes == tied.resident_bytes + 3 * 8);
    // 30 rows of a 10-row table: at most the table
    CHECK(pd::step_cost(tied, std::span(&many, 1)).weight_bytes == tied.resident_bytes + 80);
}

TEST_CASE("step cost: count stands for that many items alike", "[step_cost]") {
    const pd::StepCostShape s = pd::step_cost_shape(toy(false), 2, 2, 2);
    const pd::StepItem four{.tokens = 2, .context = 3, .count = 4};
    const std::vector<pd::StepItem> each(4, pd::StepItem{.tokens = 2, .context = 3});
    const pd::StepCost a = pd::step_cost(s, std::span(&four, 1)), b = pd::step_cost(s, each);
    CHECK(a.flops == b.flops);
    CHECK(a.bytes == b.bytes);
}

TEST_CASE("step cost: the parameter-count shape is 2 FLOPs per parameter per token", "[step_cost]") {
    const pd::StepCostShape s = pd::parameter_cost_shape(7e9, 2);
    const pd::StepItem prompt{.tokens = 2000, .count = 3};
    const pd::StepCost c = pd::step_cost(s, std::span(&prompt, 1));
    CHECK(c.flops == 2 * 7e9 * 2000 * 3);
    CHECK(c.bytes == 14e9);
}

TEST_CASE("step cost: bad items and shapes are rejected, naming what is wrong", "[step_cost]") {
    using Catch::Matchers::Contains;
    const pd::StepCostShape s = pd::step_cost_shape(toy(false), 2, 2, 2);
    const std::vector<pd::StepItem> bad = {{.tokens = 1}, {.tokens = 0}};
    CHECK_THROWS_WITH(pd::step_cost(s, bad), Contains("item 1") && Contains("tokens >= 1"));
    const pd::StepItem negative{.tokens = 1, .context = -1};
    CHECK_THROWS_WITH(pd::step_cost(s, std::span(&negative, 1)), Contains("context"));
    CHECK_THROWS_WITH(pd::step_cost_shape(toy(false), 0, 2, 2), Contains("weight_bytes"));
    CHECK_THROWS_WITH(pd::parameter_cost_shape(-1, 2), Contains("params"));
}
