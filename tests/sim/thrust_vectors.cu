// Thrust device vectors: on a GPU they live in device memory; on the simulator Thrust's CPP
// backend holds them in host memory, which the simulated kernels address directly. Checks a
// device_vector filled by thrust::sequence, scanned by thrust::exclusive_scan, then passed to
// a kernel through thrust::raw_pointer_cast, against host-computed values.
#include "check.cuh"

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>

__global__ void mod_plus_index(int* v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] % 1000 + i;
}

int main() {
    for (int n : {1, 31, 1000, 4097}) {
        thrust::device_vector<int> d(n);
        thrust::sequence(d.begin(), d.end(), 3);                // 3, 4, 5, ...
        thrust::exclusive_scan(d.begin(), d.end(), d.begin());  // running sums before each element
        mod_plus_index<<<(n + 127) / 128, 128>>>(thrust::raw_pointer_cast(d.data()), n);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        const thrust::host_vector<int> h = d;
        long long prefix = 0;
        int wrong = 0;
        for (int i = 0; i < n; ++i) {
            const long long expected = prefix % 1000 + i;  // prefix < 1e7: no overflow
            wrong += h[i] != int(expected);
            prefix += 3 + i;
        }
        CHECK_MSG(wrong == 0, "n = %d: %d wrong elements", n, wrong);
    }
    return conformance::finish();
}
