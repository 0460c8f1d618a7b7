/// @file device_helpers.cuh
/// @brief The device helpers every kernel topic shares, written once: element conversion,
/// warp and block reductions, 16-byte alignment and accesses, and the compute-capability
/// checks launchers make before using tensor cores.
///
/// For `.cu` files only (nvcc, or the simulator's host build of a kernel source).
#pragma once

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pd {

// ---- element conversion -------------------------------------------------------------------

/// A float element as float (the identity), so kernels templated on the element type read both.
__device__ __forceinline__ float to_f32(float v) {
    return v;
}
/// A bf16 element as float (exact: a bf16 is the top half of the fp32 with the same value).
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

// ---- reductions ---------------------------------------------------------------------------

/// The sum as a binary functor, for warp_reduce() and block_reduce().
struct SumOp {
    /// @return @p a + @p b
    __device__ float operator()(float a, float b) const { return a + b; }
};
/// The maximum as a binary functor, for warp_reduce() and block_reduce().
struct MaxOp {
    /// @return the larger of @p a and @p b
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// [warp_reduce]
/// Butterfly reduction over the 32 lanes of a warp: after log2(32) = 5 exchanges every lane
/// holds the result, with no shared memory and no barrier. Every lane must call it.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

/// The sum of @p v over the 32 lanes of a warp, in every lane.
__device__ __forceinline__ float warp_reduce_sum(float v) {
    return warp_reduce(v, SumOp{});
}

// [warp_reduce_sums]
/// N sums over the warp at once (N a power of two, at most 32): every lane holds N values, and
/// lane j gets the warp's sum of v[j % N]. N separate warp_reduce_sum() calls take 5 N shuffles
/// and leave every sum in every lane; here each exchange also halves the values a lane keeps.
/// The offsets of 16 down to N move all N values (the sums cannot be spread over fewer lanes
/// yet); in the round of offset h < N a lane keeps the half of its 2h values that bit h of
/// its index selects and adds the partner's copy of that half, sending the other half. For
/// N = 32: 16 + 8 + 4 + 2 + 1 = 31 shuffles instead of 160. Every lane must call it; the lane
/// is threadIdx.x % 32 (a one-dimensional block, as every kernel here launches).
template <int N>
__device__ __forceinline__ float warp_reduce_sums(float (&v)[N]) {
    static_assert(N >= 1 && N <= kWarpSize && (N & (N - 1)) == 0, "warp_reduce_sums: N a power of two <= 32");
    const int lane = threadIdx.x % kWarpSize;
#pragma unroll
    for (int offset = kWarpSize / 2; offset >= N; offset /= 2)
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
#pragma unroll
    for (int h = N / 2; h >= 1; h /= 2) {
        const bool upper = (lane & h) != 0;
#pragma unroll
        for (int i = 0; i < h; ++i) {
            const float send = upper ? v[i] : v[i + h], keep = upper ? v[i + h] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, h);
        }
    }
    return v[0];
}
// [warp_reduce_sums]

/// Block-wide reduction for a block of kWarps full warps (kWarps <= 32): warps reduce in
/// registers, their leaders meet in @p warp_results (shared memory, kWarps floats), and every
/// warp reduces the leaders' values, so every thread gets the result. Two barriers: the second
/// lets the next call reuse @p warp_results. Every thread of the block must call it.
template <int kWarps, typename Op>
__device__ __forceinline__ float block_reduce(float v, float* warp_results, Op op, float identity) {
    static_assert(kWarps >= 1 && kWarps <= kWarpSize, "block_reduce: 1 to 32 warps");
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    v = warp_reduce(v, op);
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    v = warp_reduce(lane < kWarps ? warp_results[lane] : identity, op);
    __syncthreads();
    return v;
}
// [warp_reduce]

// ---- 16-byte alignment and accesses -------------------------------------------------------

/// True when @p p is 16-byte aligned, as 128-bit (uint4, float4, 8 x bf16) accesses require.
PD_HOST_DEVICE inline bool is_aligned16(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// 16 bytes from @p src (16-byte aligned) as one 128-bit load. On the simulator through memcpy,
/// which the host compiler turns into one vector load: reading bf16 objects through a uint4
/// lvalue would break C++'s aliasing rules there (nvcc defines it).
/// @param src the first byte  @return the 16 bytes
__device__ __forceinline__ uint4 load16(const void* src) {
#if defined(PD_BACKEND_SIM)
    uint4 v;
    std::memcpy(&v, src, sizeof(v));
    return v;
#else
    return *reinterpret_cast<const uint4*>(src);
#endif
}

/// Stores the 16 bytes @p v at @p dst (16-byte aligned) as one 128-bit store; through memcpy on
/// the simulator, as in load16().
/// @param dst the first byte  @param v the bytes
__device__ __forceinline__ void store16(void* dst, const uint4& v) {
#if defined(PD_BACKEND_SIM)
    std::memcpy(dst, &v, sizeof(v));
#else
    *reinterpret_cast<uint4*>(dst) = v;
#endif
}

// ---- compute capability (host side, before a launch) --------------------------------------

/// Compute capability of the current device as 10 * major + minor (80 for sm_80; the
/// simulated device is 8.0).
inline int compute_capability() {
    int device = 0, major = 0, minor = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return 10 * major + minor;
}

/// True when the current device has bf16 tensor cores (compute capability 8.0 or newer).
inline bool has_bf16_tensor_cores() {
    return compute_capability() >= 80;
}

/// Throws std::invalid_argument when the current device has no bf16 tensor cores (compute
/// capability below 8.0). @param who the launcher and version, for the message, e.g.
/// "gemm_wmma (v7)"
inline void require_bf16_tensor_cores(const char* who) {
    const int cc = compute_capability();
    if (cc < 80)
        throw std::invalid_argument(std::string(who) + " needs bf16 tensor cores, compute capability 8.0 or newer; " +
                                    "this GPU has " + std::to_string(cc / 10) + "." + std::to_string(cc % 10));
}

}  // namespace pd
