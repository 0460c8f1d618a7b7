// Internal interface between the simulator's scheduler and its runtime API.
#pragma once

#include "pd/sim/cuda_sim.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

struct CUgraph_st;

// A stream the program created (cudaStreamCreate): the simulator defines the runtime's opaque
// handle type. Work on it runs in order as it is issued, unless it is capturing (graphs.cpp).
struct CUstream_st {
    unsigned flags = 0;
    int device = 0;                 ///< the device current when it was created: its launches run there
    CUgraph_st* capture = nullptr;  ///< the graph its capture records into, or null
    cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
    std::thread::id capture_thread;    ///< the host thread that began the capture
    bool capture_invalidated = false;  ///< an error invalidated the capture (cudaStreamEndCapture fails)
};

namespace pd::sim::detail {

/// The device the simulator reports and enforces (PD_SIM_DEVICE): its compute capability and
/// the limits that differ between GPUs.
struct DevicePreset {
    std::string name;                        ///< "" (the default) or a GPU's name ("T4")
    int compute_capability = 0;              ///< 10 * major + minor; 0: the program's PD_SIM_CUDA_ARCH
    std::size_t shared_optin = 163 * 1024;   ///< dynamic shared memory per block with the opt-in attribute
    std::size_t shared_per_sm = 164 * 1024;  ///< shared memory per SM
    int threads_per_sm = 2048;               ///< resident threads per SM
    int blocks_per_sm = 32;                  ///< resident blocks per SM
    int sms = 0;                             ///< SMs reported; 0: one per worker thread
};

/// Settings read once from the environment.
struct Settings {
    int workers = 1;               ///< PD_SIM_THREADS (default: hardware threads)
    bool random_schedule = false;  ///< PD_SIM_SCHEDULE=random
    std::uint64_t seed = 0;        ///< PD_SIM_SEED
    std::size_t stack_bytes = 0;   ///< per simulated thread (PD_SIM_STACK_KIB)
    /// PD_SIM_WATCHDOG_SECONDS: a thread that runs this long without yielding ends the process
    /// (a spin-wait the simulator cannot run); 0 turns the watchdog off.
    double watchdog_seconds = 30;
    /// PD_SIM_DEVICES: the virtual devices (1 ... kMaxDevices), each with its own memory (the
    /// simulated memory shared out among them), streams and current-device state per host thread.
    int devices = 1;
    /// PD_SIM_NCCL_TIMEOUT_SECONDS: how long a collective waits for the ranks that have not
    /// joined it before it fails, naming them (nccl.cpp).
    double collective_timeout_seconds = 60;
    /// PD_SIM_DEVICE: the device preset (default: an sm_90-class device of the program's
    /// PD_SIM_CUDA_ARCH; T4: compute capability 7.5 with a T4's limits).
    DevicePreset device;
    /// PD_SIM_PEER_ACCESS=0: the virtual devices refuse peer access (cudaDeviceCanAccessPeer says
    /// 0), as on machines whose GPUs sit on different PCIe root complexes.
    bool peer_access = true;
    /// PD_SIM_WORK_GFLOP, in FLOPs: the most simulator work one launch may ask for, counting 600
    /// per thread it starts (pd::sim_launch_work()'s cost of a thread), so that a launch of 2^31
    /// blocks is refused at once, by name, instead of running for hours; the chapter programs
    /// check their whole run against the same budget before they start.
    double launch_work_budget = 100e9;
};
Settings& settings();

/// The compute capability the simulated device reports: the preset's, or the architecture the
/// program's device code was compiled for (10 * major + minor).
int device_compute_capability();

/// The most virtual devices PD_SIM_DEVICES may ask for.
inline constexpr int kMaxDevices = 16;

/// Limits of the simulated device (also reported by cudaGetDeviceProperties).
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kMaxBlockDimX = 1024, kMaxBlockDimY = 1024, kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 0x7FFFFFFFu, kMaxGridDimY = 65535, kMaxGridDimZ = 65535;
inline constexpr std::size_t kSharedPerBlock = 48 * 1024;  ///< default limit (every preset's)
/// The most dynamic shared memory any preset allows with the opt-in attribute (the size of each
/// worker's buffer); the device's own limit is settings().device.shared_optin.
inline constexpr std::size_t kSharedPerBlockOptin = 163 * 1024;

/// The error returned (and cleared) by cudaGetLastError; sticky errors are never cleared.
void set_error(cudaError_t code);
/// Records a fault that poisons the context, as a kernel fault does on a GPU.
void set_sticky_error(cudaError_t code);
cudaError_t sticky_error();
cudaError_t take_last_error();
cudaError_t peek_last_error();
/// Clears every error (cudaDeviceReset).
void reset_errors();

/// The kernel's dynamic shared memory limit set by cudaFuncSetAttribute, if any.
std::optional<std::size_t> max_dynamic_shared(const void* kernel);
void set_max_dynamic_shared(const void* kernel, std::size_t bytes);

/// Records the diagnostic of the last failed launch (also printed to stderr).
void set_last_diagnostic(const std::string& text);

// ---- stream capture and CUDA graphs (graphs.cpp) ----------------------------------------------

/// Whether work issued to @p stream is recorded into its capture instead of run (@p recording);
/// cudaErrorStreamCaptureInvalidated for a stream whose capture an error invalidated.
cudaError_t capture_status(cudaStream_t stream, bool& recording);
/// Records a kernel launch into the capture of its stream (its arguments copied).
cudaError_t record_launch(const LaunchRequest& req);
/// Records a copy (cudaMemcpyAsync) into the capture of @p stream, its arguments checked.
void record_copy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
/// Records a memset (cudaMemsetAsync) into the capture of @p stream.
void record_set(cudaStream_t stream, void* dst, int value, std::size_t bytes);
/// Work issued to @p stream (@p call names it) when it is the legacy default stream, which every
/// blocking stream waits for: while a blocking stream of the current device is capturing, that is
/// an implicit dependency CUDA refuses, invalidating those captures
/// (cudaErrorStreamCaptureImplicit, recorded as the last error); cudaSuccess otherwise.
cudaError_t legacy_stream_work(cudaStream_t stream, const char* call);
/// A potentially unsafe call (@p call: cudaMalloc, cudaFree, ...) during a capture: refused
/// (cudaErrorStreamCaptureUnsupported, the captures concerned invalidated) when this thread
/// captures in global or thread-local mode, or another thread in global mode while this
/// thread's mode (cudaThreadExchangeStreamCaptureMode) is global.
cudaError_t capture_unsafe_call(const char* call);
/// Synchronizing @p stream, or the device with @p device: refused while the stream (or, for the
/// device, any stream) is capturing (cudaErrorStreamCaptureUnsupported, the capture invalidated).
cudaError_t capture_sync(cudaStream_t stream, bool device, const char* call);
/// Ends a capture of @p stream without a graph (the stream is being destroyed).
void forget_capture(cudaStream_t stream);

/// The name of the kernel at @p kernel as its source spells it ("ramp", "tiled_gemm<float>"), from
/// the symbol table of the program; its address if the program has none (runtime_api.cpp).
std::string kernel_name(const void* kernel);

/// The source name of the function whose mangled name is @p mangled, without its parameters
/// (as kernel_name() gives it), or "" (runtime_api.cpp).
std::string source_name(const std::string& mangled);

/// Called when a launch of @p kernel has ended: checks the guard zones around every live
/// cudaMalloc allocation, and if the kernel wrote into one, prints what it overwrote (which
/// allocation, where it was made, how far past its end or before its start) and stops the
/// program with exit status 1 (runtime_api.cpp). Does nothing in the sanitizer build, where
/// AddressSanitizer reports the access itself.
void check_device_memory_guards(const void* kernel);

/// Why the launch @p req may not run on the calling thread's current device, or "": its stream
/// belongs to another device, or one of its pointer arguments points into an allocation of
/// another device whose memory the current one has no peer access to (runtime_api.cpp).
std::string launch_device_error(const LaunchRequest& req);

/// The calling host thread's current device (cudaSetDevice), and the device that holds the
/// device allocation around @p p (-1 for memory that is not a cudaMalloc allocation).
int current_device_of_thread();
int device_of_pointer(const void* p);

/// The kernel whose block runs on this OS thread, or null outside kernels (scheduler.cpp).
const void* running_kernel();

/// Every live cudaMalloc allocation as (first byte, bytes), by address (runtime_api.cpp).
std::vector<std::pair<std::uintptr_t, std::size_t>> device_allocation_ranges();

// ---- the profiler (profiler.cpp): what the scheduler tells it -------------------------------

/// A launch starts: when a profiling scope is open and the kernels are instrumented, prepares
/// its counters (the allocations, the shared memory ranges) and returns true.
bool profile_launch_begin(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_shared);
/// A block starts on this worker: its threads, its dynamic shared memory.
void profile_block_begin(std::size_t threads, const void* dynamic_shared, std::size_t dynamic_bytes);
/// A static `__shared__` variable of the running block (shared_variable()).
void profile_shared_variable(const void* address, std::size_t bytes);
/// The lanes of warp @p warp of the running block met at a collective that all its live lanes
/// joined (or the block's barrier, @p warp = -1: every warp): their accesses so far form requests.
void profile_sync(int warp);
/// A warp-level operation executed by one warp of the running block (a shuffle, a vote, ...),
/// named as the scheduler names it; @p internal ones (the checks inside WMMA) are not counted.
void profile_warp_op(WarpOp op, const char* instruction);
/// The block barrier was released for a block of @p warps warps.
void profile_barrier(int warps);
/// The running block ends (its accesses are flushed, its counters merged into the launch's).
void profile_block_end(std::size_t linear_block, std::size_t static_shared);
/// The launch ends: its counters go into every open scope.
void profile_launch_end();
/// True (once) when the collective this thread is entering is the simulator's own
/// (profile_next_collective_internal()).
bool take_internal_collective();
/// Starts the whole run's collection when `PD_SIM_PROFILE` is set (or, with
/// @p report_at_exit, a report on stderr at exit). @param report_at_exit scripts/simcc --profile
void profile_program_start(bool report_at_exit);

/// Forgets the cp.async copies of the previous block on this worker and makes room for the
/// @p threads threads of the next one (warp_matrix.cpp).
void begin_block_async_copies(std::size_t threads);

}  // namespace pd::sim::detail
