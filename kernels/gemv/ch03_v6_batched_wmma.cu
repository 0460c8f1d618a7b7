/// @file ch03_v6_batched_wmma.cu
/// @brief GEMV v6 = v5 (Predecessor: ch03_v5_batched_simt.cu) on tensor cores (bf16, compute
/// capability >= 8.0 and the simulator): each warp computes Y^T for a 16-row strip of W and up
/// to 64 tokens with WMMA 16x16x16 bf16 tiles and fp32 accumulation; one 16x16x16 mma covers
/// 256 weights for up to 16 tokens. Chapter 03's batch sweep times both, and shows from which B
/// the tensor cores pay. As in v5, the step's slice of X is staged in shared memory and the
/// next step's W and X are prefetched into registers while the current step computes.
#include "gemv.hpp"
#include "gemv_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <mma.h>

#include <cstddef>

namespace pd::kernels::gemv {

namespace {  // v5's, copied: each step is a file of its own

/// Threads per block of v6, as v5.
constexpr int kBatchedThreads = 256;
/// Warps per block of v6.
constexpr int kBatchedWarps = kBatchedThreads / kWarpSize;

/// Loads this thread's part of one step of X: vectors threadIdx.x, threadIdx.x + 256, ... of
/// the [tokens, kRowVecs] slice starting at column k0; zeros for tokens >= B and past K.
template <typename T, int kRowVecs, int kVecs, int kPer, bool kAligned>
__device__ __forceinline__ void load_x_slice(const T* __restrict__ x, int batch, int k, int k0, uint4 (&xr)[kPer]) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int v = threadIdx.x + j * kBatchedThreads, t = v / kRowVecs;
        xr[j] = v < kVecs && t < batch
                    ? load_vec16<T, kAligned>(x + std::size_t(t) * k, k0 + (v % kRowVecs) * kVecElems<T>, k)
                    : make_uint4(0u, 0u, 0u, 0u);
    }
}

}  // namespace

/// 16-row strips of W per block of v6.
constexpr int kWmmaStrips = 2;
/// Warps that share one strip, each taking a quarter of the block's columns in a step (a
/// split of K inside the block, so that small N still gives every SM several warps).
[[maybe_unused]] constexpr int kWmmaSplits = kBatchedWarps / kWmmaStrips;  // unused below sm_80
/// Rows of W per block of v6.
constexpr int kWmmaRows = kWmmaStrips * 16;
/// 16-column tiles of W per warp per step: 8 (8 loads of 16 bytes in flight per lane) while
/// X's step slice stays small, 4 for 33 to 64 tokens.
template <int TT>
inline constexpr int kWmmaTilesPerStep = TT <= 2 ? 8 : 4;

// [gemv_batched_wmma_kernel]
/// v6, the tensor-core path of v5 (bf16), for up to TT * 16 tokens. Warp w works on strip w / 4 (16 rows)
/// and, in each step, on the columns of split w % 4. Per 16 x 16 tile of W: the lanes store
/// the tile (loaded in the previous step) to the warp's shared buffer, load it as matrix_a
/// (row-major), and multiply it with each 16-token tile of X^T (matrix_b, col-major: X's rows,
/// staged in shared memory), accumulating Y^T [16 rows, 16 tokens] in fp32. At the end the 4
/// splits of each strip are added in a fixed order (the result is the same bits every run).
template <int TT, bool kAligned>
__global__ void __launch_bounds__(kBatchedThreads)
    gemv_batched_wmma_kernel(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* __restrict__ x,
                             float* __restrict__ y, int n, int k, int batch) {
#if defined(PD_BACKEND_SIM) || __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    using bf16 = __nv_bfloat16;
    constexpr int kTiles = kWmmaTilesPerStep<TT>;
    constexpr int kWarpK = kTiles * 16;           // columns per warp per step
    constexpr int kStepK = kWmmaSplits * kWarpK;  // columns per block per step
    constexpr int kTokens = TT * 16;
    constexpr int kXLd = kStepK + 8;      // +16 bytes per row: tokens start in different banks
    constexpr int kWLd = 16 + 8;          // the same for the rows of a W tile
    constexpr int kRowVecs = kStepK / 8;  // 16-byte vectors of one token's slice
    constexpr int kXVecs = kTokens * kRowVecs;
    constexpr int kXPer = kXVecs / kBatchedThreads;  // 4 ... 8
    constexpr int kXBytes = kTokens * kXLd * int(sizeof(bf16));
    constexpr int kRedBytes = kBatchedWarps * 16 * kTokens * int(sizeof(float));
    // X's slice during the steps; afterwards the same bytes hold every warp's Y^T tile.
    // Both buffers are written as 16-byte vectors and read by load_matrix_sync as bf16.
    __shared__ __align__(128) uint4 smem[(kXBytes > kRedBytes ? kXBytes : kRedBytes) / 16];
    __shared__ __align__(128) uint4 w_tile[kBatchedWarps][16 * kWLd / 8];
    bf16* xs = reinterpret_cast<bf16*>(smem);

    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int strip = warp / kWmmaSplits, split = warp % kWmmaSplits;
    const int row = blockIdx.x * kWmmaRows + strip * 16 + lane / 2;  // this lane's row of the tiles
    const int col = split * kWarpK + (lane % 2) * 8;                 // and its first column in a step
    const int steps = ceil_div(k, kStepK);
    uint4 w_next[kTiles], x_next[kXPer];
    auto load_w = [&](int k0) {
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
            w_next[j] = row < n ? load_vec16<bf16, kAligned>(w + std::size_t(row) * k, k0 + col + j * 16, k)
                                : make_uint4(0u, 0u, 0u, 0u);
    };
    load_w(0);
    load_x_slice<bf16, kRowVecs, kXVecs, kXPer, kAligned>(x, batch, k, 0, x_next);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TT];
#pragma unroll
    for (int tt = 0; tt < TT; ++tt) wmma::fill_fragment(acc[tt], 0.f);

    for (int s = 0; s < steps; ++s) {
        __syncthreads();  // every warp has finished reading xs for step s - 1
#pragma unroll
        for (int j = 0; j < kXPer; ++j) {
            const int v = threadIdx.x + j * kBatchedThreads;
            smem[((v / kRowVecs) * kXLd + (v % kRowVecs) * 8) / 8] = x_next[j];
        }
        __syncthreads();  // xs holds step s for every warp
        uint4 wq[kTiles];
#pragma unroll
        for (int j = 0; j < kTiles; ++j) wq[j] = w_next[j];
        if (s + 1 < steps) {  // the next step's loads fly while this step computes
            load_w((s + 1) * kStepK);
            load_x_slice<bf16, kRowVecs, kXVecs, kXPer, kAligned>(x, batch, k, (s + 1) * kStepK, x_next);
        }
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            // Lane l holds 8 weights of tile j: row l / 2, columns (l % 2) * 8 ... + 7.
            w_tile[warp][((lane / 2) * kWLd + (lane % 2) * 8) / 8] = wq[j];
            __syncwarp();  // the tile is complete before the warp reads it
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
            wmma::load_matrix_sync(a, reinterpret_cast<const bf16*>(w_tile[warp]), kWLd);
#pragma unroll
            for (int tt = 0; tt < TT; ++tt) {
                // X^T as col-major: element (c, t) at xs[t * kXLd + c], token t's row of X.
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
                wmma::load_matrix_sync(b, xs + tt * 16 * kXLd + split * kWarpK + j * 16, kXLd);
                wmma::mma_sync(acc[tt], a, b, acc[tt]);
            }
            __syncwarp();  // every lane has read the tile before the next one overwrites it
        }
    }

    // xs is no longer read: its bytes now take the warps' results, red[warp][16 rows][kTokens].
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int tt = 0; tt < TT; ++tt)
        wmma::store_matrix_sync(red + warp * 16 * kTokens + tt * 16, acc[tt], kTokens, wmma::mem_row_major);
    __syncthreads();
    // Thread i sums the splits of (row i % 32 of the block, token i / 32): consecutive threads
    // write consecutive rows of y[t].
    for (int i = threadIdx.x; i < kWmmaRows * batch; i += kBatchedThreads) {
        const int rb = i % kWmmaRows, t = i / kWmmaRows, out_row = blockIdx.x * kWmmaRows + rb;
        if (out_row >= n) continue;
        float sum = 0.f;
        for (int sp = 0; sp < kWmmaSplits; ++sp)
            sum += red[((rb / 16 * kWmmaSplits + sp) * 16 + rb % 16) * kTokens + t];
        y[std::size_t(t) * n + out_row] = sum;
    }
#else
    __trap();  // not launched: the launcher checks the compute capability
#endif
}
// [gemv_batched_wmma_kernel]

/// Launches the tensor-core path for up to TT * 16 tokens: grid ceil(N / 32), 256 threads.
template <int TT>
void launch_batched_wmma(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, bool aligned,
                         cudaStream_t stream) {
    const unsigned grid = unsigned(ceil_div(s.n, kWmmaRows));
    if (aligned)
        gemv_batched_wmma_kernel<TT, true><<<grid, kBatchedThreads, 0, stream>>>(w, x, y, s.n, s.k, s.batch);
    else
        gemv_batched_wmma_kernel<TT, false><<<grid, kBatchedThreads, 0, stream>>>(w, x, y, s.n, s.k, s.batch);
}

void gemv_batched_wmma(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    require_bf16_tensor_cores("gemv_batched_wmma (v6)");
    const bool aligned = s.k % kVecElems<__nv_bfloat16> == 0 && is_aligned16(w) && is_aligned16(x);
    // Tokens in tiles of 16: one to four accumulator fragments per warp.
    if (s.batch <= 16)
        launch_batched_wmma<1>(w, x, y, s, aligned, stream);
    else if (s.batch <= 32)
        launch_batched_wmma<2>(w, x, y, s, aligned, stream);
    else if (s.batch <= 48)
        launch_batched_wmma<3>(w, x, y, s, aligned, stream);
    else
        launch_batched_wmma<4>(w, x, y, s, aligned, stream);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemv
