/// @file online_softmax.cuh
/// @brief Chapter 04: device pieces every attention kernel over the KV cache shares (decode, varlen, paged):
/// how a warp holds a head's dimensions, the dot product of a query with a key, the online
/// softmax update, and the merge of the warps' states at the end of a block.
///
/// A block has kDecodeWarps warps; the warps take the keys in turn (warp w: keys w, w + 4, ...)
/// and lane l of a warp holds dimensions l, l + 32, l + 64, l + 96 of a head, so a warp reads a
/// K or V row of d elements in one coalesced sweep.
#pragma once

#include "attention/decode_attention.hpp"
#include "pd/common.hpp"
#include "pd/device_helpers.cuh"

#include <cmath>

namespace pd::kernels::attention {

constexpr int kDecodeWarps = 4;                           ///< warps per block of every version
constexpr int kDecodeThreads = kDecodeWarps * kWarpSize;  ///< 128 threads
constexpr int kLaneDims = kMaxHeadDim / kWarpSize;        ///< dimensions of a head per lane (4)

/// One query's running softmax over the keys a warp has seen so far (the online softmax):
/// m the largest score, l the sum of exp(s - m), acc the sum of exp(s - m) v over this lane's
/// dimensions. The output is acc / l once every key has been seen.
struct OnlineState {
    float m = -INFINITY;        ///< the largest score so far
    float l = 0.f;              ///< the sum of exp(s - m) over the keys so far
    float acc[kLaneDims] = {};  ///< the sum of exp(s - m) v, this lane's dimensions
};

/// Folds one key into a query's running state @p st (the online softmax of lab 04's v2): with
/// its score @p s and this lane's dimensions @p vr of its V row, m_new = max(m, s), l and acc
/// are rescaled by exp(m - m_new) (0 on the first key, m = -inf) and gain p = exp(s - m_new)
/// and p v. Every exponent is <= 0, so nothing overflows however large the scores.
__device__ __forceinline__ void online_update(OnlineState& st, float s, const float (&vr)[kLaneDims]) {
    const float m_new = fmaxf(st.m, s);
    const float correction = expf(st.m - m_new);
    const float p = expf(s - m_new);
    st.l = st.l * correction + p;
#pragma unroll
    for (int r = 0; r < kLaneDims; ++r) st.acc[r] = fmaf(st.acc[r], correction, p * vr[r]);
    st.m = m_new;
}

/// This lane's dimensions of a row of @p d elements (lane + 32 r), as fp32; zeros past d.
template <typename T>
__device__ __forceinline__ void load_lane_dims(const T* row, int d, float (&out)[kLaneDims]) {
    const int lane = threadIdx.x % kWarpSize;
#pragma unroll
    for (int r = 0; r < kLaneDims; ++r) {
        const int c = lane + r * kWarpSize;
        out[r] = c < d ? to_f32(row[c]) : 0.f;
    }
}

/// The dot product of two rows held as lane dimensions, in every lane of the warp.
__device__ __forceinline__ float dot_lanes(const float (&a)[kLaneDims], const float (&b)[kLaneDims]) {
    float s = 0.f;
#pragma unroll
    for (int r = 0; r < kLaneDims; ++r) s = fmaf(a[r], b[r], s);
    return warp_reduce_sum(s);
}

/// Shared memory for merging the warps' states of kG queries.
template <int kG>
struct WarpStates {
    float m[kDecodeWarps][kG];                 ///< each warp's m per query
    float l[kDecodeWarps][kG];                 ///< each warp's l per query
    float acc[kDecodeWarps][kG][kMaxHeadDim];  ///< each warp's acc per query, all d dimensions
};

// [merge_warps]
/// Merges the kDecodeWarps warps' states of the first @p group of kG queries: with
/// M = max_w m_w, the block's state is M, L = sum_w l_w e^(m_w - M) and
/// A[c] = sum_w acc_w[c] e^(m_w - M). Then write(g, c, M, L, A[c]) is called once per query g
/// and dimension c < d. A warp that saw no key has m = -inf and weighs e^-inf = 0. Every thread
/// of the block must call it.
template <int kG, typename Write>
__device__ __forceinline__ void merge_warps(const OnlineState (&st)[kG], int group, int d, WarpStates<kG>& sh,
                                            Write write) {
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    for (int g = 0; g < group && g < kG; ++g) {
        if (lane == 0) {
            sh.m[warp][g] = st[g].m;
            sh.l[warp][g] = st[g].l;
        }
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r)
            if (lane + r * kWarpSize < d) sh.acc[warp][g][lane + r * kWarpSize] = st[g].acc[r];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * d; i += blockDim.x) {
        const int g = i / d, c = i % d;
        float M = -INFINITY;
        for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sh.m[w][g]);
        float L = 0.f, A = 0.f;
        for (int w = 0; w < kDecodeWarps; ++w) {
            const float scale = sh.m[w][g] == -INFINITY ? 0.f : expf(sh.m[w][g] - M);
            L = fmaf(sh.l[w][g], scale, L);
            A = fmaf(sh.acc[w][g][c], scale, A);
        }
        write(g, c, M, L, A);
    }
}
// [merge_warps]

/// Positions of sequence @p b's cache to attend to: kv_len[b], clamped to [0, S_max] so that a
/// bad length never reads outside the cache.
__device__ __forceinline__ int context_length(const int* kv_len, int b, int max_seq) {
    return min(max(kv_len[b], 0), max_seq);
}

}  // namespace pd::kernels::attention
