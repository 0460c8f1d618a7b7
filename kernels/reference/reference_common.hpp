/// @file reference_common.hpp
/// @brief The loops the CPU references share (internal to kernels/reference/): argument checks,
/// one row's RMSNorm, one token's RoPE, SiLU, a matrix-vector product and one query's attention,
/// all in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace pd::reference::detail {

using std::size_t;

[[noreturn]] inline void fail(const std::string& who, const std::string& what) {
    throw std::invalid_argument("reference::" + who + ": " + what);
}

inline void require_positive(const char* who, const char* name, int v) {
    if (v < 1) fail(who, std::string(name) + " must be >= 1, got " + std::to_string(v));
}

inline void require_size(const char* who, const char* name, size_t got, size_t expected) {
    if (got != expected)
        fail(who,
             std::string(name) + " holds " + std::to_string(got) + " values, expected " + std::to_string(expected));
}

/// y = w * x / sqrt(mean(x^2) + eps) for one row of @p D values.
template <typename X>
inline void rmsnorm_row(const X* x, const float* w, int D, double eps, double* y) {
    double sum = 0;
    for (int i = 0; i < D; ++i) sum += double(x[i]) * double(x[i]);
    const double inv_rms = 1.0 / std::sqrt(sum / D + eps);
    for (int i = 0; i < D; ++i) y[i] = double(w[i]) * double(x[i]) * inv_rms;
}

/// Turns the @p H heads of one token (@p x, [H, d], in place) by position @p pos.
inline void rope_token(double* x, int pos, int H, int d, double theta) {
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

inline double silu(double g) {
    return g / (1.0 + std::exp(-g));
}

/// out[r] = sum_j W[r][j] in[j] for the [rows, cols] matrix @p w (row-major).
inline std::vector<double> matvec(const float* w, int rows, int cols, const std::vector<double>& in) {
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
inline void attend(const double* q, const K* k, const K* v, int len, size_t stride, int d, double* out) {
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

}  // namespace pd::reference::detail
