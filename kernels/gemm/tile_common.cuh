/// @file tile_common.cuh
/// @brief Small device helpers shared by the tiled GEMM kernels of chapter 02 (v4 to v7).
#pragma once

#include "pd/cuda_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pd::kernels::gemm {

/// Element (@p row, @p col) of a row-major matrix with @p rows rows, @p cols columns and
/// leading dimension @p cols, or zero when the index falls outside it: a tile that overhangs
/// the matrix reads zeros, which add nothing to a dot product.
/// @param m the matrix  @param row the row  @param col the column  @param rows the row count
/// @param cols the column count (and the row stride)
/// @return m[row][col] or T(0)
template <typename T>
__device__ __forceinline__ T load_or_zero(const T* __restrict__ m, int row, int col, int rows, int cols) {
    return row < rows && col < cols ? m[std::size_t(row) * cols + col] : T(0.f);
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

/// Whether @p p is aligned to @p bytes bytes (a power of two), as 128-bit loads require.
/// @param p the pointer  @param bytes the alignment  @return true when p % bytes == 0
inline bool is_aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

/// Throws std::invalid_argument when the current device has a compute capability below 8.0,
/// which bf16 tensor-core instructions need (the simulated device is 8.0).
/// @param who the launcher and version, for the message, e.g. "gemm_wmma (v7)"
inline void require_sm80(const char* who) {
    int device = 0, major = 0, minor = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major < 8)
        throw std::invalid_argument(std::string(who) + " needs bf16 tensor cores, compute capability 8.0 or newer; " +
                                    "this GPU has " + std::to_string(major) + "." + std::to_string(minor));
}

}  // namespace pd::kernels::gemm
