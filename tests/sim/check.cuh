// Self-checking helpers for the conformance programs: each program runs on the simulator and,
// unchanged, on a GPU, checks its results against values computed on the host, and exits 0
// only when every check passed.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace conformance {

inline int checks_passed = 0;
inline int checks_failed = 0;

/// Records one check; prints the failure with its location.
inline void check(bool ok, const char* what, const char* file, int line) {
    if (ok) {
        ++checks_passed;
    } else {
        ++checks_failed;
        std::printf("FAILED %s:%d: %s\n", file, line, what);
    }
}

/// Prints the closing line and returns the exit code of the program.
inline int finish() {
    std::printf("%d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed == 0 ? 0 : 1;
}

}  // namespace conformance

/// Checks a condition and keeps going.
#define CHECK(cond) ::conformance::check((cond), #cond, __FILE__, __LINE__)

/// Aborts the program when a CUDA call fails (an unexpected error is not a check result).
#define CUDA_OK(call)                                                                                   \
    do {                                                                                                \
        const cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess) {                                                                      \
            std::printf("CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(err_), cudaGetErrorString(err_), \
                        #call, __FILE__, __LINE__);                                                     \
            std::exit(1);                                                                               \
        }                                                                                               \
    } while (0)
