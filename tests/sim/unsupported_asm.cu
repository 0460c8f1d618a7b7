// Compile-only input of the test sim.unsupported.asm (not a conformance program): inline PTX
// cannot run on the simulator, so building this file for it must fail with the simulator's
// message, not with an obscure error (nvcc builds it).
__device__ unsigned lane_id() {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__global__ void write_lane(unsigned* out) {
    out[threadIdx.x] = lane_id();
}

int main() {
    write_lane<<<1, 32>>>(nullptr);
    return 0;
}
