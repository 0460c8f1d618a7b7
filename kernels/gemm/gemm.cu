/// @file gemm.cu
/// @brief The versions of chapter 02, the shape check every launcher calls, and the dispatch by
/// name (`--kernel v1` ... `v8`).
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

const char* to_string(DType d) { return d == DType::fp32 ? "fp32" : "bf16"; }

std::vector<Version> versions() {
    std::vector<Version> v = {
        {"v1", DType::fp32, "naive: one thread per output, a warp walks down T (uncoalesced)"},
        {"v2", DType::fp32, "v1 with a warp along N: X is broadcast, Y stores are coalesced"},
        {"v3", DType::fp32, "v2 + 32x32 shared-memory tiles of X and W (lab 02)"},
        {"v4", DType::fp32, "v3 + 1D register blocking: 64x64 tile, 8 outputs per thread"},
        {"v5", DType::fp32, "v4 + 2D register blocking: 128x128 tile, 8x8 outputs per thread"},
        {"v6", DType::fp32, "v5 + 128-bit (float4) loads, the next tile loaded during the math"},
        {"v7", DType::bf16, "tensor cores via WMMA: 128x128 tile, 8 warps of 4x2 16x16 fragments"},
    };
#if !defined(PD_BACKEND_SIM)
    v.push_back({"v8", DType::bf16, "v7 with mma.sync m16n8k16, ldmatrix and a 3-stage cp.async pipeline"});
#endif
    return v;
}

namespace {
/// The names of versions() of dtype @p d, as "v1, v2, ...", for error messages.
std::string names_of(DType d) {
    std::string out;
    for (const Version& v : versions())
        if (v.dtype == d) out += (out.empty() ? "" : ", ") + v.name;
    return out;
}

/// Throws std::invalid_argument for @p version, which is not a @p wanted version: the message
/// says whether the name is a version of the other dtype, and lists the valid ones.
[[noreturn]] void reject(const std::string& version, DType wanted) {
    const DType other = wanted == DType::fp32 ? DType::bf16 : DType::fp32;
    for (const Version& v : versions())
        if (v.name == version)
            throw std::invalid_argument("--kernel " + version + " takes " + to_string(other) + " inputs, not " +
                                        to_string(wanted) + " (" + to_string(wanted) +
                                        " versions: " + names_of(wanted) + ")");
#if defined(PD_BACKEND_SIM)
    if (version == "v8")
        throw std::invalid_argument("--kernel v8 is CUDA only (inline PTX): not available on the simulator (" +
                                    std::string(to_string(wanted)) + " versions: " + names_of(wanted) + ")");
#endif
    throw std::invalid_argument("--kernel " + version + ": unknown version (" + to_string(wanted) +
                                " versions: " + names_of(wanted) + ")");
}
}  // namespace

void gemm(const std::string& version, const float* x, const float* w, float* y, const Shape& s,
          cudaStream_t stream) {
    if (version == "v1") gemm_naive(x, w, y, s, stream);
    else if (version == "v2") gemm_coalesced(x, w, y, s, stream);
    else if (version == "v3") gemm_smem_tiled(x, w, y, s, stream);
    else if (version == "v4") gemm_blocktile_1d(x, w, y, s, stream);
    else if (version == "v5") gemm_blocktile_2d(x, w, y, s, stream);
    else if (version == "v6") gemm_vectorized(x, w, y, s, stream);
    else reject(version, DType::fp32);
}

void gemm(const std::string& version, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s,
          cudaStream_t stream) {
    if (version == "v7") gemm_wmma(x, w, y, s, stream);
#if !defined(PD_BACKEND_SIM)
    else if (version == "v8") gemm_mma_pipelined(x, w, y, s, stream);
#endif
    else reject(version, DType::bf16);
}

}  // namespace pd::kernels::gemm
