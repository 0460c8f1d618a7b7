/// @file decode_attention_online.cu
/// @brief Lab 04, part 1: v2 of decode attention = v1 (Predecessor: kernels/attention/ch04_v1_scores_in_memory.cu)
/// with the online softmax: one pass over the cache, no score buffer.
///
/// One block per (sequence b, query head h), four warps. Warp w walks keys w, w + 4, w + 8, ...
/// of the sequence's cache; for each key it computes the score s = q . k_j / sqrt(d) (lanes hold
/// 4 dimensions each, a shuffle reduction adds them) and folds the key into its running state
/// (m, l, acc): the largest score so far, the sum of exp(s - m), and the sum of exp(s - m) v.
/// When a larger score arrives, what was summed so far is rescaled by exp(m_old - m_new), so
/// the result equals softmax(s) V without ever storing s. merge_warps() then combines the four
/// warps' states the same way and the output is acc / l.
#include "attention/decode_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>

namespace pd::kernels::attention {

// [decode_v2_kernel]
/// Block (h, b): out[b][h][:] = softmax(q k^T / sqrt(d)) v over the first kv_len[b] positions
/// of KV head h / (Hq / Hkv) of sequence b, in one pass over the cache.
template <typename T>
__global__ void decode_attention_v2_kernel(const float* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, const int* __restrict__ kv_len,
                                           float* __restrict__ out, int heads, int kv_heads, int d, int max_seq,
                                           float scale) {
    __shared__ WarpStates<1> shared;
    const int h = blockIdx.x, b = blockIdx.y;
    const int warp = threadIdx.x / kWarpSize;
    const int len = context_length(kv_len, b, max_seq);
    const std::size_t kv_head = std::size_t(b) * kv_heads + h / (heads / kv_heads);
    const T* kh = k + kv_head * max_seq * d;  // K[b][kv_head]: max_seq rows of d
    const T* vh = v + kv_head * max_seq * d;

    float qr[kLaneDims];  // this lane's dimensions of the query, pre-scaled by 1 / sqrt(d)
    load_lane_dims(q + (std::size_t(b) * heads + h) * d, d, qr);
    for (float& x : qr) x *= scale;

    OnlineState st[1];  // this warp's running state (m, l, acc) for the block's one query
    // BEGIN LAB: 1. for each key j of this warp (j = warp, warp + kDecodeWarps, ... below len): load this lane's dimensions of row j of K (load_lane_dims(kh + j * d, d, kr)), s = dot_lanes(qr, kr), then fold (s, row j of V) into st[0]: m_new = max(m, s); rescale l and acc by exp(m - m_new) (0 on the first key: m = -inf); add p = exp(s - m_new) to l and p * v to acc; m = m_new. No score buffer, no shared memory (~12 lines)
    //~ (void)kh;
    //~ (void)vh;
    //~ (void)warp;
    //~ (void)len;
    for (int j = warp; j < len; j += kDecodeWarps) {
        float kr[kLaneDims], vr[kLaneDims];
        load_lane_dims(kh + std::size_t(j) * d, d, kr);
        const float s = dot_lanes(qr, kr);
        const float m_new = fmaxf(st[0].m, s);
        const float correction = expf(st[0].m - m_new);  // exp(-inf) = 0 on the first key
        const float p = expf(s - m_new);
        load_lane_dims(vh + std::size_t(j) * d, d, vr);
        st[0].l = st[0].l * correction + p;
        for (int r = 0; r < kLaneDims; ++r) st[0].acc[r] = fmaf(st[0].acc[r], correction, p * vr[r]);
        st[0].m = m_new;
    }
    // END LAB

    float* out_bh = out + (std::size_t(b) * heads + h) * d;
    merge_warps<1>(st, 1, d, shared, [&](int, int c, float, float L, float A) { out_bh[c] = L > 0.f ? A / L : 0.f; });
}
// [decode_v2_kernel]

/// Checks the shape and launches v2: grid (Hq, B), 128 threads.
template <typename T>
void launch_decode_v2(const float* q, const T* k, const T* v, const int* kv_len, float* out, const DecodeShape& s,
                      cudaStream_t stream) {
    check_decode_shape(s);
    const dim3 grid(unsigned(s.heads), unsigned(s.batch));
    decode_attention_v2_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, kv_len, out, s.heads, s.kv_heads, s.head_dim, s.max_seq, 1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

void decode_attention_v2(const float* q, const float* k, const float* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_decode_v2(q, k, v, kv_len, out, s, stream);
}

void decode_attention_v2(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_decode_v2(q, k, v, kv_len, out, s, stream);
}

}  // namespace pd::kernels::attention
