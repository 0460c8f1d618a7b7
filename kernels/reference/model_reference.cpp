/// @file model_reference.cpp
/// @brief Chapter 04's references: RMSNorm, RoPE, SwiGLU, argmax, decode attention and the
/// whole model, on the CPU in double.
#include "model_reference.hpp"

#include "../attention/attention.hpp"  // the mask rule, allowed_keys(), shared with the kernels
#include "pd/rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace pd::reference {

namespace {

using std::size_t;

[[noreturn]] void fail(const std::string& who, const std::string& what) {
    throw std::invalid_argument("reference::" + who + ": " + what);
}

void require_positive(const char* who, const char* name, int v) {
    if (v < 1) fail(who, std::string(name) + " must be >= 1, got " + std::to_string(v));
}

void require_size(const char* who, const char* name, size_t got, size_t expected) {
    if (got != expected)
        fail(who,
             std::string(name) + " holds " + std::to_string(got) + " values, expected " + std::to_string(expected));
}

/// y = w * x / sqrt(mean(x^2) + eps) for one row of @p D values.
template <typename X>
void rmsnorm_row(const X* x, const float* w, int D, double eps, double* y) {
    double sum = 0;
    for (int i = 0; i < D; ++i) sum += double(x[i]) * double(x[i]);
    const double inv_rms = 1.0 / std::sqrt(sum / D + eps);
    for (int i = 0; i < D; ++i) y[i] = double(w[i]) * double(x[i]) * inv_rms;
}

/// Turns the @p H heads of one token (@p x, [H, d], in place) by position @p pos.
void rope_token(double* x, int pos, int H, int d, double theta) {
    for (int i = 0; i < d / 2; ++i) {
        const double a = pos * std::pow(theta, -2.0 * i / d);
        const double c = std::cos(a), s = std::sin(a);
        for (int h = 0; h < H; ++h) {
            double* pair = x + size_t(h) * d + 2 * i;
            const double x0 = pair[0], x1 = pair[1];
            pair[0] = x0 * c - x1 * s;
            pair[1] = x0 * s + x1 * c;
        }
    }
}

double silu(double g) {
    return g / (1.0 + std::exp(-g));
}

/// out[r] = sum_j W[r][j] in[j] for the [rows, cols] matrix @p w (row-major).
std::vector<double> matvec(const float* w, int rows, int cols, const std::vector<double>& in) {
    std::vector<double> out(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
        const float* wr = w + size_t(r) * cols;
        double acc = 0;
        for (int j = 0; j < cols; ++j) acc += double(wr[j]) * in[size_t(j)];
        out[size_t(r)] = acc;
    }
    return out;
}

/// softmax(q . k_j * scale over j < len) . v_j for one query of @p d values; k_j = k + j *
/// stride and v_j = v + j * stride.
template <typename K>
void attend(const double* q, const K* k, const K* v, int len, size_t stride, int d, double* out) {
    const double scale = 1.0 / std::sqrt(double(d));
    std::vector<double> p(static_cast<size_t>(len));
    double max_score = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < len; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += q[c] * double(k[j * stride + c]);
        p[size_t(j)] = dot * scale;
        max_score = std::max(max_score, p[size_t(j)]);
    }
    double sum = 0;
    for (double& x : p) sum += (x = std::exp(x - max_score));
    for (int c = 0; c < d; ++c) out[c] = 0;
    for (int j = 0; j < len; ++j)
        for (int c = 0; c < d; ++c) out[c] += p[size_t(j)] / sum * double(v[j * stride + c]);
}

}  // namespace

std::vector<double> rmsnorm(std::span<const float> x, std::span<const float> w, int T, int D, double eps) {
    require_positive("rmsnorm", "T", T);
    require_positive("rmsnorm", "D", D);
    require_size("rmsnorm", "x", x.size(), size_t(T) * D);
    require_size("rmsnorm", "w", w.size(), size_t(D));
    if (!(eps >= 0)) fail("rmsnorm", "eps must be >= 0");
    std::vector<double> y(x.size());
    for (int t = 0; t < T; ++t) rmsnorm_row(x.data() + size_t(t) * D, w.data(), D, eps, y.data() + size_t(t) * D);
    return y;
}

std::vector<double> rope(std::span<const float> x, std::span<const int> positions, int T, int H, int d, double theta) {
    require_positive("rope", "T", T);
    require_positive("rope", "H", H);
    if (d < 2 || d % 2 != 0) fail("rope", "d must be even and >= 2, got " + std::to_string(d));
    if (!(theta > 0)) fail("rope", "theta must be > 0");
    require_size("rope", "x", x.size(), size_t(T) * H * d);
    require_size("rope", "positions", positions.size(), size_t(T));
    std::vector<double> y(x.begin(), x.end());
    for (int t = 0; t < T; ++t) rope_token(y.data() + size_t(t) * H * d, positions[size_t(t)], H, d, theta);
    return y;
}

std::vector<double> swiglu(std::span<const float> gate, std::span<const float> up) {
    require_size("swiglu", "up", up.size(), gate.size());
    std::vector<double> out(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) out[i] = silu(gate[i]) * double(up[i]);
    return out;
}

std::vector<int> argmax_rows(std::span<const float> logits, int B, int V) {
    require_positive("argmax_rows", "B", B);
    require_positive("argmax_rows", "V", V);
    require_size("argmax_rows", "logits", logits.size(), size_t(B) * V);
    std::vector<int> out(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
        const float* row = logits.data() + size_t(b) * V;
        int best = 0;
        for (int j = 1; j < V; ++j)
            if (row[j] > row[best]) best = j;  // strictly greater: the first of equal values stays
        out[size_t(b)] = best;
    }
    return out;
}

std::vector<double> decode_attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                     std::span<const int> kv_len, int batch, int heads, int kv_heads, int head_dim,
                                     int max_seq) {
    const char* who = "decode_attention";
    require_positive(who, "batch", batch);
    require_positive(who, "heads", heads);
    require_positive(who, "kv_heads", kv_heads);
    require_positive(who, "head_dim", head_dim);
    require_positive(who, "max_seq", max_seq);
    if (heads % kv_heads != 0)
        fail(who, "heads = " + std::to_string(heads) + " must be a multiple of kv_heads = " + std::to_string(kv_heads));
    const size_t d = size_t(head_dim);
    require_size(who, "q", q.size(), size_t(batch) * heads * d);
    require_size(who, "k", k.size(), size_t(batch) * kv_heads * max_seq * d);
    require_size(who, "v", v.size(), size_t(batch) * kv_heads * max_seq * d);
    require_size(who, "kv_len", kv_len.size(), size_t(batch));
    std::vector<double> out(q.size()), qd(d);
    const int group = heads / kv_heads;
    for (int b = 0; b < batch; ++b) {
        const int len = kv_len[size_t(b)];
        if (len < 1 || len > max_seq)
            fail(who, "kv_len[" + std::to_string(b) + "] = " + std::to_string(len) +
                          " must be in 1 .. max_seq = " + std::to_string(max_seq));
        for (int h = 0; h < heads; ++h) {
            const size_t row = size_t(b) * heads + h;
            const size_t cache = (size_t(b) * kv_heads + h / group) * max_seq * d;
            std::copy_n(q.data() + row * d, d, qd.begin());
            attend(qd.data(), k.data() + cache, v.data() + cache, len, d, head_dim, out.data() + row * d);
        }
    }
    return out;
}

// ---- the model ------------------------------------------------------------------------------

ModelReference::ModelReference(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w) {
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

// ---- varlen attention (chapter 05) ---------------------------------------------------------

std::vector<double> varlen_attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                     std::span<const int> q_start, std::span<const int> q_len,
                                     std::span<const int> kv_len, std::span<const int> slot, int heads, int kv_heads,
                                     int head_dim, int max_seq) {
    const char* who = "varlen_attention";
    require_positive(who, "heads", heads);
    require_positive(who, "kv_heads", kv_heads);
    require_positive(who, "head_dim", head_dim);
    require_positive(who, "max_seq", max_seq);
    if (heads % kv_heads != 0)
        fail(who, "heads = " + std::to_string(heads) + " must be a multiple of kv_heads = " + std::to_string(kv_heads));
    const size_t d = size_t(head_dim), row_size = size_t(heads) * d, slot_size = size_t(kv_heads) * max_seq * d;
    if (q.size() % row_size != 0)
        fail(who, "q holds " + std::to_string(q.size()) + " values, not a multiple of heads * head_dim");
    if (k.size() == 0 || k.size() % slot_size != 0)
        fail(who, "k holds " + std::to_string(k.size()) + " values, not a positive multiple of kv_heads * max_seq * d");
    require_size(who, "v", v.size(), k.size());
    const size_t S = q_start.size(), T = q.size() / row_size, slots = k.size() / slot_size;
    require_positive(who, "sequences", int(S));
    require_size(who, "q_len", q_len.size(), S);
    require_size(who, "kv_len", kv_len.size(), S);
    require_size(who, "slot", slot.size(), S);
    std::vector<double> out(q.size(), 0.0), qd(d);
    const int group = heads / kv_heads;
    for (size_t s = 0; s < S; ++s) {
        const int n = q_len[s], len = kv_len[s], first = q_start[s], at = slot[s];
        // "name[s] = value rule": the sequence and the value that are out of range
        const auto bad = [&](const char* name, int value, const std::string& rule) {
            fail(who, std::string(name).append("[").append(std::to_string(s)).append("] = ")
                          .append(std::to_string(value)).append(rule));
        };
        if (len < 1 || len > max_seq) bad("kv_len", len, " must be in 1 .. max_seq = " + std::to_string(max_seq));
        if (n < 1 || n > len) bad("q_len", n, " must be in 1 .. kv_len = " + std::to_string(len));
        if (first < 0 || size_t(first) + size_t(n) > T)
            bad("q_start", first, " puts its rows outside the " + std::to_string(T) + " rows of q");
        if (at < 0 || size_t(at) >= slots) bad("slot", at, " must be in 0 .. " + std::to_string(slots - 1));
        for (int i = 0; i < n; ++i)
            for (int h = 0; h < heads; ++h) {
                const size_t row = (size_t(first) + size_t(i)) * heads + size_t(h);
                const size_t cache = (size_t(at) * kv_heads + size_t(h / group)) * max_seq * d;
                std::copy_n(q.data() + row * d, d, qd.begin());
                attend(qd.data(), k.data() + cache, v.data() + cache, kernels::attention::allowed_keys(i, n, len), d,
                       head_dim, out.data() + row * d);
            }
    }
    return out;
}

// [paged_layout]
std::vector<int> shuffled_block_table(std::span<const int> lens, int block_size, int num_blocks, int max_blocks,
                                      std::uint64_t seed) {
    if (block_size < 1 || num_blocks < 1 || max_blocks < 1)
        throw std::invalid_argument("shuffled_block_table: block_size, num_blocks and max_blocks must be >= 1");
    std::vector<int> pool(static_cast<size_t>(num_blocks));
    for (int i = 0; i < num_blocks; ++i) pool[size_t(i)] = i;
    Rng rng(derive_seed(seed, 7));
    for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[size_t(rng.integer(0, int(i) - 1))]);
    std::vector<int> table(lens.size() * size_t(max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
        const int blocks = (lens[s] + block_size - 1) / block_size;
        if (lens[s] < 0 || blocks > max_blocks)
            throw std::invalid_argument("shuffled_block_table: context " + std::to_string(lens[s]) + " of sequence " +
                                        std::to_string(s) + " needs more than max_blocks = " + std::to_string(max_blocks));
        for (int i = 0; i < blocks; ++i) {
            if (next == pool.size())
                throw std::invalid_argument("shuffled_block_table: the contexts need more than num_blocks = " +
                                            std::to_string(num_blocks) + " blocks");
            table[s * size_t(max_blocks) + size_t(i)] = pool[next++];
        }
    }
    return table;
}

std::vector<float> scatter_to_blocks(std::span<const float> contiguous, std::span<const int> lens,
                                     std::span<const int> table, int kv_heads, int head_dim, int max_seq,
                                     int block_size, int max_blocks, int total_blocks, int first_block, float fill) {
    const size_t B = lens.size(), Hkv = size_t(kv_heads), d = size_t(head_dim), S = size_t(max_seq);
    if (contiguous.size() != B * Hkv * S * d || table.size() != B * size_t(max_blocks))
        throw std::invalid_argument("scatter_to_blocks: the cache must be [B, Hkv, S_max, d] and the table [B, max_blocks]");
    const size_t block = Hkv * size_t(block_size) * d;
    std::vector<float> paged(size_t(total_blocks) * block, fill);
    for (size_t b = 0; b < B; ++b)
        for (int p = 0; p < lens[b]; ++p) {
            const long long physical = first_block + table[b * size_t(max_blocks) + size_t(p / block_size)];
            if (p >= max_seq || physical < 0 || physical >= total_blocks)
                throw std::invalid_argument("scatter_to_blocks: position " + std::to_string(p) + " of sequence " +
                                            std::to_string(b) + " has no block of the result");
            for (size_t h = 0; h < Hkv; ++h) {
                const size_t from = ((b * Hkv + h) * S + size_t(p)) * d;
                const size_t to = ((size_t(physical) * Hkv + h) * size_t(block_size) + size_t(p % block_size)) * d;
                std::copy_n(contiguous.begin() + std::ptrdiff_t(from), d, paged.begin() + std::ptrdiff_t(to));
            }
        }
    return paged;
}
// [paged_layout]

}  // namespace pd::reference
