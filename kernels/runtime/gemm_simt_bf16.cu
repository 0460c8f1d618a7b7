/// @file gemm_simt_bf16.cu
/// @brief The model's bf16 GEMM on GPUs without bf16 tensor cores: chapter 02's v6
/// (gemm/ch02_v6_vectorized.cu, 128 x 128 block tiles, 8 x 8 micro-tiles, the next K tile loaded during
/// the math) with one change, the loads: each thread reads 4 consecutive bf16 (8 bytes) of X and
/// of W and widens them to fp32 before they go to shared memory, so the tiles, the FMAs and their
/// order are v6's.
#include "runtime.hpp"

#include "gemm/tile_common.cuh"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::runtime {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8;  ///< v6's block tile and K step
constexpr int kTM = 8, kHalf = 4;             ///< v6's micro-tile, in two halves of 4
constexpr int kThreads = (kBM / kTM) * (kBN / kTM);
constexpr int kPad = 4;

/// Four consecutive elements m[row][col .. col+3] widened to fp32, zeros outside the matrix.
/// With @p kVec one 8-byte load (cols % 4 == 0, col % 4 == 0, an 8-byte aligned m); else four
/// guarded scalar loads.
template <bool kVec>
__device__ __forceinline__ float4 load4_bf16_or_zero(const __nv_bfloat16* __restrict__ m, int row, int col, int rows,
                                                     int cols) {
    if constexpr (kVec) {
        if (row >= rows || col >= cols) return make_float4(0.f, 0.f, 0.f, 0.f);
        const uint2 bits = *reinterpret_cast<const uint2*>(m + std::size_t(row) * cols + col);
        const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&bits.x);
        const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&bits.y);
        return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
    } else {
        const auto at = [&](int c) { return to_f32(gemm::load_or_zero(m, row, c, rows, cols)); };
        return make_float4(at(col), at(col + 1), at(col + 2), at(col + 3));
    }
}

// [gemm_simt_bf16_kernel]
/// v6's kernel (gemm_vectorized_kernel) on bf16 X and W: only the two tile loads differ.
template <bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_simt_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                          float* __restrict__ y, int T, int N, int K) {
    __shared__ __align__(16) float xs[kBK][kBM + kPad];
    __shared__ __align__(16) float ws[kBK][kBN + kPad];
    const int tid = threadIdx.x;
    const int t0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int tr = tid / (kBN / kTM), tc = tid % (kBN / kTM);
    const int load_r = tid / (kBK / 4), load_c = (tid % (kBK / 4)) * 4;
    float acc[kTM][kTM] = {};

    float4 xv = load4_bf16_or_zero<kVec>(x, t0 + load_r, load_c, T, K);
    float4 wv = load4_bf16_or_zero<kVec>(w, n0 + load_r, load_c, N, K);
    for (int k0 = 0; k0 < K; k0 += kBK) {
        xs[load_c + 0][load_r] = xv.x;
        xs[load_c + 1][load_r] = xv.y;
        xs[load_c + 2][load_r] = xv.z;
        xs[load_c + 3][load_r] = xv.w;
        ws[load_c + 0][load_r] = wv.x;
        ws[load_c + 1][load_r] = wv.y;
        ws[load_c + 2][load_r] = wv.z;
        ws[load_c + 3][load_r] = wv.w;
        __syncthreads();  // both tiles complete before anyone reads them
        if (k0 + kBK < K) {
            xv = load4_bf16_or_zero<kVec>(x, t0 + load_r, k0 + kBK + load_c, T, K);
            wv = load4_bf16_or_zero<kVec>(w, n0 + load_r, k0 + kBK + load_c, N, K);
        }
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 xa = *reinterpret_cast<const float4*>(&xs[kk][tr * kHalf]);
            const float4 xb = *reinterpret_cast<const float4*>(&xs[kk][kBM / 2 + tr * kHalf]);
            const float4 wa = *reinterpret_cast<const float4*>(&ws[kk][tc * kHalf]);
            const float4 wb = *reinterpret_cast<const float4*>(&ws[kk][kBN / 2 + tc * kHalf]);
            const float xr[kTM] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            const float wr[kTM] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTM; ++j) acc[i][j] += xr[i] * wr[j];
        }
        __syncthreads();  // everyone is done with the tiles before the next step overwrites them
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int t = t0 + (i / kHalf) * (kBM / 2) + tr * kHalf + i % kHalf;
        if (t >= T) continue;
#pragma unroll
        for (int j = 0; j < kTM; ++j) {
            const int n = n0 + (j / kHalf) * (kBN / 2) + tc * kHalf + j % kHalf;
            if (n < N) y[std::size_t(t) * N + n] = acc[i][j];
        }
    }
}
// [gemm_simt_bf16_kernel]

bool aligned8(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 8 == 0;
}

}  // namespace

void gemm_simt_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const gemm::Shape& s,
                    cudaStream_t stream) {
    gemm::check_shape(s);
    const dim3 grid(ceil_div(s.n, kBN), ceil_div(s.tokens, kBM));
    if (s.k % 4 == 0 && aligned8(x) && aligned8(w))
        gemm_simt_bf16_kernel<true><<<grid, kThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    else
        gemm_simt_bf16_kernel<false><<<grid, kThreads, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::runtime
