// Self-checking helpers for the conformance programs: each program runs on the simulator and,
// unchanged, on a GPU, checks its results against values computed on the host, and exits 0
// only when every check passed. Host code only: this header is not rewritten for the simulator.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace conformance {

inline int checks_passed = 0;
inline int checks_failed = 0;

/// Records one check; prints the failure with its location. Returns @p ok.
inline bool check(bool ok, const char* what, const char* file, int line) {
    if (ok) {
        ++checks_passed;
    } else {
        ++checks_failed;
        std::printf("FAILED %s:%d: %s\n", file, line, what);
    }
    return ok;
}

/// Prints the closing line and returns the exit code of the program.
inline int finish() {
    std::printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed == 0 ? 0 : 1;
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants): seeded inputs that are the
/// same on every machine.
struct Lcg {
    std::uint64_t state;
    explicit Lcg(std::uint64_t seed) : state(seed * 2862933555777941757ull + 3037000493ull) {}
    std::uint32_t next() {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return std::uint32_t(state >> 32);
    }
    std::uint64_t next64() { return (std::uint64_t(next()) << 32) | next(); }
    /// Uniform in [lo, hi].
    int range(int lo, int hi) { return lo + int(next() % std::uint32_t(hi - lo + 1)); }
    /// Uniform in [lo, hi).
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 8) * (1.0f / 16777216.0f); }
};

/// Counts the elements where !eq(got[i], want[i]) and prints the first few with their indices.
template <typename T, typename Eq>
int mismatches(const char* what, const T* got, const T* want, std::size_t n, Eq eq) {
    int bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (eq(got[i], want[i])) continue;
        if (bad < 5) {
            if constexpr (std::is_integral_v<T>)
                std::printf("  %s[%zu]: got %lld, want %lld\n", what, i, (long long)got[i], (long long)want[i]);
            else if constexpr (std::is_floating_point_v<T>)
                std::printf("  %s[%zu]: got %.9g, want %.9g\n", what, i, double(got[i]), double(want[i]));
            else
                std::printf("  %s[%zu]: differs\n", what, i);
        }
        ++bad;
    }
    if (bad > 0) std::printf("  %s: %d of %zu elements differ\n", what, bad, n);
    return bad;
}

/// Bitwise equality (for floats: NaN payloads and signed zeros included).
template <typename T>
int bit_mismatches(const char* what, const T* got, const T* want, std::size_t n) {
    return mismatches(what, got, want, n, [](const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; });
}

}  // namespace conformance

namespace conformance {
/// The devices present; ends the program with exit code 77 (CTest: skipped) when there are fewer
/// than @p n (a GPU machine with one; the simulator without PD_SIM_DEVICES).
inline int devices_or_skip(int n) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (devices < n) {
        std::printf("needs %d devices, found %d: skipped\n", n, devices);
        std::exit(77);
    }
    return devices;
}
}  // namespace conformance

/// Checks a condition and keeps going.
#define CHECK(cond) ::conformance::check((cond), #cond, __FILE__, __LINE__)

/// Checks a condition; on failure also prints a printf-style explanation (seed, shape, ...).
#define CHECK_MSG(cond, ...)                                            \
    do {                                                                \
        if (!::conformance::check((cond), #cond, __FILE__, __LINE__)) { \
            std::printf("    ");                                        \
            std::printf(__VA_ARGS__);                                   \
            std::printf("\n");                                          \
        }                                                               \
    } while (0)

/// Aborts the program when a CUDA call fails (an unexpected error is not a check result).
#define CUDA_OK(call)                                                                                            \
    do {                                                                                                         \
        const cudaError_t err_ = (call);                                                                         \
        if (err_ != cudaSuccess) {                                                                               \
            std::printf("CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(err_), cudaGetErrorString(err_), \
                        #call, __FILE__, __LINE__);                                                              \
            std::exit(1);                                                                                        \
        }                                                                                                        \
    } while (0)
