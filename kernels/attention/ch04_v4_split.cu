/// @file ch04_v4_split.cu
/// @brief Chapter 04, decode attention v4: v3 split over the context (flash decoding).
/// Predecessor: v3, ch04_v3_gqa.cu. The one change: at small batch one block per (KV head,
/// sequence) is far too few blocks for the GPU (8 for llama-3-8b at B = 1 on 132 SMs), so each
/// (KV head, sequence) is served by `splits` blocks, each over a chunk of the context; each writes
/// its warps' merged state, unnormalized, and a second kernel combines the chunks by the same
/// rescaling rule (decode_splits() chooses how many).
#include "attention/decode_attention.hpp"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Keys whose K and V rows a warp of v4 loads before computing with them (as v3).
constexpr int kV4KeysInFlight = 4;

// [decode_v4_kernel]
/// Block (kv head, b, split): v3's block over positions [split * chunk, min(len, (split + 1) *
/// chunk)) of the context only, len = kv_len[b] clamped to S_max. With one split the block
/// writes the output, as v3; with several it writes its partial state, unnormalized, to
/// @p partials: acc [B, Hq, splits, d], then m and l [B, Hq, splits].
template <typename T, int kG>
__global__ void decode_split_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                    const int* __restrict__ kv_len, float* __restrict__ out,
                                    float* __restrict__ partials, int heads, int kv_heads, int d, int max_seq,
                                    int chunk, float scale) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = context_length(kv_len, b, max_seq);
    const int begin = int(min((long long)split * chunk, (long long)len));  // no int overflow near the limits
    const int end = min(len - begin, chunk) + begin;
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
    // Each warp takes kV4KeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = begin + warp * kV4KeysInFlight; j0 < end; j0 += kDecodeWarps * kV4KeysInFlight) {
        float kr[kV4KeysInFlight][kLaneDims] = {}, vr[kV4KeysInFlight][kLaneDims] = {};
#pragma unroll
        for (int u = 0; u < kV4KeysInFlight; ++u) {
            if (j0 + u >= end) continue;
            load_lane_dims(kh + std::size_t(j0 + u) * d, d, kr[u]);  // K and V rows: read once for the whole group
            load_lane_dims(vh + std::size_t(j0 + u) * d, d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kV4KeysInFlight; ++u) {
            if (j0 + u >= end) continue;  // the same for the whole warp: its shuffles stay converged
#pragma unroll
            for (int g = 0; g < kG; ++g) {
                if (g >= group) break;                                 // `group` is the same in the whole block
                online_update(st[g], dot_lanes(qr[g], kr[u]), vr[u]);  // the online softmax of v2, per query
            }
        }
    }
    merge_warps<kG>(st, group, d, shared, [&](int g, int c, float M, float L, float A) {
        const std::size_t row = first_q + g;  // b * Hq + h
        if (splits == 1) {
            out[row * d + c] = L > 0.f ? A / L : 0.f;
        } else {
            const std::size_t part = row * splits + split;
            partials[part * d + c] = A;
            if (c == 0) {
                const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;  // after all acc
                partials[stats + part] = M;
                partials[stats + std::size_t(gridDim.y) * heads * splits + part] = L;
            }
        }
    });
}
// [decode_v4_kernel]

// [decode_combine_kernel]
/// v4's second kernel, block (h, b): the splits' states merge as the warps' did inside a block:
/// M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. A split past the end of
/// a shorter sequence saw no key (m = -inf) and weighs 0.
__global__ void decode_combine_kernel(const float* __restrict__ partials, float* __restrict__ out, int heads, int d,
                                      int splits) {
    const std::size_t row = std::size_t(blockIdx.y) * heads + blockIdx.x;
    const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;
    const float* m = partials + stats + row * splits;
    const float* l = m + std::size_t(gridDim.y) * heads * splits;
    const float* acc = partials + row * splits * d;
    float M = -INFINITY;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, m[s]);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float L = 0.f, A = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float w = m[s] == -INFINITY ? 0.f : expf(m[s] - M);
            L = fmaf(l[s], w, L);
            A = fmaf(acc[std::size_t(s) * d + c], w, A);
        }
        out[row * d + c] = L > 0.f ? A / L : 0.f;
    }
}
// [decode_combine_kernel]

namespace {

template <typename T, int kG>
void launch_v4_for(const float* q, const T* k, const T* v, const int* kv_len, float* out, float* partials, int splits,
                   const DecodeShape& s, cudaStream_t stream) {
    const dim3 grid(unsigned(s.kv_heads), unsigned(s.batch), unsigned(splits));
    decode_split_kernel<T, kG><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, kv_len, out, partials, s.heads, s.kv_heads, s.head_dim, s.max_seq, ceil_div(s.max_kv_len, splits),
        1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

/// Checks the shape and launches v4, instantiated for the smallest of 1, 2, 4, 8, 16 query heads
/// that holds the group: grid (Hkv, B, splits), 128 threads, each split ceil(max_kv_len / splits)
/// positions; then, with several splits, the combine.
template <typename T>
void launch_v4(const float* q, const T* k, const T* v, const int* kv_len, float* out, float* partials, int splits,
               const DecodeShape& s, cudaStream_t stream) {
    check_decode_shape(s);
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("decode attention v4: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("decode attention v4: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    const int group = s.group();
    if (group <= 1)
        launch_v4_for<T, 1>(q, k, v, kv_len, out, partials, splits, s, stream);
    else if (group <= 2)
        launch_v4_for<T, 2>(q, k, v, kv_len, out, partials, splits, s, stream);
    else if (group <= 4)
        launch_v4_for<T, 4>(q, k, v, kv_len, out, partials, splits, s, stream);
    else if (group <= 8)
        launch_v4_for<T, 8>(q, k, v, kv_len, out, partials, splits, s, stream);
    else
        launch_v4_for<T, 16>(q, k, v, kv_len, out, partials, splits, s, stream);
    if (splits > 1) {
        decode_combine_kernel<<<dim3(unsigned(s.heads), unsigned(s.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, s.heads, s.head_dim, splits);
        PD_CHECK_LAUNCH();
    }
}

}  // namespace

void decode_attention_v4(const float* q, const float* k, const float* v, const int* kv_len, float* out, float* partials,
                         int splits, const DecodeShape& s, cudaStream_t stream) {
    launch_v4(q, k, v, kv_len, out, partials, splits, s, stream);
}
void decode_attention_v4(const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* kv_len, float* out,
                         float* partials, int splits, const DecodeShape& s, cudaStream_t stream) {
    launch_v4(q, k, v, kv_len, out, partials, splits, s, stream);
}

}  // namespace pd::kernels::attention
