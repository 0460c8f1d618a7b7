// A launch the simulator would run for hours (2^31 - 1 blocks: a GPU starts them in seconds) is
// refused at once against the simulator's work budget (PD_SIM_WORK_GFLOP: 600 FLOPs of work per
// thread started), with cudaErrorLaunchTimeout and a diagnostic naming the kernel, its threads
// and the variable; the error is not sticky, and a launch within the budget then runs.
#include "diag.cuh"

__global__ void one_each(int* out) {
    if (out != nullptr) out[blockIdx.x] = 1;
}

int main() {
    one_each<<<2147483647u, 1>>>(nullptr);
    const cudaError_t e = cudaGetLastError();
    CHECK_MSG(e == cudaErrorLaunchTimeout, "the launch is refused: %s", cudaGetErrorName(e));
    const std::string why = conformance::last_diagnostic();
    CHECK_MSG(why.find("one_each") != std::string::npos && why.find("2.14748e+09 threads") != std::string::npos &&
                  why.find("PD_SIM_WORK_GFLOP") != std::string::npos,
              "the diagnostic names the kernel, its threads and the budget: %s", why.c_str());
    int* out = nullptr;
    CUDA_OK(cudaMalloc(&out, 64 * sizeof(int)));
    one_each<<<64, 1>>>(out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(out));
    return conformance::finish();
}
