/// @file tile_common.cuh
/// @brief The guarded tile load of the tiled GEMM kernels of chapter 02 (v4 to v7); the
/// helpers every topic shares (16-byte loads, alignment, compute capability) are in
/// pd/device_helpers.cuh, which this header brings in.
#pragma once

#include "pd/device_helpers.cuh"

#include <cstddef>

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

}  // namespace pd::kernels::gemm
