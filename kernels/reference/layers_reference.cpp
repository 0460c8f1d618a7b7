/// @file layers_reference.cpp
/// @brief Chapter 04's references of the small layers: RMSNorm, RoPE, SwiGLU, argmax, and chapter
/// 09's sampling rule, on the CPU in double.
#include "layers_reference.hpp"

#include "reference_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

namespace pd::reference {

using namespace detail;
using std::size_t;

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

SampledRow sample_row(std::span<const float> logits, double temperature, int top_k, double top_p, double u) {
    const int V = int(logits.size());
    require_positive("sample_row", "V", V);
    if (!(temperature > 0)) fail("sample_row", "temperature must be > 0 (greedy is argmax_rows)");
    if (top_k < 0 || top_k > V) fail("sample_row", "top_k must be in 0 .. V");
    if (!(top_p > 0 && top_p <= 1)) fail("sample_row", "top_p must be in (0, 1]");
    if (!(u >= 0 && u < 1)) fail("sample_row", "u must be in [0, 1)");
    const double m = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(static_cast<size_t>(V));
    for (int j = 0; j < V; ++j) p[size_t(j)] = std::exp((logits[size_t(j)] - m) / temperature);
    // the values in decreasing order (stable: equal values by index)
    std::vector<int> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    double cut = 0;  // keep p >= cut
    if (top_k > 0 && top_k < V) cut = p[size_t(order[size_t(top_k - 1)])];
    if (top_p < 1) {
        double kept = 0;
        for (int j : order)
            if (p[size_t(j)] >= cut) kept += p[size_t(j)];
        double mass = 0;
        for (int j : order) {  // the largest values until their mass reaches top_p of the kept
            mass += p[size_t(j)];
            if (mass >= top_p * kept) {
                cut = p[size_t(j)];
                break;
            }
        }
    }
    SampledRow out;
    double total = 0;
    for (double& x : p) total += x >= cut ? x : (x = 0);
    const double target = u * total;
    double acc = 0;
    out.margin = 1;
    for (int j = 0; j < V; ++j) {
        if (p[size_t(j)] == 0) continue;
        const double before = acc;
        acc += p[size_t(j)];
        if (out.token < 0 && target < acc) out.token = j;
        out.margin = std::min({out.margin, std::abs(target - before) / total, std::abs(target - acc) / total});
    }
    for (double& x : p) x /= total;
    out.probs = std::move(p);
    return out;
}

}  // namespace pd::reference
