// __CUDA_ARCH__ in the places nvcc's two passes give it different meanings. In a kernel and in a
// __device__ function it is the architecture the code was compiled for: on the simulator the one
// it models (900, an H100 or H200, unless the build chose another: the program's argument is
// the value expected), so `#if __CUDA_ARCH__ >= 800` takes the sm_80 path and an
// `#if ... #elif defined(__CUDA_ARCH__) ... #else` chain its middle branch. In host code it is
// not defined (nvcc's host pass): a host function, a constant at namespace scope and a
// __host__ __device__ function called from the host take their host path. On the simulator a
// __host__ __device__ function is compiled once, in its host form, so it takes its host path in
// kernels too (on a GPU its device path); the check says which applies. Braces opened in both
// branches of a conditional in a kernel do not confuse what comes after it.
#include "check.cuh"

#include <cstdlib>

// The branch a guard chain takes: 3 from sm_100, 2 from sm_80, 1 on older GPUs, 0 on the host.
__device__ int arch_branch() {
#if __CUDA_ARCH__ >= 1000
    return 3;
#elif __CUDA_ARCH__ >= 800
    return 2;
#elif defined(__CUDA_ARCH__)
    return 1;
#else
    return 0;
#endif
}

// 1 in nvcc's device pass, 0 in its host pass.
__host__ __device__ int device_pass() {
#ifdef __CUDA_ARCH__
    return 1;
#else
    return 0;
#endif
}

// At namespace scope: the host pass's value is the one host code sees.
#ifdef __CUDA_ARCH__
constexpr int kNamespaceScopePass = 1;
#else
constexpr int kNamespaceScopePass = 0;
#endif

// out[0]: __CUDA_ARCH__ (-1 if not defined); out[1]: whether `#if __CUDA_ARCH__ >= 800` held;
// out[2]: arch_branch(); out[3]: device_pass() called in a kernel; out[4]: written by the thread
// the sm_80 branch selects (thread 0, else thread 1): __CUDA_ARCH__ / 100.
__global__ void report_arch(int* out) {
#ifdef __CUDA_ARCH__
    if (threadIdx.x == 0) out[0] = __CUDA_ARCH__;
#else
    if (threadIdx.x == 0) out[0] = -1;
#endif
    if (threadIdx.x == 0) {
#if __CUDA_ARCH__ >= 800
        out[1] = 1;
#else
        out[1] = 0;
#endif
        out[2] = arch_branch();
        out[3] = device_pass();
    }
#if __CUDA_ARCH__ >= 800
    if (threadIdx.x == 0) {
#else
    if (threadIdx.x == 1) {
#endif
#ifdef __CUDA_ARCH__
        out[4] = __CUDA_ARCH__ / 100;
#endif
    }
}

// A host function after the kernel: its guard takes the host path.
int host_function_pass() {
#ifdef __CUDA_ARCH__
    return 1;
#else
    return 0;
#endif
}

int main(int argc, char** argv) {
    int* d_out;
    CUDA_OK(cudaMalloc(&d_out, 5 * sizeof(int)));
    CUDA_OK(cudaMemset(d_out, 0xFF, 5 * sizeof(int)));
    report_arch<<<1, 64>>>(d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    int got[5];
    CUDA_OK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d_out));
    const int arch = got[0];
    std::printf("__CUDA_ARCH__ in device code: %d\n", arch);

#ifdef PD_BACKEND_SIM
    // The architecture the build models, as the test passes it (the CMake option's value).
    const int expected = argc > 1 ? std::atoi(argv[1]) : 900;
    CHECK_MSG(arch == expected, "device code saw __CUDA_ARCH__ = %d, want %d", arch, expected);
    CHECK_MSG(arch == PD_SIM_CUDA_ARCH, "device code saw %d, PD_SIM_CUDA_ARCH is %d", arch, PD_SIM_CUDA_ARCH);
    // the simulated device reports the same architecture as its compute capability
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    int major = 0, minor = 0;
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    CHECK_MSG(prop.major * 100 + prop.minor * 10 == expected && major == prop.major && minor == prop.minor,
              "the device reports compute capability %d.%d (attributes %d.%d), want %d", prop.major, prop.minor, major,
              minor, expected);
#else
    (void)argc;
    (void)argv;
    // On a GPU: the architecture of the code that ran, at most the device's.
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const int device_arch = prop.major * 100 + prop.minor * 10;
    CHECK_MSG(arch >= 300 && arch % 10 == 0 && arch <= device_arch, "__CUDA_ARCH__ = %d on a device of %d", arch,
              device_arch);
#endif
    CHECK_MSG(got[1] == (arch >= 800 ? 1 : 0), "#if __CUDA_ARCH__ >= 800 gave %d for %d", got[1], arch);
    const int branch = arch >= 1000 ? 3 : arch >= 800 ? 2 : 1;
    CHECK_MSG(got[2] == branch, "the #if/#elif chain took branch %d, want %d for %d", got[2], branch, arch);
    CHECK_MSG(got[4] == arch / 100, "the thread the branch selects wrote %d, want %d", got[4], arch / 100);
#ifdef PD_BACKEND_SIM
    CHECK_MSG(got[3] == 0, "a __host__ __device__ function in a kernel took its %s path (the simulator: host)",
              got[3] == 1 ? "device" : "unknown");
#else
    CHECK_MSG(got[3] == 1, "a __host__ __device__ function in a kernel took its %s path (a GPU: device)",
              got[3] == 0 ? "host" : "unknown");
#endif

    CHECK_MSG(host_function_pass() == 0, "a host function took its __CUDA_ARCH__ path");
    CHECK_MSG(device_pass() == 0, "a __host__ __device__ function called from the host took its device path");
    CHECK_MSG(kNamespaceScopePass == 0, "a guard at namespace scope took its __CUDA_ARCH__ path in host code");
    return conformance::finish();
}
