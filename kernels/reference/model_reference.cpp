/// @file model_reference.cpp
/// @brief Chapter 04's reference model: the whole Llama-style model on the CPU in double, one
/// sequence with its own cache.
#include "model_reference.hpp"

#include "reference_common.hpp"

#include <cstddef>
#include <utility>

namespace pd::reference {

using namespace detail;
using std::size_t;

ModelReference::ModelReference(const ModelConfig& c, const ModelWeights& w, RowRounding round_kv)
    : c_(c), w_(w), round_kv_(std::move(round_kv)) {
    c.check("ModelReference");
    w.check(c, "ModelReference");
    const size_t per_layer = size_t(c.max_seq) * c.kv_heads * c.head_dim;
    k_cache_.assign(size_t(c.layers), std::vector<double>(per_layer));
    v_cache_.assign(size_t(c.layers), std::vector<double>(per_layer));
}

int ModelReference::length() const {
    return length_;
}

std::vector<std::vector<double>> ModelReference::forward(std::span<const int> tokens) {
    const ModelConfig& c = c_;
    const ModelWeights& w = w_;
    const int n = int(tokens.size());
    if (size_t(length_) + tokens.size() > size_t(c.max_seq))
        fail("ModelReference::forward", std::to_string(tokens.size()) + " tokens after " + std::to_string(length_) +
                                            " exceed max_seq = " + std::to_string(c.max_seq));
    for (int t = 0; t < n; ++t)
        if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= c.vocab)
            fail("ModelReference::forward", "token " + std::to_string(tokens[size_t(t)]) +
                                                " is outside 0 .. vocab - 1 = " + std::to_string(c.vocab - 1));
    const int D = c.d_model, Hq = c.heads, Hkv = c.kv_heads, d = c.head_dim, F = c.ffn_dim;
    const int q_dim = Hq * d, kv_dim = Hkv * d, group = Hq / Hkv;
    const size_t Dz = size_t(D);

    // The residual stream of every fed token, [n][D].
    std::vector<std::vector<double>> x(static_cast<size_t>(n), std::vector<double>(Dz));
    for (int t = 0; t < n; ++t)
        for (int i = 0; i < D; ++i) x[size_t(t)][size_t(i)] = w.embed[size_t(tokens[size_t(t)]) * Dz + size_t(i)];

    std::vector<double> h(Dz);
    for (int l = 0; l < c.layers; ++l) {
        const size_t L = size_t(l);
        const float* attn_norm = w.attn_norm.data() + L * Dz;
        const float* wq = w.wq.data() + L * size_t(q_dim) * Dz;
        const float* wk = w.wk.data() + L * size_t(kv_dim) * Dz;
        const float* wv = w.wv.data() + L * size_t(kv_dim) * Dz;
        const float* wo = w.wo.data() + L * Dz * size_t(q_dim);
        const float* ffn_norm = w.ffn_norm.data() + L * Dz;
        const float* w_gate = w.w_gate.data() + L * size_t(F) * Dz;
        const float* w_up = w.w_up.data() + L * size_t(F) * Dz;
        const float* w_down = w.w_down.data() + L * Dz * size_t(F);
        std::vector<double>& kc = k_cache_[L];
        std::vector<double>& vc = v_cache_[L];

        // 1. Q, K, V of every token; K and V go to the cache at the token's position.
        std::vector<std::vector<double>> q(static_cast<size_t>(n));
        for (int t = 0; t < n; ++t) {
            const int pos = length_ + t;
            rmsnorm_row(x[size_t(t)].data(), attn_norm, D, c.norm_eps, h.data());
            q[size_t(t)] = matvec(wq, q_dim, D, h);
            std::vector<double> k = matvec(wk, kv_dim, D, h), v = matvec(wv, kv_dim, D, h);
            rope_token(q[size_t(t)].data(), pos, Hq, d, c.rope_theta);
            rope_token(k.data(), pos, Hkv, d, c.rope_theta);
            for (int hk = 0; round_kv_ && hk < Hkv; ++hk) {  // what the cache holds of each head's row
                round_kv_(std::span(k).subspan(size_t(hk) * d, size_t(d)));
                round_kv_(std::span(v).subspan(size_t(hk) * d, size_t(d)));
            }
            std::copy(k.begin(), k.end(), kc.begin() + std::ptrdiff_t(size_t(pos) * kv_dim));
            std::copy(v.begin(), v.end(), vc.begin() + std::ptrdiff_t(size_t(pos) * kv_dim));
        }
        // 2. Causal attention over positions 0 .. pos, the output projection, the residual.
        std::vector<double> att(static_cast<size_t>(q_dim));
        for (int t = 0; t < n; ++t) {
            const int len = length_ + t + 1;
            for (int hq = 0; hq < Hq; ++hq) {
                const size_t kv_head = size_t(hq / group) * d;  // the cache is [S_max, Hkv, d]
                attend(q[size_t(t)].data() + size_t(hq) * d, kc.data() + kv_head, vc.data() + kv_head, len,
                       size_t(kv_dim), d, att.data() + size_t(hq) * d);
            }
            const std::vector<double> o = matvec(wo, D, q_dim, att);
            for (size_t i = 0; i < Dz; ++i) x[size_t(t)][i] += o[i];
        }
        // 3. The SwiGLU feed-forward block, the residual.
        for (int t = 0; t < n; ++t) {
            rmsnorm_row(x[size_t(t)].data(), ffn_norm, D, c.norm_eps, h.data());
            std::vector<double> a = matvec(w_gate, F, D, h);
            const std::vector<double> up = matvec(w_up, F, D, h);
            for (size_t i = 0; i < a.size(); ++i) a[i] = silu(a[i]) * up[i];
            const std::vector<double> y = matvec(w_down, D, F, a);
            for (size_t i = 0; i < Dz; ++i) x[size_t(t)][i] += y[i];
        }
    }
    length_ += n;

    // The final norm and the LM head of every token.
    std::vector<std::vector<double>> logits(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
        rmsnorm_row(x[size_t(t)].data(), w.final_norm.data(), D, c.norm_eps, h.data());
        logits[size_t(t)] = matvec(w.lm_head.data(), c.vocab, D, h);
    }
    return logits;
}

}  // namespace pd::reference
