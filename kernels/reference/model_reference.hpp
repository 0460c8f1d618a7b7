/// @file model_reference.hpp
/// @brief CPU reference of chapter 04's model (plain loops, double precision): the whole
/// Llama-style model (pd::ModelConfig, pd::ModelWeights) run one sequence at a time with its
/// own cache. A linear layer's W is [out, in] row-major, as the kernels'. It checks its sizes
/// and throws std::invalid_argument naming the first one that is wrong.
#pragma once

#include "pd/model_config.hpp"

#include <functional>
#include <span>
#include <vector>

namespace pd::reference {

/// The whole model on the CPU in double: one sequence with its own cache.
///
/// forward() reads as the math of one block, for all fed tokens layer by layer (as a prefill
/// does): x = embed[token]; per layer h = rmsnorm(x), q, k, v = Wq h, Wk h, Wv h, RoPE on q and
/// k at the token's position, k and v appended to the cache, causal attention of each query
/// head h over positions 0 .. pos with KV head h / (Hq / Hkv) and scale 1 / sqrt(d),
/// x += Wo att, h = rmsnorm(x), x += W_down (silu(W_gate h) * (W_up h)); then
/// logits = lm_head rmsnorm(x). Every sum and product is in double.
class ModelReference {
public:
    /// What a cache does to each K and V row of one token and KV head (head_dim values) it
    /// stores: an 8-bit cache rounds the row through its codes and its scale (chapter 08).
    using RowRounding = std::function<void(std::span<double> row)>;
    /// Keeps references to @p c and @p w (the caller keeps them alive) and an empty cache.
    /// Throws std::invalid_argument when @p c is out of range or @p w does not match it.
    /// @param c the model's shape  @param w its weights
    /// @param round_kv applied to every K and V row before it is cached (empty: stored as computed)
    ModelReference(const ModelConfig& c, const ModelWeights& w, RowRounding round_kv = {});
    /// Feeds `tokens` at positions length() ... length()+n-1 (appending K and V to its cache; throws
    /// std::invalid_argument past c.max_seq) and returns the logits of every fed token, [n][V]. Also throws, before
    /// changing anything, on a token id outside 0 .. V-1.
    std::vector<std::vector<double>> forward(std::span<const int> tokens);
    /// The positions fed so far (the cache's length).
    int length() const;

private:
    const ModelConfig& c_;
    const ModelWeights& w_;
    RowRounding round_kv_;
    int length_ = 0;
    /// Per layer, the cached K and V in double: [S_max, Hkv, d].
    std::vector<std::vector<double>> k_cache_, v_cache_;
};

}  // namespace pd::reference
