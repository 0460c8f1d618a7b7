// Launch-configuration errors, as a GPU reports them: for each configuration the hardware rejects
// (more than 1024 threads per block, blockDim.z = 65, a zero grid or block dimension,
// gridDim.y or gridDim.z = 65536, dynamic shared memory above the kernel's limit: the default
// 48 KiB without the attribute, above the value set with cudaFuncSetAttribute, above the opt-in
// maximum), the kernel does not run (its output keeps the poison), cudaGetLastError() returns the
// error once and then cudaSuccess, and the next valid launch runs. The largest valid
// configurations run. Codes: the CUDA Runtime API documents cudaErrorInvalidConfiguration for
// too many threads or blocks; a dynamic shared memory request above the kernel's limit is
// rejected by the driver's launch with CUDA_ERROR_INVALID_VALUE, which the runtime returns as
// cudaErrorInvalidValue ("invalid argument"), as is a cudaFuncSetAttribute value above the
// opt-in maximum.
#include "check.cuh"

#include <vector>

constexpr int kN = 64;
constexpr unsigned kDefault = 48 * 1024, k64KiB = 64 * 1024;

__global__ void mark(int* out, int n) {
    const int t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    const long long b = blockIdx.x + (long long)blockIdx.y * gridDim.x + (long long)blockIdx.z * gridDim.x * gridDim.y;
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    if (b == 0)
        for (int k = t; k < n; k += threads) out[k] = k + 1;
}

// Uses the first and last byte of its dynamic shared memory. Tag makes distinct kernels, each
// with its own cudaFuncAttributeMaxDynamicSharedMemorySize.
template <int Tag>
__global__ void touch_shared(int* out, int n, unsigned bytes) {
    extern __shared__ unsigned char smem[];
    if (threadIdx.x == 0) {
        smem[0] = 1;
        smem[bytes - 1] = 2;
    }
    __syncthreads();
    if (threadIdx.x < n) out[threadIdx.x] = smem[0] + smem[bytes - 1] + threadIdx.x;
}

using SharedKernel = void (*)(int*, int, unsigned);

/// One launch: mark<<<grid, block>>>, or, with a kernel, kernel<<<1, kN, shared_bytes>>>.
struct Launch {
    dim3 grid = 1, block = kN;
    SharedKernel kernel = nullptr;
    unsigned shared_bytes = 0;
};

int* d_out;
std::vector<int> host(kN);

void run(const Launch& l) {
    if (l.kernel)
        l.kernel<<<1, kN, l.shared_bytes>>>(d_out, kN, l.shared_bytes);
    else
        mark<<<l.grid, l.block>>>(d_out, kN);
}

/// The output after the launch: -1 everywhere (poisoned, not run), or what the kernel writes.
bool output_is(const Launch& l, bool ran) {
    CUDA_OK(cudaMemcpy(host.data(), d_out, kN * sizeof(int), cudaMemcpyDeviceToHost));
    for (int t = 0; t < kN; ++t)
        if (host[t] != (!ran ? -1 : l.kernel ? t + 3 : t + 1)) return false;
    return true;
}

/// Runs a launch that must succeed.
void expect_runs(const char* what, const Launch& l) {
    CUDA_OK(cudaMemset(d_out, 0xFF, kN * sizeof(int)));
    run(l);
    const cudaError_t err = cudaGetLastError();
    CHECK_MSG(err == cudaSuccess, "%s: cudaGetLastError() returned %s", what, cudaGetErrorName(err));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK_MSG(output_is(l, true), "%s: the kernel did not write its output", what);
}

/// Runs a launch the hardware must reject, then a valid one.
void expect_rejected(const char* what, cudaError_t expected, const Launch& bad, const Launch& good) {
    CUDA_OK(cudaMemset(d_out, 0xFF, kN * sizeof(int)));
    run(bad);
    const cudaError_t first = cudaGetLastError();
    const cudaError_t second = cudaGetLastError();
    CHECK_MSG(first == expected, "%s: cudaGetLastError() returned %s, expected %s", what, cudaGetErrorName(first),
              cudaGetErrorName(expected));
    CHECK_MSG(second == cudaSuccess, "%s: the error was not cleared (%s)", what, cudaGetErrorName(second));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK_MSG(output_is(bad, false), "%s: the kernel ran", what);
    expect_runs(what, good);
}

Launch grid_block(dim3 grid, dim3 block) {
    return {grid, block, nullptr, 0};
}
Launch shared(SharedKernel kernel, unsigned bytes) {
    return {1, kN, kernel, bytes};
}

void set_max_dynamic_shared(SharedKernel kernel, int bytes) {
    CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 bytes));
}

int main() {
    CUDA_OK(cudaMalloc(&d_out, kN * sizeof(int)));
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK(prop.maxThreadsPerBlock == 1024);
    CHECK(prop.maxThreadsDim[2] == 64);
    CHECK(prop.maxGridSize[1] == 65535 && prop.maxGridSize[2] == 65535);
    CHECK(prop.sharedMemPerBlock == 48 * 1024);
    const unsigned optin = unsigned(prop.sharedMemPerBlockOptin);
    CHECK(optin >= 64 * 1024);

    const Launch good = grid_block(1, kN);
    const cudaError_t config = cudaErrorInvalidConfiguration;
    expect_rejected("1025 threads per block", config, grid_block(1, 1025), good);
    expect_rejected("block (32, 32, 2): 2048 threads", config, grid_block(1, dim3(32, 32, 2)), good);
    expect_rejected("blockDim.z = 65", config, grid_block(1, dim3(1, 1, 65)), good);
    expect_rejected("gridDim.x = 0", config, grid_block(0, kN), good);
    expect_rejected("gridDim.y = 0", config, grid_block(dim3(1, 0, 1), kN), good);
    expect_rejected("gridDim.z = 0", config, grid_block(dim3(1, 1, 0), kN), good);
    expect_rejected("blockDim.x = 0", config, grid_block(1, dim3(0, 1, 1)), good);
    expect_rejected("gridDim.y = 65536", config, grid_block(dim3(1, 65536, 1), 1), good);
    expect_rejected("gridDim.z = 65536", config, grid_block(dim3(1, 1, 65536), 1), good);

    // The largest valid shapes run.
    expect_runs("1024 threads per block", grid_block(1, 1024));
    expect_runs("block (1, 16, 64)", grid_block(1, dim3(1, 16, 64)));
    expect_runs("gridDim.y = 65535", grid_block(dim3(1, 65535, 1), 1));
    expect_runs("gridDim.x = 70000", grid_block(70000, 1));

    // Dynamic shared memory. Each case uses its own kernel: the attribute belongs to the kernel.
    const cudaError_t too_much = cudaErrorInvalidValue;
    expect_runs("48 KiB without the attribute", shared(touch_shared<0>, kDefault));
    expect_rejected("48 KiB + 1 without the attribute", too_much, shared(touch_shared<0>, kDefault + 1),
                    shared(touch_shared<0>, 16));

    set_max_dynamic_shared(touch_shared<1>, k64KiB);
    expect_runs("64 KiB with the attribute at 64 KiB", shared(touch_shared<1>, k64KiB));
    expect_rejected("64 KiB + 4 with the attribute at 64 KiB", too_much, shared(touch_shared<1>, k64KiB + 4),
                    shared(touch_shared<1>, k64KiB));

    // The attribute also lowers the limit.
    set_max_dynamic_shared(touch_shared<2>, 1024);
    expect_rejected("2 KiB with the attribute lowered to 1 KiB", too_much, shared(touch_shared<2>, 2048),
                    shared(touch_shared<2>, 1024));

    // Above the opt-in maximum: the attribute itself is refused, and so is the launch.
    const cudaError_t set_err = cudaFuncSetAttribute(reinterpret_cast<const void*>(touch_shared<3>),
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize, int(optin) + 1);
    CHECK_MSG(set_err == cudaErrorInvalidValue, "attribute above the opt-in maximum: %s", cudaGetErrorName(set_err));
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaSuccess);
    set_max_dynamic_shared(touch_shared<3>, int(optin));
    expect_runs("the opt-in maximum", shared(touch_shared<3>, optin));
    expect_rejected("the opt-in maximum + 1", too_much, shared(touch_shared<3>, optin + 1),
                    shared(touch_shared<3>, optin));

    CUDA_OK(cudaFree(d_out));
    return conformance::finish();
}
