// Checks shared by the kernel tests and the lab tests: guard elements after an output that must
// still hold the poison bytes, and bitwise comparison of two runs. The lab tests include this
// file by its relative path ("../kernels/guard_check.hpp").
#pragma once

#include "pd/buffer.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

namespace pd::testing {

/// True when the float at @p i of @p values holds pd::kPoisonByte in each of its bytes: the
/// exact bits the buffer was filled with, not merely some NaN a kernel may have written.
inline bool still_poisoned(const std::vector<float>& values, std::size_t i) {
    unsigned char bytes[sizeof(float)];
    std::memcpy(bytes, &values[i], sizeof(float));
    for (unsigned char b : bytes)
        if (b != pd::kPoisonByte) return false;
    return true;
}

/// The number of floats of @p values from index @p n on that no longer hold the poison: the
/// guard elements a kernel wrote past its output (0 when the guard is intact).
inline std::size_t guard_written(const std::vector<float>& values, std::size_t n) {
    std::size_t written = 0;
    for (std::size_t i = n; i < values.size(); ++i) written += !still_poisoned(values, i);
    return written;
}

/// True when every float of @p values from index @p n on still holds pd::kPoisonByte in each
/// byte: the kernel wrote nothing past its output.
inline bool guard_intact(const std::vector<float>& values, std::size_t n) {
    return guard_written(values, n) == 0;
}

/// True when @p a and @p b hold the same bits (a rerun on the same input must give them).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace pd::testing
