// Device-side faults: an assert() that fails in one thread of one block stops the launch with
// cudaErrorAssert, and the message names that block and thread, the assertion and its source
// line; __trap() in one thread gives cudaErrorLaunchFailure with the same details. assert() is
// enabled here even in a Release build (NDEBUG is undefined before <cassert>). After each,
// cudaDeviceReset() and a valid launch runs.
#undef NDEBUG
#include <cassert>

#include "diag.cuh"

#include <vector>

constexpr int kAssertLine = __LINE__ + 4;
__global__ void check_non_negative(const int* in, int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    assert(in[i] >= 0);
    out[i] = in[i];
}

constexpr int kTrapLine = __LINE__ + 2;
__global__ void trap_once(int* out) {
    if (blockIdx.x == 1 && threadIdx.x == 3) __trap();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

int main() {
    using conformance::at;
    const int n = 4 * 64 - 10;
    std::vector<int> in(n);
    conformance::Lcg rng(3);
    for (int& x : in) x = rng.range(0, 1000);
    int *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(int)));

    // First without a bad value: the assertion holds everywhere and the kernel completes.
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    check_non_negative<<<4, 64>>>(d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());

    in[2 * 64 + 5] = -1;  // only block 2, thread 5 fails the assertion
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    check_non_negative<<<4, 64>>>(d_in, d_out, n);
    conformance::expect_fault("assert", cudaErrorAssert,
                              {"block (2,0,0) thread (5,0,0)", "in[i] >= 0", at(__FILE__, kAssertLine)});
    check_recovered("assert");

    trap_once<<<3, 32>>>(d_out);
    conformance::expect_fault("__trap", cudaErrorLaunchFailure,
                              {"block (1,0,0) thread (3,0,0)", "__trap", at(__FILE__, kTrapLine)});
    check_recovered("__trap");

    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    return conformance::finish();
}
