// Several devices in one program, as a GPU machine with N devices presents them (on the
// simulator: PD_SIM_DEVICES=N virtual devices, each with its own memory and streams):
// cudaGetDeviceCount, cudaSetDevice per host thread (a thread's current device is its own),
// allocations and cudaMemGetInfo per device, kernels launched on each device from threads of
// their own, cudaMemcpyPeer between devices, and the peer access queries. On the simulator a
// kernel given a pointer into another device's memory without peer access is refused, naming
// the kernel, the argument and the allocation (on a GPU that access faults), as is a launch on
// another device's stream. Needs 2 devices: on a machine with fewer it exits 77 (skipped).
#include "check.cuh"

#include <string>
#include <thread>
#include <vector>

__global__ void iota(int* out, int n, int base) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = base + i;
}

int main() {
    const int devices = conformance::devices_or_skip(2);
    const int n = 1000;  // not a multiple of the block
    const int D = devices < 4 ? devices : 4;

    // each device's allocations count against its own memory
    std::size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMemGetInfo(&free0, &total0));
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaMemGetInfo(&free1, &total1));
    int* big = nullptr;
    const std::size_t big_bytes = std::size_t(64) << 20;
    CUDA_OK(cudaMalloc(&big, big_bytes));
    std::size_t free1_after = 0, free0_after = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free1_after, &total));
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaMemGetInfo(&free0_after, &total));
    CHECK_MSG(free1 - free1_after >= big_bytes, "device 1's free memory fell by %zu bytes", free1 - free1_after);
#if defined(PD_BACKEND_SIM)
    // on a GPU other processes may allocate meanwhile: only the simulator's count is exact
    CHECK_MSG(free0_after == free0, "device 0's free memory changed by %zu bytes", free0 - free0_after);
#endif
    CUDA_OK(cudaFree(big));

    // one host thread per device: each sets its own current device and launches there
    std::vector<int*> buffers(std::size_t(D), nullptr);
    std::vector<int> seen(std::size_t(D), -1);
    std::vector<std::thread> threads;
    for (int d = 0; d < D; ++d)
        threads.emplace_back([&, d] {
            CUDA_OK(cudaSetDevice(d));
            CUDA_OK(cudaMalloc(&buffers[std::size_t(d)], n * sizeof(int)));
            iota<<<(n + 255) / 256, 256>>>(buffers[std::size_t(d)], n, 1000 * d);
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaGetDevice(&seen[std::size_t(d)]));
        });
    for (std::thread& t : threads) t.join();
    int main_device = -1;
    CUDA_OK(cudaGetDevice(&main_device));
    CHECK_MSG(main_device == 0, "the main thread's device is %d after the threads set theirs", main_device);
    for (int d = 0; d < D; ++d) {
        CHECK_MSG(seen[std::size_t(d)] == d, "thread %d saw device %d", d, seen[std::size_t(d)]);
        std::vector<int> host(n), want(n);
        CUDA_OK(cudaMemcpy(host.data(), buffers[std::size_t(d)], n * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) want[std::size_t(i)] = 1000 * d + i;
        CHECK(conformance::bit_mismatches("device buffer", host.data(), want.data(), std::size_t(n)) == 0);
    }

    // peer copies: device 1's buffer into device 0's, and a chain through every device
    CUDA_OK(cudaMemcpyPeer(buffers[0], 0, buffers[1], 1, n * sizeof(int)));
    std::vector<int> host(n), want(n);
    CUDA_OK(cudaMemcpy(host.data(), buffers[0], n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) want[std::size_t(i)] = 1000 + i;
    CHECK(conformance::bit_mismatches("peer copy 1 -> 0", host.data(), want.data(), std::size_t(n)) == 0);
    for (int d = 1; d < D; ++d) {
        cudaStream_t s;
        CUDA_OK(cudaSetDevice(d));
        CUDA_OK(cudaStreamCreate(&s));
        CUDA_OK(
            cudaMemcpyPeerAsync(buffers[std::size_t(d)], d, buffers[std::size_t(d - 1)], d - 1, n * sizeof(int), s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaStreamDestroy(s));
    }
    CUDA_OK(cudaMemcpy(host.data(), buffers[std::size_t(D - 1)], n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(conformance::bit_mismatches("peer copy chain", host.data(), want.data(), std::size_t(n)) == 0);

    // peer access: queried for every pair, enabled once, refused twice
    for (int a = 0; a < D; ++a)
        for (int b = 0; b < D; ++b) {
            int can = -1;
            CUDA_OK(cudaDeviceCanAccessPeer(&can, a, b));
            if (a == b) CHECK_MSG(can == 0, "device %d reports peer access to itself", a);
        }
    CHECK(cudaSetDevice(devices) == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice);

#if defined(PD_BACKEND_SIM)
    // a kernel on device 0 given device 1's memory is refused, naming what it was given
    CUDA_OK(cudaSetDevice(0));
    iota<<<4, 256>>>(buffers[1], n, 7);
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
    const std::string why = pd::sim::last_diagnostic();
    CHECK_MSG(why.find("kernel 'iota' runs on device 0, but its argument 1 points into") != std::string::npos &&
                  why.find("on device 1") != std::string::npos &&
                  why.find("cudaDeviceEnablePeerAccess(1, 0)") != std::string::npos,
              "diagnostic: %s", why.c_str());
    CUDA_OK(cudaMemcpy(host.data(), buffers[1], n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_MSG(host[0] == 1000, "the refused kernel wrote %d", host[0]);
    // with peer access enabled, it runs
    CUDA_OK(cudaDeviceEnablePeerAccess(1, 0));
    CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled);
    cudaGetLastError();  // the error is the last one, as on a GPU
    iota<<<4, 256>>>(buffers[1], n, 7);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(host.data(), buffers[1], n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_MSG(host[0] == 7 && host[n - 1] == 7 + n - 1, "the peer kernel wrote %d ... %d", host[0], host[n - 1]);
    CUDA_OK(cudaDeviceDisablePeerAccess(1));
    CHECK(cudaDeviceDisablePeerAccess(1) == cudaErrorPeerAccessNotEnabled);
    cudaGetLastError();
    // a stream of device 1 used while device 0 is current
    cudaStream_t s1;
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamCreate(&s1));
    CUDA_OK(cudaSetDevice(0));
    iota<<<4, 256, 0, s1>>>(buffers[0], n, 7);
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
    CHECK(pd::sim::last_diagnostic().find("is launched on a stream of device 1 while device 0 is current") !=
          std::string::npos);
    CUDA_OK(cudaStreamDestroy(s1));
    // cudaMemcpyPeer checks that each pointer is on the device it names
    CHECK(cudaMemcpyPeer(buffers[0], 1, buffers[1], 1, 16) == cudaErrorInvalidValue);
    CHECK(pd::sim::last_diagnostic().find("the destination is said to be on device 1") != std::string::npos);
    cudaGetLastError();
#endif
    for (int d = 0; d < D; ++d) {
        CUDA_OK(cudaSetDevice(d));
        CUDA_OK(cudaFree(buffers[std::size_t(d)]));
    }
    return conformance::finish();
}
