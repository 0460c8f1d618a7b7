/// @file linear_reference.hpp
/// @brief CPU reference of a linear layer, Y = X W^T (chapter 02's prefill GEMM and chapter
/// 03's decode GEMV): plain loops, double accumulation.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <span>
#include <vector>

namespace pd::reference {

/// y[m][n] = sum_k x[m][k] * w[n][k], every product and sum in double.
/// @param x [M, K] row-major  @param w [N, K] row-major
/// @param m M, rows of X (T tokens in prefill, B sequences in decode)  @param n N  @param k K
/// @param magnitudes when not null, receives sum_k |x[m][k] * w[n][k]| of each output [M, N]:
/// the scale of the fp32 rounding bound (pd::compare_sums)
/// @pre the spans hold exactly M*K and N*K elements, and M, N, K >= 1 (else std::invalid_argument)
/// @return [M, N]
std::vector<double> linear(std::span<const float> x, std::span<const float> w, int m, int n, int k,
                           std::vector<double>* magnitudes = nullptr);

/// As above for bf16 inputs: the reference of a bf16 kernel uses the rounded values it reads
/// (each is exact in double), so only the kernel's own arithmetic differs.
/// @param x [M, K]  @param w [N, K]  @param m M  @param n N  @param k K  @return [M, N]
std::vector<double> linear(std::span<const __nv_bfloat16> x, std::span<const __nv_bfloat16> w, int m, int n, int k);

/// Only the rows listed in @p rows of the product (a sample of a large one, for the programs'
/// benchmark sizes). @param x [M, K]  @param w [N, K]  @param m M  @param n N  @param k K
/// @param rows row indices in [0, M)
/// @param magnitudes when not null, receives sum_k |x w| of each output [rows.size(), N]
/// @return [rows.size(), N]
std::vector<double> linear_rows(std::span<const float> x, std::span<const float> w, int m, int n, int k,
                                std::span<const std::size_t> rows, std::vector<double>* magnitudes = nullptr);

/// linear_rows() for bf16 inputs. @param x [M, K]  @param w [N, K]  @param m M  @param n N
/// @param k K  @param rows row indices in [0, M)
/// @param magnitudes when not null, receives sum_k |x w| of each output [rows.size(), N]
/// @return [rows.size(), N]
std::vector<double> linear_rows(std::span<const __nv_bfloat16> x, std::span<const __nv_bfloat16> w, int m, int n, int k,
                                std::span<const std::size_t> rows, std::vector<double>* magnitudes = nullptr);

}  // namespace pd::reference
