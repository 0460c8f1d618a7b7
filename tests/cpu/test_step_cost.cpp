// The one count of a forward pass (pd/step_cost.hpp) on hand-computed cases: the dense layers per
// token and the LM head per emitting item, the attention's pairs (causal, and every score of the
// square as chapter 01's kernels compute them), the weights read once (the embedding as a gather,
// nothing more for a tied head that is read anyway), the cache read and written; items counted
// several times; chapter 04's worked example (printed: its page quotes it); and the errors.
#include "pd/step_cost.hpp"

#include "pd/roofline.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
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
    // chapter 09's verify pass: 4 tokens after 5 cached, the logits of all 4 through the head
    const pd::StepItem verify{.tokens = 4, .context = 5, .logits = 4};
    const pd::StepCost v = pd::step_cost(s, std::span(&verify, 1));
    CHECK(v.dense_flops == 4 * 576 + 4 * 80);
    CHECK(v.weight_bytes == 656 + 80 + 4 * 8);  // the head is read once for its 4 rows
    const pd::StepItem too_many{.tokens = 2, .logits = 3};
    CHECK_THROWS_WITH(pd::step_cost(s, std::span(&too_many, 1)), Catch::Matchers::Contains("1 <= logits <= tokens"));
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
    // the 36 scores of each of 2 heads in 2 layers, 4 bytes each, written, read, written, read
    CHECK(causal.score_bytes == 0);
    CHECK(all.score_bytes == 36 * 2 * 2 * 4 * 4);
    CHECK(all.bytes == causal.bytes + all.score_bytes);
}

TEST_CASE("step cost: chapter 04's worked example: llama-3-8b at C = 1024 cached and recomputed", "[step_cost]") {
    // bf16 weights and cache, fp32 norms (as pd::model::Model::cost() counts); B = 1, C = 1024:
    // the cached step is one token after 1,023 cached positions, the recomputed one a prefill of
    // all 1,024 through chapter 01's attention, its score matrix in memory.
    const pd::ModelConfig m = *pd::find_model("llama-3-8b");
    const pd::roofline::GpuSpec gpu = *pd::roofline::find_gpu("H200");
    const pd::StepCostShape s = pd::step_cost_shape(m, 2, 2, 4);
    const double C = 1024, L = m.layers, Hq = m.heads, d = m.head_dim;
    const pd::StepItem cached_item{.tokens = 1, .context = C - 1}, prefill_item{.tokens = C};
    const pd::StepCost cached = pd::step_cost(s, std::span(&cached_item, 1));
    const pd::StepCost recomputed = pd::step_cost(s, std::span(&prefill_item, 1), pd::AttentionCount::all_scores);
    // the counts by hand: 2 N per token (N: the layers' matrices; and the head once), 4 L Hq d
    // per pair; recomputing, every score of the C x C square and P V over its C (C + 1) / 2
    const double N = s.dense_flops_per_token / 2;
    CHECK(cached.flops == Approx(2 * N + s.head_flops + 4 * L * Hq * d * C));
    CHECK(recomputed.flops == Approx(2 * N * C + s.head_flops + 2 * L * Hq * d * (C * C + C * (C + 1) / 2)));
    CHECK(cached.kv_bytes == Approx(C * s.kv_bytes_per_position));
    CHECK(recomputed.kv_bytes == Approx(C * s.kv_bytes_per_position));  // written, not read
    CHECK(recomputed.weight_bytes - cached.weight_bytes == Approx((C - 1) * s.row_bytes));
    CHECK(recomputed.score_bytes == Approx(16 * Hq * L * C * C));  // fp32, four passes
    CHECK(cached.score_bytes == 0);

    const double peak = gpu.tensor_tflops * 1e12, bandwidth = gpu.bandwidth_gbps * 1e9;
    std::printf(
        "\nchapter 04's worked example: llama-3-8b, bf16 weights and cache, B = 1, C = 1024, on the %s "
        "datasheet (%.1f TFLOP/s, %.1f TB/s)\n",
        gpu.name.c_str(), gpu.tensor_tflops, gpu.bandwidth_gbps / 1e3);
    std::printf("%-10s  %8s  %10s  %8s  %9s  %8s  %10s  %9s\n", "step", "GFLOP", "weights GB", "cache GB", "scores GB",
                "bytes GB", "compute ms", "memory ms");
    std::printf("%s\n", std::string(90, '-').c_str());
    for (const auto& [name, c] : {std::pair{"cached", cached}, std::pair{"recomputed", recomputed}})
        std::printf("%-10s  %8.1f  %10.2f  %8.2f  %9.2f  %8.2f  %10.2f  %9.2f\n", name, c.flops / 1e9,
                    c.weight_bytes / 1e9, c.kv_bytes / 1e9, c.score_bytes / 1e9, c.bytes / 1e9, c.flops / peak * 1e3,
                    c.bytes / bandwidth * 1e3);
    const auto floor_s = [&](const pd::StepCost& c) { return std::max(c.flops / peak, c.bytes / bandwidth); };
    std::printf("ratios, recomputed over cached: FLOPs %.0f, bytes %.2f, floors %.1f\n",
                recomputed.flops / cached.flops, recomputed.bytes / cached.bytes,
                floor_s(recomputed) / floor_s(cached));
    // the page's conclusion: the score matrix outweighs the weights, yet the compute floor binds
    CHECK(recomputed.score_bytes > recomputed.weight_bytes);
    CHECK(recomputed.flops / peak > recomputed.bytes / bandwidth);
    CHECK(cached.bytes / bandwidth > cached.flops / peak);
}

TEST_CASE("step cost: a tied head reads the table once, and gathers stop at the table", "[step_cost]") {
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
