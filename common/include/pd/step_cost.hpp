/// @file step_cost.hpp
/// @brief The FLOPs and the fewest bytes of one forward pass of a model over a batch: written
/// once, for chapter 00's calculator, chapter 04's model and chapter 05's cost model.
///
/// A batch is a list of items, each a sequence's new tokens (a whole prompt, a chunk of one, or
/// one decode token) after `context` positions already in its cache. One pass costs:
///
/// * **dense layers**: 2 FLOPs per matrix weight of the layers per token (Wq, Wk, Wv, Wo, gate,
///   up, down), plus the LM head (2 V D) for each row of logits an emitting item asks for (its
///   last token's; chapter 09's verify pass: every token's);
/// * **attention**: 4 d Hq L FLOPs per (query, key) pair the queries attend to (2 d for q . k,
///   2 d for p v); an item of t queries after c cached positions attends, causally, to
///   c + i + 1 keys for query i: c t + t (t + 1) / 2 pairs. A kernel that computes every score
///   (chapter 01's naive attention: t (c + t) of them, then P V over the allowed ones) counts
///   AttentionCount::all_scores;
/// * **weights**: every matrix and norm of the layers and the final norm, once per pass; the LM
///   head if an item emits; one embedding row per token (at most the whole table; nothing more
///   when the head is the embedding table and is read anyway);
/// * **KV cache**: every item reads its context's K and V and writes its new tokens';
/// * **score matrix** (AttentionCount::all_scores only): chapter 01's kernels keep every score
///   in memory, in fp32, and pass over it four times (written by the scores kernel, read and
///   written by the softmax, read by P V): 16 Hq L bytes per score.
///
/// Not counted: activations, the norms' and RoPE's arithmetic, sampling.
#pragma once

#include "pd/model_config.hpp"

#include <span>

namespace pd {

/// What one token, one emitted token and one attended pair cost a model, and what a pass reads
/// whatever its batch.
struct StepCostShape {
    double dense_flops_per_token = 0;     ///< 2 per matrix weight of the layers
    double head_flops = 0;                ///< 2 V D: the LM head, per item that emits a token
    double attention_flops_per_pair = 0;  ///< 4 d Hq L per (query, key) pair
    double resident_bytes = 0;            ///< read by every pass: the layers' matrices and norms, the final norm
    double head_bytes = 0;                ///< the LM head, read when an item emits
    double row_bytes = 0;                 ///< one embedding row, gathered per token
    double table_bytes = 0;               ///< the embedding table: the most the gathers read
    bool tied = false;                    ///< the LM head is the embedding table
    double kv_bytes_per_position = 0;     ///< K and V of one position, every layer
    double score_bytes_per_score = 0;     ///< 16 Hq L: chapter 01's fp32 score, four passes, every head and layer
};

/// The shape of model @p c: weights of @p weight_bytes per parameter, norms of @p norm_bytes
/// (the model keeps them in fp32: 4), a cache of @p kv_bytes per element.
/// @throws std::invalid_argument naming the field of @p c out of range, or a byte size not positive
StepCostShape step_cost_shape(const ModelConfig& c, double weight_bytes, double kv_bytes, double norm_bytes);
/// The shape of a model known only by its parameter count (chapter 00's calculator): 2 FLOPs per
/// parameter per token, every parameter read once per pass, no attention and no cache.
/// @param params P  @param bytes_per_param b
StepCostShape parameter_cost_shape(double params, double bytes_per_param);

/// One item of a batch: @p tokens new tokens after @p context cached positions (or @p count
/// sequences alike).
struct StepItem {
    double tokens = 1;   ///< new tokens (>= 1)
    double context = 0;  ///< positions already in the cache (>= 0)
    bool emits = true;   ///< the item's last token needs its logits (the LM head)
    double count = 1;    ///< sequences of this shape in the batch (>= 1)
    /// Rows of logits it needs when it emits, 1 ... tokens (chapter 09's verify pass: every token's).
    double logits = 1;
};

/// How the attention kernel counts: the pairs the causal rule allows (the fewest FLOPs), or
/// every score of the square and P V over the allowed pairs (chapter 01's naive kernels).
enum class AttentionCount { causal, all_scores };

/// The counts of one pass, with their parts.
struct StepCost {
    double flops = 0;            ///< dense_flops + attention_flops
    double bytes = 0;            ///< weight_bytes + kv_bytes + score_bytes
    double dense_flops = 0;      ///< the layers' matrices and the LM head
    double attention_flops = 0;  ///< q . k and p v
    double weight_bytes = 0;     ///< the weights read
    double kv_bytes = 0;         ///< the cache read and written
    double score_bytes = 0;      ///< the score matrix in memory (AttentionCount::all_scores; 0 otherwise)
};

/// The FLOPs and fewest bytes of one pass of @p shape over @p items (an empty batch costs 0).
/// @throws std::invalid_argument naming the item whose tokens < 1 or context < 0
StepCost step_cost(const StepCostShape& shape, std::span<const StepItem> items,
                   AttentionCount count = AttentionCount::causal);

}  // namespace pd
