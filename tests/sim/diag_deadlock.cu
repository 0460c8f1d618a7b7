// Diagnostics of deadlocks, where threads wait for each other at different synchronization
// points (on a GPU: a hang; on the simulator: cudaErrorLaunchFailure and a diagnostic naming
// both waits). Cases: half a warp shuffles with the full mask while the other half waits at
// __syncthreads; a default (full-mask) __syncwarp() inside a branch that half the warp takes,
// the other half going on to __syncthreads; two warp collectives whose masks overlap but differ.
// The program must not hang: the simulator reports instead. After each, cudaDeviceReset() and
// a valid launch runs.
#include "diag.cuh"

#include <vector>

constexpr int kShuffleLine = __LINE__ + 4, kBarrierLine = __LINE__ + 5;
__global__ void shuffle_vs_barrier(int* out) {
    const int lane = threadIdx.x % 32;
    int v = lane;
    if (lane < 16) v = __shfl_sync(0xffffffffu, v, lane + 16);
    __syncthreads();
    out[threadIdx.x] = v;
}

constexpr int kSyncwarpLine = __LINE__ + 6, kLaterBarrierLine = __LINE__ + 8;
__global__ void syncwarp_in_branch(int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    if (t % 32 < 16) {
        s[t] = t;
        __syncwarp();  // the default mask names all 32 lanes, but only 16 come
    }
    __syncthreads();
    out[t] = s[t];
}

constexpr int kFirstLine = __LINE__ + 5, kSecondLine = __LINE__ + 7;
__global__ void overlapping_masks(int* out) {
    const int lane = threadIdx.x % 32;
    int v = lane;
    if (lane < 16) {
        v = __shfl_sync(0xffffffffu, v, 0);
    } else {
        __syncwarp(0xffff0001u);  // lane 0 waits elsewhere with another mask
    }
    out[threadIdx.x] = v;
}

int main() {
    using conformance::at;
    int* d_out;
    CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(int)));

    shuffle_vs_barrier<<<1, 64>>>(d_out);
    conformance::expect_fault("shuffle vs barrier", cudaErrorLaunchFailure,
                              {"deadlock", "__shfl_sync", at(__FILE__, kShuffleLine), "lane 16", "__syncthreads",
                               at(__FILE__, kBarrierLine)});
    check_recovered("shuffle vs barrier");

    syncwarp_in_branch<<<1, 64>>>(d_out);
    conformance::expect_fault(
        "__syncwarp in a branch", cudaErrorLaunchFailure,
        {"deadlock", "__syncwarp", at(__FILE__, kSyncwarpLine), "lane 16", at(__FILE__, kLaterBarrierLine)});
    check_recovered("__syncwarp in a branch");

    overlapping_masks<<<1, 32>>>(d_out);
    conformance::expect_fault("overlapping masks", cudaErrorLaunchFailure,
                              {"deadlock", at(__FILE__, kFirstLine), at(__FILE__, kSecondLine), "0xffff0001"});
    check_recovered("overlapping masks");

    CUDA_OK(cudaFree(d_out));
    return conformance::finish();
}
