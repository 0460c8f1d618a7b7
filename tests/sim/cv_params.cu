// Kernels whose pointer parameters carry cv-qualifiers: `volatile int*` (the flag of a spin
// loop), `const volatile`, a volatile pointee behind __restrict__, pointers that are themselves
// const, and a struct passed by value that holds a volatile pointer. Each launch compiles on the
// simulator as it does under nvcc, its arguments converting as a call converts them (an `int*`
// argument to a `volatile int*` parameter), and runs; the results are checked on the host.
#include "check.cuh"

#include <vector>

constexpr int kN = 300;

struct Flagged {
    volatile int* flag;
    int value;
};

/// Thread i writes i + 1 through a volatile pointer and reads it back through it.
__global__ void write_volatile(volatile int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = i + 1;
    out[i] = out[i] * 2;  // a volatile read of what this thread wrote
}

/// A reader of volatile data: y[i] = 3 x[i].
__global__ void read_const_volatile(const volatile int* x, int* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 3 * x[i];
}

/// Pointers that are const themselves, a volatile pointee behind __restrict__.
__global__ void const_pointers(const int* const x, volatile float* __restrict__ const y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = float(x[i]) + 0.5f;
}

/// A spin flag as learners write one: thread 0 of the block publishes a value, then raises the
/// flag; every thread waits for the flag after the barrier (already raised: no thread spins on
/// a thread that has not run) and reads the value.
__global__ void publish_then_wait(Flagged f, volatile int* data, int* seen) {
    if (threadIdx.x == 0) {
        data[0] = f.value;
        __threadfence();
        *f.flag = 1;
    }
    __syncthreads();
    while (*f.flag == 0) {
    }
    seen[threadIdx.x] = data[0];
}

/// A volatile 64-bit counter bumped by an atomic through its non-volatile alias.
__global__ void volatile_u64(volatile unsigned long long* counter, unsigned long long* plain) {
    atomicAdd(plain, 1ull);
    __syncthreads();
    if (threadIdx.x == 0) counter[1] = counter[0];
}

int main() {
    int *a = nullptr, *b = nullptr, *flag = nullptr, *data = nullptr, *seen = nullptr;
    float* f = nullptr;
    unsigned long long* counter = nullptr;
    CUDA_OK(cudaMalloc(&a, kN * sizeof(int)));
    CUDA_OK(cudaMalloc(&b, kN * sizeof(int)));
    CUDA_OK(cudaMalloc(&f, kN * sizeof(float)));
    CUDA_OK(cudaMalloc(&flag, sizeof(int)));
    CUDA_OK(cudaMalloc(&data, sizeof(int)));
    CUDA_OK(cudaMalloc(&seen, 64 * sizeof(int)));
    CUDA_OK(cudaMalloc(&counter, 2 * sizeof(unsigned long long)));
    CUDA_OK(cudaMemset(flag, 0, sizeof(int)));
    CUDA_OK(cudaMemset(counter, 0, 2 * sizeof(unsigned long long)));

    const int blocks = (kN + 127) / 128;
    write_volatile<<<blocks, 128>>>(a, kN);  // int* to volatile int*: an implicit conversion
    read_const_volatile<<<blocks, 128>>>(a, b, kN);
    const_pointers<<<blocks, 128>>>(b, f, kN);
    publish_then_wait<<<1, 64>>>(Flagged{flag, 4242}, data, seen);
    volatile_u64<<<1, 96>>>(counter, counter);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());

    std::vector<int> ha(kN), hb(kN), hseen(64);
    std::vector<float> hf(kN);
    unsigned long long hc[2] = {};
    CUDA_OK(cudaMemcpy(ha.data(), a, kN * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hb.data(), b, kN * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hf.data(), f, kN * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hseen.data(), seen, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hc, counter, sizeof hc, cudaMemcpyDeviceToHost));
    bool ok_a = true, ok_b = true, ok_f = true, ok_seen = true;
    for (int i = 0; i < kN; ++i) {
        ok_a = ok_a && ha[i] == 2 * (i + 1);
        ok_b = ok_b && hb[i] == 6 * (i + 1);
        ok_f = ok_f && hf[i] == float(6 * (i + 1)) + 0.5f;
    }
    for (int t = 0; t < 64; ++t) ok_seen = ok_seen && hseen[t] == 4242;
    CHECK(ok_a);
    CHECK(ok_b);
    CHECK(ok_f);
    CHECK(ok_seen);
    CHECK(hc[0] == 96 && hc[1] == 96);
    for (void* p : {(void*)a, (void*)b, (void*)f, (void*)flag, (void*)data, (void*)seen, (void*)counter})
        CUDA_OK(cudaFree(p));
    return conformance::finish();
}
