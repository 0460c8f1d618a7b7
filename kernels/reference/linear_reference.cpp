/// @file linear_reference.cpp
/// @brief Y = X W^T on the CPU in double.
#include "linear_reference.hpp"

#include "pd/half.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::reference {

namespace {

template <typename T>
std::vector<double> rows_of(std::span<const T> x, std::span<const T> w, int m, int n, int k,
                            std::span<const std::size_t> rows, std::vector<double>* magnitudes = nullptr) {
    if (m < 1 || n < 1 || k < 1)
        throw std::invalid_argument("reference::linear: M, N, K must be >= 1 (got " + std::to_string(m) + ", " +
                                    std::to_string(n) + ", " + std::to_string(k) + ")");
    if (x.size() != std::size_t(m) * k || w.size() != std::size_t(n) * k)
        throw std::invalid_argument("reference::linear: x must hold M*K and w N*K elements");
    const std::size_t kk = std::size_t(k);
    // Convert W once: the inner loop then reads doubles.
    std::vector<double> wd(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) wd[i] = double(to_float(w[i]));
    std::vector<double> y(rows.size() * std::size_t(n));
    if (magnitudes) magnitudes->assign(y.size(), 0.0);
    std::vector<double> xr(kk);
    for (std::size_t r = 0; r < rows.size(); ++r) {
        if (rows[r] >= std::size_t(m)) throw std::invalid_argument("reference::linear_rows: row index >= M");
        for (std::size_t c = 0; c < kk; ++c) xr[c] = double(to_float(x[rows[r] * kk + c]));
        for (std::size_t j = 0; j < std::size_t(n); ++j) {
            const double* wr = wd.data() + j * kk;
            double acc = 0, mag = 0;  // two independent chains: the second costs next to nothing
            for (std::size_t c = 0; c < kk; ++c) {
                const double p = xr[c] * wr[c];
                acc += p;
                mag += std::fabs(p);
            }
            y[r * std::size_t(n) + j] = acc;
            if (magnitudes) (*magnitudes)[r * std::size_t(n) + j] = mag;
        }
    }
    return y;
}

template <typename T>
std::vector<double> all_rows(std::span<const T> x, std::span<const T> w, int m, int n, int k,
                             std::vector<double>* magnitudes = nullptr) {
    std::vector<std::size_t> rows(std::size_t(m > 0 ? m : 0));
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
    return rows_of<T>(x, w, m, n, k, rows, magnitudes);
}

}  // namespace

std::vector<double> linear(std::span<const float> x, std::span<const float> w, int m, int n, int k,
                           std::vector<double>* magnitudes) {
    return all_rows<float>(x, w, m, n, k, magnitudes);
}

std::vector<double> linear(std::span<const __nv_bfloat16> x, std::span<const __nv_bfloat16> w, int m, int n, int k) {
    return all_rows<__nv_bfloat16>(x, w, m, n, k);
}

std::vector<double> linear_rows(std::span<const float> x, std::span<const float> w, int m, int n, int k,
                                std::span<const std::size_t> rows, std::vector<double>* magnitudes) {
    return rows_of<float>(x, w, m, n, k, rows, magnitudes);
}

std::vector<double> linear_rows(std::span<const __nv_bfloat16> x, std::span<const __nv_bfloat16> w, int m, int n, int k,
                                std::span<const std::size_t> rows, std::vector<double>* magnitudes) {
    return rows_of<__nv_bfloat16>(x, w, m, n, k, rows, magnitudes);
}

}  // namespace pd::reference
