/// @file common.hpp
/// @brief Project-wide constants and tiny helpers, defined once for every chapter and kernel.
#pragma once

#include <cstddef>
#include <cstdint>

/// Marks a function usable from host and device code (empty in plain host builds).
#if defined(__CUDACC__) || defined(PD_BACKEND_SIM)
#define PD_HOST_DEVICE __host__ __device__
#else
#define PD_HOST_DEVICE
#endif

namespace pd {

/// Threads in a warp on every NVIDIA GPU the project supports (and on the simulator).
inline constexpr int kWarpSize = 32;

/// Integer division rounded up: the number of blocks of size @p b needed to cover @p a items.
/// @pre b > 0, a >= 0
template <typename T>
PD_HOST_DEVICE constexpr T ceil_div(T a, T b) {
    return (a + b - 1) / b;
}

/// Name of the backend this translation unit is built for: "cuda" or "sim".
inline constexpr const char* backend_name() {
#if defined(PD_BACKEND_SIM)
    return "sim";
#else
    return "cuda";
#endif
}

/// Bytes in one gibibyte and one mebibyte, for sizes printed to the user.
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
/// Bytes in one gibibyte (2^30).
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

}  // namespace pd
