/// @file rng.hpp
/// @brief Seeded random inputs: the same seed gives the same data on every platform.
///
/// `std::mt19937_64` is specified bit for bit by the C++ standard, but the standard
/// distributions are not, so the conversions to float are written out here.
#pragma once

#include "pd/half.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>

namespace pd {

/// A seeded generator of uniform and normal floats, reproducible across compilers.
class Rng {
public:
    /// A generator whose whole sequence is fixed by @p seed.
    explicit Rng(std::uint64_t seed) : engine_(seed) {}

    /// Uniform in [0, 1) with 24 random bits (every value exactly representable as float).
    float uniform01() { return static_cast<float>(engine_() >> 40) * 0x1.0p-24f; }
    /// Uniform in [lo, hi).
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform01(); }
    /// Standard normal (Box-Muller on 53-bit uniforms), scaled to @p mean and @p stddev.
    float normal(float mean = 0.f, float stddev = 1.f) {
        const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;          // [0, 1)
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        return static_cast<float>(mean + stddev * z);
    }
    /// Uniform integer in [lo, hi] (small ranges; the modulo bias is below 2^-50).
    int integer(int lo, int hi) {
        if (hi < lo) throw std::invalid_argument("Rng::integer: hi < lo");
        return lo + static_cast<int>(engine_() % static_cast<std::uint64_t>(hi - lo + 1));
    }
    /// The next raw 64-bit value.
    std::uint64_t next() { return engine_(); }

private:
    std::mt19937_64 engine_;
};

/// Fills @p out with values uniform in [lo, hi), rounded to T (float, __half, __nv_bfloat16).
template <typename T>
void fill_uniform(std::span<T> out, float lo, float hi, std::uint64_t seed) {
    Rng rng(seed);
    for (T& x : out) x = from_float<T>(rng.uniform(lo, hi));
}

/// Fills @p out with normal values (@p mean, @p stddev), rounded to T.
template <typename T>
void fill_normal(std::span<T> out, float mean, float stddev, std::uint64_t seed) {
    Rng rng(seed);
    for (T& x : out) x = from_float<T>(rng.normal(mean, stddev));
}

/// Fills @p out with integers uniform in [lo, hi]; exact in every type for |v| <= 256, so
/// products and sums of them can be compared exactly.
template <typename T>
void fill_integers(std::span<T> out, int lo, int hi, std::uint64_t seed) {
    Rng rng(seed);
    for (T& x : out) x = from_float<T>(static_cast<float>(rng.integer(lo, hi)));
}

/// Derives an independent seed for input number @p stream from the program's seed, so that
/// each tensor of a problem gets its own sequence (SplitMix64 finalizer).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

}  // namespace pd
