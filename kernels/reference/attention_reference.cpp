// CPU reference of naive attention: plain loops in double.
#include "attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pd::reference {

std::vector<double> attention_probabilities(std::span<const float> q, std::span<const float> k, int batch,
                                            int heads, int q_len, int kv_len, int head_dim, bool causal) {
    if (q_len < 1 || kv_len < q_len || head_dim < 1 || batch < 1 || heads < 1)
        throw std::invalid_argument("reference::attention: need 1 <= Sq <= Sk and positive sizes");
    const std::size_t bh_count = std::size_t(batch) * heads;
    if (q.size() != bh_count * q_len * head_dim || k.size() != bh_count * kv_len * head_dim)
        throw std::invalid_argument("reference::attention: tensor sizes do not match the shape");
    const double scale = 1.0 / std::sqrt(double(head_dim));
    std::vector<double> p(bh_count * q_len * kv_len, 0.0);
    std::vector<double> row(kv_len);
    for (std::size_t bh = 0; bh < bh_count; ++bh) {
        for (int i = 0; i < q_len; ++i) {
            const int keys = causal ? kv_len - q_len + i + 1 : kv_len;
            double m = -INFINITY;
            for (int j = 0; j < keys; ++j) {
                double dot = 0;
                for (int c = 0; c < head_dim; ++c)
                    dot += double(q[(bh * q_len + i) * head_dim + c]) * double(k[(bh * kv_len + j) * head_dim + c]);
                row[j] = dot * scale;
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
