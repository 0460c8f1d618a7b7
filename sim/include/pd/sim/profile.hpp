/// @file profile.hpp
/// @brief The simulator's profiler: what a kernel's GPU speed depends on, counted while the
/// simulator runs it thread by thread. Global memory as warp-level requests, the 32-byte sectors
/// and 128-byte lines they touch and the bytes the threads asked for; shared memory as requests
/// and wavefronts under the 32-bank rule; warp-level operations (shuffles, votes, barriers,
/// atomics, mma.sync, ldmatrix, cp.async, WMMA); the distinct sectors a launch touches and an
/// estimate of its DRAM traffic from a model of a GPU's L2. Per kernel and per source line.
///
/// The counters exist only in programs whose kernels were compiled for the profiler (the
/// `*-sim-profile` twins of the chapter programs, `scripts/simcc --profile`): there every load
/// and store of the kernels' code calls the simulator (GCC's thread-sanitizer instrumentation),
/// which the plain simulator build does not pay. docs/simulator.md ("The profiler") states the
/// rules: how lanes form a request, how wavefronts are counted, where they depart from hardware.
///
/// A program collects by scope, profile_begin() ... profile_end() (pd::Bench does it around
/// each version's checked run), or for its whole run with `PD_SIM_PROFILE=FILE`, which writes
/// at exit a JSON list with one object per kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pd::sim {

/// Counters of one kind of memory access (global loads, shared stores, ...), summed.
struct AccessCounts {
    std::uint64_t requests = 0;      ///< warp-level requests (instructions executed by a warp)
    std::uint64_t sectors = 0;       ///< global: 32-byte sectors the requests touch, per request
    std::uint64_t lines = 0;         ///< global: 128-byte lines the requests touch, per request
    std::uint64_t bytes = 0;         ///< bytes the threads asked for (every lane's access)
    std::uint64_t unique_bytes = 0;  ///< distinct bytes per request (a broadcast counts once)
    std::uint64_t ideal = 0;         ///< the fewest sectors (global) or wavefronts (shared) those bytes need
    std::uint64_t wavefronts = 0;    ///< shared: wavefronts under the 32-bank, 4-byte rule
    /// Adds @p o to these counters. @param o counters of the same kind
    void add(const AccessCounts& o);
};

/// What kind of access a source line makes.
enum class AccessKind { global_load, global_store, global_atomic, shared_load, shared_store, shared_atomic };
/// "global load", "shared store", ...
const char* to_string(AccessKind k);

/// One source line's accesses of one kind (a "site"), with how the lanes of its first request
/// were spread, for the reading.
struct SiteProfile {
    std::string file;  ///< the source file (the innermost frame outside the simulator's headers)
    int line = 0;      ///< its line
    std::string
        via;  ///< "file:line" of the kernel's own line when the access is in a helper inlined there ("" otherwise)
    std::string function;                       ///< the function the access is in, as the debug information names it
    AccessKind kind = AccessKind::global_load;  ///< what the access does
    std::string instruction;    ///< "" for the kernel's own loads and stores; "cp.async", "ldmatrix", "wmma load", ...
    AccessCounts counts;        ///< summed over the kernel's launches
    int access_bytes = 0;       ///< the size of one lane's access (of the first request)
    int active_lanes = 0;       ///< lanes in the first request
    long long lane_stride = 0;  ///< bytes between neighbouring lanes' addresses in the first request
    bool uniform = false;       ///< the first request's lanes were evenly spaced (lane_stride apart; 0: one address)
    /// True when @p o is the same access as this one (the same line, kind and instruction, and the
    /// same lane pattern: an unrolled loop's copies of it), whose counts add up.
    /// @param o another site
    bool same_access(const SiteProfile& o) const;
};

/// Counts of warp-level operations (each executed by one warp counts once; atomics count the
/// warp-level requests, as the memory counters do).
struct WarpOps {
    std::uint64_t shuffles = 0;    ///< __shfl*_sync
    std::uint64_t votes = 0;       ///< __ballot_sync, __any_sync, __all_sync, __match_*_sync, __activemask
    std::uint64_t reductions = 0;  ///< __reduce_*_sync
    std::uint64_t syncwarps = 0;   ///< __syncwarp
    std::uint64_t barriers = 0;    ///< __syncthreads (and _count/_and/_or), once per warp of the block
    std::uint64_t mma = 0;         ///< mma.sync
    std::uint64_t ldmatrix = 0;    ///< ldmatrix
    std::uint64_t cp_async = 0;    ///< cp.async (warp-level requests)
    std::uint64_t wmma_load = 0;   ///< nvcuda::wmma::load_matrix_sync
    std::uint64_t wmma_store = 0;  ///< nvcuda::wmma::store_matrix_sync
    std::uint64_t wmma_mma = 0;    ///< nvcuda::wmma::mma_sync
    /// Adds @p o. @param o counts to add
    void add(const WarpOps& o);
};

/// One source line's accesses of one kind folded into the memory instructions nvcc emitted for
/// that line (the CUDA build's SASS tables, scripts/sass --table): the per-lane addresses the
/// simulator observed, grouped into requests as the emitted instructions group them (four 4-byte
/// loads of one lane that one `LDS.128` makes are one access of 16 bytes), and counted under the
/// same rules. docs/simulator.md ("What nvcc emits") defines the fold and when it is exact.
struct LineFold {
    std::string file;                           ///< the kernel's source file
    int line = 0;                               ///< the kernel's line (a helper inlined there counts here)
    AccessKind kind = AccessKind::global_load;  ///< loads or stores, global or shared (atomics are not folded)
    std::string emitted;                        ///< that kind's instructions of the line: "LDS.128 x8, LDS x32"
    AccessCounts source;                        ///< the source's accesses of the line (its sites, summed)
    AccessCounts folded;                        ///< the same accesses, grouped as the emitted instructions group them
    bool exact = false;                         ///< the emitted instructions account for every access evenly
    std::string why;                            ///< when not exact, why (and what the counts are then)
};

/// Everything counted for one kernel (by name), summed over its launches in the scope.
struct KernelProfile {
    std::string kernel;  ///< its name as the source spells it ("pd::kernels::gemv::gemv_warp_per_row_kernel<float>")
    std::uint64_t launches = 0;              ///< launches counted
    std::uint64_t blocks = 0;                ///< blocks run
    std::uint64_t threads = 0;               ///< threads run
    int block_threads = 0;                   ///< threads per block of the last launch
    std::uint64_t dynamic_shared_bytes = 0;  ///< dynamic shared memory per block of the last launch
    std::uint64_t static_shared_bytes = 0;   ///< the largest static __shared__ total of a block
    AccessCounts global_load;                ///< loads from cudaMalloc memory
    AccessCounts global_store;               ///< stores to it
    AccessCounts global_atomic;              ///< atomics on it
    AccessCounts shared_load;                ///< loads from the block's shared memory
    AccessCounts shared_store;               ///< stores to it
    AccessCounts shared_atomic;              ///< atomics on it
    WarpOps ops;                             ///< warp-level operations
    /// Distinct 32-byte sectors each launch touched (loads and stores), summed over launches:
    /// the DRAM traffic's lower bound, 32 bytes each.
    std::uint64_t unique_sectors = 0;
    /// Of those, the distinct sectors written.
    std::uint64_t unique_store_sectors = 0;
    /// Sectors the launches' global requests touched: the DRAM traffic with no reuse at all.
    std::uint64_t requested_sectors = 0;
    /// DRAM traffic the L2 model estimates (bytes): the load sectors that miss a
    /// set-associative LRU cache of the GPU's L2 size, visited in the order the simulator ran
    /// the blocks, plus the distinct sectors written; -1 when a launch was too large to model.
    double dram_bytes_estimate = 0;
    std::vector<SiteProfile> sites;  ///< every site, in the order of their source lines
    std::string sass_arch;           ///< the SASS the fold read ("sm_90"), "" where the build has none
    std::string sass_sha256;         ///< the SHA-256 of the kernel's SASS, as scripts/sass computes it
    std::string sass_tool;           ///< the disassembler that read it ("nvdisasm 13.2.51")
    std::vector<LineFold> folds;     ///< per line and kind where there is SASS, in line order
    /// Adds the counters of @p o (the same kernel). @param o another collection
    void add(const KernelProfile& o);
};

/// The kernel's counts of @p kind with every folded line's source counts replaced by its folded
/// ones: what the GPU's instructions make of the same accesses (the source's counts where the
/// build has no SASS), without the accesses of ldmatrix and cp.async, which a GPU counts under
/// metrics of their own (LDSM, LDGSTS: emulated_counts()). @param k the kernel  @param kind the kind of access
AccessCounts folded_counts(const KernelProfile& k, AccessKind kind);
/// The counts of @p kind that the emulated @p instruction ("ldmatrix", "cp.async") made.
/// @param k the kernel  @param kind the kind of access  @param instruction the instruction
AccessCounts emulated_counts(const KernelProfile& k, AccessKind kind, const char* instruction);

/// "kernels/gemm/x.cu:63 shared load: LDS.128 x16: 4096 requests, 4096 wavefronts (the source's
/// accesses: 16384 requests, 16384 wavefronts), exact": one folded line, said. @param f the line
std::string fold_line(const LineFold& f);

/// The version of nvcc that compiled the SASS the fold reads ("" in a build without CUDA).
const char* nvcc_version();

/// What ptxas reported for one kernel compiled for one architecture, in the CUDA build of the
/// same tree (its kernel libraries keep the report: build/kernel-resources/).
struct KernelResources {
    int registers = 0;     ///< per thread
    int shared_bytes = 0;  ///< static shared memory per block
    int stack_bytes = 0;   ///< stack frame per thread (local arrays and spills)
    int spill_stores = 0;  ///< bytes of registers spilled to local memory
    int spill_loads = 0;   ///< bytes loaded back
};
/// The CUDA build's report for @p kernel (as KernelProfile::kernel names it) compiled for
/// compute capability @p cc (90 for sm_90), if the build recorded one (`PD_SIM_KERNEL_RESOURCES`
/// names another directory of reports).
/// @param kernel the kernel's name  @param cc the architecture
std::optional<KernelResources> kernel_resources(const std::string& kernel, int cc);

/// True when this program's kernels were compiled for the profiler (a `*-sim-profile` program,
/// `scripts/simcc --profile`): only then are there counters to collect.
bool profiler_available();

/// Starts a scope: the launches until the matching profile_end() are counted into it. Scopes
/// nest; a launch is counted into every open one.
/// @param l2_bytes the L2 capacity the DRAM estimate models (the named GPU's)
void profile_begin(double l2_bytes);
/// Ends the innermost scope and returns its kernels, in the order of their first launch, with
/// their sites resolved to source lines.
std::vector<KernelProfile> profile_end();

/// "32 sectors per request where 4 would do: the lanes of a warp are 1036 bytes apart (259
/// floats: a row of W each)": one line on what a site's counters mean, or "" when the site
/// does what its bytes need. @param s the site
std::string reading(const SiteProfile& s);
/// How far a site is from what its bytes need: the sectors (global) or wavefronts (shared)
/// beyond the ideal count. The worst sites have the most. @param s the site
std::uint64_t excess(const SiteProfile& s);

/// The kernels of @p kernels as the JSON list `PD_SIM_PROFILE=FILE` writes: one object per
/// kernel with `kernel`, `launches`, `global_load`, `global_store`, `global_atomic` (each
/// {requests, sectors, lines, bytes, unique_bytes, ideal_sectors}), `shared_load`, `shared_store`,
/// `shared_atomic` (each {requests, wavefronts, ideal_wavefronts, bytes}), `ops`,
/// `unique_sectors`, `requested_sectors`, `dram_bytes_estimate`, `sites` ([{file, line, via,
/// op, instruction, requests, sectors, wavefronts, bytes, ideal, reading}]), and where the build
/// has the kernel's SASS, `sass` ({arch, sha256, nvdisasm, nvcc}), `folded` (the four folded kinds,
/// as above, and apart `ldmatrix`, `cp_async_global` and `cp_async_shared`) and `folds` ([{file,
/// line, op, emitted, source, folded, exact, why}]).
/// @param kernels the profiles  @param l2_bytes the L2 the estimate modelled
std::string to_json_text(const std::vector<KernelProfile>& kernels, double l2_bytes);

/// A readable report of @p kernels: per kernel its counters, sectors per request, efficiency,
/// wavefronts per request, and its three worst sites with their readings.
/// @param kernels the profiles
std::string describe(const std::vector<KernelProfile>& kernels);

}  // namespace pd::sim
