// A kernel that must spill: 64 live accumulators under -maxrregcount=32. cli.spill_check compiles
// it through cmake/ptxas-resources.sh, whose rule (no library kernel spills) must stop it.
__global__ void spills(const float* x, float* y, int n) {
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = x[i * n + threadIdx.x];
    for (int k = 0; k < n; ++k)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = acc[i] * x[k] + acc[(i + 1) % 64];
#pragma unroll
    for (int i = 0; i < 64; ++i) y[i * n + threadIdx.x] = acc[i];
}
