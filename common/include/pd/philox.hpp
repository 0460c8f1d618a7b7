/// @file philox.hpp
/// @brief Philox4x32-10, the counter-based generator every random draw of sampling uses, on the
/// host and on the device alike (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
/// SC 2011; cuRAND's and PyTorch's GPU generator).
///
/// A counter-based generator has no state to carry between draws: the draw number i of stream s
/// under seed k is a pure function of (k, s, i). A GPU thread computes its own draw without
/// reading or writing a shared state, a test recomputes any draw on the host, and the simulator
/// and the GPU give the same bits. Ten rounds of two 32x32 -> 64-bit multiplies scramble the
/// 128-bit counter under a 64-bit key; the key is bumped by the Weyl constants between rounds.
/// Its known-answer vectors (Random123's `kat_vectors`) are checked in tests/cpu.
#pragma once

#include "pd/common.hpp"

#include <cstdint>

namespace pd {

/// Four 32-bit words: a Philox counter, or one draw of 128 random bits.
struct Philox4 {
    std::uint32_t w[4];  ///< the words, w[0] first
};

/// Philox4x32 with 10 rounds: the 128 random bits of counter @p c under the key (@p k0, @p k1).
/// @param c the counter  @param k0 the key's low word  @param k1 the key's high word
/// @return the draw
PD_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
    constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // the round multipliers
    constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // the key's Weyl increments
    for (int round = 0; round < 10; ++round) {
        if (round > 0) k0 += W0, k1 += W1;
        const std::uint64_t p0 = std::uint64_t(M0) * c.w[0], p1 = std::uint64_t(M1) * c.w[2];
        const std::uint32_t hi0 = std::uint32_t(p0 >> 32), lo0 = std::uint32_t(p0);
        const std::uint32_t hi1 = std::uint32_t(p1 >> 32), lo1 = std::uint32_t(p1);
        c = Philox4{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
    }
    return c;
}

/// The 128 random bits of draw @p index of stream @p stream under @p seed: the seed is the key,
/// (index, stream) the counter. Sampling names its streams (one per sequence and purpose) and
/// numbers its draws by position, so a draw does not depend on which batch or thread makes it.
/// @param seed the run's seed  @param stream which sequence of draws  @param index which draw of it
/// @return the draw
PD_HOST_DEVICE inline Philox4 philox_draw(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
    return philox4x32_10(
        Philox4{{std::uint32_t(index), std::uint32_t(index >> 32), std::uint32_t(stream), std::uint32_t(stream >> 32)}},
        std::uint32_t(seed), std::uint32_t(seed >> 32));
}

/// A uniform float in [0, 1) from draw @p index of stream @p stream under @p seed: its first
/// word's top 24 bits, so every value is exact in float and the host and the device agree.
/// @param seed the run's seed  @param stream which sequence of draws  @param index which draw of it
/// @return u in [0, 1), a multiple of 2^-24
PD_HOST_DEVICE inline float philox_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
    return float(philox_draw(seed, stream, index).w[0] >> 8) * 0x1.0p-24f;
}

}  // namespace pd
