// A learner's own program built with `scripts/simcc --profile` (tests/sim/check_profile_run.cmake
// builds and runs it): one warp loads every other float (a stride of 2: 8 sectors for 128
// bytes), stores them through a shared-memory tile read back with a stride of 2 words (2
// wavefronts), and writes 32 consecutive floats (4 sectors). With PD_SIM_PROFILE=FILE the
// counts go to FILE as JSON; without it, simcc --profile's report goes to stderr at exit.
#include <cstdio>

__global__ void strided_copy(const float* in, float* out) {
    __shared__ float tile[64];
    const int lane = threadIdx.x;
    tile[lane] = in[2 * lane];
    tile[lane + 32] = 0.f;
    __syncthreads();
    out[lane] = tile[(2 * lane) % 64];
}

int main() {
    float *in = nullptr, *out = nullptr;
    cudaMalloc(&in, 64 * sizeof(float));
    cudaMalloc(&out, 32 * sizeof(float));
    cudaMemset(in, 0, 64 * sizeof(float));
    strided_copy<<<1, 32>>>(in, out);
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("strided_copy: %s\n", cudaGetErrorString(e));
    cudaFree(in);
    cudaFree(out);
    return e == cudaSuccess ? 0 : 1;
}
