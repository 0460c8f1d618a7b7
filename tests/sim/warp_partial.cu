// A warp reduction over a partial warp (a block of fewer than 32 threads), with the mask naming
// exactly the lanes that exist. A lane whose source lane is not in the mask gets an undefined
// value (Programming Guide, __shfl_sync: "If the target thread is inactive, the retrieved value
// is undefined"), which is legal as long as it is not used: here each lane discards it. The
// sums must be exact for every block size 1..32.
#include "check.cuh"

#include <vector>

__global__ void partial_warp_sum(const int* in, int* out) {
    const int lane = threadIdx.x;
    const int lanes = blockDim.x;  // at most 32: one warp
    const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    int v = in[blockIdx.x * 32 + lane];
    for (int offset = 16; offset > 0; offset /= 2) {
        const int other = __shfl_down_sync(mask, v, offset);  // undefined when lane + offset >= lanes
        if (lane + offset < lanes) v += other;
    }
    if (lane == 0) out[blockIdx.x] = v;
}

int main() {
    const int blocks = 4;
    for (int lanes = 1; lanes <= 32; ++lanes) {
        conformance::Lcg rng(lanes);
        std::vector<int> in(blocks * 32), want(blocks, 0), got(blocks);
        for (int& x : in) x = rng.range(-1000, 1000);
        for (int b = 0; b < blocks; ++b)
            for (int l = 0; l < lanes; ++l) want[b] += in[b * 32 + l];
        int *d_in, *d_out;
        CUDA_OK(cudaMalloc(&d_in, in.size() * sizeof(int)));
        CUDA_OK(cudaMalloc(&d_out, blocks * sizeof(int)));
        CUDA_OK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, 0xFF, blocks * sizeof(int)));
        partial_warp_sum<<<blocks, lanes>>>(d_in, d_out);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(got.data(), d_out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
        CHECK_MSG(
            conformance::mismatches("sum", got.data(), want.data(), blocks, [](int a, int b) { return a == b; }) == 0,
            "block of %d threads", lanes);
        CUDA_OK(cudaFree(d_in));
        CUDA_OK(cudaFree(d_out));
    }
    return conformance::finish();
}
