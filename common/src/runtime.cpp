// Parts of common/ that call the CUDA runtime. Compiled once per backend: against the
// toolkit's runtime for cuda, against the simulator's runtime for sim.
#include "pd/buffer.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device.hpp"
#include "pd/timer.hpp"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace pd {

std::string cuda_error_message(cudaError_t code, const char* call, const char* file, int line) {
    std::ostringstream msg;
    msg << "CUDA error: `" << call << "` at " << file << ":" << line << ": " << cudaGetErrorName(code) << " ("
        << cudaGetErrorString(code) << ")";
    return msg.str();
}

DeviceProbe probe_devices() {
    DeviceProbe p;
    const cudaError_t err = cudaGetDeviceCount(&p.count);
    if (err != cudaSuccess) {
        p.count = 0;
        p.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
        cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    } else if (p.count == 0) {
        p.reason = "the CUDA runtime reports 0 devices";
    }
    return p;
}

DeviceInfo query_device(int index) {
    DeviceInfo d;
    d.index = index;
    cudaDeviceProp prop{};
    PD_CHECK_CUDA(cudaGetDeviceProperties(&prop, index));
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.sm_count = prop.multiProcessorCount;
    d.global_mem_bytes = prop.totalGlobalMem;
    d.l2_bytes = prop.l2CacheSize;
    d.smem_per_block = prop.sharedMemPerBlock;
    d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
    d.smem_per_sm = prop.sharedMemPerMultiprocessor;
    d.max_threads_per_block = prop.maxThreadsPerBlock;
    d.warp_size = prop.warpSize;
    // The memory clock left cudaDeviceProp in CUDA 13; the attribute remains.
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, index));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&d.max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, index));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, index));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&d.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
    // Double data rate: two transfers per clock, bus width in bits.
    d.theoretical_bandwidth_gbps = 2.0 * d.memory_clock_khz * 1e3 * (d.memory_bus_bits / 8.0) / 1e9;
    PD_CHECK_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
    PD_CHECK_CUDA(cudaDriverGetVersion(&d.driver_version));
    return d;
}

nlohmann::json to_json(const DeviceInfo& d) {
    return {{"name", d.name},
            {"index", d.index},
            {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
            {"sm_count", d.sm_count},
            {"global_mem_bytes", d.global_mem_bytes},
            {"l2_bytes", d.l2_bytes},
            {"smem_per_block", d.smem_per_block},
            {"smem_per_block_optin", d.smem_per_block_optin},
            {"smem_per_sm", d.smem_per_sm},
            {"clock_khz", d.clock_khz},
            {"max_threads_per_sm", d.max_threads_per_sm},
            {"memory_clock_khz", d.memory_clock_khz},
            {"memory_bus_bits", d.memory_bus_bits},
            {"theoretical_bandwidth_gbps", d.theoretical_bandwidth_gbps},
            {"runtime_version", d.runtime_version},
            {"driver_version", d.driver_version}};
}

std::string describe(const DeviceInfo& d) {
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "device %d: %s (compute capability %d.%d)\n"
                  "  multiprocessors        %d\n"
                  "  global memory          %.2f GiB\n"
                  "  L2 cache               %.1f MiB\n"
                  "  shared memory / block  %zu KiB (opt-in up to %zu KiB)\n"
                  "  shared memory / SM     %zu KiB\n"
                  "  memory bus             %d bits at %.0f MHz\n"
                  "  theoretical bandwidth  %.0f GB/s (2 x clock x bus width)\n"
                  "  runtime %d.%d, driver %d.%d\n",
                  d.index, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count, d.global_mem_bytes / double(1 << 30),
                  d.l2_bytes / double(1 << 20), d.smem_per_block / 1024, d.smem_per_block_optin / 1024,
                  d.smem_per_sm / 1024, d.memory_bus_bits, d.memory_clock_khz / 1e3, d.theoretical_bandwidth_gbps,
                  d.runtime_version / 1000, (d.runtime_version % 1000) / 10, d.driver_version / 1000,
                  (d.driver_version % 1000) / 10);
    return buf;
}

int fp32_lanes_per_sm(int major, int minor) {
    if (major == 7 || (major == 8 && minor == 0)) return 64;
    if (major >= 8) return 128;
    return 0;
}

double fp32_peak_flops(const DeviceInfo& d) {
    return 2.0 * fp32_lanes_per_sm(d.cc_major, d.cc_minor) * d.sm_count * d.clock_khz * 1e3;
}

double measure_copy_gbps(std::size_t bytes, int warmup, int iters) {
    DeviceBuffer<unsigned char> src(bytes), dst(bytes);
    src.fill_bytes(0x5A);
    dst.fill_bytes(0x00);
    PD_CHECK_CUDA(cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice));
    unsigned char first = 0, last = 0;
    PD_CHECK_CUDA(cudaMemcpy(&first, dst.data(), 1, cudaMemcpyDeviceToHost));
    PD_CHECK_CUDA(cudaMemcpy(&last, dst.data() + bytes - 1, 1, cudaMemcpyDeviceToHost));
    if (first != 0x5A || last != 0x5A) throw std::runtime_error("measure_copy_gbps: the copy is wrong");
    const TimingStats t =
        time_device([&] { PD_CHECK_CUDA(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); },
                    warmup, iters);
    return 2.0 * double(bytes) / (t.median_ms * 1e-3) / 1e9;
}

}  // namespace pd
