/// @file gemv_quant.cuh
/// @brief Chapter 08: what the quantized GEMVs of the three formats share, written once: the
/// launch geometry (so that their times compare), X's tokens staged in shared memory as 16-byte
/// units without bank conflicts (load_x8(), staged_slot(), stage_tokens()), a pair of floats
/// packed as bf16 (the _tc kernels' tiles), and the e4m3 decoding by moving bits (fp8_at(), which
/// chapter 08's 8-bit KV cache uses too). Each format's kernels are a step of their own:
/// ch08_int8_gemv.cu, ch08_fp8_gemv.cu and lab 08's gemv_int4.cu (the lab tree's).
#pragma once

#include "quant.hpp"

#include "pd/common.hpp"
#include "pd/device_helpers.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pd::kernels::quant {

/// Rows each warp computes (its loads of the 4 rows are in flight together).
constexpr int kQuantRowsPerWarp = 4;
/// Warps per block.
constexpr int kQuantWarps = 8;
/// Threads per block.
constexpr int kQuantThreads = kQuantWarps * kWarpSize;
/// Rows per block: the tokens staged in shared memory serve this many rows.
constexpr int kQuantRowsPerBlock = kQuantWarps * kQuantRowsPerWarp;
/// Columns of X staged in shared memory at a time (bf16: 2 KiB per token).
constexpr int kQuantChunk = 1024;

/// Warps per block of the tensor-core path: each computes one 16-row strip of W for all K.
constexpr int kQuantMmaWarps = 4;
/// Threads per block of the tensor-core path.
constexpr int kQuantMmaThreads = kQuantMmaWarps * kWarpSize;
/// Rows per block of the tensor-core path.
constexpr int kQuantMmaRows = kQuantMmaWarps * 16;
/// Columns of X staged at a time by the tensor-core path: 16 tokens x 512 bf16 = 16 KiB.
constexpr int kQuantMmaChunk = 512;
/// Packed vectors each lane loads before it decodes them (their loads in flight together).
constexpr int kQuantMmaLoads = 4;

// [fp8_decode]
/// The e4m3 byte @p b as an fp32, exactly: its sign, exponent and mantissa bits moved to the
/// places of fp32's (bit 7 to 31; bits 0-6 to 20-26), which reads as the value times 2^-120
/// (the exponent bias 127 instead of 7; a subnormal e4m3 lands on an fp32 subnormal with the same
/// mantissa); the multiplication by 2^120 is exact. (The e4m3 NaN, 0x7f, decodes to 480: the
/// quantizer never writes it.)
__device__ __forceinline__ float fp8_at(unsigned u, int i) {
    const unsigned b = (u >> (8 * i)) & 0xffu;
    return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
}
// [fp8_decode]

/// Where unit @p j of vector @p vec sits in a token's row of the staged chunk: xs[b][j][slot].
/// "Transposed" (unit j of every vector together), so that lanes reading unit j of neighbouring
/// vectors read neighbouring 16 bytes, and XOR-swizzled by j x 8 / kUnits, so that the 8 threads
/// of a store phase (units 0 ... kUnits - 1 of a few vectors) land in 8 different 16-byte bank
/// groups too. The XOR permutes vectors within aligned groups of 8: the reads stay conflict-free.
template <int kUnits>
__device__ __forceinline__ int staged_slot(int j, int vec) {
    return vec ^ (j * (8 / kUnits));
}

/// Columns c ... c + 7 of token @p b of X [batch, K] (bf16) as 16 bytes: one 128-bit load
/// where the 8 columns are inside K and 16-byte aligned, element by element otherwise; zeros
/// past K and past the batch.
__device__ __forceinline__ uint4 load_x8(const __nv_bfloat16* __restrict__ x, int k, int batch, int b, int c) {
    if (b >= batch || c >= k) return make_uint4(0u, 0u, 0u, 0u);
    const __nv_bfloat16* src = x + std::size_t(b) * k + c;
    if (c + 8 <= k && is_aligned16(src)) return load16(src);
    unsigned u[4] = {0u, 0u, 0u, 0u};  // the row's tail, or a row that is not 16-byte aligned (K % 8 != 0)
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (c + e < k) u[e / 2] |= unsigned(__bfloat16_as_ushort(src[e])) << (16 * (e % 2));
    return make_uint4(u[0], u[1], u[2], u[3]);
}

/// Stages columns c0 ... c0 + kQuantChunk - 1 of the kBatch tokens in shared memory, as
/// 16-byte units of 8 bf16 (unit j of a vector of kValues columns at xs[b][j][staged_slot()]).
/// Zeros past K and past the batch. Every thread calls it.
template <int kValues, int kBatch>
__device__ __forceinline__ void stage_tokens(uint4 (&xs)[kBatch][kValues / 8][kQuantChunk / kValues],
                                             const __nv_bfloat16* __restrict__ x, int k, int batch, int c0) {
    constexpr int kUnits = kValues / 8;
    for (int i = threadIdx.x; i < kBatch * kQuantChunk / 8; i += kQuantThreads) {
        const int b = i / (kQuantChunk / 8), unit = i % (kQuantChunk / 8);
        xs[b][unit % kUnits][staged_slot<kUnits>(unit % kUnits, unit / kUnits)] =
            load_x8(x, k, batch, b, c0 + 8 * unit);
    }
}

/// The bf16 bits of @p a and @p b, rounded to nearest even, in one 32-bit word (a in the low half).
__device__ __forceinline__ unsigned pack_bf16x2(float a, float b) {
    return unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(a))) |
           (unsigned(__bfloat16_as_ushort(__float2bfloat16_rn(b))) << 16);
}

}  // namespace pd::kernels::quant
