// Compile-only input of the test sim.unsupported.big_shared_ns: a static __shared__ array of
// 2 GiB at namespace scope, which ptxas refuses as it refuses one in a kernel, must be refused
// by name when the simulator builds it too (it failed at link time: a 2 GiB thread-local array).
__shared__ char big[2147483648ull];  // 2 GiB

__global__ void touch(char* out) {
    big[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = big[threadIdx.x];
}

int main() {
    touch<<<1, 32>>>(nullptr);
    return 0;
}
