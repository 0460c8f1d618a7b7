// Diagnostics of warp collectives whose mask disagrees with the lanes that reach them (undefined
// behaviour on a GPU; on the simulator: cudaErrorLaunchFailure and a diagnostic naming the lane,
// the mask and the call's source line). Cases: a mask that omits lanes reaching the call (so it
// does not include the calling lane); a mask naming lanes that already exited; a mask naming
// lanes that exit later; a full mask in a block of 20 threads, whose only warp has 20 lanes; a
// width that is not a power of two; lanes of one mask meeting at different collectives
// (__ballot_sync and __shfl_sync). After each, cudaDeviceReset() and a valid launch runs. The
// words checked hold under every schedule (PD_SIM_SCHEDULE=random may report another lane).
#include "diag.cuh"

#include <vector>

constexpr int kOmitsLine = __LINE__ + 4;
__global__ void mask_omits_lanes(int* out) {
    const int lane = threadIdx.x % 32;
    // Every lane calls, but the mask names only the low half.
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, lane, 0);
}

constexpr int kExitedLine = __LINE__ + 4;
__global__ void lanes_exited_before(int* out) {
    const int lane = threadIdx.x % 32;
    if (lane < 8) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, lane, 8);
}

constexpr int kExitLaterLine = __LINE__ + 4;
__global__ void lanes_exit_later(int* out) {
    const int lane = threadIdx.x % 32;
    if (lane >= 24) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, lane, 1);
}

constexpr int kMissingLanesLine = __LINE__ + 2;
__global__ void full_mask_in_partial_warp(unsigned* out) {
    out[threadIdx.x] = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
}

constexpr int kWidthLine = __LINE__ + 2;
__global__ void bad_width(int* out) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1, 12);
}

constexpr int kBallotLine = __LINE__ + 5, kShflLine = __LINE__ + 7;
__global__ void different_collectives(unsigned* out) {
    const int lane = threadIdx.x % 32;
    unsigned v;
    if (lane < 16)
        v = __ballot_sync(0xffffffffu, lane % 2);
    else
        v = __shfl_sync(0xffffffffu, unsigned(lane), 0);
    out[threadIdx.x] = v;
}

int main() {
    using conformance::at;
    int* d_out;
    unsigned* d_uout;
    CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_uout, 64 * sizeof(unsigned)));

    mask_omits_lanes<<<1, 32>>>(d_out);
    conformance::expect_fault(
        "mask omits lanes", cudaErrorLaunchFailure,
        {"__shfl_sync", at(__FILE__, kOmitsLine), "0x0000ffff", "does not include the calling lane"});
    check_recovered("mask omits lanes");

    lanes_exited_before<<<1, 32>>>(d_out);
    conformance::expect_fault("lanes exited before", cudaErrorLaunchFailure,
                              {"__shfl_sync", at(__FILE__, kExitedLine), "0xffffffff", "exited"});
    check_recovered("lanes exited before");

    lanes_exit_later<<<1, 32>>>(d_out);
    conformance::expect_fault("lanes exit later", cudaErrorLaunchFailure,
                              {"__shfl_down_sync", at(__FILE__, kExitLaterLine), "exited"});
    check_recovered("lanes exit later");

    full_mask_in_partial_warp<<<1, 20>>>(d_uout);
    conformance::expect_fault("full mask in a partial warp", cudaErrorLaunchFailure,
                              {"__ballot_sync", at(__FILE__, kMissingLanesLine), "0xffffffff", "do not exist", "20"});
    check_recovered("full mask in a partial warp");

    bad_width<<<1, 32>>>(d_out);
    conformance::expect_fault("width 12", cudaErrorLaunchFailure,
                              {"__shfl_xor_sync", at(__FILE__, kWidthLine), "width 12", "power of two"});
    check_recovered("width 12");

    different_collectives<<<1, 32>>>(d_uout);
    conformance::expect_fault("different collectives", cudaErrorLaunchFailure,
                              {"different warp collectives", "__ballot_sync", at(__FILE__, kBallotLine), "__shfl_sync",
                               at(__FILE__, kShflLine)});
    check_recovered("different collectives");

    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_uout));
    return conformance::finish();
}
