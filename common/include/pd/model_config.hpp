/// @file model_config.hpp
/// @brief The shape of a decoder-only (Llama-style) transformer, and the presets the course
/// uses: chapter 00's calculator counts with them, chapter 04's model is built from them.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pd {

/// A Llama-style decoder: embedding, `layers` blocks of (RMSNorm, attention with grouped-query
/// heads and RoPE, RMSNorm, SwiGLU FFN), a final RMSNorm and the LM head.
struct ModelConfig {
    std::string name;              ///< preset name, as `--model` and `--preset` take it
    int vocab = 0;                 ///< V, vocabulary size
    int d_model = 0;               ///< D, the width of the residual stream
    int layers = 0;                ///< L, transformer blocks
    int heads = 0;                 ///< Hq, query heads
    int kv_heads = 0;              ///< Hkv, key/value heads (grouped-query attention when < Hq)
    int head_dim = 0;              ///< d, the width of one head
    int ffn_dim = 0;               ///< F, the SwiGLU inner size
    int max_seq = 0;               ///< the longest sequence (prompt + generated), the cache's length
    double rope_theta = 10000;     ///< RoPE base: pair i of a head turns at pos * theta^(-2i/d)
    double norm_eps = 1e-5;        ///< RMSNorm epsilon
    bool tied_embeddings = false;  ///< true when the LM head reuses the embedding matrix
    std::string source;            ///< where the shape comes from

    /// Query heads that share one KV head: Hq / Hkv.
    int group() const { return kv_heads > 0 ? heads / kv_heads : 0; }
    /// Parameters of the weights: embeddings (and LM head unless tied), attention and gated MLP
    /// projections, the norms.
    double parameter_count() const;
    /// KV-cache bytes per token: 2 (K and V) * layers * kv_heads * head_dim * bytes.
    double kv_bytes_per_token(double bytes_per_element) const;
    /// Throws std::invalid_argument naming the first field out of range (sizes below 1, heads not
    /// a multiple of kv_heads, an odd head_dim (RoPE turns pairs), theta or eps not positive).
    /// @param what the origin, first in the message ("--preset tiny", "stories15M.bin")
    void check(const std::string& what) const;
};

/// The presets: tiny (the simulator's model), tiny-tp (its tensor-parallel twin: 8 query and 8 KV heads), stories15M
/// (llama2.c's 15M story model), llama-3-8b, llama-3-70b, llama-2-7b (the shapes of the published models), llama-3.1-8b
/// (llama-3-8b's shapes with 128k positions, for long prompts: chapter 07).
const std::vector<ModelConfig>& model_presets();
/// The preset named @p name, if any.
std::optional<ModelConfig> find_model(std::string_view name);
/// The preset names, in order, for `--help` and error messages.
std::vector<std::string> model_names();

/// @p c as JSON: name, vocab, d_model, layers, heads, kv_heads, head_dim, ffn_dim, max_seq,
/// rope_theta, norm_eps, tied_embeddings, source (what `--dump` writes as config.json).
nlohmann::json to_json(const ModelConfig& c);

/// "tiny (source): V = 512, D = 64, L = 2, Hq = 4, Hkv = 2, d = 16, F = 172; 1.2e+05 parameters":
/// the shape of @p c in the notation of the pages. @param c the model
std::string describe(const ModelConfig& c);

}  // namespace pd

namespace pd {

/// The weights of a ModelConfig on the host, in fp32, row-major, in the layout of llama2.c's
/// checkpoints and of the course's kernels (a linear layer's W is [out, in]):
/// embed [V, D], attn_norm [L, D], wq [L, Hq d, D], wk and wv [L, Hkv d, D], wo [L, D, Hq d],
/// ffn_norm [L, D], w_gate and w_up [L, F, D], w_down [L, D, F], final_norm [D], lm_head [V, D]
/// (a copy of embed when the embeddings are tied).
struct ModelWeights {
    std::vector<float> embed;       ///< [V, D] token embeddings
    std::vector<float> attn_norm;   ///< [L, D] RMSNorm weights before attention
    std::vector<float> wq;          ///< [L, Hq d, D] query projections
    std::vector<float> wk;          ///< [L, Hkv d, D] key projections
    std::vector<float> wv;          ///< [L, Hkv d, D] value projections
    std::vector<float> wo;          ///< [L, D, Hq d] output projections
    std::vector<float> ffn_norm;    ///< [L, D] RMSNorm weights before the FFN
    std::vector<float> w_gate;      ///< [L, F, D] SwiGLU gate projections
    std::vector<float> w_up;        ///< [L, F, D] SwiGLU up projections
    std::vector<float> w_down;      ///< [L, D, F] SwiGLU down projections
    std::vector<float> final_norm;  ///< [D] the final RMSNorm's weights
    std::vector<float> lm_head;     ///< [V, D] the LM head (a copy of embed when tied)

    /// The tensors by name, in the order above, with their shapes for @p c: what `--dump` writes.
    struct Tensor {
        std::string name;                ///< "embed", "attn_norm", ...
        std::vector<float>* data;        ///< the tensor's values
        std::vector<std::size_t> shape;  ///< its shape for the config
    };
    /// The twelve tensors with their shapes (mutable views into this object).
    std::vector<Tensor> tensors(const ModelConfig& c);
    /// Throws std::invalid_argument ("<what>: <tensor> has N values, expected M") when a
    /// tensor's size does not match @p c.
    void check(const ModelConfig& c, const std::string& what) const;
};

}  // namespace pd
