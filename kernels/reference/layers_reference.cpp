/// @file layers_reference.cpp
/// @brief Chapter 04's references of the small layers: RMSNorm, RoPE, SwiGLU, argmax, on the CPU
/// in double.
#include "layers_reference.hpp"

#include "reference_common.hpp"

#include <cstddef>

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

}  // namespace pd::reference
