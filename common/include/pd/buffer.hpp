/// @file buffer.hpp
/// @brief RAII device memory: one owner per allocation, freed on scope exit.
#pragma once

#include "pd/cuda_check.hpp"

#include <cstddef>
#include <cstring>
#include <limits>
#include <source_location>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

namespace pd {

/// A typed device allocation of a fixed number of elements. Move-only.
///
/// Plain `cudaMalloc`/`cudaFree` underneath, so it behaves the same under nvcc, under a host
/// compiler calling the CUDA runtime, and on the simulator.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    /// Allocates @p count elements (uninitialized).
    /// @param count elements
    /// @param where the caller's line: on the simulator, a kernel that writes past the
    /// allocation is reported with it (its guard zones, docs/simulator.md)
    explicit DeviceBuffer(std::size_t count, std::source_location where = std::source_location::current())
        : count_(count) {
        if (count_ == 0) return;
#if defined(PD_BACKEND_SIM)
        PD_CHECK_CUDA(pd_sim_cudaMalloc(where, reinterpret_cast<void**>(&ptr_), bytes()));
#else
        (void)where;
        PD_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
#endif
    }
    /// Allocates and copies @p host to the device.
    /// @param host the values  @param where the caller's line (as above)
    explicit DeviceBuffer(std::span<const T> host, std::source_location where = std::source_location::current())
        : DeviceBuffer(host.size(), where) {
        upload(host);
    }
    ~DeviceBuffer() {
        reset();
    }

    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    /// Takes over @p other's allocation; @p other is left empty.
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    /// Frees this allocation and takes over @p other's; @p other is left empty.
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            reset();
            ptr_ = std::exchange(other.ptr_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }

    /// Device pointer to the first element (nullptr when empty).
    T* data() noexcept {
        return ptr_;
    }
    /// Device pointer to the first element (nullptr when empty).
    const T* data() const noexcept {
        return ptr_;
    }
    /// Number of elements.
    std::size_t size() const noexcept {
        return count_;
    }
    /// Size in bytes: size() * sizeof(T).
    std::size_t bytes() const noexcept {
        return count_ * sizeof(T);
    }

    /// Copies @p host (exactly size() elements) to the device; synchronous.
    void upload(std::span<const T> host) {
        if (host.size() != count_) throw std::invalid_argument("DeviceBuffer::upload: size mismatch");
        if (count_ > 0) PD_CHECK_CUDA(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
    /// Copies the whole buffer back to a new host vector; synchronous.
    std::vector<T> download() const {
        std::vector<T> host(count_);
        if (count_ > 0) PD_CHECK_CUDA(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
        return host;
    }
    /// Sets every byte to @p byte (0xFF makes float and half elements NaN).
    void fill_bytes(unsigned char byte) {
        if (count_ > 0) PD_CHECK_CUDA(cudaMemset(ptr_, byte, bytes()));
    }

private:
    void reset() noexcept {
        if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor
        ptr_ = nullptr;
        count_ = 0;
    }
    T* ptr_ = nullptr;
    std::size_t count_ = 0;
};

/// Byte pattern that makes every float, double, __half and __nv_bfloat16 element a NaN:
/// fill an output with it before a kernel runs, and an element the kernel never wrote shows up.
inline constexpr unsigned char kPoisonByte = 0xFF;

}  // namespace pd
