// CPU references for chapter 00: plain loops.
#include "roofline_reference.hpp"

#include <cmath>
#include <stdexcept>

namespace pd::reference {

std::vector<float> fma_chains(std::span<const float> init, std::span<const float> mul, std::span<const float> add,
                              int patterns, int chains, int iters) {
    const std::size_t n = std::size_t(patterns) * chains;
    if (init.size() < n || mul.size() < n || add.size() < n)
        throw std::invalid_argument("reference::fma_chains: inputs smaller than patterns * chains");
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        float a = init[i];
        for (int it = 0; it < iters; ++it) a = std::fma(a, mul[i], add[i]);
        out[i] = a;
    }
    return out;
}

std::vector<double> gemm_abt_sample(std::span<const float> a, std::span<const float> b, std::size_t k,
                                    std::span<const std::size_t> rows, std::span<const std::size_t> cols) {
    std::vector<double> c(rows.size() * cols.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t j = 0; j < cols.size(); ++j) {
            double s = 0;
            for (std::size_t p = 0; p < k; ++p) s += double(a[rows[i] * k + p]) * double(b[cols[j] * k + p]);
            c[i * cols.size() + j] = s;
        }
    return c;
}

}  // namespace pd::reference
