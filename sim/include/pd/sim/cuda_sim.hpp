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

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef PD_BACKEND_SIM
/// Defined (as 1) in every translation unit of the sim build, so that code can tell the
/// backends apart.
#define PD_BACKEND_SIM 1
#endif

#ifndef PD_SIM_CUDA_ARCH
/// The architecture the simulator models, as `__CUDA_ARCH__` spells it: 900 (compute
/// capability 9.0, an H100 or H200) unless the build defines another value (the CMake option
/// PD_SIM_CUDA_ARCH, or `-DPD_SIM_CUDA_ARCH=800` given to scripts/simcc).
///
/// nvcc compiles a file twice: a host pass, where `__CUDA_ARCH__` is not defined, and a device
/// pass per architecture, where it is. The simulator compiles it once, so the rewriter
/// (tools/rewrite.cpp) decides by where the name is written: in the body of a function declared
/// `__global__` or `__device__` (and not also `__host__`) it becomes PD_SIM_CUDA_ARCH, so
/// `#if __CUDA_ARCH__ >= 800` takes the device path of this architecture; everywhere else (host
/// functions, `__host__ __device__` functions, namespace scope, headers that are not rewritten)
/// it is left undefined, and the code takes the path of nvcc's host pass. `__CUDACC__` is not
/// defined.
#define PD_SIM_CUDA_ARCH 900
#endif
#if !(PD_SIM_CUDA_ARCH >= 300 && PD_SIM_CUDA_ARCH % 10 == 0)
#error "PD_SIM_CUDA_ARCH must be an architecture as __CUDA_ARCH__ spells it (800, 860, 900, ...)"
#endif

namespace pd::sim::detail {
/// Records @p arch, the architecture the program's device code sees as `__CUDA_ARCH__`, as the
/// compute capability the simulated device reports (cudaGetDeviceProperties, 9.0 for 900).
/// @param arch as `__CUDA_ARCH__` spells it  @return @p arch
int model_architecture(int arch);
#ifndef PD_SIM_RUNTIME_SOURCE
/// Every translation unit of a program registers its PD_SIM_CUDA_ARCH before main() (the
/// simulator's own library does not, so a program built with another value reports it).
inline const int registered_architecture = model_architecture(PD_SIM_CUDA_ARCH);
#endif
}  // namespace pd::sim::detail

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
///@{
/// CUDA's qualifiers, empty on the simulator: a kernel or device function is an ordinary C++
/// function; a `__constant__`, `__device__` or `__managed__` variable is an ordinary global
/// variable; `__grid_constant__` and `__launch_bounds__(...)` have no effect.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
///@}
/// Asks the host compiler to inline the function, as nvcc does.
#define __forceinline__ inline __attribute__((always_inline))
/// One copy per block: a block's threads share the OS thread that runs it. In a function, the
/// rewriter follows each `__shared__` declaration with a call to pd::sim::detail::shared_variable(),
/// which poisons the variable at the start of each block and checks the 48 KiB limit.
#define __shared__ static thread_local
// What the rewriter writes around a `__shared__` declaration in a function (tools/rewrite.cpp):
// `__shared__ float PD_SIM_SHARED_NAME(s)[32]; PD_SIM_SHARED_BIND(s)`. The plain simulator
// keeps the name and registers the variable; code compiled for the profiler names it apart and
// reaches it through a reference (shared_reference()).
/// Refuses, when the program is compiled, a static `__shared__` variable @p name over 48 KiB, as
/// ptxas refuses it (a 2 GiB array would otherwise fail at link time, or take the machine's memory).
#define PD_SIM_SHARED_LIMIT(name)                                                                          \
    static_assert(sizeof(name) <= 48 * 1024,                                                               \
                  "a static __shared__ variable of more than 48 KiB: ptxas refuses it (a kernel's static " \
                  "shared memory is at most 48 KiB); use extern __shared__ and cudaFuncSetAttribute above it");
#if defined(PD_SIM_PROFILED)
/// The name pd_sim_rewrite gives a `__shared__` variable's own declaration (a renamed one under
/// the profiler, whose accesses then go through PD_SIM_SHARED_BIND's reference).
#define PD_SIM_SHARED_NAME(name) pd_sim_shared_##name
/// What follows a `__shared__` declaration: registers the variable with the simulator (the
/// profiler: binds @p name to it as a reference, so that its accesses are counted).
#define PD_SIM_SHARED_BIND(name)              \
    PD_SIM_SHARED_LIMIT(pd_sim_shared_##name) \
    auto& name = ::pd::sim::detail::shared_reference(pd_sim_shared_##name, #name);
#else
/// The name pd_sim_rewrite gives a `__shared__` variable's own declaration: its own.
#define PD_SIM_SHARED_NAME(name) name
/// What follows a `__shared__` declaration: registers the variable with the simulator.
#define PD_SIM_SHARED_BIND(name)                                                                                  \
    PD_SIM_SHARED_LIMIT(name)                                                                                     \
    ::pd::sim::detail::shared_variable(const_cast<void*>(static_cast<const volatile void*>(&name)), sizeof(name), \
                                       #name);
#endif

/// The CPU simulator of the CUDA execution model: each CUDA thread a fiber, the fibers of one
/// block on one OS thread, blocks spread over a pool of worker threads (see the page
/// "Running without a GPU", docs/simulator.md).
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

/// Kinds of warp collectives. `Instruction` is a warp-wide PTX instruction (warp_instruction()).
enum class WarpOp {
    SyncWarp,
    Shfl,
    ShflUp,
    ShflDown,
    ShflXor,
    Ballot,
    Any,
    All,
    Match,
    Wmma,
    ActiveMask,
    ReduceAdd,
    ReduceMinU,
    ReduceMaxU,
    ReduceMinI,
    ReduceMaxI,
    ReduceAnd,
    ReduceOr,
    ReduceXor,
    Instruction
};
/// Arrives at a warp collective with a value of up to 8 bytes; returns this lane's result.
std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int param, int width,
                              const std::source_location& loc);
/// Arrives at a warp-wide PTX instruction (`.sync.aligned`: mma.sync, ldmatrix), named @p name in
/// diagnostics. Waits until all 32 lanes of the warp have arrived at the same call site; then,
/// while every lane is suspended, calls `execute(lane_args)` once, `lane_args[l]` being the
/// @p args of lane l. So the instruction reads and writes every lane's operands at one instant,
/// as the warp does on a GPU. A lane missing (exited, elsewhere, or not existing in a partial
/// warp) or lanes at different instructions stop the launch with a diagnostic.
void warp_instruction(const char* name, void (*execute)(void* const* lane_args), void* args,
                      const std::source_location& loc);
/// __activemask: the lanes of the warp that reach this call together (same call site, in the
/// same scheduling round).
unsigned active_mask(const std::source_location& loc);

/// Stops the launch with cudaErrorAssert / cudaErrorLaunchFailure after printing @p message
/// for the current thread. Does not return.
[[noreturn]] void kernel_fault(cudaError_t code, const char* message, const std::source_location& loc);

/// Stops the launch, as a GPU's trap would, when the simulated device (PD_SIM_DEVICE) has a
/// compute capability below @p needed (10 * major + minor: 80 for sm_80): on such a GPU the
/// code of @p instruction ("bf16 mma.sync m16n8k16") is not there. Returns otherwise.
void require_compute_capability(int needed, const char* instruction, const std::source_location& loc);

/// Base of this block's dynamic shared memory (sized by the launch).
void* dynamic_shared_memory();

/// Called where a `__shared__` variable is declared in a function (the rewriter adds the call
/// after the declaration; see tools/rewrite.cpp), each time a thread passes it. The first time in
/// a block, the variable (@p bytes at @p address) is poisoned with 0xFF bytes, as a GPU leaves
/// shared memory holding garbage, and counted in the block's static shared memory; if that total
/// exceeds 48 KiB the launch stops with cudaErrorLaunchOutOfResources and a diagnostic naming
/// @p name and its line (nvcc refuses such a kernel when building for a GPU).
/// Returns @p address (through a call the compiler cannot see into: the profiler's reference).
void* shared_variable(void* address, std::size_t bytes, const char* name,
                      const std::source_location& loc = std::source_location::current());
/// The profiler's reference to a `__shared__` variable: registered as shared_variable() does,
/// and returned through it, so that the compiler cannot fold an access at a constant index into
/// a direct one, which its instrumentation would not report.
/// @param variable the variable  @param name its name  @param loc where it is declared
template <typename T>
T& shared_reference(T& variable, const char* name, const std::source_location& loc = std::source_location::current()) {
    void* p = shared_variable(const_cast<void*>(static_cast<const volatile void*>(&variable)), sizeof(T), name, loc);
    return *static_cast<T*>(p);
}

// ---- the profiler (profiler.cpp, pd/sim/profile.hpp), as the code compiled for it calls it ------
/// Registers a translation unit compiled for the profiler (PD_SIM_PROFILED: its loads and stores
/// call the simulator); the first starts `PD_SIM_PROFILE=FILE`'s collection, or with
/// @p report_at_exit (scripts/simcc --profile) a report on stderr at exit.
/// @param report_at_exit print the report at exit  @return the units registered so far
int register_instrumented_unit(bool report_at_exit);
/// True while the running block is profiled (its accesses are counted).
bool profile_active();
/// Stops (+1) or resumes (-1) counting this thread's accesses: inside an emulation, whose own
/// loads and stores are not the kernel's. @param delta +1 or -1
void profile_suppress(int delta);
/// Counts a lane's access that an emulated instruction makes (cp.async, ldmatrix, WMMA), at the
/// call site @p file:@p line of the instruction @p instruction (a string literal).
/// @param p the address  @param size bytes  @param store a store  @param file the call's file
/// @param line its line  @param instruction its name
void profile_access(const void* p, unsigned size, bool store, const char* file, unsigned line, const char* instruction);
/// Counts an atomic of @p size bytes at @p p by the running thread (its site: the caller's code).
/// @param p the address  @param size bytes
void profile_atomic(const void* p, unsigned size);
/// Counts a WMMA call of one warp: 0 load_matrix_sync, 1 store_matrix_sync, 2 mma_sync.
/// @param what which call
void profile_wmma(int what);
/// The next warp collective of this thread is the simulator's own (WMMA's consistency checks):
/// it is not counted as the program's.
void profile_next_collective_internal();

/// An atomic, as the profiler sees it: counted once as an atomic; the loads and stores of its
/// emulation are not counted.
struct ProfiledAtomic {
    /// @param p the address  @param size bytes
    ProfiledAtomic(const void* p, unsigned size) {
        profile_atomic(p, size);
        profile_suppress(1);
    }
    ~ProfiledAtomic() { profile_suppress(-1); }
    ProfiledAtomic(const ProfiledAtomic&) = delete;
    ProfiledAtomic& operator=(const ProfiledAtomic&) = delete;
};

#if defined(PD_SIM_PROFILED) && !defined(PD_SIM_RUNTIME_SOURCE)
#if defined(PD_SIM_PROFILE_REPORT)
/// This unit's registration with the profiler (scripts/simcc --profile: a report at exit).
inline const int profiled_unit = register_instrumented_unit(true);
#else
/// This unit's registration with the profiler.
inline const int profiled_unit = register_instrumented_unit(false);
#endif
#endif

/// A kernel launch, type-erased: `invoke(bound)` runs the kernel body for the current thread.
struct LaunchRequest {
    dim3 grid, block;
    std::size_t shared_bytes = 0;
    cudaStream_t stream = nullptr;
    const void* kernel = nullptr;  ///< identity of the kernel, for cudaFuncSetAttribute
    void (*invoke)(const void* bound) = nullptr;
    const void* bound = nullptr;
    /// The launch's pointer arguments in order (null where an argument is not a pointer): with
    /// several virtual devices, each must point into memory the current device can reach.
    const void* const* pointers = nullptr;
    int arguments = 0;  ///< entries of pointers
    /// A copy of `bound` that outlives the launch, for a stream capture that records it (a CUDA
    /// graph replays the launch with the arguments it was captured with).
    std::shared_ptr<const void> (*clone)(const void* bound) = nullptr;
};
/// Validates the configuration (setting the error cudaGetLastError returns) and runs every
/// block; returns when the kernel has finished.
void launch(const LaunchRequest& request);

template <typename T>
std::uint64_t to_bits(const T& v) {
    static_assert(sizeof(T) <= 8, "warp collectives on the simulator take values of at most 8 bytes");
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
    ///@{
    /// The launch configuration: grid and block dimensions, dynamic shared memory in bytes, stream.
    dim3 grid, block;
    std::size_t shared_bytes;
    cudaStream_t stream;
    ///@}
    /// The launch's arguments, as given (converted to the kernel's parameter types at launch).
    std::tuple<A...> args;
};

/// The launch configuration of one `<<<grid, block, shared_bytes, stream>>>`.
struct LaunchConfig {
    ///@{
    /// Grid and block dimensions, dynamic shared memory in bytes, stream, as written in `<<<...>>>`.
    dim3 grid, block;
    std::size_t shared_bytes;
    cudaStream_t stream;
    ///@}
    /// Binds the launch's arguments @p args (copied, as CUDA copies kernel arguments) to this
    /// configuration; `kernel << config(args...)` then launches.
    template <typename... A>
    BoundLaunch<std::decay_t<A>...> operator()(A&&... args) const {
        return {grid, block, shared_bytes, stream, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    }
};

/// What the rewritten `k<<<grid, block, shared_bytes, stream>>>(args)` calls:
/// `k << pd::sim::launch_config(grid, block, shared_bytes, stream)(args)`, where the rewriter
/// wraps `k` in a detail::kernel_at_launch() when it is a name it can select a kernel from. As
/// in CUDA, @p shared_bytes (dynamic shared memory) and @p stream may be omitted.
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
std::shared_ptr<const void> clone_bound(const void* bound) {
    return std::make_shared<const BoundKernel<Kernel, Params>>(*static_cast<const BoundKernel<Kernel, Params>*>(bound));
}
template <typename Kernel, typename Params>
void invoke_kernel(const void* bound) {
    const auto* b = static_cast<const BoundKernel<Kernel, Params>*>(bound);
    Params copy = b->params;  // each thread gets its own copy of the by-value parameters
    std::apply(b->kernel, std::move(copy));
}
/// @p arg converted to the parameter type @p P by copy-initialization, as a call converts it:
/// implicit conversions only (`float*` to `const float*`, `int` to `size_t`).
template <typename P, typename A>
P convert_argument(A&& arg) {
    return std::forward<A>(arg);
}
/// @p arg as an address when it is a pointer to an object, else null (launch_device_error()).
template <typename P>
const void* pointer_argument(const P& arg) {
    if constexpr (std::is_pointer_v<P> && std::is_object_v<std::remove_pointer_t<P>>)
        // (through `const volatile void*`: a `volatile int*` parameter, the flag of a spin loop,
        // converts to no other void pointer)
        return const_cast<const void*>(static_cast<const volatile void*>(arg));
    else
        return nullptr;
}
template <typename Params, typename Args, std::size_t... I>
Params convert_arguments([[maybe_unused]] Args&& args, std::index_sequence<I...>) {
    return Params(convert_argument<std::tuple_element_t<I, Params>>(std::get<I>(std::move(args)))...);
}
}  // namespace detail

// [launch_operator]
/// Launches @p kernel with the bound configuration and arguments (converted to the kernel's
/// parameter types, as a CUDA launch does).
template <typename... P, typename... A>
void operator<<(void (*kernel)(P...), BoundLaunch<A...>&& launch) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    using Params = std::tuple<std::decay_t<P>...>;
    detail::BoundKernel<void (*)(P...), Params> bound{
        kernel, detail::convert_arguments<Params>(std::move(launch.args), std::index_sequence_for<A...>{})};
    detail::LaunchRequest req;
    req.grid = launch.grid;
    req.block = launch.block;
    req.shared_bytes = launch.shared_bytes;
    req.stream = launch.stream;
    req.kernel = reinterpret_cast<const void*>(kernel);
    req.invoke = &detail::invoke_kernel<void (*)(P...), Params>;
    req.bound = &bound;
    req.clone = &detail::clone_bound<void (*)(P...), Params>;
    const std::array<const void*, sizeof...(P)> pointers = std::apply(
        [](const auto&... p) { return std::array<const void*, sizeof...(P)>{detail::pointer_argument(p)...}; },
        bound.params);
    req.pointers = pointers.data();
    req.arguments = int(sizeof...(P));
    detail::launch(req);
}
// [launch_operator]

// ---- which kernel a launch names: deduction of template arguments ----------------------------
// A launch `k<<<cfg>>>(args)` of a kernel template whose template arguments are deduced from the
// launch's arguments, as nvcc deduces them, names no single function, so the `operator<<` above
// cannot take it. The rewriter therefore turns the kernel expression into a kernel_at_launch()
// whose selector, given the types of the launch's arguments, returns the pointer to the kernel
// the launch calls (the same specialization nvcc picks, so cudaFuncSetAttribute on it applies):
//
//   1. the expression itself when it is one function or a function pointer (a plain kernel,
//      explicit template arguments `k<float, 64>`, `table[i]`, `launch.kernel`);
//   2. otherwise, the specialization that deduction from the arguments picks, with the
//      conversions the arguments need, found through a declaration the rewriter adds after
//      each kernel template: `template <DeductionKey, HEAD> auto k(DeductionTag<...>, PARAMS)
//      -> KernelSignature<void(PARAMS)>`, never defined, called only in unevaluated operands;
//   3. otherwise, the kernel whose parameter types are exactly the arguments' types (a kernel
//      template declared in a header that the simulator does not rewrite).
// The leading DeductionKey template parameter keeps `k<float>` naming the kernel alone.
namespace detail {
/// The (decayed) types of a launch's arguments, handed to a kernel selector.
template <typename... A>
struct ArgTypes {};
/// The first template parameter of the declarations the rewriter adds after kernel templates.
enum class DeductionKey { key };
/// The first parameter of those declarations.
template <DeductionKey>
struct DeductionTag {};
inline constexpr DeductionTag<DeductionKey::key> deduction_tag{};
/// What those declarations return: the function type of the kernel they mirror.
template <typename F>
struct KernelSignature {
    using type = F;
};
/// An lvalue of type @p A, in unevaluated operands only (as std::declval<A&>()).
template <typename A>
A& launch_arg();
/// Selection 1: @p kernel, one function or a function pointer.
template <typename... P, typename... A>
auto kernel_pointer(void (*kernel)(P...), ArgTypes<A...>) {
    return kernel;
}
/// Selections 2 and 3: the function of type `Signature::type` that @p kernel names.
template <typename Signature>
auto kernel_of(typename Signature::type* kernel) {
    return kernel;
}
/// Reached when no selection applies: stops the build with a message (and returns a pointer
/// type that the launch accepts, so that no second error follows).
template <typename... A>
auto no_matching_kernel() -> void (*)(A...) {
    static_assert(sizeof...(A) != sizeof...(A),
                  "no kernel of this name can be launched with these arguments: their number or types do not fit "
                  "its parameters, or its template arguments cannot be deduced from them (a kernel template "
                  "declared in a header that the simulator does not rewrite is deduced only from arguments of "
                  "exactly its parameter types: name its template arguments, k<float><<<...>>>)");
    return nullptr;
}
/// A kernel expression at a launch, waiting for the types of the launch's arguments.
template <typename Select>
struct KernelAtLaunch {
    Select select;
};
/// Wraps the selector the rewriter writes for the kernel expression of a launch.
template <typename Select>
KernelAtLaunch<Select> kernel_at_launch(Select select) {
    return {std::move(select)};
}
}  // namespace detail

/// Launches the kernel that @p kernel selects for the types of the launch's arguments.
template <typename Select, typename... A>
void operator<<(detail::KernelAtLaunch<Select>&& kernel, BoundLaunch<A...>&& launch) {
    kernel.select(detail::ArgTypes<A...>{}) << std::move(launch);
}

/// The diagnostic of the last failed launch or rejected configuration ("" if none).
std::string last_diagnostic();
/// Worker threads that run blocks (PD_SIM_THREADS, default: the hardware threads).
int worker_count();
/// Device allocations (cudaMalloc, cudaMallocManaged) made so far by the program: a test reads
/// it before and after code that must not allocate, such as a timed step.
std::uint64_t device_allocations();
/// Chooses the schedule of later launches: round-robin (the default) or, with @p random, the
/// order in which threads resume shuffled at every barrier from @p seed (as PD_SIM_SCHEDULE=random
/// and PD_SIM_SEED do). Call between launches.
void set_schedule(bool random, std::uint64_t seed);

/// Guard used where the rewriter removed an unsupported construct (inline PTX).
template <typename T = void>
inline constexpr bool kUnsupported = false;

}  // namespace pd::sim

// ---- built-in variables --------------------------------------------------------------------
/// CUDA's threadIdx: the index of the calling thread in its block.
#define threadIdx (static_cast<const uint3&>(::pd::sim::detail::current->thread_idx))
/// CUDA's blockIdx: the index of the calling thread's block in the grid.
#define blockIdx (static_cast<const uint3&>(::pd::sim::detail::current_block->block_idx))
/// CUDA's blockDim: the dimensions of the block, as launched.
#define blockDim (static_cast<const dim3&>(::pd::sim::detail::current_block->block_dim))
/// CUDA's gridDim: the dimensions of the grid, as launched.
#define gridDim (static_cast<const dim3&>(::pd::sim::detail::current_block->grid_dim))
/// CUDA's warpSize: a constant, not a macro, so that cudaDeviceProp::warpSize stays usable.
inline constexpr int warpSize = ::pd::sim::kWarpSize;

// ---- barriers and warp collectives (the call site is reported in diagnostics) ---------------
/// Waits until every thread of the block has reached this barrier. Every thread must reach
/// the same `__syncthreads` (same source line): a thread that exited, or waits at another
/// barrier, stops the launch with a "divergent barrier" diagnostic.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline void __syncthreads(const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Sync, 0, loc);
}
/// A __syncthreads() that returns the number of threads of the block whose @p predicate is
/// non-zero.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline int __syncthreads_count(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Count, predicate != 0, loc);
}
/// A __syncthreads() that returns 1 if @p predicate is non-zero in every thread of the block,
/// else 0.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline int __syncthreads_and(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::And, predicate != 0, loc);
}
/// A __syncthreads() that returns 1 if @p predicate is non-zero in any thread of the block,
/// else 0.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline int __syncthreads_or(int predicate, const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::block_barrier(::pd::sim::detail::BarrierKind::Or, predicate != 0, loc);
}
/// Waits until every lane named in @p mask (which must include the caller) has reached a
/// __syncwarp with the same mask. A warp collective: see __shfl_sync() for the rules.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline void __syncwarp(unsigned mask = 0xffffffffu, const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::warp_collective(::pd::sim::detail::WarpOp::SyncWarp, mask, 0, 0, 32, loc);
}

/// Returns @p var of lane @p src_lane (modulo @p width, within the caller's segment of
/// @p width lanes). A warp collective, as are the other *_sync functions: it waits until
/// every lane named in @p mask has arrived at a collective with the same mask. The launch
/// stops with a diagnostic if @p mask omits the caller or names a lane that does not exist
/// or has exited, if the lanes meet at different collectives, or if @p width is not a power
/// of two from 1 to 32. @p T is any trivially copyable type of at most 8 bytes.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::Shfl, mask, to_bits(var), src_lane, width, loc));
}
/// Returns @p var of the lane @p delta below the caller, or the caller's own @p var when
/// that lane is outside its segment of @p width lanes. A warp collective (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflUp, mask, to_bits(var), int(delta), width, loc));
}
/// Returns @p var of the lane @p delta above the caller, or the caller's own @p var when
/// that lane is outside its segment of @p width lanes. A warp collective (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflDown, mask, to_bits(var), int(delta), width, loc));
}
/// Returns @p var of lane (caller's lane XOR @p lane_mask), or the caller's own @p var when
/// that lane is beyond its segment of @p width lanes. A warp collective (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return from_bits<T>(warp_collective(WarpOp::ShflXor, mask, to_bits(var), lane_mask, width, loc));
}
/// Returns the mask of the lanes in @p mask whose @p predicate is non-zero. A warp collective
/// (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return unsigned(warp_collective(WarpOp::Ballot, mask, predicate != 0, 0, 32, loc));
}
/// Returns 1 if @p predicate is non-zero in any lane of @p mask, else 0. A warp collective
/// (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline int __any_sync(unsigned mask, int predicate, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return int(warp_collective(WarpOp::Any, mask, predicate != 0, 0, 32, loc));
}
/// Returns 1 if @p predicate is non-zero in every lane of @p mask, else 0. A warp collective
/// (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline int __all_sync(unsigned mask, int predicate, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return int(warp_collective(WarpOp::All, mask, predicate != 0, 0, 32, loc));
}
/// Returns the mask of the lanes in @p mask whose @p value has the same bits as the caller's.
/// A warp collective (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
unsigned __match_any_sync(unsigned mask, T value, const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    return unsigned(warp_collective(WarpOp::Match, mask, to_bits(value), 0, 32, loc));
}
/// The lanes of the caller's warp that execute this call together with it: when no thread of
/// the block can go on, the lanes waiting at the same `__activemask` call (same source line)
/// are released together, each with their mask. So the mask always holds the caller, and
/// never a lane that has exited or that is on the other side of a branch.
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
inline unsigned __activemask(const std::source_location& loc = std::source_location::current()) {
    return ::pd::sim::detail::active_mask(loc);
}
/// Returns @p mask and sets `*pred` to 1 if every lane in @p mask has the same bits in
/// @p value; otherwise returns 0 and sets `*pred` to 0. A warp collective (see __shfl_sync()).
/// The last parameter, the call site, is filled in by the compiler; diagnostics name it.
template <typename T>
unsigned __match_all_sync(unsigned mask, T value, int* pred,
                          const std::source_location& loc = std::source_location::current()) {
    using namespace ::pd::sim::detail;
    const unsigned same = unsigned(warp_collective(WarpOp::Match, mask, to_bits(value), 0, 32, loc));
    *pred = same == mask;
    return same == mask ? mask : 0u;
}
/// Defines one of CUDA's warp reductions, `name(mask, value)`: every lane in `mask` gets the
/// sum, minimum, maximum, AND, OR or XOR of `value` over the lanes of `mask`. The functions
/// defined are `__reduce_add_sync`, `__reduce_min_sync` and `__reduce_max_sync` on `int` and
/// `unsigned`, and `__reduce_and_sync`, `__reduce_or_sync` and `__reduce_xor_sync` on
/// `unsigned`. Each is a warp collective (see __shfl_sync()). The macro is undefined after use.
#define PD_SIM_WARP_REDUCE(name, type, op)                                                                           \
    inline type name(unsigned mask, type value, const std::source_location& loc = std::source_location::current()) { \
        using namespace ::pd::sim::detail;                                                                           \
        return type(warp_collective(WarpOp::op, mask, std::uint32_t(value), 0, 32, loc));                            \
    }
PD_SIM_WARP_REDUCE(__reduce_add_sync, unsigned, ReduceAdd)
PD_SIM_WARP_REDUCE(__reduce_add_sync, int, ReduceAdd)
PD_SIM_WARP_REDUCE(__reduce_min_sync, unsigned, ReduceMinU)
PD_SIM_WARP_REDUCE(__reduce_min_sync, int, ReduceMinI)
PD_SIM_WARP_REDUCE(__reduce_max_sync, unsigned, ReduceMaxU)
PD_SIM_WARP_REDUCE(__reduce_max_sync, int, ReduceMaxI)
PD_SIM_WARP_REDUCE(__reduce_and_sync, unsigned, ReduceAnd)
PD_SIM_WARP_REDUCE(__reduce_or_sync, unsigned, ReduceOr)
PD_SIM_WARP_REDUCE(__reduce_xor_sync, unsigned, ReduceXor)
#undef PD_SIM_WARP_REDUCE

// ---- memory fences, clocks, traps ------------------------------------------------------------
///@{
/// A sequentially consistent fence (std::atomic_thread_fence). The threads of one block run on
/// one OS thread, so among them every write is already visible to the next thread to run.
inline void __threadfence() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_system() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}
///@}
/// The host's steady clock in nanoseconds (not GPU clock cycles).
long long clock64();
/// Does nothing: a simulated thread runs until it waits at a barrier or warp collective.
inline void __nanosleep(unsigned) {}
/// Stops the launch with cudaErrorLaunchFailure and a diagnostic naming the thread and @p loc.
[[noreturn]] inline void __trap(const std::source_location& loc = std::source_location::current()) {
    ::pd::sim::detail::kernel_fault(cudaErrorLaunchFailure, "__trap() called", loc);
}
/// Returns `*p` (there is no read-only cache to go through).
template <typename T>
T __ldg(const T* p) {
    return *p;
}

// ---- atomics (real atomics: blocks run concurrently on worker threads) -----------------------
namespace pd::sim::detail {
template <typename T, typename Fn>
T atomic_update(T* address, Fn&& fn) {
    const ProfiledAtomic counted(address, sizeof(T));
    std::atomic_ref<T> ref(*address);
    T old = ref.load(std::memory_order_relaxed);
    while (!ref.compare_exchange_weak(old, fn(old), std::memory_order_seq_cst, std::memory_order_relaxed)) {
    }
    return old;
}
}  // namespace pd::sim::detail

/// Adds @p val to `*address` atomically and returns the old value. The atomics are real
/// (std::atomic_ref, sequentially consistent): blocks run at the same time on worker threads.
/// @p T is int, unsigned, unsigned long long, float, double, __half, __half2, __nv_bfloat16 or
/// __nv_bfloat162 (the 16-bit types by a compare-and-swap loop on their bits); @p val is
/// converted to @p T, as CUDA's overloads convert it.
// The value parameters do not take part in deduction (std::type_identity_t), so that
// atomicAdd(unsigned*, 1) converts 1 as CUDA's overloads would.
template <typename T>
T atomicAdd(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half2> ||
                  std::is_same_v<T, __nv_bfloat162>) {
        // 16-bit floats (and pairs): a compare-and-swap loop on the raw bits.
        using Bits = std::conditional_t<sizeof(T) == 2, unsigned short, unsigned>;
        std::atomic_ref<Bits> ref(*reinterpret_cast<Bits*>(address));
        Bits old = ref.load();
        for (;;) {
            T current;
            std::memcpy(&current, &old, sizeof(T));
            const T sum = current + val;
            Bits desired;
            std::memcpy(&desired, &sum, sizeof(T));
            if (ref.compare_exchange_weak(old, desired)) return current;
        }
    } else {
        static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long> ||
                          std::is_same_v<T, float> || std::is_same_v<T, double>,
                      "atomicAdd: int, unsigned, unsigned long long, float, double, __half, __half2 or bf16");
        return std::atomic_ref<T>(*address).fetch_add(val);
    }
}
/// atomicAdd(): every atomic is device-wide here, so the block scope changes nothing.
template <typename T>
T atomicAdd_block(T* address, std::type_identity_t<T> val) {
    return atomicAdd(address, val);
}
/// atomicAdd(): there is one memory, so the system scope changes nothing.
template <typename T>
T atomicAdd_system(T* address, std::type_identity_t<T> val) {
    return atomicAdd(address, val);
}
/// Subtracts @p val from `*address` atomically; returns the old value.
template <typename T>
T atomicSub(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    return std::atomic_ref<T>(*address).fetch_sub(val);
}
/// Stores @p val in `*address` atomically; returns the old value.
template <typename T>
T atomicExch(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    return std::atomic_ref<T>(*address).exchange(val);
}
/// Stores max(`*address`, @p val) atomically; returns the old value.
template <typename T>
T atomicMax(T* address, std::type_identity_t<T> val) {
    return ::pd::sim::detail::atomic_update(address, [val](T old) { return old < val ? val : old; });
}
/// Stores min(`*address`, @p val) atomically; returns the old value.
template <typename T>
T atomicMin(T* address, std::type_identity_t<T> val) {
    return ::pd::sim::detail::atomic_update(address, [val](T old) { return val < old ? val : old; });
}
/// Stores @p val in `*address` if it equals @p compare, atomically; returns the old value.
template <typename T>
T atomicCAS(T* address, std::type_identity_t<T> compare, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    std::atomic_ref<T>(*address).compare_exchange_strong(compare, val);
    return compare;  // the old value, whether or not the exchange happened
}
/// Stores `*address & val` atomically; returns the old value.
template <typename T>
T atomicAnd(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    return std::atomic_ref<T>(*address).fetch_and(val);
}
/// Stores `*address | val` atomically; returns the old value.
template <typename T>
T atomicOr(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    return std::atomic_ref<T>(*address).fetch_or(val);
}
/// Stores `*address ^ val` atomically; returns the old value.
template <typename T>
T atomicXor(T* address, std::type_identity_t<T> val) {
    const ::pd::sim::detail::ProfiledAtomic counted(address, sizeof(T));
    return std::atomic_ref<T>(*address).fetch_xor(val);
}
/// Stores `old >= val ? 0 : old + 1` atomically, where old is `*address`; returns old.
inline unsigned atomicInc(unsigned* address, unsigned val) {
    return ::pd::sim::detail::atomic_update(address, [val](unsigned old) { return old >= val ? 0u : old + 1; });
}
/// Stores `(old == 0 || old > val) ? val : old - 1` atomically, where old is `*address`;
/// returns old.
inline unsigned atomicDec(unsigned* address, unsigned val) {
    return ::pd::sim::detail::atomic_update(address,
                                            [val](unsigned old) { return (old == 0 || old > val) ? val : old - 1; });
}

// ---- integer and bit intrinsics ---------------------------------------------------------------
///@{
/// The number of bits set in @p x.
inline int __popc(unsigned x) {
    return std::popcount(x);
}
inline int __popcll(unsigned long long x) {
    return std::popcount(x);
}
///@}
///@{
/// The number of leading zero bits of @p x (32 or 64 for 0).
inline int __clz(int x) {
    return std::countl_zero(static_cast<unsigned>(x));
}
inline int __clzll(long long x) {
    return std::countl_zero(static_cast<unsigned long long>(x));
}
///@}
///@{
/// The position (from 1) of the least significant bit set in @p x; 0 for 0.
inline int __ffs(int x) {
    return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
inline int __ffsll(long long x) {
    return x == 0 ? 0 : std::countr_zero(static_cast<unsigned long long>(x)) + 1;
}
///@}
/// @p x with its 32 bits in reverse order.
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
///@{
/// The low 32 bits of the full product `a * b`. CUDA multiplies only the low 24 bits of each
/// operand, so the results agree only when both operands fit in 24 bits.
/// 24-bit multiply: the low 24 bits of each operand, sign-extended, multiplied (low 32 bits kept).
inline int __mul24(int a, int b) {
    const int a24 = int(unsigned(a) << 8) >> 8, b24 = int(unsigned(b) << 8) >> 8;
    return int(unsigned(a24) * unsigned(b24));
}
inline unsigned __umul24(unsigned a, unsigned b) {
    return (a & 0xFFFFFFu) * (b & 0xFFFFFFu);
}
///@}
///@{
/// The high 32 bits of the 64-bit product of @p a and @p b.
inline int __mulhi(int a, int b) {
    return int((static_cast<long long>(a) * b) >> 32);
}
inline unsigned __umulhi(unsigned a, unsigned b) {
    return unsigned((static_cast<unsigned long long>(a) * b) >> 32);
}
///@}
///@{
/// Reinterprets the bits of @p x as the other type (std::bit_cast).
inline float __int_as_float(int x) {
    return std::bit_cast<float>(x);
}
inline int __float_as_int(float x) {
    return std::bit_cast<int>(x);
}
inline float __uint_as_float(unsigned x) {
    return std::bit_cast<float>(x);
}
inline unsigned __float_as_uint(float x) {
    return std::bit_cast<unsigned>(x);
}
inline double __longlong_as_double(long long x) {
    return std::bit_cast<double>(x);
}
inline long long __double_as_longlong(double x) {
    return std::bit_cast<long long>(x);
}
///@}

///@{
/// The high 64 bits of the 128-bit product of @p a and @p b.
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) {
    return (long long)(((__int128)a * b) >> 64);
}
///@}
///@{
/// `z + |x - y|`.
inline unsigned __sad(int x, int y, unsigned z) {
    return z + unsigned(x > y ? x - y : y - x);
}
inline unsigned __usad(unsigned x, unsigned y, unsigned z) {
    return z + (x > y ? x - y : y - x);
}
///@}
/// Byte i of the result is the byte of the 8-byte value y:x (x the low half) that the low
/// 3 bits of nibble i of @p s select.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long bytes = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= unsigned((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
/// The high 32 bits of the 64-bit value hi:lo shifted left by `shift & 31`.
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return unsigned((v << (shift & 31)) >> 32);
}
/// The low 32 bits of the 64-bit value hi:lo shifted right by `shift & 31`.
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return unsigned(v >> (shift & 31));
}
///@{
/// @p c plus the dot product of the four 8-bit lanes of @p a and @p b (signed for int,
/// unsigned for unsigned).
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += int(std::int8_t(a >> (8 * i))) * int(std::int8_t(b >> (8 * i)));
    return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xFF) * ((b >> (8 * i)) & 0xFF);
    return c;
}
///@}
///@{
/// The average `(a + b) / 2` without overflow, rounded down (`__hadd`, `__uhadd`) or up
/// (`__rhadd`, `__urhadd`).
inline int __hadd(int a, int b) {
    return int((static_cast<long long>(a) + b) >> 1);
}
inline unsigned __uhadd(unsigned a, unsigned b) {
    return unsigned((static_cast<unsigned long long>(a) + b) >> 1);
}
inline int __rhadd(int a, int b) {
    return int((static_cast<long long>(a) + b + 1) >> 1);
}
inline unsigned __urhadd(unsigned a, unsigned b) {
    return unsigned((static_cast<unsigned long long>(a) + b + 1) >> 1);
}
///@}

// CUDA's min and max for every arithmetic type (device code calls them unqualified).
///@{
/// CUDA's min and max overloads; the float and double forms are fmin and fmax (a NaN
/// operand gives the other operand).
inline int min(int a, int b) {
    return a < b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
    return a < b ? a : b;
}
inline long long min(long long a, long long b) {
    return a < b ? a : b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) {
    return a < b ? a : b;
}
inline float min(float a, float b) {
    return std::fmin(a, b);
}
inline double min(double a, double b) {
    return std::fmin(a, b);
}
inline int max(int a, int b) {
    return a > b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
    return a > b ? a : b;
}
inline long long max(long long a, long long b) {
    return a > b ? a : b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}
inline float max(float a, float b) {
    return std::fmax(a, b);
}
inline double max(double a, double b) {
    return std::fmax(a, b);
}
///@}

// ---- conversions with CUDA's rounding suffixes (rn: to nearest even, rz: toward zero,
// rd: down, ru: up) ------------------------------------------------------------------------
///@{
/// Conversions with CUDA's rounding suffixes. A result outside the range of an integer
/// type is undefined here (the host conversion's behaviour), where CUDA clamps it.
inline int __float2int_rn(float x) {
    return int(std::nearbyint(x));
}
inline int __float2int_rz(float x) {
    return int(std::trunc(x));
}
inline int __float2int_rd(float x) {
    return int(std::floor(x));
}
inline int __float2int_ru(float x) {
    return int(std::ceil(x));
}
inline unsigned __float2uint_rn(float x) {
    return unsigned(std::nearbyint(x));
}
inline unsigned __float2uint_rz(float x) {
    return unsigned(std::trunc(x));
}
inline long long __float2ll_rn(float x) {
    return static_cast<long long>(std::nearbyint(x));
}
inline long long __float2ll_rz(float x) {
    return static_cast<long long>(std::trunc(x));
}
inline float __int2float_rn(int x) {
    return float(x);
}
inline float __uint2float_rn(unsigned x) {
    return float(x);
}
inline float __ll2float_rn(long long x) {
    return float(x);
}
inline float __double2float_rn(double x) {
    return float(x);
}
inline int __double2int_rn(double x) {
    return int(std::nearbyint(x));
}
inline int __double2int_rz(double x) {
    return int(std::trunc(x));
}
///@}

// ---- float math: CUDA's names that the host library lacks -----------------------------------
// The fast intrinsics (__expf, ...) are approximations on a GPU; here they are the accurate
// functions, so results can differ from a GPU's in the last bits.
///@{
/// CUDA's math functions that the host library lacks, and its intrinsics, computed with the
/// host's functions and operators: `__expf`, `__sinf`, `__fdividef`, ... are not the GPU's
/// faster approximations, and the `_rn` forms round to nearest as the host's arithmetic does,
/// so results can differ from a GPU's in the last bits. `sinpif(x)` and the like compute
/// `sin(pi * x)` with pi rounded, so they are not exact at integers as CUDA's are.
/// `__saturatef` clamps to [0, 1] (NaN gives 0).
inline float rsqrtf(float x) {
    return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
    return 1.0 / std::sqrt(x);
}
inline float rcbrtf(float x) {
    return 1.0f / std::cbrt(x);
}
inline float __expf(float x) {
    return std::exp(x);
}
inline float __exp10f(float x) {
    return std::pow(10.0f, x);
}
inline float __logf(float x) {
    return std::log(x);
}
inline float __log2f(float x) {
    return std::log2(x);
}
inline float __log10f(float x) {
    return std::log10(x);
}
inline float __sinf(float x) {
    return std::sin(x);
}
inline float __cosf(float x) {
    return std::cos(x);
}
inline float __tanf(float x) {
    return std::tan(x);
}
inline void __sincosf(float x, float* s, float* c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
inline float __powf(float x, float y) {
    return std::pow(x, y);
}
inline float __fdividef(float x, float y) {
    return x / y;
}
inline float __frcp_rn(float x) {
    return 1.0f / x;
}
inline float __fsqrt_rn(float x) {
    return std::sqrt(x);
}
inline float __saturatef(float x) {
    return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x == x ? x : 0.f));
}
inline float __fmaf_rn(float a, float b, float c) {
    return std::fma(a, b, c);
}
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __frsqrt_rn(float x) {
    return 1.0f / std::sqrt(x);
}
inline float sinpif(float x) {
    return std::sin(3.14159265358979323846f * x);
}
inline float cospif(float x) {
    return std::cos(3.14159265358979323846f * x);
}
inline double sinpi(double x) {
    return std::sin(3.14159265358979323846 * x);
}
inline double cospi(double x) {
    return std::cos(3.14159265358979323846 * x);
}
inline float norm3df(float a, float b, float c) {
    return std::sqrt(a * a + b * b + c * c);
}
inline float normcdff(float x) {
    return 0.5f * std::erfc(-x / std::sqrt(2.0f));
}
inline double __fma_rn(double a, double b, double c) {
    return std::fma(a, b, c);
}
///@}

// ---- 16-bit float functions the toolkit's headers give only to device code --------------------
///@{
/// 16-bit float functions that the toolkit's headers declare for device code only: computed
/// in float, then rounded once to the 16-bit type.
inline __half __hfma(__half a, __half b, __half c) {
    return __float2half_rn(std::fma(__half2float(a), __half2float(b), __half2float(c)));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                          __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
inline __half hexp(__half x) {
    return __float2half_rn(std::exp(__half2float(x)));
}
inline __half hlog(__half x) {
    return __float2half_rn(std::log(__half2float(x)));
}
inline __half hsqrt(__half x) {
    return __float2half_rn(std::sqrt(__half2float(x)));
}
inline __half hrsqrt(__half x) {
    return __float2half_rn(1.0f / std::sqrt(__half2float(x)));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __float2bfloat16_rn(std::fma(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __nv_bfloat16 hexp(__nv_bfloat16 x) {
    return __float2bfloat16_rn(std::exp(__bfloat162float(x)));
}
///@}

// ---- the C++ forms of runtime API calls that cuda_runtime.h declares for nvcc only -----------
///@{
/// The C++ forms of runtime API calls that cuda_runtime.h declares for nvcc only: the kernel,
/// or the `__constant__` or `__device__` variable, is passed by name.
template <typename T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
template <typename T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
    return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}
template <typename T>
cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, std::size_t count, std::size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    static_assert(!std::is_pointer_v<T>,
                  "cudaMemcpyToSymbol takes the __constant__/__device__ variable itself, "
                  "not its address");
    return ::cudaMemcpyToSymbol(static_cast<const void*>(&symbol), src, count, offset, kind);
}
template <typename T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, std::size_t count, std::size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    static_assert(!std::is_pointer_v<T>,
                  "cudaMemcpyFromSymbol takes the __constant__/__device__ variable itself, "
                  "not its address");
    return ::cudaMemcpyFromSymbol(dst, static_cast<const void*>(&symbol), count, offset, kind);
}
///@}

// ---- device allocations remember where they were made ----------------------------------------
///@{
/// cudaMalloc and cudaMallocManaged as the simulator's programs call them: the same allocation,
/// also recording the call site @p site, which the simulator names when a kernel writes past the
/// end (or before the start) of the buffer (see "Running without a GPU", docs/simulator.md).
cudaError_t pd_sim_cudaMalloc(const std::source_location& site, void** ptr, std::size_t bytes);
cudaError_t pd_sim_cudaMallocManaged(const std::source_location& site, void** ptr, std::size_t bytes,
                                     unsigned int flags = cudaMemAttachGlobal);
template <typename T>
cudaError_t pd_sim_cudaMalloc(const std::source_location& site, T** ptr, std::size_t bytes) {
    return pd_sim_cudaMalloc(site, reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t pd_sim_cudaMallocManaged(const std::source_location& site, T** ptr, std::size_t bytes,
                                     unsigned int flags = cudaMemAttachGlobal) {
    return pd_sim_cudaMallocManaged(site, reinterpret_cast<void**>(ptr), bytes, flags);
}
///@}
/// A call `cudaMalloc(&p, bytes)` (or `::cudaMalloc(...)`) passes its own source location on.
/// The name alone (`&cudaMalloc`) is still the runtime's function.
#define cudaMalloc(...) pd_sim_cudaMalloc(::std::source_location::current(), __VA_ARGS__)
/// As cudaMalloc.
#define cudaMallocManaged(...) pd_sim_cudaMallocManaged(::std::source_location::current(), __VA_ARGS__)

#include "pd/sim/wmma.hpp"
