// Checks shared by the kernel tests: guard elements after an output that must still hold the
// poison bytes, and bitwise comparison of two runs.
#pragma once

#include "pd/buffer.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

namespace pd::testing {

/// True when every float of @p values from index @p n on still holds pd::kPoisonByte in each
/// byte: the kernel wrote nothing past its output.
inline bool guard_intact(const std::vector<float>& values, std::size_t n) {
    for (std::size_t i = n; i < values.size(); ++i) {
        unsigned char bytes[sizeof(float)];
        std::memcpy(bytes, &values[i], sizeof(float));
        for (unsigned char b : bytes)
            if (b != pd::kPoisonByte) return false;
    }
    return true;
}

/// True when @p a and @p b hold the same bits (a rerun on the same input must give them).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace pd::testing
