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

/// The simulator work of one kernel launch, in FLOPs, what pd::kSimWorkBudget counts before a
/// run on the simulator: the FLOPs its threads execute (the idle rows and columns of a block
/// tile included: they compute zeros); the FLOPs of matrix instructions emulated through WMMA,
/// counted 8 times; 600 per thread started; and 1,600 per warp shuffle or vote (a rendezvous of
/// the warp's 32 threads). The weights are times measured on a 2-core machine, where the
/// simulator's WMMA runs about 8 times slower per FLOP than its mma.sync and its SIMT FMAs
/// (chapter 02's v7 against v6 and v8), a thread costs about 0.5 us to start and retire, and a
/// warp collective about 1.6 us: as much time as that many FLOPs. There the simulator does 1 to 5
/// GFLOP of this work per second (an estimate, to refuse runs of hours before they start;
/// chapters 00 to 03 also count their inputs and CPU references, @ref kSimElementWork).
/// @param threads threads the launch starts  @param flops FLOPs of its SIMT arithmetic
/// @param wmma_flops FLOPs of its WMMA matrix instructions  @param collectives warp shuffles and votes
/// @return the work, in FLOPs
inline constexpr double sim_launch_work(double threads, double flops, double wmma_flops = 0, double collectives = 0) {
    return 600 * threads + flops + 8 * wmma_flops + 1600 * collectives;
}
/// The simulator work, in FLOPs, of one input element a chapter program handles on the host:
/// drawing it, rounding it, copying it to the device and back, checking it (about 50 ns each).
inline constexpr double kSimElementWork = 50;

/// Bytes in one gibibyte and one mebibyte, for sizes printed to the user.
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
/// Bytes in one gibibyte (2^30).
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

}  // namespace pd
