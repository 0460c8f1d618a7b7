// CPU reference of naive attention: plain loops in double.
#include "attention_reference.hpp"

#include "../attention/attention.hpp"  // the mask rule, allowed_keys(), shared with the kernels
#include "reference_common.hpp"

#include "pd/half.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::reference {

using namespace detail;

namespace {
void check_sizes(std::span<const float> q, std::span<const float> k, int batch, int heads, int q_len, int kv_len,
                 int head_dim) {
    if (q_len < 1 || kv_len < q_len || head_dim < 1 || batch < 1 || heads < 1)
        throw std::invalid_argument("reference::attention: need 1 <= Sq <= Sk and positive sizes");
    const std::size_t bh_count = std::size_t(batch) * heads;
    if (q.size() != bh_count * q_len * head_dim || k.size() != bh_count * kv_len * head_dim)
        throw std::invalid_argument("reference::attention: tensor sizes do not match the shape");
}

/// q_i . k_j / sqrt(d) for query row @p i of head @p bh, in double.
double score(std::span<const float> q, std::span<const float> k, std::size_t bh, int i, int j, int q_len, int kv_len,
             int head_dim) {
    double dot = 0;
    for (int c = 0; c < head_dim; ++c)
        dot += double(q[(bh * q_len + i) * head_dim + c]) * double(k[(bh * kv_len + j) * head_dim + c]);
    return dot / std::sqrt(double(head_dim));
}
}  // namespace

std::vector<double> attention_gqa(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                  int batch, int heads, int kv_heads, int q_len, int kv_len, int head_dim, bool causal,
                                  std::vector<double>* lse, bool bf16_probabilities) {
    if (q_len < 1 || kv_len < q_len || head_dim < 1 || batch < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0)
        throw std::invalid_argument("reference::attention_gqa: need 1 <= Sq <= Sk, positive sizes, H % Hkv == 0");
    const std::size_t d = std::size_t(head_dim), q_n = std::size_t(batch) * heads * q_len * d,
                      kv_n = std::size_t(batch) * kv_heads * kv_len * d;
    if (q.size() != q_n || k.size() != kv_n || v.size() != kv_n)
        throw std::invalid_argument("reference::attention_gqa: tensor sizes do not match the shape");
    std::vector<double> out(q_n, 0.0), e(static_cast<std::size_t>(kv_len));
    if (lse) lse->assign(std::size_t(batch) * heads * q_len, 0.0);
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h) {
            const std::size_t kvh = std::size_t(b) * kv_heads + h / (heads / kv_heads);
            for (int i = 0; i < q_len; ++i) {
                const std::size_t qi = (std::size_t(b) * heads + h) * q_len + i;
                const int keys = kernels::attention::allowed_keys(i, q_len, kv_len, causal);
                double m = -INFINITY;
                for (int j = 0; j < keys; ++j) {
                    double dot = 0;
                    for (std::size_t c = 0; c < d; ++c) dot += double(q[qi * d + c]) * k[(kvh * kv_len + j) * d + c];
                    e[std::size_t(j)] = dot / std::sqrt(double(head_dim));
                    m = std::max(m, e[std::size_t(j)]);
                }
                double sum = 0;
                for (int j = 0; j < keys; ++j) sum += (e[std::size_t(j)] = std::exp(e[std::size_t(j)] - m));
                for (int j = 0; j < keys; ++j) {
                    const double p = bf16_probabilities
                                         ? double(to_float(from_float<__nv_bfloat16>(float(e[std::size_t(j)]))))
                                         : e[std::size_t(j)];
                    for (std::size_t c = 0; c < d; ++c) out[qi * d + c] += p / sum * v[(kvh * kv_len + j) * d + c];
                }
                if (lse) (*lse)[qi] = m + std::log(sum);
            }
        }
    return out;
}

void attention_gqa_rows(std::span<const float> q, std::span<const float> k, std::span<const float> v, int batch,
                        int heads, int kv_heads, int q_len, int kv_len, int head_dim, bool causal,
                        std::span<const std::size_t> rows, std::vector<double>& out, std::vector<double>& lse,
                        bool bf16_probabilities) {
    const std::size_t d = std::size_t(head_dim), group = std::size_t(heads / std::max(kv_heads, 1));
    for (std::size_t row : rows) {
        if (row >= std::size_t(batch) * heads * q_len)
            throw std::invalid_argument("reference::attention_gqa_rows: row " + std::to_string(row) +
                                        " is past B H Sq");
        const std::size_t kv_head = row / std::size_t(q_len) / group;  // (b H + h) / group = b Hkv + h / group
        const std::size_t keys =
            std::size_t(kernels::attention::allowed_keys(int(row % std::size_t(q_len)), q_len, kv_len, causal));
        const auto keys_of = [&](std::span<const float> t) { return t.subspan(kv_head * kv_len * d, keys * d); };
        std::vector<double> l;
        const std::vector<double> o = attention_gqa(q.subspan(row * d, d), keys_of(k), keys_of(v), 1, 1, 1, 1,
                                                    int(keys), head_dim, false, &l, bf16_probabilities);
        out.insert(out.end(), o.begin(), o.end());
        lse.push_back(l.front());
    }
}

std::vector<std::size_t> attention_check_rows(std::size_t batch_heads, int q_len, bool all) {
    std::vector<std::size_t> rows;
    const std::size_t n = std::size_t(q_len);
    if (all) {
        for (std::size_t r = 0; r < batch_heads * n; ++r) rows.push_back(r);
        return rows;
    }
    for (std::size_t bh : {std::size_t(0), batch_heads - 1})
        for (std::size_t i = 0; i < 64; ++i) rows.push_back(bh * n + (n == 1 ? 0 : i * (n - 1) / 63));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

std::vector<double> attention_scores(std::span<const float> q, std::span<const float> k, int batch, int heads,
                                     int q_len, int kv_len, int head_dim) {
    check_sizes(q, k, batch, heads, q_len, kv_len, head_dim);
    const std::size_t bh_count = std::size_t(batch) * heads;
    std::vector<double> s(bh_count * q_len * kv_len);
    for (std::size_t bh = 0; bh < bh_count; ++bh)
        for (int i = 0; i < q_len; ++i)
            for (int j = 0; j < kv_len; ++j)
                s[(bh * q_len + i) * kv_len + j] = score(q, k, bh, i, j, q_len, kv_len, head_dim);
    return s;
}

std::vector<double> attention_probabilities(std::span<const float> q, std::span<const float> k, int batch, int heads,
                                            int q_len, int kv_len, int head_dim, bool causal) {
    check_sizes(q, k, batch, heads, q_len, kv_len, head_dim);
    const std::size_t bh_count = std::size_t(batch) * heads;
    std::vector<double> p(bh_count * q_len * kv_len, 0.0);
    std::vector<double> row(kv_len);
    for (std::size_t bh = 0; bh < bh_count; ++bh) {
        for (int i = 0; i < q_len; ++i) {
            const int keys = kernels::attention::allowed_keys(i, q_len, kv_len, causal);
            double m = -INFINITY;
            for (int j = 0; j < keys; ++j) {
                row[j] = score(q, k, bh, i, j, q_len, kv_len, head_dim);
                m = std::max(m, row[j]);
            }
            double sum = 0;
            for (int j = 0; j < keys; ++j) sum += (row[j] = std::exp(row[j] - m));
            for (int j = 0; j < keys; ++j) p[(bh * q_len + i) * kv_len + j] = row[j] / sum;
        }
    }
    return p;
}

std::vector<double> attention(std::span<const float> q, std::span<const float> k, std::span<const float> v, int batch,
                              int heads, int q_len, int kv_len, int head_dim, bool causal) {
    const std::vector<double> p = attention_probabilities(q, k, batch, heads, q_len, kv_len, head_dim, causal);
    const std::size_t bh_count = std::size_t(batch) * heads;
    if (v.size() != bh_count * kv_len * head_dim)
        throw std::invalid_argument("reference::attention: v size does not match the shape");
    std::vector<double> out(bh_count * q_len * head_dim, 0.0);
    for (std::size_t bh = 0; bh < bh_count; ++bh)
        for (int i = 0; i < q_len; ++i)
            for (int j = 0; j < kv_len; ++j) {
                const double pij = p[(bh * q_len + i) * kv_len + j];
                if (pij == 0.0) continue;
                for (int c = 0; c < head_dim; ++c)
                    out[(bh * q_len + i) * head_dim + c] += pij * double(v[(bh * kv_len + j) * head_dim + c]);
            }
    return out;
}

// ---- decode attention over a KV cache (chapter 04) --------------------------------------------

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

// ---- varlen attention of a mixed batch (chapter 05) -------------------------------------------

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
            fail(who, std::string(name)
                          .append("[")
                          .append(std::to_string(s))
                          .append("] = ")
                          .append(std::to_string(value))
                          .append(rule));
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

}  // namespace pd::reference
