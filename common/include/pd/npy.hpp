/// @file npy.hpp
/// @brief Writing (and reading back) NumPy `.npy` files, for `--dump DIR`.
///
/// Format version 1.0, little-endian, C order. In Python: `numpy.load("q.npy")`.
#pragma once

#include "pd/half.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pd {

/// Writes @p data with @p shape to @p path. Supported element types: float (`<f4`), double
/// (`<f8`), __half (`<f2`), std::int32_t (`<i4`), std::int64_t (`<i8`), std::uint8_t (`|u1`).
/// NumPy has no bfloat16: write bf16 tensors converted to float.
/// @pre the product of @p shape equals data.size(). Throws std::runtime_error on I/O errors.
template <typename T>
void write_npy(const std::string& path, std::span<const T> data, std::vector<std::size_t> shape);

/// A .npy file read back: its dtype descriptor (e.g. "<f4"), shape and raw bytes.
struct NpyArray {
    /// NumPy dtype descriptor, e.g. "<f4".
    std::string descr;
    /// Dimensions, outermost first.
    std::vector<std::size_t> shape;
    /// True for column-major data (write_npy always writes C order).
    bool fortran_order = false;
    /// The element data as stored in the file.
    std::vector<std::uint8_t> bytes;
    /// Number of elements (product of the shape).
    std::size_t size() const;
    /// The data as floats. @pre descr == "<f4"
    std::vector<float> as_float() const;
};

/// Reads a version 1.0 .npy file written by write_npy (or NumPy). Throws on malformed input.
NpyArray read_npy(const std::string& path);

/// Converts bf16 values to float, for dumping (NumPy has no bfloat16).
std::vector<float> to_float_vector(std::span<const __nv_bfloat16> values);

}  // namespace pd
