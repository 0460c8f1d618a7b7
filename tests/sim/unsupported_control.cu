// Compile-only input of the test sim.unsupported.control: the same kind of program as
// unsupported_asm.cu and unsupported_cub.cu without the unsupported construct. It must build
// with the same flags, so that their failures are the simulator's refusals, not broken flags.
__device__ unsigned lane_id() {
    return threadIdx.x % 32;
}

__global__ void write_lane(unsigned* out) {
    __shared__ unsigned s[32];
    s[threadIdx.x] = lane_id();
    __syncthreads();
    out[threadIdx.x] = s[31 - threadIdx.x];
}

int main() {
    write_lane<<<1, 32>>>(nullptr);
    return 0;
}
