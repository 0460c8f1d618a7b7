/// @file ch04_v1_scores_in_memory.cu
/// @brief Chapter 04, decode attention v1: the first step, one query per (sequence, query head)
/// over the KV cache as chapter 01 computes attention (no predecessor): the first decode step.
/// One block per (sequence, query head): the scores go to a buffer in memory, then the block
/// finds their maximum, then exponentiates and sums them (chapter 01's two-pass softmax), then
/// P V. v2 (lab 04, solutions/04_kv_cache/decode_attention_online.cu) folds the keys in one pass
/// with the online softmax.
#include "attention/decode_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>

namespace pd::kernels::attention {

// [decode_v1_kernel]
/// Block (h, b): the scores of the query against every cached key go to memory (one warp per
/// key in turn), then the block finds their maximum, then exponentiates and sums them (the
/// two passes of chapter 01's softmax), then thread c adds up P V for dimension c.
template <typename T>
__global__ void decode_attention_v1_kernel(const float* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, const int* __restrict__ kv_len,
                                           float* __restrict__ out, float* __restrict__ scores, int heads, int kv_heads,
                                           int d, int max_seq, int max_kv_len, float scale) {
    __shared__ float partials[kDecodeWarps];
    const int h = blockIdx.x, b = blockIdx.y;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int len = min(context_length(kv_len, b, max_seq), max_kv_len);
    const std::size_t kv_head = std::size_t(b) * kv_heads + h / (heads / kv_heads);
    const T* kh = k + kv_head * max_seq * d;
    const T* vh = v + kv_head * max_seq * d;
    float* s = scores + (std::size_t(b) * heads + h) * max_kv_len;  // this row of the score buffer

    float qr[kLaneDims];
    load_lane_dims(q + (std::size_t(b) * heads + h) * d, d, qr);
    for (int j = warp; j < len; j += kDecodeWarps) {  // 1. scores, one warp per key
        float kr[kLaneDims];
        load_lane_dims(kh + std::size_t(j) * d, d, kr);
        const float dot = dot_lanes(qr, kr);
        if (lane == 0) s[j] = dot * scale;
    }
    __syncthreads();  // the scores in memory are visible to the whole block

    float m = -INFINITY;  // 2. the maximum
    for (int j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, s[j]);
    m = block_reduce<kDecodeWarps>(m, partials, MaxOp{}, -INFINITY);
    float l = 0.f;  // 3. exponentiate in place and sum
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float e = expf(s[j] - m);
        s[j] = e;
        l += e;
    }
    l = block_reduce<kDecodeWarps>(l, partials, SumOp{}, 0.f);  // its barriers also publish s[]

    for (int c = threadIdx.x; c < d; c += blockDim.x) {  // 4. P V: consecutive threads, consecutive c
        float acc = 0.f;
        for (int j = 0; j < len; ++j) acc = fmaf(s[j], to_f32(vh[std::size_t(j) * d + c]), acc);
        out[(std::size_t(b) * heads + h) * d + c] = l > 0.f ? acc / l : 0.f;
    }
}
// [decode_v1_kernel]

namespace {

template <typename T>
void launch_v1(const float* q, const T* k, const T* v, const int* kv_len, float* out, float* scores,
               const DecodeShape& s, cudaStream_t stream) {
    check_decode_shape(s);
    const dim3 grid(unsigned(s.heads), unsigned(s.batch));
    decode_attention_v1_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, kv_len, out, scores, s.heads,
                                                                       s.kv_heads, s.head_dim, s.max_seq, s.max_kv_len,
                                                                       1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

}  // namespace

void decode_attention_v1(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* scores,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_v1(q, k, v, kv_len, out, scores, s, stream);
}
void decode_attention_v1(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* scores, const DecodeShape& s, cudaStream_t stream) {
    launch_v1(q, k, v, kv_len, out, scores, s, stream);
}

}  // namespace pd::kernels::attention
