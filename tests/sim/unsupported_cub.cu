// Compile-only input of the test sim.unsupported.cub (not a conformance program): CUB's block
// primitives cannot run on the simulator, so building this file for it must fail with the
// simulator's message (nvcc builds it).
#include <cub/cub.cuh>

__global__ void block_sum(const int* in, int* out) {
    using Reduce = cub::BlockReduce<int, 128>;
    __shared__ typename Reduce::TempStorage temp;
    const int sum = Reduce(temp).Sum(in[threadIdx.x]);
    if (threadIdx.x == 0) *out = sum;
}

int main() {
    block_sum<<<1, 128>>>(nullptr, nullptr);
    return 0;
}
