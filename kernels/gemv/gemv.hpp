/// @file gemv.hpp
/// @brief Chapter 03: the decode GEMV of a linear layer, y = W x for one new token per
/// sequence, from one thread per row to 128-bit loads, and batched decode that reads every
/// weight once for B tokens. Includable from plain C++ (tests, programs).
///
/// Layout (row-major, as chapter 02):
///  - W: [N, K] weights, one row per output feature;
///  - X: [B, K] the new token of each of B sequences;
///  - Y: [B, N], y[b][n] = sum_k w[n][k] * x[b][k], accumulated in fp32, written as fp32.
///
/// W and X have the same type: float, or __nv_bfloat16 (the usual serving format: half the
/// bytes per weight). Every version accepts any N, K >= 1 and 1 <= B <= kMaxBatch.
/// v1 to v4 are single-token kernels: for B > 1 they run once per token (grid.y = B) and
/// read W B times; v5 and v6 read each weight once for all B tokens.
#pragma once

#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::gemv {

/// Largest batch every version accepts (the decode batch sweep goes 1, 2, 4 ... 64).
constexpr int kMaxBatch = 64;

/// Sizes of one decode step of one linear layer: Y [B, N] = X [B, K] W [N, K]^T.
struct Shape {
    int batch = 1;  ///< B: tokens (one per sequence), 1 <= B <= kMaxBatch
    int n = 1;      ///< N: rows of W, outputs per token
    int k = 1;      ///< K: columns of W, inputs per token

    /// 2 B N K: each weight is used for one multiply and one add per token.
    double flops() const { return 2.0 * batch * n * k; }
    /// Elements of W: N * K.
    std::size_t w_elements() const { return std::size_t(n) * k; }
    /// Elements of X: B * K.
    std::size_t x_elements() const { return std::size_t(batch) * k; }
    /// Elements of Y: B * N.
    std::size_t y_elements() const { return std::size_t(batch) * n; }
    /// The fewest bytes a step must move: W and X read once, Y written once (fp32).
    /// @param elem_bytes bytes of one W or X element (4 for fp32, 2 for bf16)
    double min_bytes(int elem_bytes) const {
        return double(elem_bytes) * (double(w_elements()) + double(x_elements())) + 4.0 * double(y_elements());
    }
};

/// Throws std::invalid_argument naming the first parameter out of range: N or K below 1, B
/// outside 1 ... kMaxBatch, or W above 2^31 - 1 elements.
/// @param s the sizes to check
void check_shape(const Shape& s);

// [gemv_versions]
/// The versions of chapter 03, in order. v1 to v5 take fp32 or bf16 W and X; v6 bf16 only.
inline const std::vector<Version>& versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1", {fp32, bf16}, simt, "one thread per row of W (uncoalesced: a warp's loads are K elements apart)"},
        {"v2", {fp32, bf16}, simt, "v1 + one warp per row: coalesced loads, partial sums added by shuffles (lab 03)"},
        {"v3", {fp32, bf16}, simt, "v2 + 128-bit loads (4 fp32 or 8 bf16 per lane, 4 in flight) and 4 rows per block"},
        {"v4", {fp32, bf16}, simt, "v3 with the warp sum done by CUB's WarpReduce", Backends::cuda_only},
        {"v5", {fp32, bf16}, simt, "batched decode: each weight read once for all B tokens, X in shared memory"},
        {"v6", {bf16}, tensor_cores, "v5 on tensor cores: WMMA 16x16x16 tiles of W times 16-token tiles of X^T"},
    };
    return list;
}
// [gemv_versions]

/// The simulator work of one launch of @p version on @p s (pd::sim_launch_work()): v1 starts a
/// thread per row, the others up to a warp per row (v2 to v4: a warp each; v5 and v6 share a
/// block of 256 threads among 8 to 32 rows); v2 and v3 sum each row's partial sums per token
/// with 5 shuffles, v5 with about one per sum; v6's products go through the simulator's WMMA on
/// tiles of 16 tokens and 32 rows, stepping through K 512 columns at a time (the padding past B,
/// N and K included). @param version "v1" ... "v6"  @param s the sizes
inline double sim_work(const std::string& version, const Shape& s) {
    const double threads = version == "v1" ? double(s.n) : double(kWarpSize) * s.n, sums = double(s.batch) * s.n;
    if (version == "v6")  // tiles of 16 tokens x 32 rows x the block's step along K (up to 512 columns)
        return sim_launch_work(threads, 0,
                               2.0 * ceil_div(s.batch, 16) * 16 * ceil_div(s.n, 32) * 32.0 * ceil_div(s.k, 512) * 512);
    return sim_launch_work(threads, s.flops(), 0, version == "v1" ? 0 : version == "v5" ? sums : 5 * sums);
}

/// v1: one thread per row of W. Neighbouring threads read addresses K elements apart, so
/// every load of a warp touches 32 different memory segments (uncoalesced: the lesson).
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_thread_per_row(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream = nullptr);
/// v1 with bf16 W and X. @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the
/// stream
void gemv_thread_per_row(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                         cudaStream_t stream = nullptr);

/// v2 = v1 with one warp per row: the 32 lanes read 32 consecutive weights (coalesced) and
/// combine their partial sums with a shuffle reduction. Lab 03.
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_warp_per_row(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream = nullptr);
/// v2 with bf16 W and X. @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the
/// stream
void gemv_warp_per_row(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                       cudaStream_t stream = nullptr);

/// v3 = v2 + 128-bit loads (4 floats or 8 bf16 per lane per load) and several rows per block;
/// the elements before the first 16-byte boundary of a row and after the last are read one by
/// one, so any K works.
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_vectorized(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream = nullptr);
/// v3 with bf16 W and X. @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the
/// stream
void gemv_vectorized(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                     cudaStream_t stream = nullptr);

/// v4 = v3 with the warp reduction done by CUB's WarpReduce. CUDA only: on the simulator it
/// throws std::invalid_argument.
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_cub(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream = nullptr);
/// v4 with bf16 W and X. @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the
/// stream
void gemv_cub(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v5: batched decode on the FMA units. Each weight is loaded once per step and used for all B
/// tokens (X is staged in shared memory). 128-bit loads where K % 4 == 0 (fp32) or K % 8 == 0
/// (bf16) and the pointers are 16-byte aligned; element loads otherwise.
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_batched(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream = nullptr);
/// v5 with bf16 W and X. @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the
/// stream
void gemv_batched(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                  cudaStream_t stream = nullptr);

/// v6 = v5 with the products on tensor cores (WMMA, bf16 in, fp32 accumulation): tokens in
/// tiles of 16. Runs on the simulator too; on a GPU older than sm_80 it throws
/// std::invalid_argument.
/// @param w [N, K]  @param x [B, K]  @param y [B, N]  @param s the sizes  @param stream the stream
void gemv_batched_wmma(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
                       cudaStream_t stream = nullptr);

/// Runs version @p version (a name from versions(); any other, and v4 on the simulator, throws
/// std::invalid_argument naming the version).
/// @param version "v1" ... "v5"  @param w [N, K]  @param x [B, K]  @param y [B, N]
/// @param s the sizes  @param stream the stream to launch on
void gemv(const std::string& version, const float* w, const float* x, float* y, const Shape& s,
          cudaStream_t stream = nullptr);
/// As above, with bf16 W and X.
/// @param version "v1" ... "v6"  @param w [N, K]  @param x [B, K]  @param y [B, N]
/// @param s the sizes  @param stream the stream to launch on
void gemv(const std::string& version, const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
          cudaStream_t stream = nullptr);

}  // namespace pd::kernels::gemv
