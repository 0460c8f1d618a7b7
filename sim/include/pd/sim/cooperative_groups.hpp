/// @file cooperative_groups.hpp
/// @brief CUDA's cooperative groups on the simulator: the block-level subset (thread_block,
/// thread_block_tile of 1 to 32 threads, coalesced_group, thread_group).
///
/// On the sim build `#include <cooperative_groups.h>` finds this header (through
/// sim/shadow/cooperative_groups.h); nvcc keeps the toolkit's own. Every group
/// operation is one of the simulator's barriers or warp collectives: `block.sync()` is
/// `__syncthreads()`, and a tile of N threads calls the `*_sync` intrinsics with the mask of
/// its N lanes and a width of N. So a misuse stops the kernel with the diagnostic of that
/// intrinsic (a tile sync not reached by every thread of the tile, a tile whose lanes do not
/// exist in a partial warp, ...), naming the thread and the line of the group call: each
/// member function takes the caller's location as a last, defaulted parameter.
///
/// Grid-wide groups (this_grid, grid_group), multi-device groups, clusters, tiles of more
/// than 32 threads and the partitions binary_partition and labeled_partition fail to compile
/// with a message that says so. cg::reduce and its operators are in
/// pd/sim/cooperative_groups_reduce.hpp (`#include <cooperative_groups/reduce.h>`).
#pragma once

#include "pd/sim/cuda_sim.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <string>
#include <type_traits>

/// CUDA's cooperative groups (`namespace cg = cooperative_groups;`): the groups of threads of
/// one block, their barriers and their collectives, implemented with the simulator's
/// `__syncthreads` and warp intrinsics (see the page "Running without a GPU").
namespace cooperative_groups {

class thread_block;
class coalesced_group;
class thread_group;
template <unsigned Size, typename ParentT = void>
class thread_block_tile;

namespace detail {

/// False for every type: the condition of a static_assert that fires only when a template
/// that the simulator does not provide is used.
template <typename...>
inline constexpr bool unsupported = false;

/// The calling thread's index in its block (x fastest), as thread_block::thread_rank().
inline unsigned block_rank() {
    return unsigned(::pd::sim::detail::current->linear);
}

/// The calling thread's lane in its warp.
inline unsigned lane() {
    return block_rank() % unsigned(::pd::sim::kWarpSize);
}

/// The threads of the calling thread's block.
inline unsigned block_threads() {
    const dim3 d = ::pd::sim::detail::current_block->block_dim;
    return d.x * d.y * d.z;
}

/// The lanes below @p lane.
inline unsigned lanes_below(unsigned lane) {
    return (1u << lane) - 1u;
}

/// The lane of the member of rank @p rank in the lanes of @p mask (ranks in lane order), or 32
/// when @p mask has no such member.
inline unsigned lane_of_rank(unsigned mask, unsigned rank) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        if (rank == 0) return l;
        --rank;
    }
    return 32;
}

/// The bits of @p lanes that are in @p mask, moved to the ranks of those lanes in @p mask.
inline unsigned pack_by_rank(unsigned mask, unsigned lanes) {
    unsigned packed = 0, rank = 0;
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        if (lanes & (1u << l)) packed |= 1u << rank;
        ++rank;
    }
    return packed;
}

/// The four warp shuffles.
enum class Shuffle { Idx, Up, Down, Xor };

/// One warp shuffle of a value of at most 8 bytes, through the simulator's intrinsic.
template <typename T>
T shuffle_word(Shuffle kind, unsigned mask, const T& var, int param, int width, const std::source_location& loc) {
    switch (kind) {
        case Shuffle::Idx:
            return __shfl_sync(mask, var, param, width, loc);
        case Shuffle::Up:
            return __shfl_up_sync(mask, var, unsigned(param), width, loc);
        case Shuffle::Down:
            return __shfl_down_sync(mask, var, unsigned(param), width, loc);
        case Shuffle::Xor:
            break;
    }
    return __shfl_xor_sync(mask, var, param, width, loc);
}

/// A warp shuffle of any trivially copyable value, as cooperative groups shuffle one: a value
/// of more than 8 bytes moves as several 8-byte shuffles.
template <typename T>
T shuffle(Shuffle kind, unsigned mask, const T& var, int param, int width, const std::source_location& loc) {
    static_assert(std::is_trivially_copyable_v<T>, "cooperative groups shuffle trivially copyable values only");
    if constexpr (sizeof(T) <= 8) {
        return shuffle_word(kind, mask, var, param, width, loc);
    } else {
        constexpr std::size_t words = (sizeof(T) + 7) / 8;
        std::uint64_t in[words] = {}, out[words];
        std::memcpy(in, &var, sizeof(T));
        for (std::size_t w = 0; w < words; ++w) out[w] = shuffle_word(kind, mask, in[w], param, width, loc);
        T result;
        std::memcpy(static_cast<void*>(&result), out, sizeof(T));
        return result;
    }
}

struct tile_access;

}  // namespace detail

// ---- thread_block ---------------------------------------------------------------------------

/// The threads of the calling thread's block (this_thread_block()).
class thread_block {
public:
    /// Waits until every thread of the block has reached this call: `__syncthreads()`, with its
    /// diagnostics ("divergent barrier", "deadlock") naming the line of this call.
    static void sync(const std::source_location& loc = std::source_location::current()) { __syncthreads(loc); }
    /// The calling thread's rank in the block: `threadIdx.x + threadIdx.y * blockDim.x +
    /// threadIdx.z * blockDim.x * blockDim.y`.
    static unsigned thread_rank() { return detail::block_rank(); }
    /// The number of threads of the block.
    static unsigned num_threads() { return detail::block_threads(); }
    /// The number of threads of the block (num_threads()).
    static unsigned size() { return detail::block_threads(); }
    /// The block's index in the grid: `blockIdx`.
    static dim3 group_index() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    /// The calling thread's index in the block: `threadIdx`.
    static dim3 thread_index() { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    /// The block's dimensions: `blockDim`.
    static dim3 dim_threads() { return blockDim; }
    /// The block's dimensions: `blockDim` (dim_threads()).
    static dim3 group_dim() { return blockDim; }
};

/// The group of every thread of the calling thread's block.
inline thread_block this_thread_block() {
    return thread_block();
}

// ---- thread_block_tile ----------------------------------------------------------------------

/// What every tile of @p Size threads provides, whatever its parent (see thread_block_tile).
/// Sizes 1, 2, 4, 8, 16 and 32.
template <unsigned Size>
class thread_block_tile_base {
    static_assert(Size <= 32,
                  "thread_block_tile of more than 32 threads (tiled_partition<64> and larger) does not run "
                  "on the pd::sim CPU simulator: it provides tiles of 1, 2, 4, 8, 16 and 32 threads");
    static_assert(Size > 32 || (Size >= 1 && (Size & (Size - 1)) == 0),
                  "the size of a thread_block_tile must be 1, 2, 4, 8, 16 or 32");

public:
    /// The number of threads of the tile, @p Size.
    static constexpr unsigned num_threads() { return Size; }
    /// The number of threads of the tile, @p Size (num_threads()).
    static constexpr unsigned size() { return Size; }
    /// The calling thread's rank in the tile, from 0 to @p Size - 1.
    static unsigned thread_rank() { return detail::block_rank() & (Size - 1); }
    /// The index of this tile among the tiles its parent was partitioned into.
    unsigned meta_group_rank() const { return meta_rank_; }
    /// The number of tiles the parent was partitioned into (the last one may be partial).
    unsigned meta_group_size() const { return meta_size_; }

    /// Waits until every thread of the tile has reached this call: `__syncwarp(mask of the
    /// tile)`. A thread of the tile that has exited, or waits elsewhere, stops the kernel with
    /// the diagnostic of `__syncwarp`, naming the line of this call.
    static void sync(const std::source_location& loc = std::source_location::current()) { __syncwarp(mask(), loc); }
    /// @p var of the thread of rank @p src_rank (modulo @p Size): `__shfl_sync` over the tile.
    /// Values of more than 8 bytes move as several shuffles.
    template <typename T>
    T shfl(T var, int src_rank, const std::source_location& loc = std::source_location::current()) const {
        return detail::shuffle(detail::Shuffle::Idx, mask(), var, src_rank, int(Size), loc);
    }
    /// @p var of the thread @p delta ranks below, or the caller's own when there is none:
    /// `__shfl_up_sync` over the tile.
    template <typename T>
    T shfl_up(T var, unsigned delta, const std::source_location& loc = std::source_location::current()) const {
        return detail::shuffle(detail::Shuffle::Up, mask(), var, int(delta), int(Size), loc);
    }
    /// @p var of the thread @p delta ranks above, or the caller's own when there is none:
    /// `__shfl_down_sync` over the tile.
    template <typename T>
    T shfl_down(T var, unsigned delta, const std::source_location& loc = std::source_location::current()) const {
        return detail::shuffle(detail::Shuffle::Down, mask(), var, int(delta), int(Size), loc);
    }
    /// @p var of the thread of rank `thread_rank() ^ lane_mask`: `__shfl_xor_sync` over the tile.
    template <typename T>
    T shfl_xor(T var, unsigned lane_mask, const std::source_location& loc = std::source_location::current()) const {
        return detail::shuffle(detail::Shuffle::Xor, mask(), var, int(lane_mask), int(Size), loc);
    }
    /// 1 if @p predicate is non-zero in any thread of the tile, else 0 (`__any_sync`).
    int any(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return __any_sync(mask(), predicate, loc);
    }
    /// 1 if @p predicate is non-zero in every thread of the tile, else 0 (`__all_sync`).
    int all(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return __all_sync(mask(), predicate, loc);
    }
    /// Bit r is set if @p predicate is non-zero in the thread of rank r (`__ballot_sync`).
    unsigned ballot(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return __ballot_sync(mask(), predicate, loc) >> base_lane();
    }
    /// Bit r is set if the thread of rank r holds the bits of @p value (`__match_any_sync`).
    template <typename T>
    unsigned match_any(T value, const std::source_location& loc = std::source_location::current()) const {
        return __match_any_sync(mask(), value, loc) >> base_lane();
    }
    /// The tile's ranks (bits 0 to @p Size - 1), with @p pred 1, if every thread holds the bits
    /// of @p value; else 0, with @p pred 0 (`__match_all_sync`).
    template <typename T>
    unsigned match_all(T value, int& pred, const std::source_location& loc = std::source_location::current()) const {
        return __match_all_sync(mask(), value, &pred, loc) >> base_lane();
    }

protected:
    /// A tile with its place among its parent's tiles.
    thread_block_tile_base(unsigned meta_rank, unsigned meta_size) : meta_rank_(meta_rank), meta_size_(meta_size) {}

private:
    friend class thread_group;
    static unsigned base_lane() { return detail::lane() & ~(Size - 1); }
    static unsigned mask() { return Size == 32 ? 0xffffffffu : ((1u << Size) - 1u) << base_lane(); }

    unsigned meta_rank_, meta_size_;
};

/// A tile of @p Size consecutive threads of a block (by thread_rank()), made by
/// tiled_partition<Size>(): tile k holds the threads of ranks k * Size to k * Size + Size - 1,
/// which are lanes of one warp. Its collectives (thread_block_tile_base) are the warp
/// intrinsics with the mask of those lanes and a width of @p Size. @p ParentT is the
/// partitioned group; a tile converts to `thread_block_tile<Size>` (ParentT void), the type to
/// name in a function's parameters.
template <unsigned Size, typename ParentT>
class thread_block_tile : public thread_block_tile_base<Size> {
public:
    /// The same tile, as a `thread_block_tile<Size>` (whose parent is not part of its type).
    template <typename OtherParentT, typename P = ParentT,
              typename = std::enable_if_t<std::is_void_v<P> && !std::is_void_v<OtherParentT>>>
    thread_block_tile(const thread_block_tile<Size, OtherParentT>& tile) : thread_block_tile_base<Size>(tile) {}

private:
    friend struct detail::tile_access;
    thread_block_tile(unsigned meta_rank, unsigned meta_size) : thread_block_tile_base<Size>(meta_rank, meta_size) {}
};

namespace detail {
/// Makes tiles (their constructors are not public, as in CUDA).
struct tile_access {
    template <unsigned Size, typename ParentT>
    static thread_block_tile<Size, ParentT> make(unsigned meta_rank, unsigned meta_size) {
        return thread_block_tile<Size, ParentT>(meta_rank, meta_size);
    }
};
}  // namespace detail

/// Partitions the block into tiles of @p Size threads, by thread_rank(): the calling thread's
/// tile. Sizes 1, 2, 4, 8, 16 and 32; a block whose size is not a multiple of @p Size has a
/// partial last tile, whose collectives name lanes that do not exist (a diagnostic).
template <unsigned Size>
thread_block_tile<Size, thread_block> tiled_partition(const thread_block& parent) {
    return detail::tile_access::make<Size, thread_block>(parent.thread_rank() / Size,
                                                         (parent.num_threads() + Size - 1) / Size);
}

/// Partitions a tile into smaller tiles of @p Size threads: the calling thread's one.
template <unsigned Size, unsigned ParentSize, typename GrandParentT>
thread_block_tile<Size, thread_block_tile<ParentSize, GrandParentT>> tiled_partition(
    const thread_block_tile<ParentSize, GrandParentT>& parent) {
    static_assert(Size < ParentSize, "tiled_partition<Size>(tile): Size must be smaller than the tile's size");
    return detail::tile_access::make<Size, thread_block_tile<ParentSize, GrandParentT>>(parent.thread_rank() / Size,
                                                                                        ParentSize / Size);
}

/// The calling thread alone, as a tile of one thread.
inline thread_block_tile<1, void> this_thread() {
    return detail::tile_access::make<1, thread_block_tile<1, thread_block>>(0, 1);
}

// ---- coalesced_group ------------------------------------------------------------------------

/// The threads of the caller's warp that execute coalesced_threads() together with it (the
/// mask of `__activemask()`), ranked in lane order. Its collectives are warp intrinsics with
/// that mask.
class coalesced_group {
public:
    /// The number of threads of the group.
    unsigned num_threads() const { return unsigned(std::popcount(mask_)); }
    /// The number of threads of the group (num_threads()).
    unsigned size() const { return num_threads(); }
    /// The calling thread's rank: the number of members in lower lanes.
    unsigned thread_rank() const { return unsigned(std::popcount(mask_ & detail::lanes_below(detail::lane()))); }
    /// 0: a group from coalesced_threads() is not a partition of another.
    unsigned meta_group_rank() const { return 0; }
    /// 1: a group from coalesced_threads() is not a partition of another.
    unsigned meta_group_size() const { return 1; }

    /// Waits until every thread of the group has reached this call: `__syncwarp(mask)`.
    void sync(const std::source_location& loc = std::source_location::current()) const { __syncwarp(mask_, loc); }
    /// @p var of the member of rank @p src_rank (`__shfl_sync`). A rank outside the group
    /// reads a lane outside the mask: undefined on a GPU, all-one bits here.
    template <typename T>
    T shfl(T var, int src_rank, const std::source_location& loc = std::source_location::current()) const {
        return detail::shuffle(detail::Shuffle::Idx, mask_, var, int(source_lane(src_rank)), 32, loc);
    }
    /// @p var of the member @p delta ranks above, or the caller's own when there is none.
    template <typename T>
    T shfl_down(T var, unsigned delta, const std::source_location& loc = std::source_location::current()) const {
        const unsigned rank = thread_rank(), n = num_threads();
        const unsigned src = delta < n - rank ? detail::lane_of_rank(mask_, rank + delta) : detail::lane();
        return detail::shuffle(detail::Shuffle::Idx, mask_, var, int(src), 32, loc);
    }
    /// @p var of the member @p delta ranks below, or the caller's own when there is none.
    template <typename T>
    T shfl_up(T var, unsigned delta, const std::source_location& loc = std::source_location::current()) const {
        const unsigned rank = thread_rank();
        const unsigned src = delta <= rank ? detail::lane_of_rank(mask_, rank - delta) : detail::lane();
        return detail::shuffle(detail::Shuffle::Idx, mask_, var, int(src), 32, loc);
    }
    /// 1 if @p predicate is non-zero in any member, else 0 (`__any_sync`).
    int any(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return __any_sync(mask_, predicate, loc);
    }
    /// 1 if @p predicate is non-zero in every member, else 0 (`__all_sync`).
    int all(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return __all_sync(mask_, predicate, loc);
    }
    /// Bit r is set if @p predicate is non-zero in the member of rank r (`__ballot_sync`, its
    /// lanes packed by rank).
    unsigned ballot(int predicate, const std::source_location& loc = std::source_location::current()) const {
        return detail::pack_by_rank(mask_, __ballot_sync(mask_, predicate, loc));
    }
    /// Bit r is set if the member of rank r holds the bits of @p value (`__match_any_sync`).
    template <typename T>
    unsigned match_any(T value, const std::source_location& loc = std::source_location::current()) const {
        return detail::pack_by_rank(mask_, __match_any_sync(mask_, value, loc));
    }
    /// Every rank's bit, with @p pred 1, if every member holds the bits of @p value; else 0,
    /// with @p pred 0 (`__match_all_sync`).
    template <typename T>
    unsigned match_all(T value, int& pred, const std::source_location& loc = std::source_location::current()) const {
        return detail::pack_by_rank(mask_, __match_all_sync(mask_, value, &pred, loc));
    }

private:
    friend coalesced_group coalesced_threads(const std::source_location& loc);
    friend class thread_group;
    explicit coalesced_group(unsigned mask) : mask_(mask) {}
    unsigned source_lane(int src_rank) const {
        if (src_rank >= 0 && unsigned(src_rank) < num_threads()) return detail::lane_of_rank(mask_, unsigned(src_rank));
        return unsigned(std::countr_one(mask_)) % 32;  // a lane outside the group (undefined)
    }
    unsigned mask_;
};

/// The threads of the caller's warp that call this together with it (`__activemask()`): in a
/// branch, the lanes of the warp that took it.
inline coalesced_group coalesced_threads(const std::source_location& loc = std::source_location::current()) {
    return coalesced_group(__activemask(loc));
}

// ---- thread_group ---------------------------------------------------------------------------

/// Any of the groups above, with its type erased: a thread_block, a tile or a coalesced_group
/// converts to it. Also made by the run-time tiled_partition(parent, tile_size).
class thread_group {
public:
    /// The group of the whole block.
    thread_group(const thread_block&) : block_(true), mask_(0) {}
    /// The group of the tile's threads.
    template <unsigned Size, typename ParentT>
    thread_group(const thread_block_tile<Size, ParentT>&)
        : block_(false), mask_(thread_block_tile_base<Size>::mask()) {}
    /// The group of the coalesced group's threads.
    thread_group(const coalesced_group& g) : block_(false), mask_(g.mask_) {}

    /// Waits until every thread of the group has reached this call (`__syncthreads()` for a
    /// block, `__syncwarp(mask)` for the threads of a warp).
    void sync(const std::source_location& loc = std::source_location::current()) const {
        if (block_)
            __syncthreads(loc);
        else
            __syncwarp(mask_, loc);
    }
    /// The number of threads of the group.
    unsigned long long num_threads() const { return block_ ? detail::block_threads() : unsigned(std::popcount(mask_)); }
    /// The number of threads of the group (num_threads()).
    unsigned long long size() const { return num_threads(); }
    /// The calling thread's rank in the group.
    unsigned long long thread_rank() const {
        return block_ ? detail::block_rank() : unsigned(std::popcount(mask_ & detail::lanes_below(detail::lane())));
    }

private:
    friend thread_group tiled_partition(const thread_group& parent, unsigned tile_size,
                                        const std::source_location& loc);
    thread_group(bool block, unsigned mask) : block_(block), mask_(mask) {}
    bool block_;     ///< the whole block (else the lanes of mask_ in the caller's warp)
    unsigned mask_;  ///< the group's lanes in the caller's warp
};

/// Partitions @p parent (a block, a tile or a coalesced group) into groups of @p tile_size
/// threads by rank: the calling thread's group. @p tile_size must be a power of two from 1 to
/// 32 (CUDA traps otherwise; here the kernel stops with a diagnostic naming the line).
inline thread_group tiled_partition(const thread_group& parent, unsigned tile_size,
                                    const std::source_location& loc = std::source_location::current()) {
    if (tile_size == 0 || tile_size > 32 || (tile_size & (tile_size - 1)) != 0)
        ::pd::sim::detail::kernel_fault(cudaErrorLaunchFailure,
                                        ("tiled_partition(parent, " + std::to_string(tile_size) +
                                         "): the tile size must be a power of two from 1 to 32")
                                            .c_str(),
                                        loc);
    const unsigned parent_mask = parent.block_ ? 0xffffffffu : parent.mask_;
    // The parent's members in this warp, ranked: the caller's tile is the members of the same
    // rank / tile_size. A block's ranks are consecutive and its warps start at multiples of 32,
    // so the lanes of a tile of a block are consecutive too.
    const unsigned lane = detail::lane();
    const unsigned first = unsigned(std::popcount(parent_mask & detail::lanes_below(lane))) / tile_size * tile_size;
    unsigned mask = 0;
    for (unsigned r = first; r < first + tile_size; ++r) {
        const unsigned l = detail::lane_of_rank(parent_mask, r);
        if (l < 32) mask |= 1u << l;
    }
    return thread_group(false, mask);
}

/// Partitions the block into groups of @p tile_size threads (see the thread_group form).
inline thread_group tiled_partition(const thread_block& parent, unsigned tile_size,
                                    const std::source_location& loc = std::source_location::current()) {
    return tiled_partition(thread_group(parent), tile_size, loc);
}

// ---- free functions -------------------------------------------------------------------------

/// `g.sync()`.
template <typename GroupT>
void sync(const GroupT& g, const std::source_location& loc = std::source_location::current()) {
    g.sync(loc);
}
/// `g.thread_rank()`.
template <typename GroupT>
auto thread_rank(const GroupT& g) -> decltype(g.thread_rank()) {
    return g.thread_rank();
}
/// `g.num_threads()`.
template <typename GroupT>
auto group_size(const GroupT& g) -> decltype(g.num_threads()) {
    return g.num_threads();
}

// ---- what the simulator does not provide: a compile-time message --------------------------

/// Defines the members of a group type the simulator does not provide: each fails to compile
/// with @p message. Undefined after use.
#define PD_SIM_CG_UNSUPPORTED_MEMBERS(message)             \
    template <typename... A>                               \
    unsigned long long sync(A&&...) const {                \
        static_assert(detail::unsupported<A...>, message); \
        return 0;                                          \
    }                                                      \
    template <typename... A>                               \
    unsigned long long thread_rank(A&&...) const {         \
        static_assert(detail::unsupported<A...>, message); \
        return 0;                                          \
    }                                                      \
    template <typename... A>                               \
    unsigned long long size(A&&...) const {                \
        static_assert(detail::unsupported<A...>, message); \
        return 0;                                          \
    }                                                      \
    template <typename... A>                               \
    unsigned long long num_threads(A&&...) const {         \
        static_assert(detail::unsupported<A...>, message); \
        return 0;                                          \
    }

/// The message of grid-wide groups.
#define PD_SIM_CG_GRID_MESSAGE                                                                                   \
    "grid-wide groups (cooperative_groups::this_grid(), grid_group, grid.sync()) do not run on the pd::sim CPU " \
    "simulator: it runs each block to completion before starting another, so no block can wait for the others. " \
    "End the kernel where the grid would sync and launch a second kernel for the rest."
/// The message of multi-device groups.
#define PD_SIM_CG_MULTI_GRID_MESSAGE                                                                               \
    "multi-device groups (cooperative_groups::this_multi_grid(), multi_grid_group) do not run on the pd::sim CPU " \
    "simulator, which simulates one device (CUDA 13 no longer has them)"
/// The message of thread block clusters.
#define PD_SIM_CG_CLUSTER_MESSAGE                                                                              \
    "thread block clusters (cooperative_groups::this_cluster(), cluster_group) do not run on the pd::sim CPU " \
    "simulator, which simulates a device of compute capability 8.0"

/// A grid-wide group: not provided by the simulator (using it fails to compile, saying why).
class grid_group {
public:
    PD_SIM_CG_UNSUPPORTED_MEMBERS(PD_SIM_CG_GRID_MESSAGE)
};
/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
grid_group this_grid(A&&...) {
    static_assert(detail::unsupported<A...>, PD_SIM_CG_GRID_MESSAGE);
    return grid_group();
}

/// A multi-device group: not provided by the simulator (using it fails to compile).
class multi_grid_group {
public:
    PD_SIM_CG_UNSUPPORTED_MEMBERS(PD_SIM_CG_MULTI_GRID_MESSAGE)
};
/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
multi_grid_group this_multi_grid(A&&...) {
    static_assert(detail::unsupported<A...>, PD_SIM_CG_MULTI_GRID_MESSAGE);
    return multi_grid_group();
}

/// A thread block cluster: not provided by the simulator (using it fails to compile).
class cluster_group {
public:
    PD_SIM_CG_UNSUPPORTED_MEMBERS(PD_SIM_CG_CLUSTER_MESSAGE)
};
/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
cluster_group this_cluster(A&&...) {
    static_assert(detail::unsupported<A...>, PD_SIM_CG_CLUSTER_MESSAGE);
    return cluster_group();
}

/// Scratch memory for tiles of more than 32 threads: not provided by the simulator, which has
/// no such tiles (using it fails to compile).
template <unsigned MaxBlockSize>
struct block_tile_memory {
    static_assert(detail::unsupported<block_tile_memory>,
                  "block_tile_memory (for tiles of more than 32 threads) does not run on the pd::sim CPU simulator: "
                  "it provides tiles of 1, 2, 4, 8, 16 and 32 threads");
};

/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
coalesced_group binary_partition(A&&...) {
    static_assert(detail::unsupported<A...>,
                  "cooperative_groups::binary_partition does not run on the pd::sim CPU simulator: use "
                  "coalesced_threads() inside each side of the branch");
    return coalesced_threads();
}
/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
coalesced_group labeled_partition(A&&...) {
    static_assert(detail::unsupported<A...>,
                  "cooperative_groups::labeled_partition does not run on the pd::sim CPU simulator: use "
                  "coalesced_threads() inside each side of the branch, or __match_any_sync");
    return coalesced_threads();
}

#undef PD_SIM_CG_UNSUPPORTED_MEMBERS
#undef PD_SIM_CG_GRID_MESSAGE
#undef PD_SIM_CG_MULTI_GRID_MESSAGE
#undef PD_SIM_CG_CLUSTER_MESSAGE

}  // namespace cooperative_groups
