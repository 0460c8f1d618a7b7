/// @file ch04_v3_gqa.cu
/// @brief Chapter 04, decode attention v3: v2 per KV head. Predecessor: v2 (lab 04,
/// solutions/04_kv_cache/decode_attention_online.cu). The one change: one block serves a KV head
/// and its whole group of query heads (grouped-query attention), so each K and V row is loaded
/// once for the group instead of once per query head, and each warp keeps 4 keys' rows in flight
/// before computing with them. v4 (ch04_v4_split.cu) splits the context among several blocks.
#include "attention/decode_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Keys whose K and V rows a warp of v3 loads before computing with them.
constexpr int kV3KeysInFlight = 4;

// [decode_v3_kernel]
/// Block (kv head, b): the group's query heads (up to kG of them, `group` in use) all attend to
/// the first min(kv_len[b], max_kv_len) positions of the same KV head of sequence b's slot (the
/// cache [B, Hkv, S_max, d], sequence b in slot b), so every K and V row is loaded once and used
/// for each query of the group (v2 loads it once per query head). Each warp keeps one
/// OnlineState per query and works on kV3KeysInFlight consecutive keys at a time; the 4 warps'
/// states are merged at the end, as in v2.
template <typename T, int kG>
__global__ void decode_gqa_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const int* __restrict__ kv_len, float* __restrict__ out, int heads, int kv_heads,
                                  int d, int max_seq, int max_kv_len, float scale) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y;
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = min(context_length(kv_len, b, max_seq), max_kv_len);
    const std::size_t kv_head = std::size_t(b) * kv_heads + kvh;
    const T* kh = k + kv_head * max_seq * d;  // this KV head's positions in the slot
    const T* vh = v + kv_head * max_seq * d;
    const std::size_t first_q = std::size_t(b) * heads + std::size_t(kvh) * group;  // query heads of the group

    float qr[kG][kLaneDims] = {};  // zeros past the group
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        if (g < group) load_lane_dims(q + (first_q + g) * d, d, qr[g]);
        for (float& x : qr[g]) x *= scale;
    }
    OnlineState st[kG];
    // Each warp takes kV3KeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = warp * kV3KeysInFlight; j0 < len; j0 += kDecodeWarps * kV3KeysInFlight) {
        float kr[kV3KeysInFlight][kLaneDims] = {}, vr[kV3KeysInFlight][kLaneDims] = {};
#pragma unroll
        for (int u = 0; u < kV3KeysInFlight; ++u) {
            if (j0 + u >= len) continue;
            load_lane_dims(kh + std::size_t(j0 + u) * d, d, kr[u]);  // K and V rows: read once for the whole group
            load_lane_dims(vh + std::size_t(j0 + u) * d, d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kV3KeysInFlight; ++u) {
            if (j0 + u >= len) continue;  // the same for the whole warp: its shuffles stay converged
#pragma unroll
            for (int g = 0; g < kG; ++g) {
                if (g >= group) break;                                 // `group` is the same in the whole block
                online_update(st[g], dot_lanes(qr[g], kr[u]), vr[u]);  // the online softmax of v2, per query
            }
        }
    }
    merge_warps<kG>(st, group, d, shared, [&](int g, int c, float M, float L, float A) {
        out[(first_q + g) * d + c] = L > 0.f ? A / L : 0.f;
    });
}
// [decode_v3_kernel]

namespace {

template <typename T, int kG>
void launch_v3_for(const float* q, const T* k, const T* v, const int* kv_len, float* out, const DecodeShape& s,
                   cudaStream_t stream) {
    const dim3 grid(unsigned(s.kv_heads), unsigned(s.batch));
    decode_gqa_kernel<T, kG><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, kv_len, out, s.heads, s.kv_heads, s.head_dim,
                                                                  s.max_seq, s.max_kv_len,
                                                                  1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

/// Checks the shape and launches v3, instantiated for the smallest of 1, 2, 4, 8, 16 query heads
/// that holds the group: grid (Hkv, B), 128 threads.
template <typename T>
void launch_v3(const float* q, const T* k, const T* v, const int* kv_len, float* out, const DecodeShape& s,
               cudaStream_t stream) {
    check_decode_shape(s);
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("decode attention v3: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    const int group = s.group();
    if (group <= 1)
        launch_v3_for<T, 1>(q, k, v, kv_len, out, s, stream);
    else if (group <= 2)
        launch_v3_for<T, 2>(q, k, v, kv_len, out, s, stream);
    else if (group <= 4)
        launch_v3_for<T, 4>(q, k, v, kv_len, out, s, stream);
    else if (group <= 8)
        launch_v3_for<T, 8>(q, k, v, kv_len, out, s, stream);
    else
        launch_v3_for<T, 16>(q, k, v, kv_len, out, s, stream);
}

}  // namespace

void decode_attention_v3(const float* q, const float* k, const float* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_v3(q, k, v, kv_len, out, s, stream);
}
void decode_attention_v3(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         const DecodeShape& s, cudaStream_t stream) {
    launch_v3(q, k, v, kv_len, out, s, stream);
}

}  // namespace pd::kernels::attention
