// Helpers for the diagnostic programs (simulator only): after a launch that must fail, check the
// error code, that the simulator's diagnostic contains the expected words and source locations,
// then reset the device (a kernel fault leaves the context unusable, on a GPU as here) and check
// that the next valid launch works (check_recovered).
#pragma once

#include "check.cuh"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

namespace conformance {

/// How a child process ended, and what it printed (stdout and stderr together).
struct Outcome {
    int status = -1;  ///< the exit status, or -1 if it did not exit normally
    int signal = 0;   ///< the signal that ended it, or 0
    std::string output;
};

/// Runs this program again as `<program> <name>` in a child process, with @p env (such as
/// "PD_SIM_WATCHDOG_SECONDS=1") in its environment, for a case that must stop the program.
inline Outcome run_case(const char* name, const std::string& env = "") {
    char self[4096] = {};
    if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return {};
    const std::string command = env + (env.empty() ? "" : " ") + "'" + std::string(self) + "' " + name + " 2>&1";
    Outcome o;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return o;
    char buf[4096];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) o.output.append(buf, got);
    const int status = pclose(pipe);
    if (status != -1 && WIFEXITED(status)) o.status = WEXITSTATUS(status);
    if (status != -1 && WIFSIGNALED(status)) o.signal = WTERMSIG(status);
    return o;
}

/// The simulator's explanation of the last failed launch ("" on a GPU, which gives none).
inline std::string last_diagnostic() {
#ifdef PD_BACKEND_SIM
    return pd::sim::last_diagnostic();
#else
    return "";
#endif
}

/// "<this file>:<line>", as diagnostics name a source location.
inline std::string at(const char* file, int line) {
    return std::string(file) + ":" + std::to_string(line);
}

/// Checks the error of a failed launch (from cudaDeviceSynchronize and cudaGetLastError) and
/// that the diagnostic contains every one of @p words; then resets the device.
inline void expect_fault(const char* what, cudaError_t expected, std::initializer_list<std::string> words) {
    const cudaError_t sync = cudaDeviceSynchronize();
    const cudaError_t last = cudaGetLastError();
    const std::string diagnostic = last_diagnostic();
    bool ok = check(sync == expected, "cudaDeviceSynchronize() returns the expected error", __FILE__, __LINE__);
    ok &= check(last == expected, "cudaGetLastError() returns the expected error", __FILE__, __LINE__);
    if (sync != expected || last != expected)
        std::printf("    %s: expected %s, cudaDeviceSynchronize() gave %s, cudaGetLastError() gave %s\n", what,
                    cudaGetErrorName(expected), cudaGetErrorName(sync), cudaGetErrorName(last));
    for (const std::string& w : words) {
        const bool found = diagnostic.find(w) != std::string::npos;
        ok &= check(found, "the diagnostic names what went wrong", __FILE__, __LINE__);
        if (!found) std::printf("    %s: the diagnostic lacks \"%s\"\n", what, w.c_str());
    }
    if (!ok) std::printf("    %s: the diagnostic was: %s\n", what, diagnostic.c_str());
    CUDA_OK(cudaDeviceReset());
    const cudaError_t after = cudaGetLastError();
    check(after == cudaSuccess, "cudaDeviceReset() clears the error", __FILE__, __LINE__);
}

}  // namespace conformance

__global__ void diag_fill(int* out, int value) {
    out[threadIdx.x] = value;
}

/// After cudaDeviceReset, a valid kernel runs and writes its output: the fault was cleared.
inline void check_recovered(const char* what) {
    int* d;
    CUDA_OK(cudaMalloc(&d, 32 * sizeof(int)));
    diag_fill<<<1, 32>>>(d, 7);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int> h(32);
    CUDA_OK(cudaMemcpy(h.data(), d, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_MSG(h == std::vector<int>(32, 7), "after %s: a valid launch did not run", what);
    CUDA_OK(cudaFree(d));
}
