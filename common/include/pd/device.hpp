/// @file device.hpp
/// @brief What the device is: the numbers chapters print and judge kernels against.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace pd {

/// Properties of one device, read with cudaGetDeviceProperties and cudaDeviceGetAttribute
/// (CUDA 13 removed the clock fields from cudaDeviceProp).
struct DeviceInfo {
    /// Device ordinal, as passed to cudaSetDevice.
    int index = 0;
    /// Name reported by the runtime, e.g. "NVIDIA H200".
    std::string name;
    /// Compute capability, major and minor.
    int cc_major = 0, cc_minor = 0;  ///< compute capability
    int sm_count = 0;                ///< streaming multiprocessors
    /// Device memory in bytes.
    std::size_t global_mem_bytes = 0;
    /// L2 cache size in bytes.
    int l2_bytes = 0;
    std::size_t smem_per_block = 0;        ///< default limit per block
    std::size_t smem_per_block_optin = 0;  ///< limit with cudaFuncAttributeMaxDynamicSharedMemorySize
    /// Shared memory per multiprocessor, in bytes.
    std::size_t smem_per_sm = 0;
    /// Largest block the device accepts.
    int max_threads_per_block = 0;
    /// Threads per warp (32).
    int warp_size = 0;
    int clock_khz = 0;           ///< peak SM clock (0 when not reported, e.g. on the simulator)
    int max_threads_per_sm = 0;  ///< resident threads per SM
    int memory_clock_khz = 0;    ///< peak memory clock
    /// Memory bus width in bits.
    int memory_bus_bits = 0;
    double theoretical_bandwidth_gbps = 0;  ///< 2 (double data rate) * clock * bus width / 8
    ///@{
    /// CUDA runtime and driver versions, as 1000 * major + 10 * minor.
    int runtime_version = 0, driver_version = 0;
    ///@}
};

/// How many devices the runtime sees, and why none when there are none.
struct DeviceProbe {
    /// Number of CUDA devices visible.
    int count = 0;
    std::string reason;  ///< empty when count > 0, else the runtime's explanation
};

/// Asks the runtime for devices; never throws (a machine without a GPU is a normal case).
DeviceProbe probe_devices();

/// Reads the properties of device @p index. Throws pd::CudaError on failure.
DeviceInfo query_device(int index = 0);

/// The device as a JSON object (the "device" field of a chapter's report).
nlohmann::json to_json(const DeviceInfo& d);

/// A multi-line human-readable report of the device.
std::string describe(const DeviceInfo& d);

/// FP32 lanes per SM for compute capability @p major.@p minor (64 on sm_70, sm_75 and sm_80,
/// 128 on later ones; CUDA C++ Programming Guide, arithmetic instruction throughput), 0 when
/// unknown.
int fp32_lanes_per_sm(int major, int minor);

/// Theoretical FP32 peak (one FMA = 2 FLOPs per lane per clock) in FLOP/s, or 0 when the
/// device does not report its clock.
double fp32_peak_flops(const DeviceInfo& d);

/// Measures device-to-device copy bandwidth with cudaMemcpy over two buffers of @p bytes:
/// the median of @p iters timed copies after @p warmup, counting bytes read plus written, in
/// 1e9 bytes per second. The copy is checked (first and last bytes) before it is timed;
/// throws std::runtime_error if it is wrong.
double measure_copy_gbps(std::size_t bytes, int warmup, int iters);

}  // namespace pd
