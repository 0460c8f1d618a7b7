/// @file roofline_reference.hpp
/// @brief CPU references for chapter 00's kernels.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace pd::reference {

/// The chains of pd::kernels::roofline::fma_chains for each of the @p patterns rows, computed
/// with std::fma in float: IEEE fused multiply-add rounds once, as the GPU's FFMA does, so
/// the results match the kernel bit for bit.
/// @return [patterns, chains] final values
std::vector<float> fma_chains(std::span<const float> init, std::span<const float> mul, std::span<const float> add,
                              int patterns, int chains, int iters);

/// C = A B^T for row-major A [m, k] and B [n, k], accumulated in double, for the entries
/// listed in @p rows x @p cols (a sample of a large product). @return [rows.size(), cols.size()]
std::vector<double> gemm_abt_sample(std::span<const float> a, std::span<const float> b, std::size_t k,
                                    std::span<const std::size_t> rows, std::span<const std::size_t> cols);

}  // namespace pd::reference
