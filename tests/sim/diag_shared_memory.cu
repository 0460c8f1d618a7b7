// Static shared memory on the simulator behaves as on a GPU (simulator only: on a GPU the bugs
// below read garbage, or do not compile):
//  * it holds garbage at the start of every block: a classic stale-read bug, a block sum whose
//    threads past the end of the input never write their slot, gives NaN in the last block
//    (the first block a worker ran used to start from zeros, and later blocks from the previous
//    block's values, so the bug went unnoticed or gave plausible wrong sums); the fixed kernel
//    gives the right sums;
//  * a block does not see what the previous block on the same worker wrote (run with
//    PD_SIM_THREADS=1, so that one worker runs every block);
//  * a kernel whose static shared variables add up to more than 48 KiB stops at its launch with
//    cudaErrorLaunchOutOfResources and a diagnostic naming the variable, its line and the total,
//    as nvcc refuses it when building for a GPU; exactly 48 KiB runs. (One variable over 48 KiB
//    is refused at compile time: sim.unsupported.big_shared.)
#include "diag.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

constexpr int kBlock = 128;

/// Sums kBlock values per block by a tree in shared memory. With @p fixed false, the bug: the
/// threads past n leave their slot unwritten, and the tree adds whatever it holds.
__global__ void block_sum(const float* in, float* out, int n, bool fixed) {
    __shared__ float s[kBlock];
    const int t = threadIdx.x, i = blockIdx.x * kBlock + t;
    if (i < n)
        s[t] = in[i];
    else if (fixed)
        s[t] = 0.0f;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

/// Block 0 fills s; every block then reads s. Only block 0 may see the values it wrote.
__global__ void previous_block(int* out) {
    __shared__ int s[32];
    if (blockIdx.x == 0) s[threadIdx.x] = 1000 + int(threadIdx.x);
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
}

constexpr int kSecondLine = __LINE__ + 3;
__global__ void two_arrays_too_big(float* out) {
    __shared__ float first[8192];   // 32 KiB
    __shared__ float second[5120];  // 20 KiB: 52 KiB in all
    first[threadIdx.x] = 1.0f;
    second[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = first[threadIdx.x] + second[threadIdx.x];
}

__global__ void exactly_48k(float* out) {
    __shared__ float a[6144], b[6144];  // 2 x 24 KiB = 49152 bytes: the limit, allowed
    a[threadIdx.x] = 1.0f;
    b[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

int main() {
    using conformance::at;
    // 5 blocks, n = 520: the last block holds 8 values and 120 unwritten slots.
    const int n = 4 * kBlock + 8, blocks = 5;
    std::vector<float> in(static_cast<std::size_t>(n));
    conformance::Lcg rng(3);
    for (float& v : in) v = float(rng.range(-9, 9));
    float *d_in, *d_out;
    int* d_int;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_int, 4 * 32 * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> want(blocks, 0.0f), got(blocks);
    for (int i = 0; i < n; ++i) want[std::size_t(i / kBlock)] += in[std::size_t(i)];

    block_sum<<<blocks, kBlock>>>(d_in, d_out, n, false);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK_MSG(std::isnan(got[blocks - 1]), "the stale-read bug must show: the last block's sum is %g, not NaN",
              double(got[blocks - 1]));
    for (int b = 0; b + 1 < blocks; ++b)
        CHECK_MSG(got[std::size_t(b)] == want[std::size_t(b)], "block %d (every slot written): %g, want %g", b,
                  double(got[std::size_t(b)]), double(want[std::size_t(b)]));

    block_sum<<<blocks, kBlock>>>(d_in, d_out, n, true);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(conformance::mismatches("fixed block sums", got.data(), want.data(), std::size_t(blocks),
                                  [](float a, float b) { return a == b; }) == 0);

    previous_block<<<4, 32>>>(d_int);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int> seen(4 * 32);
    CUDA_OK(cudaMemcpy(seen.data(), d_int, seen.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int own = 0, poisoned = 0;
    for (int t = 0; t < 32; ++t) own += seen[std::size_t(t)] == 1000 + t;
    for (int i = 32; i < 4 * 32; ++i) poisoned += seen[std::size_t(i)] == -1;  // 0xFFFFFFFF
    CHECK_MSG(own == 32, "block 0 reads what it wrote: %d of 32", own);
    CHECK_MSG(poisoned == 3 * 32, "blocks 1-3 read the poison, not block 0's values: %d of 96", poisoned);

    two_arrays_too_big<<<1, 32>>>(d_out);
    conformance::expect_fault("two arrays over 48 KiB", cudaErrorLaunchOutOfResources,
                              {"`second`", "53248 bytes", at(__FILE__, kSecondLine)});
    check_recovered("two arrays over 48 KiB");

    exactly_48k<<<2, 32>>>(d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> sums(32);
    CUDA_OK(cudaMemcpy(sums.data(), d_out, 32 * sizeof(float), cudaMemcpyDeviceToHost));
    int three = 0;
    for (float v : sums) three += v == 3.0f;
    CHECK_MSG(three == 32, "48 KiB of static shared memory runs: %d of 32 sums right", three);

    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_int));
    return conformance::finish();
}
