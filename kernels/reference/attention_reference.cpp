// CPU reference of naive attention: plain loops in double.
#include "attention_reference.hpp"

#include "../attention/attention.hpp"  // the mask rule, allowed_keys(), shared with the kernels

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pd::reference {

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
double score(std::span<const float> q, std::span<const float> k, std::size_t bh, int i, int j, int q_len,
             int kv_len, int head_dim) {
    double dot = 0;
    for (int c = 0; c < head_dim; ++c)
        dot += double(q[(bh * q_len + i) * head_dim + c]) * double(k[(bh * kv_len + j) * head_dim + c]);
    return dot / std::sqrt(double(head_dim));
}
}  // namespace

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

std::vector<double> attention_probabilities(std::span<const float> q, std::span<const float> k, int batch,
                                            int heads, int q_len, int kv_len, int head_dim, bool causal) {
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

std::vector<double> attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                              int batch, int heads, int q_len, int kv_len, int head_dim, bool causal) {
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

}  // namespace pd::reference
