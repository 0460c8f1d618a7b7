// The FLOPs and bytes of one forward pass over a batch (see step_cost.hpp for what is counted).
#include "pd/step_cost.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd {

namespace {

void require_positive(double v, const char* name) {
    if (!(v > 0) || !std::isfinite(v))
        throw std::invalid_argument(std::string("step cost: ") + name + " must be a positive finite number, got " +
                                    std::to_string(v));
}

}  // namespace

StepCostShape step_cost_shape(const ModelConfig& c, double weight_bytes, double kv_bytes, double norm_bytes) {
    c.check("step cost of " + c.name);
    require_positive(weight_bytes, "weight_bytes");
    require_positive(kv_bytes, "kv_bytes");
    require_positive(norm_bytes, "norm_bytes");
    const double D = c.d_model, q = double(c.heads) * c.head_dim, kv = double(c.kv_heads) * c.head_dim;
    // Wq [q, D], Wk and Wv [kv, D], Wo [D, q], gate and up [F, D], down [D, F]
    const double layer_matrices = D * q + 2 * D * kv + q * D + 3 * D * c.ffn_dim;
    const double norms = 2.0 * c.layers * D + D;  // two per layer and the final one
    StepCostShape s;
    s.dense_flops_per_token = 2 * c.layers * layer_matrices;
    s.head_flops = 2 * double(c.vocab) * D;
    s.attention_flops_per_pair = 4.0 * c.head_dim * c.heads * c.layers;
    s.resident_bytes = c.layers * layer_matrices * weight_bytes + norms * norm_bytes;
    s.head_bytes = double(c.vocab) * D * weight_bytes;
    s.row_bytes = D * weight_bytes;
    s.table_bytes = s.head_bytes;
    s.tied = c.tied_embeddings;
    s.kv_bytes_per_position = c.kv_bytes_per_token(kv_bytes);
    s.score_bytes_per_score = 4.0 * 4 * c.heads * c.layers;  // 4 bytes, 4 passes
    return s;
}

StepCostShape parameter_cost_shape(double params, double bytes_per_param) {
    require_positive(params, "params");
    require_positive(bytes_per_param, "bytes_per_param");
    StepCostShape s;
    s.dense_flops_per_token = 2 * params;
    s.resident_bytes = params * bytes_per_param;
    return s;
}

// [step_cost]
StepCost step_cost(const StepCostShape& shape, std::span<const StepItem> items, AttentionCount count) {
    StepCost c;
    if (items.empty()) return c;
    double tokens = 0, emitting = 0, allowed = 0, squares = 0, cached = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
        const StepItem& it = items[i];
        if (!(it.tokens >= 1) || !(it.context >= 0) || !(it.count >= 1) || !(it.logits >= 1 && it.logits <= it.tokens))
            throw std::invalid_argument(
                "step cost: item " + std::to_string(i) + " has tokens = " + std::to_string(it.tokens) +
                ", context = " + std::to_string(it.context) + ", count = " + std::to_string(it.count) + ", logits = " +
                std::to_string(it.logits) + " (tokens >= 1, context >= 0, count >= 1, 1 <= logits <= tokens)");
        const double t = it.tokens, ctx = it.context, n = it.count;
        tokens += n * t;
        emitting += it.emits ? n * it.logits : 0;  // rows through the LM head
        allowed +=
            n * (t * ctx + t * (t + 1) / 2);  // query i sees the ctx cached keys and the i + 1 new ones up to itself
        squares += n * t * (ctx + t);         // every score of the item's block
        cached += n * ctx;
    }
    c.dense_flops = shape.dense_flops_per_token * tokens + shape.head_flops * emitting;
    c.attention_flops = count == AttentionCount::causal
                            ? shape.attention_flops_per_pair * allowed
                            : shape.attention_flops_per_pair / 2 * (squares + allowed);  // 2 d per score, 2 d per p v
    c.flops = c.dense_flops + c.attention_flops;
    const bool head = emitting > 0 && shape.head_bytes > 0;
    const double gathered = shape.tied && head ? 0 : std::min(tokens * shape.row_bytes, shape.table_bytes);
    c.weight_bytes = shape.resident_bytes + (head ? shape.head_bytes : 0) + gathered;
    c.kv_bytes = (cached + tokens) * shape.kv_bytes_per_position;
    c.score_bytes = count == AttentionCount::all_scores ? shape.score_bytes_per_score * squares : 0;
    c.bytes = c.weight_bytes + c.kv_bytes + c.score_bytes;
    return c;
}
// [step_cost]

}  // namespace pd
