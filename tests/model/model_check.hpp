/// @file model_check.hpp
/// @brief Shared by the model-level tests: the tiny preset and seeded random token ids.
#pragma once

#include "pd/model_config.hpp"
#include "pd/rng.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pd::test {

/// The tiny preset (common/src/model_config.cpp): seconds per model on the simulator.
inline ModelConfig tiny() {
    return *find_model("tiny");
}

/// @p n token ids drawn uniformly from [0, @p vocab), seeded.
inline std::vector<int> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
    Rng rng(seed);
    std::vector<int> t(n);
    for (int& x : t) x = rng.integer(0, vocab - 1);
    return t;
}

}  // namespace pd::test
