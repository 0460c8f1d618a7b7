// Compile-only input of the test sim.unsupported.big_shared (not a conformance program): a static
// __shared__ array of 2 GiB, which ptxas refuses (a kernel's static shared memory is at most 48
// KiB), must be refused when the simulator builds it too, by name, instead of failing to link or
// taking the machine's memory.
__global__ void huge(float* out) {
    __shared__ float big[1u << 29];  // 2 GiB
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = big[threadIdx.x];
}

int main() {
    huge<<<1, 32>>>(nullptr);
    return 0;
}
