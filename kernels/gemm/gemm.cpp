/// @file gemm.cpp
/// @brief The shape check every launcher of chapter 02 calls, and the dispatch by name
/// (`--kernel v1` ... `v8`) over the versions() of gemm.hpp.
#include "gemm.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pd::kernels::gemm {

void check_shape(const Shape& s) {
    auto positive = [](int v, const char* name) {
        if (v < 1) throw std::invalid_argument(std::string(name) + " must be >= 1, got " + std::to_string(v));
    };
    positive(s.tokens, "tokens (T)");
    positive(s.n, "n (N)");
    positive(s.k, "k (K)");
    // Every kernel indexes a row with 32-bit offsets, so no matrix may hold 2^31 elements.
    constexpr std::uint64_t kMaxElements = 0x7FFFFFFFu;
    auto fits = [](std::uint64_t elements, const char* name) {
        if (elements > kMaxElements)
            throw std::invalid_argument(std::string(name) + " = " + std::to_string(elements) +
                                        " elements exceeds 2^31 - 1 (32-bit offsets)");
    };
    fits(std::uint64_t(s.tokens) * std::uint64_t(s.k), "X: tokens (T) * k (K)");
    fits(std::uint64_t(s.n) * std::uint64_t(s.k), "W: n (N) * k (K)");
    fits(std::uint64_t(s.tokens) * std::uint64_t(s.n), "Y: tokens (T) * n (N)");
    // The grids put T (v2 to v8) or N (v1) on their y axis, at most 65535 blocks of >= 32 rows.
    constexpr int kMaxRows = 65535 * 32;
    if (s.tokens > kMaxRows)
        throw std::invalid_argument("tokens (T) = " + std::to_string(s.tokens) + " exceeds " +
                                    std::to_string(kMaxRows) + " (65535 grid rows of 32)");
    if (s.n > kMaxRows)
        throw std::invalid_argument("n (N) = " + std::to_string(s.n) + " exceeds " + std::to_string(kMaxRows) +
                                    " (65535 grid rows of 32)");
}

void gemm(const std::string& version, const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    const Version& v = find_version(versions(), version, DType::fp32, "gemm");
    if (v.name == "v1")
        gemm_naive(x, w, y, s, stream);
    else if (v.name == "v2")
        gemm_coalesced(x, w, y, s, stream);
    else if (v.name == "v3")
        gemm_smem_tiled(x, w, y, s, stream);
    else if (v.name == "v4")
        gemm_blocktile_1d(x, w, y, s, stream);
    else if (v.name == "v5")
        gemm_blocktile_2d(x, w, y, s, stream);
    else
        gemm_vectorized(x, w, y, s, stream);  // v6
}

void gemm(const std::string& version, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s,
          cudaStream_t stream) {
    const Version& v = find_version(versions(), version, DType::bf16, "gemm");
    if (v.name == "v7")
        gemm_wmma(x, w, y, s, stream);
    else
        gemm_mma_pipelined(x, w, y, s, stream);  // v8
}

}  // namespace pd::kernels::gemm
