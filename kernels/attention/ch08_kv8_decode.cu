/// @file ch08_kv8_decode.cu
/// @brief Chapter 08, decode attention over the 8-bit KV cache (fp8 e4m3 or int8 codes, one fp32
/// scale per row). Predecessor: chapter 04's v4, ch04_v4_split.cu (v3 is its one-split case). The
/// one change: each K and V row is loaded as codes and multiplied by its row's scale in registers
/// (kv_quant.cuh's load_lane_dims()), a quarter of fp32's bytes and half of bf16's; the rest of
/// v4 is unchanged. (The paged cache in 8 bits, which the model runs, is the runtime's:
/// kernels/runtime/paged_decode.cu.)
#include "attention/decode_attention.hpp"
#include "attention/kv_quant.cuh"
#include "attention/online_softmax.cuh"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Keys whose K and V rows a warp loads before computing with them (as chapter 04's v3 and v4).
constexpr int kKv8KeysInFlight = 4;

// [kv8_decode_kernel]
/// Block (kv head, b, split): chapter 04's v4 block on a cache of 8-bit codes T (Fp8Kv or Int8Kv)
/// whose row scales are @p k_scales and @p v_scales [B, Hkv, S_max]. With one split (v3) the block
/// writes the output; with several its partial state, unnormalized, to @p partials.
template <typename T, int kG>
__global__ void decode_kv8_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const float* __restrict__ k_scales, const float* __restrict__ v_scales,
                                  const int* __restrict__ kv_len, float* __restrict__ out, float* __restrict__ partials,
                                  int heads, int kv_heads, int d, int max_seq, int chunk, float scale) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = context_length(kv_len, b, max_seq);
    const int begin = int(min((long long)split * chunk, (long long)len));  // no int overflow near the limits
    const int end = min(len - begin, chunk) + begin;
    const std::size_t kv_head = std::size_t(b) * kv_heads + kvh;
    const long long head_row = (long long)(kv_head)*max_seq * d;  // this KV head's position 0 in the slot
    const std::size_t first_q = std::size_t(b) * heads + std::size_t(kvh) * group;  // query heads of the group

    float qr[kG][kLaneDims] = {};  // zeros past the group
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        if (g < group) load_lane_dims(q + (first_q + g) * d, d, qr[g]);
        for (float& x : qr[g]) x *= scale;
    }
    OnlineState st[kG];
    // Each warp takes kKv8KeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = begin + warp * kKv8KeysInFlight; j0 < end; j0 += kDecodeWarps * kKv8KeysInFlight) {
        float kr[kKv8KeysInFlight][kLaneDims] = {}, vr[kKv8KeysInFlight][kLaneDims] = {};
#pragma unroll
        for (int u = 0; u < kKv8KeysInFlight; ++u) {
            if (j0 + u >= end) continue;
            const long long row = head_row + (long long)(j0 + u) * d;
            load_lane_dims(k, k_scales, row, d, kr[u]);  // K and V rows, dequantized: read once for the whole group
            load_lane_dims(v, v_scales, row, d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kKv8KeysInFlight; ++u) {
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
// [kv8_decode_kernel]

// [kv8_combine_kernel]
/// The second kernel, block (h, b), as chapter 04's v4's: the splits' states merge as the warps' did inside a block:
/// M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. A split past the end of
/// a shorter sequence saw no key (m = -inf) and weighs 0.
__global__ void kv8_combine_kernel(const float* __restrict__ partials, float* __restrict__ out, int heads, int d,
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
// [kv8_combine_kernel]

namespace {

template <typename T, int kG>
void launch_v4_for(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                   const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                   cudaStream_t stream) {
    const dim3 grid(unsigned(s.kv_heads), unsigned(s.batch), unsigned(splits));
    decode_kv8_kernel<T, kG><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, k_scales, v_scales, kv_len, out, partials, s.heads, s.kv_heads, s.head_dim, s.max_seq,
        ceil_div(s.max_kv_len, splits), 1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

/// Checks the shape and launches v4, instantiated for the smallest of 1, 2, 4, 8, 16 query heads
/// that holds the group: grid (Hkv, B, splits), 128 threads, each split ceil(max_kv_len / splits)
/// positions; then, with several splits, the combine.
template <typename T>
void launch_v4(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales, const int* kv_len,
               float* out, float* partials, int splits, const DecodeShape& s, cudaStream_t stream) {
    check_decode_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "decode attention v3/v4");
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("decode attention v3/v4: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("decode attention v4: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    const int group = s.group();
    if (group <= 1)
        launch_v4_for<T, 1>(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
    else if (group <= 2)
        launch_v4_for<T, 2>(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
    else if (group <= 4)
        launch_v4_for<T, 4>(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
    else if (group <= 8)
        launch_v4_for<T, 8>(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
    else
        launch_v4_for<T, 16>(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
    if (splits > 1) {
        kv8_combine_kernel<<<dim3(unsigned(s.heads), unsigned(s.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, s.heads, s.head_dim, splits);
        PD_CHECK_LAUNCH();
    }
}

}  // namespace

void decode_attention_v3(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream) {
    launch_v4(q, k, v, k_scales, v_scales, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v3(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, const DecodeShape& s, cudaStream_t stream) {
    launch_v4(q, k, v, k_scales, v_scales, kv_len, out, nullptr, 1, s, stream);
}
void decode_attention_v4(const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream) {
    launch_v4(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
}
void decode_attention_v4(const float* q, const Int8Kv* k, const Int8Kv* v, const float* k_scales, const float* v_scales,
                         const int* kv_len, float* out, float* partials, int splits, const DecodeShape& s,
                         cudaStream_t stream) {
    launch_v4(q, k, v, k_scales, v_scales, kv_len, out, partials, splits, s, stream);
}

namespace {

/// Chapter 08's 8-bit cache: v3 and v4 read it (v1 and lab 04's v2 take fp32 and bf16 only).
template <typename T>
void dispatch_kv8(const std::string& version, const float* q, const T* k, const T* v, const float* k_scales,
                  const float* v_scales, const int* kv_len, float* out, float* workspace, const DecodeShape& s,
                  int sm_count, cudaStream_t stream) {
    if (version == "v3") return decode_attention_v3(q, k, v, k_scales, v_scales, kv_len, out, s, stream);
    if (version == "v4")
        return decode_attention_v4(q, k, v, k_scales, v_scales, kv_len, out, workspace, decode_splits(s, sm_count), s,
                                   stream);
    throw std::invalid_argument("decode attention: version = " + version +
                                " does not read an 8-bit cache (v3 and v4 do)");
}

}  // namespace

void decode_attention(const std::string& version, const float* q, const Fp8Kv* k, const Fp8Kv* v, const float* k_scales,
                      const float* v_scales, const int* kv_len, float* out, float* workspace, const DecodeShape& s,
                      int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k, v, k_scales, v_scales, kv_len, out, workspace, s, sm_count, stream);
}
void decode_attention(const std::string& version, const float* q, const Int8Kv* k, const Int8Kv* v,
                      const float* k_scales, const float* v_scales, const int* kv_len, float* out, float* workspace,
                      const DecodeShape& s, int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k, v, k_scales, v_scales, kv_len, out, workspace, s, sm_count, stream);
}

}  // namespace pd::kernels::attention
