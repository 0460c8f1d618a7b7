#include "pd/model_config.hpp"

#include <cstdio>
#include <stdexcept>

namespace pd {

double ModelConfig::parameter_count() const {
    const double h = d_model, q = double(heads) * head_dim, kv = double(kv_heads) * head_dim;
    const double attention = h * q + 2 * h * kv + q * h;  // Wq, Wk, Wv, Wo
    const double mlp = 3 * h * ffn_dim;                   // gate, up, down
    const double norms = 2 * h;                           // two RMSNorm weight vectors
    const double embeddings = double(vocab) * h * (tied_embeddings ? 1 : 2);
    return layers * (attention + mlp + norms) + embeddings + h;  // + final norm
}

double ModelConfig::kv_bytes_per_token(double bytes_per_element) const {
    return 2.0 * layers * kv_heads * head_dim * bytes_per_element;
}

void ModelConfig::check(const std::string& what) const {
    const auto fail = [&](const std::string& field, const std::string& why) {
        throw std::invalid_argument(what + ": " + field + " " + why);
    };
    const std::pair<const char*, int> sizes[] = {{"vocab", vocab},     {"d_model", d_model},   {"layers", layers},
                                                 {"heads", heads},     {"kv_heads", kv_heads}, {"head_dim", head_dim},
                                                 {"ffn_dim", ffn_dim}, {"max_seq", max_seq}};
    for (const auto& [field, v] : sizes)
        if (v < 1) fail(field, "must be >= 1, got " + std::to_string(v));
    if (heads % kv_heads != 0)
        fail("heads", "= " + std::to_string(heads) + " must be a multiple of kv_heads = " + std::to_string(kv_heads));
    if (head_dim % 2 != 0) fail("head_dim", "must be even (RoPE turns pairs), got " + std::to_string(head_dim));
    if (!(rope_theta > 0)) fail("rope_theta", "must be > 0");
    if (!(norm_eps > 0)) fail("norm_eps", "must be > 0");
}

const std::vector<ModelConfig>& model_presets() {
    // The published models' shapes from their config.json (hidden_size, num_hidden_layers,
    // num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
    // max_position_embeddings, rope_theta, rms_norm_eps); stories15M from the header of
    // llama2.c's stories15M.bin (dim 288, hidden_dim 768, 6 layers, 6 heads, vocab 32000, seq_len 256).
    static const std::vector<ModelConfig> presets = {
        {.name = "tiny",
         .vocab = 512,
         .d_model = 128,
         .layers = 2,
         .heads = 4,
         .kv_heads = 2,
         .head_dim = 32,
         .ffn_dim = 344,
         .max_seq = 512,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "the course's simulator model: GQA (2 query heads per KV head), seconds on a CPU"},
        {.name = "tiny-tp",
         .vocab = 512,
         .d_model = 128,
         .layers = 2,
         .heads = 8,
         .kv_heads = 8,
         .head_dim = 16,
         .ffn_dim = 344,
         .max_seq = 512,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "the course's simulator model for tensor parallelism: 8 query and 8 KV heads, FFN 344 = 8 x 43 "
                   "and vocabulary 512 split by up to 8 ranks"},
        {.name = "stories15M",
         .vocab = 32000,
         .d_model = 288,
         .layers = 6,
         .heads = 6,
         .kv_heads = 6,
         .head_dim = 48,
         .ffn_dim = 768,
         .max_seq = 256,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = true,
         .source = "llama2.c stories15M.bin header"},
        {.name = "llama-3-8b",
         .vocab = 128256,
         .d_model = 4096,
         .layers = 32,
         .heads = 32,
         .kv_heads = 8,
         .head_dim = 128,
         .ffn_dim = 14336,
         .max_seq = 8192,
         .rope_theta = 500000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "Meta Llama 3 8B config.json"},
        {.name = "llama-3-70b",
         .vocab = 128256,
         .d_model = 8192,
         .layers = 80,
         .heads = 64,
         .kv_heads = 8,
         .head_dim = 128,
         .ffn_dim = 28672,
         .max_seq = 8192,
         .rope_theta = 500000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "Meta Llama 3 70B config.json"},
        {.name = "llama-2-7b",
         .vocab = 32000,
         .d_model = 4096,
         .layers = 32,
         .heads = 32,
         .kv_heads = 32,
         .head_dim = 128,
         .ffn_dim = 11008,
         .max_seq = 4096,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "Meta Llama 2 7B config.json"},
        {.name = "llama-3.1-8b",
         .vocab = 128256,
         .d_model = 4096,
         .layers = 32,
         .heads = 32,
         .kv_heads = 8,
         .head_dim = 128,
         .ffn_dim = 14336,
         .max_seq = 131072,
         .rope_theta = 500000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "Meta Llama 3.1 8B config.json (max_position_embeddings 131072; its RoPE scaling of long "
                   "contexts is not modelled): llama-3-8b's shapes, for long prompts on a GPU"},
        {.name = "llama-2-13b",
         .vocab = 32000,
         .d_model = 5120,
         .layers = 40,
         .heads = 40,
         .kv_heads = 40,
         .head_dim = 128,
         .ffn_dim = 13824,
         .max_seq = 4096,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "Meta Llama 2 13B config.json"},
        {.name = "tinyllama-1.1b",
         .vocab = 32000,
         .d_model = 2048,
         .layers = 22,
         .heads = 32,
         .kv_heads = 4,
         .head_dim = 64,
         .ffn_dim = 5632,
         .max_seq = 2048,
         .rope_theta = 10000,
         .norm_eps = 1e-5,
         .tied_embeddings = false,
         .source = "TinyLlama-1.1B config.json"},
    };
    return presets;
}

std::optional<ModelConfig> find_model(std::string_view name) {
    for (const ModelConfig& m : model_presets())
        if (m.name == name) return m;
    return std::nullopt;
}

std::vector<std::string> model_names() {
    std::vector<std::string> names;
    for (const ModelConfig& m : model_presets()) names.push_back(m.name);
    return names;
}

nlohmann::json to_json(const ModelConfig& c) {
    return {{"name", c.name},         {"vocab", c.vocab},
            {"d_model", c.d_model},   {"layers", c.layers},
            {"heads", c.heads},       {"kv_heads", c.kv_heads},
            {"head_dim", c.head_dim}, {"ffn_dim", c.ffn_dim},
            {"max_seq", c.max_seq},   {"rope_theta", c.rope_theta},
            {"norm_eps", c.norm_eps}, {"tied_embeddings", c.tied_embeddings},
            {"source", c.source}};
}

std::string describe(const ModelConfig& c) {
    char parameters[32];
    std::snprintf(parameters, sizeof parameters, "%.3g", c.parameter_count());
    return c.name + " (" + c.source + "): V = " + std::to_string(c.vocab) + ", D = " + std::to_string(c.d_model) +
           ", L = " + std::to_string(c.layers) + ", Hq = " + std::to_string(c.heads) +
           ", Hkv = " + std::to_string(c.kv_heads) + ", d = " + std::to_string(c.head_dim) +
           ", F = " + std::to_string(c.ffn_dim) + "; " + parameters + " parameters";
}

}  // namespace pd

namespace pd {

std::vector<ModelWeights::Tensor> ModelWeights::tensors(const ModelConfig& c) {
    using S = std::size_t;
    const S V = S(c.vocab), D = S(c.d_model), L = S(c.layers), q = S(c.heads) * c.head_dim,
            kv = S(c.kv_heads) * c.head_dim, F = S(c.ffn_dim);
    return {{"embed", &embed, {V, D}},       {"attn_norm", &attn_norm, {L, D}}, {"wq", &wq, {L, q, D}},
            {"wk", &wk, {L, kv, D}},         {"wv", &wv, {L, kv, D}},           {"wo", &wo, {L, D, q}},
            {"ffn_norm", &ffn_norm, {L, D}}, {"w_gate", &w_gate, {L, F, D}},    {"w_up", &w_up, {L, F, D}},
            {"w_down", &w_down, {L, D, F}},  {"final_norm", &final_norm, {D}},  {"lm_head", &lm_head, {V, D}}};
}

void ModelWeights::check(const ModelConfig& c, const std::string& what) const {
    for (const Tensor& t : const_cast<ModelWeights*>(this)->tensors(c)) {
        std::size_t n = 1;
        for (std::size_t e : t.shape) n *= e;
        if (t.data->size() != n)
            throw std::invalid_argument(what + ": " + t.name + " has " + std::to_string(t.data->size()) +
                                        " values, expected " + std::to_string(n));
    }
}

}  // namespace pd
