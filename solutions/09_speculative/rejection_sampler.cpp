/// @file rejection_sampler.cpp
/// @brief Lab 09: the rejection sampler of speculative decoding (Leviathan et al. 2023; Chen et
/// al. 2023). A verify step has the target's distributions at the k + 1 positions of a draft
/// (p), the draft's distributions it drew its tokens from (q), the k draft tokens and k + 1
/// uniforms; it returns how many draft tokens are kept and the token the target adds after them.
/// The tokens a step adds are distributed exactly as the target's own samples, whatever q is:
/// keeping x with probability min(1, p(x) / q(x)) leaves min(p, q) of the mass, and the residual
/// max(p - q, 0), normalized, is the rest of p.
///
/// Host C++, built into pd_serving from the lab tree (like lab 05's step builder), so the
/// speculative decoding tests and `ch09_speculative` run this code. The checks of the arguments
/// are done here, before the lab's part; sample_index() (pd/serving/speculative.hpp) makes every
/// draw.
#include "pd/serving/speculative.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace pd::serving {

// [rejection_sample]
SpecVerdict rejection_sample(std::span<const float> p, std::span<const float> q, std::span<const int> draft, int V,
                             std::span<const float> u) {
    const int k = static_cast<int>(draft.size());
    const std::size_t v = V > 0 ? static_cast<std::size_t>(V) : 0;
    if (V < 1) throw std::invalid_argument("rejection_sample: V = " + std::to_string(V) + " must be >= 1");
    if (p.size() != (draft.size() + 1) * v || q.size() != draft.size() * v || u.size() != draft.size() + 1)
        throw std::invalid_argument(
            "rejection_sample: with k = " + std::to_string(k) + " draft tokens and V = " + std::to_string(V) +
            ", p must have (k + 1) * V values (has " + std::to_string(p.size()) + "), q k * V (has " +
            std::to_string(q.size()) + ") and u k + 1 (has " + std::to_string(u.size()) + ")");
    for (int i = 0; i < k; ++i)
        if (draft[i] < 0 || draft[i] >= V)
            throw std::invalid_argument("rejection_sample: draft[" + std::to_string(i) + "] = " +
                                        std::to_string(draft[i]) + " must be in [0, V = " + std::to_string(V) + ")");
    // row(m, i): row i of the row-major [rows, V] matrix m
    const auto row = [v](std::span<const float> m, int i) { return m.subspan(static_cast<std::size_t>(i) * v, v); };
    std::vector<double> w(v);  // the weights of the draw: a residual, or the last row of p
    // 1. Each draft token in turn: kept with probability min(1, p/q); the first one rejected ends
    // the step with a token drawn from the residual.
    // BEGIN LAB: 1. for i = 0 ... k - 1, with x = draft[i], pi = row(p, i), qi = row(q, i): keep x when u[i] * qi[x] < pi[x] (the product in double); otherwise set w[j] = max(pi[j] - qi[j], 0) for every j (in double) and return {i, sample_index(w, u[k])} (~7 lines)
    for (int i = 0; i < k; ++i) {
        const std::span<const float> pi = row(p, i), qi = row(q, i);
        const int x = draft[i];
        if (double(u[i]) * double(qi[x]) < double(pi[x])) continue;  // kept: p(x) / q(x) > u
        for (std::size_t j = 0; j < v; ++j) w[j] = std::max(double(pi[j]) - double(qi[j]), 0.0);
        return {i, sample_index(w, u[k])};
    }
    // END LAB
    // 2. Every draft token kept: the target's last row gives a bonus token.
    // BEGIN LAB: 2. all k kept: set w to row(p, k) (in double) and return {k, sample_index(w, u[k])} (~3 lines)
    //~ (void)row;
    //~ (void)w;
    //~ return {};
    const std::span<const float> pk = row(p, k);
    for (std::size_t j = 0; j < v; ++j) w[j] = pk[j];
    return {k, sample_index(w, u[k])};
    // END LAB
}
// [rejection_sample]

}  // namespace pd::serving
