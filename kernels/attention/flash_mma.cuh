/// @file flash_mma.cuh
/// @brief What chapter 07's tensor-core steps (v4 ch07_v4_mma.cu, v5 ch07_v5_ldmatrix_swizzle.cu,
/// v6 ch07_v6_cp_async.cu) share and do not teach: the block's shape, the shared memory's size,
/// and the word-sized loads and stores that go through memcpy on the simulator. The steps' own
/// lessons (the tile layout, the fragment loads, the copies) are in their files.
#pragma once

#include "attention/flash_attention.hpp"
#include "pd/device_helpers.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace pd::kernels::attention {

/// Warps of a block of v4 to v6: each owns 16 of the block's queries (one m16 tile).
constexpr int kFlashMmaWarps = kFlashMmaQueries / 16;
/// Threads of a block of v4 to v6: 128.
constexpr int kFlashMmaThreads = kFlashMmaWarps * kWarpSize;
/// n8 tiles of a warp's scores per K tile: 64 keys / 8.
constexpr int kFlashScoreTiles = kFlashMmaKeys / 8;

static_assert(kFlashMmaQueries == kFlashMmaKeys, "the Q tile passes through a K tile's buffer");
static_assert(kFlashMmaKeys % 16 == 0 && kFlashScoreTiles % 2 == 0, "whole k16 steps of P V");

/// Bytes of one K or V tile in shared memory: 64 keys x kD bf16.
template <int kD>
constexpr int kFlashMmaTileBytes = kFlashMmaKeys* kD * 2;

/// A 32- or 16-bit word of shared memory at @p p (aligned to its size), as one load; through
/// memcpy on the simulator, as pd::load16(), since the tile's bytes are not objects of type W.
/// @param p the first byte  @return the word
template <typename W>
__device__ __forceinline__ W load_word(const unsigned char* p) {
#if defined(PD_BACKEND_SIM)
    W w;
    std::memcpy(&w, p, sizeof(w));
    return w;
#else
    return *reinterpret_cast<const W*>(p);
#endif
}

/// Stores @p a and @p b at @p p (8-byte aligned) as one 64-bit store: the 4 lanes of a group
/// then write a row's 8 consecutive floats, one 32-byte sector, in one request (two scalar
/// stores would touch each sector twice). Through memcpy on the simulator, as load_word().
/// @param p the first float  @param a the first value  @param b the second
__device__ __forceinline__ void store_pair(float* p, float a, float b) {
    const float2 v = make_float2(a, b);
#if defined(PD_BACKEND_SIM)
    std::memcpy(p, &v, sizeof(v));
#else
    *reinterpret_cast<float2*>(p) = v;
#endif
}

/// Two floats as bf16 in one register, @p lo in the low half (the first element of a pair).
/// @param lo the first element  @param hi the second  @return the packed pair
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
    return std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           std::uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16;
}

/// The launchers' checks of v4 to v6 (in ch07's dispatch, flash_attention.cu): the shape (d = 64
/// or 128), a GPU with bf16 tensor cores, Q, K and V 16-byte aligned (16-byte copies of whole
/// rows) and O 8-byte aligned (pairs of floats). Throws std::invalid_argument naming @p version.
void check_flash_mma(const char* version, const void* q, const void* k, const void* v, const float* out,
                     const Shape& s);

}  // namespace pd::kernels::attention
