// The CUDA runtime API subset of the simulator, with the toolkit's own declarations, types and
// error codes. Device memory is host memory; streams and events run in order, so every call
// completes before it returns, and events read the host clock.
#include "sim_internal.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

// The opaque handle types the runtime declares; the simulator defines them.
struct CUstream_st {
    unsigned flags = 0;
};
struct CUevent_st {
    std::chrono::steady_clock::time_point time{};
    bool recorded = false;
};

namespace pd::sim::detail {

namespace {

std::mutex state_mutex;
cudaError_t sticky = cudaSuccess;
thread_local cudaError_t last_error = cudaSuccess;
std::string diagnostic;
std::map<const void*, std::size_t> dynamic_shared_limits;
std::map<const void*, std::size_t> device_allocations;
std::map<const void*, std::size_t> host_allocations;
std::size_t allocated_bytes = 0;
int current_device = 0;

std::size_t simulated_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const std::size_t physical = pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : (8ull << 30);
    return std::min<std::size_t>(physical / 2, 16ull << 30);
}

/// Returns @p code after recording it as the last error (success is not recorded).
cudaError_t fail(cudaError_t code) {
    set_error(code);
    return code;
}

void* aligned_block(std::size_t bytes) {
    return ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
}

}  // namespace

void set_error(cudaError_t code) {
    if (code != cudaSuccess) last_error = code;
}
void set_sticky_error(cudaError_t code) {
    std::lock_guard<std::mutex> lock(state_mutex);
    sticky = code;
    last_error = code;
}
cudaError_t sticky_error() {
    std::lock_guard<std::mutex> lock(state_mutex);
    return sticky;
}
cudaError_t take_last_error() {
    const cudaError_t s = sticky_error();
    if (s != cudaSuccess) return s;
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t peek_last_error() {
    const cudaError_t s = sticky_error();
    return s != cudaSuccess ? s : last_error;
}
void reset_errors() {
    std::lock_guard<std::mutex> lock(state_mutex);
    sticky = cudaSuccess;
    last_error = cudaSuccess;
    diagnostic.clear();
}
std::optional<std::size_t> max_dynamic_shared(const void* kernel) {
    std::lock_guard<std::mutex> lock(state_mutex);
    const auto it = dynamic_shared_limits.find(kernel);
    if (it == dynamic_shared_limits.end()) return std::nullopt;
    return it->second;
}
void set_max_dynamic_shared(const void* kernel, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(state_mutex);
    dynamic_shared_limits[kernel] = bytes;
}
void set_last_diagnostic(const std::string& text) {
    std::lock_guard<std::mutex> lock(state_mutex);
    diagnostic = text;
}

}  // namespace pd::sim::detail

namespace pd::sim {
std::string last_diagnostic() {
    std::lock_guard<std::mutex> lock(detail::state_mutex);
    return detail::diagnostic;
}
int worker_count() { return detail::settings().workers; }
}  // namespace pd::sim

using namespace pd::sim::detail;

// ---- errors ----------------------------------------------------------------------------------

cudaError_t cudaGetLastError() { return take_last_error(); }
cudaError_t cudaPeekAtLastError() { return peek_last_error(); }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define PD_SIM_ERROR(name) \
    case name: return #name;
        PD_SIM_ERROR(cudaSuccess)
        PD_SIM_ERROR(cudaErrorInvalidValue)
        PD_SIM_ERROR(cudaErrorMemoryAllocation)
        PD_SIM_ERROR(cudaErrorInitializationError)
        PD_SIM_ERROR(cudaErrorInvalidConfiguration)
        PD_SIM_ERROR(cudaErrorInvalidDevice)
        PD_SIM_ERROR(cudaErrorInvalidDevicePointer)
        PD_SIM_ERROR(cudaErrorInvalidMemcpyDirection)
        PD_SIM_ERROR(cudaErrorInvalidDeviceFunction)
        PD_SIM_ERROR(cudaErrorInvalidResourceHandle)
        PD_SIM_ERROR(cudaErrorInvalidSymbol)
        PD_SIM_ERROR(cudaErrorNotReady)
        PD_SIM_ERROR(cudaErrorNoDevice)
        PD_SIM_ERROR(cudaErrorInsufficientDriver)
        PD_SIM_ERROR(cudaErrorNotSupported)
        PD_SIM_ERROR(cudaErrorIllegalAddress)
        PD_SIM_ERROR(cudaErrorMisalignedAddress)
        PD_SIM_ERROR(cudaErrorLaunchOutOfResources)
        PD_SIM_ERROR(cudaErrorAssert)
        PD_SIM_ERROR(cudaErrorIllegalInstruction)
        PD_SIM_ERROR(cudaErrorLaunchFailure)
        PD_SIM_ERROR(cudaErrorUnknown)
#undef PD_SIM_ERROR
        default: return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorNotSupported: return "operation not supported";
        case cudaErrorAssert: return "device-side assert triggered";
        case cudaErrorMisalignedAddress: return "misaligned address";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        default: return "unknown error";
    }
}

// ---- device -----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
    if (count == nullptr) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device != 0) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    if (device == nullptr) return fail(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (prop == nullptr) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "pd::sim CPU simulator (%d worker threads)", settings().workers);
    prop->totalGlobalMem = simulated_memory_bytes();
    prop->sharedMemPerBlock = kSharedPerBlock;
    prop->sharedMemPerBlockOptin = kSharedPerBlockOptin;
    prop->sharedMemPerMultiprocessor = kSharedPerSM;
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->warpSize = pd::sim::kWarpSize;
    prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
    prop->maxThreadsDim[0] = kMaxBlockDimX;
    prop->maxThreadsDim[1] = kMaxBlockDimY;
    prop->maxThreadsDim[2] = kMaxBlockDimZ;
    prop->maxGridSize[0] = int(kMaxGridDimX);
    prop->maxGridSize[1] = int(kMaxGridDimY);
    prop->maxGridSize[2] = int(kMaxGridDimZ);
    prop->totalConstMem = 64 * 1024;
    prop->major = 8;  // the feature level it simulates: bf16 WMMA needs sm_80
    prop->minor = 0;
    prop->multiProcessorCount = settings().workers;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->l2CacheSize = 0;  // no cache is simulated
    prop->unifiedAddressing = 1;
    prop->managedMemory = 1;
    prop->concurrentKernels = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (value == nullptr) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *value = kMaxBlockDimX; break;
        case cudaDevAttrMaxBlockDimY: *value = kMaxBlockDimY; break;
        case cudaDevAttrMaxBlockDimZ: *value = kMaxBlockDimZ; break;
        case cudaDevAttrMaxGridDimX: *value = int(kMaxGridDimX); break;
        case cudaDevAttrMaxGridDimY: *value = int(kMaxGridDimY); break;
        case cudaDevAttrMaxGridDimZ: *value = int(kMaxGridDimZ); break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(kSharedPerBlock); break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kSharedPerBlockOptin); break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(kSharedPerSM); break;
        case cudaDevAttrWarpSize: *value = pd::sim::kWarpSize; break;
        case cudaDevAttrMultiProcessorCount: *value = settings().workers; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 8; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
        case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
        default: *value = 0; break;  // clocks, bus width, cache sizes: not simulated
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return sticky_error(); }
cudaError_t cudaDeviceReset() {
    reset_errors();
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(state_mutex);
    *total_bytes = simulated_memory_bytes();
    *free_bytes = *total_bytes > allocated_bytes ? *total_bytes - allocated_bytes : 0;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
    if (v == nullptr) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
    if (v == nullptr) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || std::size_t(value) > kSharedPerBlockOptin) return fail(cudaErrorInvalidValue);
        set_max_dynamic_shared(func, std::size_t(value));
    }
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    if (attr == nullptr || func == nullptr) return fail(cudaErrorInvalidValue);
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
    attr->maxDynamicSharedSizeBytes = int(max_dynamic_shared(func).value_or(kSharedPerBlock));
    attr->numRegs = 0;          // not simulated
    attr->sharedSizeBytes = 0;  // static shared memory is not measured by the simulator
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          std::size_t dynamic_shared) {
    if (blocks == nullptr || func == nullptr || block_size < 1) return fail(cudaErrorInvalidValue);
    // Threads and shared memory only: the simulator knows no register counts.
    int by_threads = 2048 / block_size;
    const int by_shared = dynamic_shared > 0 ? int(kSharedPerSM / dynamic_shared) : 32;
    *blocks = std::max(0, std::min({by_threads, by_shared, 32}));
    return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
    if (ptr == nullptr) return fail(cudaErrorInvalidValue);
    if (const cudaError_t s = sticky_error()) return s;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (allocated_bytes + bytes > simulated_memory_bytes()) {
            *ptr = nullptr;
            return fail(cudaErrorMemoryAllocation);
        }
    }
    void* p = aligned_block(bytes);
    if (p == nullptr) {
        *ptr = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    std::lock_guard<std::mutex> lock(state_mutex);
    device_allocations[p] = bytes;
    allocated_bytes += bytes;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaMallocManaged(void** ptr, std::size_t bytes, unsigned int) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFree(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        const auto it = device_allocations.find(ptr);
        if (it == device_allocations.end()) return fail(cudaErrorInvalidValue);
        allocated_bytes -= it->second;
        device_allocations.erase(it);
    }
    ::operator delete(ptr, std::align_val_t(256));
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
    if (ptr == nullptr) return fail(cudaErrorInvalidValue);
    void* p = aligned_block(bytes);
    if (p == nullptr) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(state_mutex);
    host_allocations[p] = bytes;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned int) { return cudaMallocHost(ptr, bytes); }
cudaError_t cudaFreeHost(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (host_allocations.erase(ptr) == 0) return fail(cudaErrorInvalidValue);
    }
    ::operator delete(ptr, std::align_val_t(256));
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (const cudaError_t s = sticky_error()) return s;
    if (int(kind) < 0 || int(kind) > int(cudaMemcpyDefault)) return fail(cudaErrorInvalidMemcpyDirection);
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
    if (const cudaError_t s = sticky_error()) return s;
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr) return fail(cudaErrorInvalidValue);
    std::memset(dst, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t) {
    return cudaMemset(dst, value, bytes);
}
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, std::size_t bytes, std::size_t offset,
                               cudaMemcpyKind kind) {
    return cudaMemcpy(static_cast<char*>(const_cast<void*>(symbol)) + offset, src, bytes, kind);
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, std::size_t bytes, std::size_t offset,
                                 cudaMemcpyKind kind) {
    return cudaMemcpy(dst, static_cast<const char*>(symbol) + offset, bytes, kind);
}

// ---- streams and events: executed in order; events read the host clock ------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    if (stream == nullptr) return fail(cudaErrorInvalidValue);
    *stream = new CUstream_st{};
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    const cudaError_t e = cudaStreamCreate(stream);
    if (e == cudaSuccess) (*stream)->flags = flags;
    return e;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return sticky_error(); }
cudaError_t cudaStreamQuery(cudaStream_t) { return sticky_error(); }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return sticky_error(); }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    if (event == nullptr) return fail(cudaErrorInvalidValue);
    *event = new CUevent_st{};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    event->time = std::chrono::steady_clock::now();
    event->recorded = true;
    return sticky_error();
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    return sticky_error();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    return sticky_error();
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == nullptr) return fail(cudaErrorInvalidValue);
    if (start == nullptr || end == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
    return cudaSuccess;
}
