/// @file gemv_common.cuh
/// @brief Device code shared by the GEMV versions of chapter 03: 16-byte vectors of 4 floats
/// or 8 bf16 (loaded with guards, unpacked) and the vectorized dot product of a row. The
/// helpers of every topic (to_f32(), warp_reduce_sum(), is_aligned16()) come from
/// pd/device_helpers.cuh.
#pragma once

#include "pd/common.hpp"
#include "pd/device_helpers.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace pd::kernels::gemv {

/// Elements of type T in one 16-byte vector: 4 floats or 8 bf16.
template <typename T>
inline constexpr int kVecElems = 16 / int(sizeof(T));

// [gemv_unpack16]
/// The kVecElems<T> elements packed in @p v, as floats. A bf16 is the high half of the fp32
/// with the same value, so the conversion is a shift or a mask, no arithmetic. @p v is taken by
/// value: a caller's uint4 in shared memory is read whole, one 128-bit load (as nvcc issues it;
/// the simulator's profiler then counts one 16-byte access, not four 4-byte ones).
template <typename T>
__device__ __forceinline__ void unpack16(const uint4 v, float (&f)[kVecElems<T>]) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
    if constexpr (std::is_same_v<T, float>) {
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(u[i]);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = __uint_as_float(u[i] << 16);              // element 2i: the low half (little-endian)
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);  // element 2i + 1: the high half
        }
    }
}
// [gemv_unpack16]

/// The bits of one element, for packing elements read one by one into a uint4.
__device__ __forceinline__ unsigned element_bits(float v) {
    return __float_as_uint(v);
}
/// The 16 bits of one bf16 element.
__device__ __forceinline__ unsigned element_bits(__nv_bfloat16 v) {
    return __bfloat16_as_ushort(v);
}

/// Elements k ... k + kVecElems<T> - 1 of @p row as one 16-byte vector, zeros at and beyond
/// @p K. kAligned: one 128-bit load, which needs row + k 16-byte aligned and K a multiple of
/// kVecElems<T> (so a vector is wholly inside the row or wholly past it); otherwise the
/// elements are read one by one, for any alignment and any K.
template <typename T, bool kAligned>
__device__ __forceinline__ uint4 load_vec16(const T* __restrict__ row, int k, int K) {
    if constexpr (kAligned) {
        return k < K ? __ldg(reinterpret_cast<const uint4*>(row + k)) : make_uint4(0u, 0u, 0u, 0u);
    } else {
        constexpr int kPerWord = 4 / int(sizeof(T));  // elements per 32-bit word: 1 or 2
        unsigned u[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int e = 0; e < kVecElems<T>; ++e)
            if (k + e < K) u[e / kPerWord] |= element_bits(row[k + e]) << (32 / kPerWord * (e % kPerWord));
        return make_uint4(u[0], u[1], u[2], u[3]);
    }
}

// [gemv_vectorized_dot]
/// Independent 16-byte loads each lane issues per iteration of lane_dot_vectors: 4, so that a
/// warp keeps 2 KiB of W in flight, enough (with a few warps per SM) to cover DRAM latency.
inline constexpr int kVectorizedUnroll = 4;

/// fma of the kVecElems<T> products of two 16-byte vectors into @p acc, in element order.
template <typename T>
__device__ __forceinline__ float dot16(const uint4& w, const uint4& x, float acc) {
    float wf[kVecElems<T>], xf[kVecElems<T>];
    unpack16<T>(w, wf);
    unpack16<T>(x, xf);
#pragma unroll
    for (int e = 0; e < kVecElems<T>; ++e) acc = fmaf(wf[e], xf[e], acc);
    return acc;
}

/// This lane's share of the dot product of @p vecs 16-byte vectors of W (16-byte aligned) and
/// of X: vectors lane, lane + 32, ...; kVectorizedUnroll loads are issued before their
/// products are summed. kXVec: X is 16-byte aligned too and is read as vectors; otherwise its
/// elements are read one by one (X is small and cached, so only W needs the wide loads).
template <typename T, bool kXVec>
__device__ __forceinline__ float lane_dot_vectors(const uint4* __restrict__ wv, const T* __restrict__ x, int vecs,
                                                  int lane) {
    constexpr int E = kVecElems<T>;
    float acc = 0.f;
    int i = lane;
    for (; i + (kVectorizedUnroll - 1) * kWarpSize < vecs; i += kVectorizedUnroll * kWarpSize) {
        uint4 wq[kVectorizedUnroll], xq[kVectorizedUnroll];
#pragma unroll
        for (int u = 0; u < kVectorizedUnroll; ++u) wq[u] = __ldg(wv + i + u * kWarpSize);
#pragma unroll
        for (int u = 0; u < kVectorizedUnroll; ++u) xq[u] = load_vec16<T, kXVec>(x, (i + u * kWarpSize) * E, vecs * E);
#pragma unroll
        for (int u = 0; u < kVectorizedUnroll; ++u) acc = dot16<T>(wq[u], xq[u], acc);
    }
    for (; i < vecs; i += kWarpSize) acc = dot16<T>(__ldg(wv + i), load_vec16<T, kXVec>(x, i * E, vecs * E), acc);
    return acc;
}

/// This lane's share of the dot product of one row of W with one row of X, both of length @p k,
/// for any alignment of @p w: the elements before the row's first 16-byte boundary (fewer than
/// one vector) and after its last whole vector are read one by one, the rest as 16-byte vectors.
template <typename T>
__device__ __forceinline__ float lane_dot_vectorized(const T* __restrict__ w, const T* __restrict__ x, int k,
                                                     int lane) {
    constexpr int E = kVecElems<T>;
    const int to_boundary = int((16 - reinterpret_cast<std::uintptr_t>(w) % 16) % 16 / sizeof(T));
    const int head = to_boundary < k ? to_boundary : k;  // < E <= 8 elements: one per lane
    float acc = lane < head ? to_f32(w[lane]) * to_f32(x[lane]) : 0.f;
    const int vecs = (k - head) / E;
    const uint4* wv = reinterpret_cast<const uint4*>(w + head);
    // X row b starts at x + b * K: it may sit at another offset from a 16-byte boundary than W's row.
    acc += is_aligned16(x + head) ? lane_dot_vectors<T, true>(wv, x + head, vecs, lane)
                                  : lane_dot_vectors<T, false>(wv, x + head, vecs, lane);
    for (int c = head + vecs * E + lane; c < k; c += kWarpSize) acc = fmaf(to_f32(w[c]), to_f32(x[c]), acc);
    return acc;
}
// [gemv_vectorized_dot]

}  // namespace pd::kernels::gemv
