/// @file ch03_v5_batched_simt.cu
/// @brief GEMV v5 = v3 (Predecessor: ch03_v3_vectorized.cu) batched: v1 to v4 run once per token
/// and read W B times; v5 reads each weight once per step and uses it for all B tokens, so the
/// step costs about as much as one token's (reading W dominates) until the products become the
/// bottleneck. Each warp owns 4 rows (fewer when B > 16) and each lane keeps one fp32
/// accumulator per (row, token), B rounded up to a power of two; the products run on the FMA
/// units (fp32 and bf16). With B tokens a weight costs B FMAs plus its share of the conversions
/// and shared-memory reads of X: about 0.2 warp instructions per weight at B = 4 and 0.35 at
/// B = 8, against an SM's 4 instructions per cycle and the ~9 bf16 weights per cycle per SM
/// that HBM delivers on an H100/H200, so from B of about 5 the SIMT path nears compute-bound.
/// The step's slice of X [B, K] is staged in shared memory (read by every warp of the block),
/// and the next step's W and X are prefetched into registers while the current step computes.
/// W is read with v3's 128-bit loads when K is a multiple of 8 bf16 / 4 floats and W and X are
/// 16-byte aligned (the usual case); otherwise element by element, correct but slower.
#include "gemv.hpp"
#include "gemv_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cstddef>

namespace pd::kernels::gemv {

/// Threads per block of v5.
constexpr int kBatchedThreads = 256;
/// Warps per block of v5.
constexpr int kBatchedWarps = kBatchedThreads / kWarpSize;

/// Rows of W per warp of the SIMT path for a pass of TB tokens: the accumulators, rows x TB
/// per lane, stay at 64 registers; each x read from shared memory serves all of them.
template <int TB>
inline constexpr int kSimtRowsPerWarp = TB <= 16 ? 4 : (TB == 32 ? 2 : 1);
/// 16-byte vectors per row per lane in one step of the SIMT path (the loads in flight per
/// lane are kSimtRowsPerWarp * kSimtUnroll: 8 for B <= 16).
template <int TB>
inline constexpr int kSimtUnroll = TB == 64 ? 1 : 2;

/// Loads this lane's vectors of W for one step: rows row0 ... row0 + R - 1 (zeros past N), and
/// vectors u * 32 + lane (u < U) of the step starting at column k0 (zeros past K).
template <typename T, int R, int U, bool kAligned>
__device__ __forceinline__ void load_w_rows(const T* __restrict__ w, int row0, int n, int k, int k0, int lane,
                                            uint4 (&wq)[R][U]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u)
            wq[r][u] = row0 + r < n ? load_vec16<T, kAligned>(w + std::size_t(row0 + r) * k,
                                                              k0 + (u * kWarpSize + lane) * kVecElems<T>, k)
                                    : make_uint4(0u, 0u, 0u, 0u);
}

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

// [gemv_batched_kernel]
/// v5, the SIMT path, for up to TB tokens: warp w of block i owns rows (i * 8 + w) * R ...
/// + R - 1, each lane sums vectors lane, lane + 32, ... of those rows for every token, and the
/// warp reduces the R x TB sums at the end, 32 at a time. Each weight is loaded once and used
/// TB times.
template <typename T, int TB, bool kAligned>
__global__ void __launch_bounds__(kBatchedThreads)
    gemv_batched_simt_kernel(const T* __restrict__ w, const T* __restrict__ x, float* __restrict__ y, int n, int k,
                             int batch) {
    constexpr int E = kVecElems<T>, R = kSimtRowsPerWarp<TB>, U = kSimtUnroll<TB>;
    constexpr int kRowVecs = U * kWarpSize;  // vectors of a row in one step
    constexpr int kStepK = kRowVecs * E;     // columns in one step
    constexpr int kXVecs = TB * kRowVecs;    // vectors of X in one step (<= 2048: 32 KiB)
    constexpr int kXPer = ceil_div(kXVecs, kBatchedThreads);
    // X's slice is prefetched through registers like W's rows, except in bf16 at 64 tokens: its 8
    // vectors per thread (32 registers) beside the 64 accumulators and the conversions of 8-wide
    // vectors made ptxas spill (about 240 bytes on sm_75 and sm_90), so that case loads each
    // step's slice straight into shared memory.
    constexpr bool kPrefetchX = kXPer <= 4 || E == 4;
    __shared__ uint4 xs[kXVecs];  // xs[t * kRowVecs + v]: token t, vector v of the step

    const int lane = threadIdx.x % kWarpSize;
    const int row0 = (blockIdx.x * kBatchedWarps + threadIdx.x / kWarpSize) * R;
    const int steps = ceil_div(k, kStepK);
    uint4 w_next[R][U], x_next[kPrefetchX ? kXPer : 1];
    load_w_rows<T, R, U, kAligned>(w, row0, n, k, 0, lane, w_next);
    if constexpr (kPrefetchX) load_x_slice<T, kRowVecs, kXVecs, kXPer, kAligned>(x, batch, k, 0, x_next);
    float acc[R][TB] = {};

    for (int s = 0; s < steps; ++s) {
        __syncthreads();  // every warp has finished reading xs for step s - 1
#pragma unroll
        for (int j = 0; j < kXPer; ++j) {
            const int v = threadIdx.x + j * kBatchedThreads;
            if (v >= kXVecs) continue;
            if constexpr (kPrefetchX) {
                xs[v] = x_next[j];
            } else {
                const int t = v / kRowVecs;
                xs[v] = t < batch ? load_vec16<T, kAligned>(x + std::size_t(t) * k, s * kStepK + (v % kRowVecs) * E, k)
                                  : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        __syncthreads();  // xs holds step s for every warp
        uint4 wq[R][U];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int u = 0; u < U; ++u) wq[r][u] = w_next[r][u];
        if (s + 1 < steps) {  // the next step's loads fly while this step computes
            load_w_rows<T, R, U, kAligned>(w, row0, n, k, (s + 1) * kStepK, lane, w_next);
            if constexpr (kPrefetchX)
                load_x_slice<T, kRowVecs, kXVecs, kXPer, kAligned>(x, batch, k, (s + 1) * kStepK, x_next);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float wf[R][E];  // converted once, used for every token
#pragma unroll
            for (int r = 0; r < R; ++r) unpack16<T>(wq[r][u], wf[r]);
#pragma unroll
            for (int t = 0; t < TB; ++t) {
                float xf[E];  // read from shared memory once, used for every row
                unpack16<T>(xs[t * kRowVecs + u * kWarpSize + lane], xf);
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int e = 0; e < E; ++e) acc[r][t] = fmaf(wf[r][e], xf[e], acc[r][t]);
            }
        }
    }

    // The R x TB sums over the warp, up to 32 at once (warp_reduce_sums: lane j gets sum j of
    // each group, 31 shuffles per 32 sums); sum i is row r = i / TB, token t = i % TB.
    constexpr int kSums = R * TB, kGroup = kSums < kWarpSize ? kSums : kWarpSize;
#pragma unroll
    for (int g = 0; g < kSums / kGroup; ++g) {
        float v[kGroup];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) v[j] = acc[(g * kGroup + j) / TB][(g * kGroup + j) % TB];
        const float sum = warp_reduce_sums(v);
        const int i = g * kGroup + lane, r = i / TB, t = i % TB;
        if (lane < kGroup && t < batch && row0 + r < n) y[std::size_t(t) * n + row0 + r] = sum;
    }
}
// [gemv_batched_kernel]

/// Launches the SIMT path for up to TB tokens: grid ceil(N / (8 R)), 256 threads.
template <typename T, int TB>
void launch_batched_simt(const T* w, const T* x, float* y, const Shape& s, bool aligned, cudaStream_t stream) {
    const unsigned grid = unsigned(ceil_div(s.n, kBatchedWarps * kSimtRowsPerWarp<TB>));
    if (aligned)
        gemv_batched_simt_kernel<T, TB, true><<<grid, kBatchedThreads, 0, stream>>>(w, x, y, s.n, s.k, s.batch);
    else
        gemv_batched_simt_kernel<T, TB, false><<<grid, kBatchedThreads, 0, stream>>>(w, x, y, s.n, s.k, s.batch);
}

/// Checks the shape, picks the tokens per pass, and launches v5.
template <typename T>
void launch_batched(const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    // 128-bit loads need whole vectors in every row: K a multiple of 4 floats / 8 bf16, and
    // 16-byte aligned W and X.
    const bool aligned = s.k % kVecElems<T> == 0 && is_aligned16(w) && is_aligned16(x);
    const int b = s.batch;
    if (b <= 1)
        launch_batched_simt<T, 1>(w, x, y, s, aligned, stream);
    else if (b <= 2)
        launch_batched_simt<T, 2>(w, x, y, s, aligned, stream);
    else if (b <= 4)
        launch_batched_simt<T, 4>(w, x, y, s, aligned, stream);
    else if (b <= 8)
        launch_batched_simt<T, 8>(w, x, y, s, aligned, stream);
    else if (b <= 16)
        launch_batched_simt<T, 16>(w, x, y, s, aligned, stream);
    else if (b <= 32)
        launch_batched_simt<T, 32>(w, x, y, s, aligned, stream);
    else
        launch_batched_simt<T, 64>(w, x, y, s, aligned, stream);
    PD_CHECK_LAUNCH();
}

void gemv_batched(const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_batched(w, x, y, s, stream);
}

void gemv_batched(const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    launch_batched(w, x, y, s, stream);
}

}  // namespace pd::kernels::gemv
