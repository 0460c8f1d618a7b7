/// @file cuda_sim.hpp
/// @brief The device side of the CPU simulator of the CUDA execution model (namespace pd::sim).
///
/// The sim build force-includes this header first in every translation unit (`-include`).
/// It includes the toolkit's own headers (so `dim3`, `cudaError_t`, `__half`, ... are CUDA's
/// own types), then takes over the keywords those headers define as empty under a host
/// compiler, and provides what device code uses: the built-in index variables, barriers,
/// warp collectives, atomics, intrinsics, and the launch that the rewritten `<<<...>>>`
/// syntax calls. The runtime API (cudaMalloc, streams, events, ...) is implemented by the
/// simulator library with the toolkit's declarations.
///
/// Each CUDA thread runs as a fiber; the fibers of one block share one OS thread, so static
/// `__shared__` variables become `static thread_local` (one copy per block in flight).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef PD_BACKEND_SIM
#define PD_BACKEND_SIM 1
#endif

// ---- keywords: the toolkit defines these as empty for host compilers; the simulator owns them.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __launch_bounds__
#undef __forceinline__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
/// One copy per block: a block's threads share the OS thread that runs it.
#define __shared__ static thread_local

namespace pd::sim {

/// Threads per warp on the simulated device.
inline constexpr int kWarpSize = 32;

namespace detail {

/// What the scheduler knows of one simulated CUDA thread.
struct ThreadState {
    uint3 thread_idx;
    int linear = 0;  ///< x + y * blockDim.x + z * blockDim.x * blockDim.y
};

/// What every thread of a block sees: its block's coordinates and the launch's shape.
struct BlockInfo {
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};

// GNU __thread rather than thread_local: constant-initialized, so no TLS wrapper functions
// (GCC 12 miscompiles UBSan's null check around those wrappers).
/// The simulated thread running on this OS thread (null outside kernels).
extern __thread ThreadState* current;
/// The block info of the block running on this OS thread.
extern __thread const BlockInfo* current_block;

/// Kinds of block-wide barriers.
enum class BarrierKind { Sync, Count, And, Or };
/// Arrives at a block-wide barrier; returns the reduction for Count/And/Or.
int block_barrier(BarrierKind kind, int predicate, const std::source_location& loc);

/// Kinds of warp collectives.
enum class WarpOp { SyncWarp, Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, Match, Wmma };
/// Arrives at a warp collective with a value of up to 8 bytes; returns this lane's result.
std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int param, int width,
                              const std::source_location& loc);
/// Lanes of the current thread's warp that have not exited.
unsigned active_mask();

/// Stops the launch with cudaErrorAssert / cudaErrorLaunchFailure after printing @p message
/// for the current thread. Does not return.
[[noreturn]] void kernel_fault(cudaError_t code, const char* message, const std::source_location& loc);

/// Base of this block's dynamic shared memory (sized by the launch).
void* dynamic_shared_memory();

/// A kernel launch, type-erased: `invoke(bound)` runs the kernel body for the current thread.
struct LaunchRequest {
    dim3 grid, block;
    std::size_t shared_bytes = 0;
    cudaStream_t stream = nullptr;
    const void* kernel = nullptr;  ///< identity of the kernel, for cudaFuncSetAttribute
    void (*invoke)(const void* bound) = nullptr;
    const void* bound = nullptr;
};
/// Validates the configuration (setting the error cudaGetLastError returns) and runs every
/// block; returns when the kernel has finished.
void launch(const LaunchRequest& request);

template <typename T>
std::uint64_t to_bits(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                  "warp collectives on the simulator take trivially copyable values of at most 8 bytes");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}
template <typename T>
T from_bits(std::uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}

}  // namespace detail

// ---- launch: `k<<<cfg>>>(args)` is rewritten to `k << pd::sim::launch_config(cfg)(args)` --------

/// Arguments bound to a launch configuration, waiting for the kernel on the left of `<<`.
template <typename... A>
struct BoundLaunch {
    dim3 grid, block;
    std::size_t shared_bytes;
    cudaStream_t stream;
    std::tuple<A...> args;
};

/// The launch configuration of one `<<<grid, block, shared_bytes, stream>>>`.
struct LaunchConfig {
    dim3 grid, block;
    std::size_t shared_bytes;
    cudaStream_t stream;
    template <typename... A>
    BoundLaunch<std::decay_t<A>...> operator()(A&&... args) const {
        return {grid, block, shared_bytes, stream, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    }
};

inline LaunchConfig launch_config(dim3 grid, dim3 block, std::size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
    return {grid, block, shared_bytes, stream};
}

namespace detail {
template <typename Kernel, typename Params>
struct BoundKernel {
    Kernel kernel;
    Params params;
};
template <typename Kernel, typename Params>
void invoke_kernel(const void* bound) {
    const auto* b = static_cast<const BoundKernel<Kernel, Params>*>(bound);
    Params copy = b->params;  // each thread gets its own copy of the by-value parameters
    std::apply(b->kernel, std::move(copy));
}
}  // namespace detail

/// Launches @p kernel with the bound configuration and arguments (converted to the kernel's
/// parameter types, as a CUDA launch does).
template <typename... P, typename... A>
void operator<<(void (*kernel)(P...), BoundLaunch<A...>&& launch) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    using Params = std::tuple<std::decay_t<P>...>;
    detail::BoundKernel<void (*)(P...), Params> bound{kernel, std::make_from_tuple<Params>(std::move(launch.args))};
    detail::LaunchRequest req;
    req.grid = launch.grid;
    req.block = launch.block;
    req.shared_bytes = launch.shared_bytes;
    req.stream = launch.stream;
    req.kernel = reinterpret_cast<const void*>(kernel);
    req.invoke = &detail::invoke_kernel<void (*)(P...), Params>;
    req.bound = &bound;
    detail::launch(req);
}

/// The diagnostic of the last failed launch or rejected configuration ("" if none).
std::string last_diagnostic();
/// Worker threads that run blocks (PD_SIM_THREADS, default: the hardware threads).
int worker_count();
/// Chooses the schedule of later launches: round-robin (the default) or, with @p random, the
/// order in which threads resume shuffled at every barrier from @p seed (as PD_SIM_SCHEDULE=random
/// and PD_SIM_SEED do). Call between launches.
void set_schedule(bool random, std::uint64_t seed);

/// Guard used where the rewriter removed an unsupported construct (inline PTX).
template <typename T = void>
inline constexpr bool kUnsupported = false;

}  // namespace pd::sim

// ---- built-in variables --------------------------------------------------------------------
#define threadIdx (static_cast<const uint3&>(::pd::sim::detail::current->thread_idx))
#define blockIdx (static_cast<const uint3&>(::pd::sim::detail::current_block->block_idx))
#define blockDim (static_cast<const dim3&>(::pd::sim::detail::current_block->block_dim))
#define gridDim (static_cast<const dim3&>(::pd::sim::detail::current_block->grid_dim))
/// CUDA's warpSize: a constant, not a macro, so that cudaDeviceProp::warpSize stays usable.
inline constexpr int warpSize = ::pd::sim::kWarpSize;

// ---- barriers and warp collectives (the call site is reported in diagnostics) ---------------
inline void __syncthreads(const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Sync, 0, loc);
}
inline int __syncthreads_count(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Count, predicate != 0, loc);
}
inline int __syncthreads_and(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::And, predicate != 0, loc);
}
inline int __syncthreads_or(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Or, predicate != 0, loc);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::warp_collective(::pd::sim::detail::WarpOp::SyncWarp, mask, 0, 0, 32, loc);
}

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::Shfl, mask, to_bits(var), src_lane, width, loc));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflUp, mask, to_bits(var), int(delta), width, loc));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflDown, mask, to_bits(var), int(delta), width, loc));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflXor, mask, to_bits(var), lane_mask, width, loc));
}
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return unsigned(warp_collective(WarpOp::Ballot, mask, predicate != 0, 0, 32, loc));
}
inline int __any_sync(unsigned mask, int predicate, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return int(warp_collective(WarpOp::Any, mask, predicate != 0, 0, 32, loc));
}
inline int __all_sync(unsigned mask, int predicate, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return int(warp_collective(WarpOp::All, mask, predicate != 0, 0, 32, loc));
}
template <typename T>
unsigned __match_any_sync(unsigned mask, T value, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return unsigned(warp_collective(WarpOp::Match, mask, to_bits(value), 0, 32, loc));
}
inline unsigned __activemask() { return ::pd::sim::detail::active_mask(); }

// ---- memory fences, clocks, traps ------------------------------------------------------------
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
long long clock64();
inline void __nanosleep(unsigned) {}
[[noreturn]] inline void __trap(const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::kernel_fault(cudaErrorLaunchFailure, "__trap() called", loc);
}
template <typename T>
T __ldg(const T* p) {
    return *p;
}

// ---- atomics (real atomics: blocks run concurrently on worker threads) -----------------------
namespace pd::sim::detail {
template <typename T, typename Fn>
T atomic_update(T* address, Fn&& fn) {
    std::atomic_ref<T> ref(*address);
    T old = ref.load(std::memory_order_relaxed);
    while (!ref.compare_exchange_weak(old, fn(old), std::memory_order_seq_cst, std::memory_order_relaxed)) {
    }
    return old;
}
}  // namespace pd::sim::detail

template <typename T>
T atomicAdd(T* address, T val) {
    static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long> ||
                      std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "atomicAdd: int, unsigned, unsigned long long, float or double");
    return std::atomic_ref<T>(*address).fetch_add(val);
}
template <typename T>
T atomicSub(T* address, T val) {
    return std::atomic_ref<T>(*address).fetch_sub(val);
}
template <typename T>
T atomicExch(T* address, T val) {
    return std::atomic_ref<T>(*address).exchange(val);
}
template <typename T>
T atomicMax(T* address, T val) {
    return ::pd::sim::detail::atomic_update(address, [val](T old) { return old < val ? val : old; });
}
template <typename T>
T atomicMin(T* address, T val) {
    return ::pd::sim::detail::atomic_update(address, [val](T old) { return val < old ? val : old; });
}
template <typename T>
T atomicCAS(T* address, T compare, T val) {
    std::atomic_ref<T>(*address).compare_exchange_strong(compare, val);
    return compare;  // the old value, whether or not the exchange happened
}
template <typename T>
T atomicAnd(T* address, T val) {
    return std::atomic_ref<T>(*address).fetch_and(val);
}
template <typename T>
T atomicOr(T* address, T val) {
    return std::atomic_ref<T>(*address).fetch_or(val);
}
template <typename T>
T atomicXor(T* address, T val) {
    return std::atomic_ref<T>(*address).fetch_xor(val);
}
inline unsigned atomicInc(unsigned* address, unsigned val) {
    return ::pd::sim::detail::atomic_update(address, [val](unsigned old) { return old >= val ? 0u : old + 1; });
}
inline unsigned atomicDec(unsigned* address, unsigned val) {
    return ::pd::sim::detail::atomic_update(address,
                                            [val](unsigned old) { return (old == 0 || old > val) ? val : old - 1; });
}

// ---- integer and bit intrinsics ---------------------------------------------------------------
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return std::countl_zero(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline int __ffsll(long long x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1; }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return int((static_cast<long long>(a) * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((static_cast<unsigned long long>(a) * b) >> 32); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }

// ---- float math: CUDA's names that the host library lacks -----------------------------------
// The fast intrinsics (__expf, ...) are approximations on a GPU; here they are the accurate
// functions, so results can differ from a GPU's in the last bits.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f)); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }

#include "pd/sim/wmma.hpp"
