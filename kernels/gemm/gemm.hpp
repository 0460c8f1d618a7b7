/// @file gemm.hpp
/// @brief Chapter 02: the prefill GEMM of a linear layer, Y = X W^T, in eight steps from a naive
/// kernel to tensor cores, and their launchers. Includable from plain C++ (tests, programs).
///
/// Layout (row-major, the layout of a framework's linear layer):
///  - X: [T, K] activations, T = batch x prompt tokens;
///  - W: [N, K] weights, one row per output feature;
///  - Y: [T, N], y[t][n] = sum_k x[t][k] * w[n][k], accumulated in fp32, written as fp32.
///
/// Both operands are K-contiguous, so a dot product walks both along a row. v1 to v6 take fp32
/// inputs (SIMT FMA); v7 and v8 take bf16 inputs (tensor cores) with fp32 accumulation and an
/// fp32 output. Every version accepts any T, N, K >= 1: tiles that overhang the matrices are
/// guarded (loads read zeros, stores are skipped).
#pragma once

#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::gemm {

/// Sizes of one GEMM: Y [T, N] = X [T, K] W [N, K]^T.
struct Shape {
    int tokens = 1;  ///< T (the M of a GEMM): rows of X and Y
    int n = 1;       ///< N: output features, rows of W, columns of Y
    int k = 1;       ///< K: input features, the reduction length

    /// 2 T N K: one multiply and one add per term.
    double flops() const { return 2.0 * tokens * n * k; }
    /// Elements of X: T * K.
    std::size_t x_elements() const { return std::size_t(tokens) * k; }
    /// Elements of W: N * K.
    std::size_t w_elements() const { return std::size_t(n) * k; }
    /// Elements of Y: T * N.
    std::size_t y_elements() const { return std::size_t(tokens) * n; }
    /// The fewest bytes a GEMM must move: X and W read once, Y written once.
    /// @param input_bytes bytes of one X or W element (4 for fp32, 2 for bf16); Y is fp32
    double min_bytes(int input_bytes) const {
        return double(input_bytes) * (double(x_elements()) + double(w_elements())) + 4.0 * double(y_elements());
    }
};

/// Throws std::invalid_argument naming the first parameter out of range: T, N or K below 1,
/// X, W or Y above 2^31 - 1 elements (the kernels index with 32-bit offsets per row), or T or
/// N above 65535 * 32 = 2097120 (the grids' y dimension holds at most 65535 tiles of >= 32).
/// @param s the sizes to check
void check_shape(const Shape& s);

// [gemm_versions]
/// The versions of chapter 02, in order: fp32 SIMT steps v1 to v6, then bf16 tensor-core steps
/// v7 and v8.
inline const std::vector<Version>& versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1", {fp32}, simt, "naive: one thread per output, a warp walks down T (uncoalesced)"},
        {"v2", {fp32}, simt, "v1 with a warp along N: X is broadcast, Y stores are coalesced"},
        {"v3", {fp32}, simt, "v2 + 32x32 shared-memory tiles of X and W (lab 02)"},
        {"v4", {fp32}, simt, "v3 + 1D register blocking: 64x64 tile, 8 outputs per thread"},
        {"v5", {fp32}, simt, "v4 + 2D register blocking: 128x128 tile, 8x8 outputs per thread"},
        {"v6", {fp32}, simt, "v5 + 128-bit (float4) loads, the next tile loaded during the math"},
        {"v7", {bf16}, tensor_cores, "tensor cores via WMMA: 128x128 tile, 8 warps of 4x2 16x16 fragments"},
        {"v8", {bf16}, tensor_cores, "v7 with mma.sync m16n8k16, ldmatrix and a 3-stage cp.async pipeline"},
    };
    return list;
}
// [gemm_versions]

/// The simulator work of one launch of @p version on @p s (pd::sim_launch_work()): every block
/// tile computes all its outputs over the whole K, the rows and columns past T and N included
/// (v1 and v2 launch 32 x 32 threads per tile, one per output, and idle ones return at once;
/// v3: 32 x 32 outputs on 1024 threads; v4: 64 x 64 on 512; v5 to v8: 128 x 128 on 256), and
/// v7's products go through the simulator's WMMA. @param version "v1" ... "v8"  @param s the sizes
inline double sim_work(const std::string& version, const Shape& s) {
    const int tile = version <= "v3" ? 32 : version == "v4" ? 64 : 128;
    const int threads = version <= "v3" ? 1024 : version == "v4" ? 512 : 256;
    const double tiles = double(ceil_div(s.tokens, tile)) * double(ceil_div(s.n, tile));
    const bool naive = version == "v1" || version == "v2";
    const double flops = naive ? s.flops() : 2.0 * tiles * tile * tile * s.k;
    return sim_launch_work(tiles * threads, version == "v7" ? 0 : flops, version == "v7" ? flops : 0);
}

// ---- fp32, SIMT -----------------------------------------------------------------------------

/// v1: one thread per output y[t][n], consecutive threads of a warp walk along T, so each
/// warp reads 32 different rows of X at once (uncoalesced).
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_naive(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v2 = v1 with consecutive threads along N: a warp shares one row of X (a broadcast) and its
/// stores to Y are contiguous.
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_coalesced(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v3 = v2 + shared-memory tiles: a block stages a tile of X and a tile of W in shared memory
/// and every element staged is used by a whole row or column of threads. Lab 02.
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_smem_tiled(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v4 = v3 + 1D register blocking: each thread computes a column of several outputs, reusing
/// one W value from a register across them.
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_blocktile_1d(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v5 = v4 + 2D register blocking: each thread computes a micro-tile (an outer product of a
/// column of X values and a row of W values held in registers).
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_blocktile_2d(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v6 = v5 + 128-bit loads (float4) from global and shared memory, with the next K tile's
/// global loads issued before the current tile's math. The float4 global loads need K % 4 == 0
/// and 16-byte aligned X and W; otherwise the same tiling runs with scalar global loads.
/// @param x [T, K]  @param w [N, K]  @param y [T, N]  @param s the sizes  @param stream the stream
void gemm_vectorized(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

// ---- bf16, tensor cores ---------------------------------------------------------------------

/// v7: tensor cores through WMMA (16x16x16 bf16 fragments, fp32 accumulators); tiles staged in
/// shared memory with zeros past the edges, by 128-bit loads where K % 8 == 0 and X, W are
/// 16-byte aligned (scalar loads otherwise). Runs on the simulator too; on a GPU older than
/// sm_80 (no bf16 tensor cores) it throws std::invalid_argument.
/// @param x [T, K]  @param w [N, K]  @param y [T, N] fp32  @param s the sizes  @param stream the stream
void gemm_wmma(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s, cudaStream_t stream = nullptr);

/// v8 = v7 with `mma.sync` (m16n8k16) on fragments loaded by `ldmatrix`, and `cp.async`
/// multi-stage pipelining of the shared-memory tiles (the wrappers of pd/warp_mma.cuh: inline
/// PTX on a GPU, emulated with the PTX ISA's fragment layouts on the simulator). sm_80 and
/// later: on an older GPU it throws std::invalid_argument.
/// @param x [T, K]  @param w [N, K]  @param y [T, N] fp32  @param s the sizes  @param stream the stream
void gemm_mma_pipelined(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s,
                        cudaStream_t stream = nullptr);

// ---- dispatch -------------------------------------------------------------------------------

/// Runs fp32 version @p version (v1 ... v6). Any other name, a bf16 version included, throws
/// std::invalid_argument naming the version (find_version()).
/// @param version a name from versions()  @param x [T, K]  @param w [N, K]  @param y [T, N]
/// @param s the sizes  @param stream the stream to launch on
void gemm(const std::string& version, const float* x, const float* w, float* y, const Shape& s,
          cudaStream_t stream = nullptr);

/// Runs bf16 version @p version (v7, v8). Any other name throws std::invalid_argument naming
/// the version (find_version()).
/// @param version a name from versions()  @param x [T, K]  @param w [N, K]  @param y [T, N] fp32
/// @param s the sizes  @param stream the stream to launch on
void gemm(const std::string& version, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const Shape& s,
          cudaStream_t stream = nullptr);

}  // namespace pd::kernels::gemm
