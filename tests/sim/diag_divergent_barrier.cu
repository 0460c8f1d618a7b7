// Diagnostics of __syncthreads not reached by every thread of the block (on a GPU: a hang or
// undefined behaviour; on the simulator: cudaErrorLaunchFailure and a diagnostic naming the
// barrier's source line). Cases: half the block returns before the barrier; the partial last
// block's threads past the end return before it (only that block is named); the two sides of an
// if/else wait at two different __syncthreads; a loop whose trip count depends on the thread
// leaves threads at the loop's barrier and at the one after it. After each, cudaDeviceReset()
// and a valid launch runs.
#include "diag.cuh"

#include <vector>

constexpr int kEarlyReturnLine = __LINE__ + 4;
__global__ void early_return(int* out) {
    __shared__ int s[64];
    if (threadIdx.x < 16) return;
    __syncthreads();
    s[threadIdx.x] = threadIdx.x;
    out[threadIdx.x] = s[threadIdx.x];
}

// The classic bug: returning early for the threads past the end of the data, then a barrier.
constexpr int kGuardLine = __LINE__ + 6;
__global__ void guard_then_barrier(const float* in, float* out, int n) {
    __shared__ float s[128];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = s[(threadIdx.x + 1) % blockDim.x];
}

constexpr int kIfLine = __LINE__ + 4, kElseLine = __LINE__ + 7;
__global__ void if_else_barriers(int* out) {
    if (threadIdx.x % 2 == 0) {
        out[threadIdx.x] = 1;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2;
        __syncthreads();
    }
}

constexpr int kLoopLine = __LINE__ + 4, kAfterLoopLine = __LINE__ + 6;
__global__ void loop_trip_count(int* out) {
    for (int k = 0; k < int(threadIdx.x % 3); ++k) {
        out[threadIdx.x] += k;
        __syncthreads();
    }
    __syncthreads();
}

int main() {
    using conformance::at;
    int* d_out;
    float *d_in, *d_fout;

    CUDA_OK(cudaMalloc(&d_out, 128 * sizeof(int)));
    early_return<<<1, 64>>>(d_out);
    conformance::expect_fault(
        "early return", cudaErrorLaunchFailure,
        {"divergent barrier", "__syncthreads", at(__FILE__, kEarlyReturnLine), "exited", "thread (0,0,0)"});
    check_recovered("early return");

    const int n = 3 * 128 + 50;  // the last of 4 blocks has 50 threads with data
    CUDA_OK(cudaMalloc(&d_in, 4 * 128 * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_fout, 4 * 128 * sizeof(float)));
    CUDA_OK(cudaMemset(d_in, 0, 4 * 128 * sizeof(float)));
    guard_then_barrier<<<4, 128>>>(d_in, d_fout, n);
    conformance::expect_fault(
        "guard then barrier", cudaErrorLaunchFailure,
        {"divergent barrier", at(__FILE__, kGuardLine), "block (3,0,0)", "exited", "thread (50,0,0)"});
    check_recovered("guard then barrier");

    if_else_barriers<<<1, 64>>>(d_out);
    conformance::expect_fault(
        "if/else barriers", cudaErrorLaunchFailure,
        {"divergent barrier", "different barriers", at(__FILE__, kIfLine), at(__FILE__, kElseLine)});
    check_recovered("if/else barriers");

    CUDA_OK(cudaMemset(d_out, 0, 128 * sizeof(int)));
    loop_trip_count<<<1, 96>>>(d_out);
    conformance::expect_fault("loop trip count", cudaErrorLaunchFailure,
                              {"divergent barrier", at(__FILE__, kLoopLine), at(__FILE__, kAfterLoopLine)});
    check_recovered("loop trip count");

    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_fout));
    return conformance::finish();
}
