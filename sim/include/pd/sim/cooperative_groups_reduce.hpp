/// @file cooperative_groups_reduce.hpp
/// @brief cg::reduce and its operators on the simulator (`#include <cooperative_groups/reduce.h>`
/// finds this header through sim/shadow/cooperative_groups/reduce.h).
///
/// cg::reduce combines one value from every thread of a tile or a coalesced group with an
/// operator and gives the result to every thread. It is built on the group's shuffles, so a
/// thread of the group that does not reach the call stops the kernel with the diagnostic of
/// the shuffle, naming the line of the cg::reduce call.
#pragma once

#include "pd/sim/cooperative_groups.hpp"

#include <source_location>
#include <type_traits>

namespace cooperative_groups {

/// The operator of cg::reduce that adds: `a + b`.
template <typename T>
struct plus {
    /// `a + b`.
    T operator()(T a, T b) const { return a + b; }
};
/// The operator of cg::reduce that keeps the smaller value: `b < a ? b : a`.
template <typename T>
struct less {
    /// The smaller of @p a and @p b (@p a when neither is smaller).
    T operator()(T a, T b) const { return b < a ? b : a; }
};
/// The operator of cg::reduce that keeps the larger value: `a < b ? b : a`.
template <typename T>
struct greater {
    /// The larger of @p a and @p b (@p a when neither is larger).
    T operator()(T a, T b) const { return a < b ? b : a; }
};
/// The operator of cg::reduce that takes the bitwise AND: `a & b`.
template <typename T>
struct bit_and {
    /// `a & b`.
    T operator()(T a, T b) const { return a & b; }
};
/// The operator of cg::reduce that takes the bitwise OR: `a | b`.
template <typename T>
struct bit_or {
    /// `a | b`.
    T operator()(T a, T b) const { return a | b; }
};
/// The operator of cg::reduce that takes the bitwise XOR: `a ^ b`.
template <typename T>
struct bit_xor {
    /// `a ^ b`.
    T operator()(T a, T b) const { return a ^ b; }
};

namespace detail {

/// The type an operator of cooperative groups works on (void for any other callable).
template <typename Op>
struct operator_type {
    using type = void;
};
template <typename T>
struct operator_type<plus<T>> {
    using type = T;
};
template <typename T>
struct operator_type<less<T>> {
    using type = T;
};
template <typename T>
struct operator_type<greater<T>> {
    using type = T;
};
template <typename T>
struct operator_type<bit_and<T>> {
    using type = T;
};
template <typename T>
struct operator_type<bit_or<T>> {
    using type = T;
};
template <typename T>
struct operator_type<bit_xor<T>> {
    using type = T;
};

/// The size of a tile type; 0 for other groups.
template <typename GroupT>
inline constexpr unsigned tile_size = 0;
template <unsigned Size, typename ParentT>
inline constexpr unsigned tile_size<thread_block_tile<Size, ParentT>> = Size;

}  // namespace detail

/// Combines @p val of every thread of @p group (a thread_block_tile or a coalesced_group) with
/// @p op (cg::plus, cg::less, cg::greater, cg::bit_and, cg::bit_or, cg::bit_xor, or any
/// associative and commutative callable) and returns the result in every thread. Every
/// thread of the group must call it. A tile combines by shuffles across halves (`shfl_xor`),
/// a coalesced group by shuffles down its ranks, then a broadcast from rank 0; floating-point
/// sums may therefore differ from a GPU's in the last bits. The last parameter, the call
/// site, is filled in by the compiler; diagnostics name it.
template <typename GroupT, typename T, typename Op>
auto reduce(const GroupT& group, T&& val, Op&& op, const std::source_location& loc = std::source_location::current())
    -> decltype(op(val, val)) {
    using Group = std::remove_cvref_t<GroupT>;
    using Value = std::remove_cvref_t<T>;
    using Input = typename detail::operator_type<std::remove_cvref_t<Op>>::type;
    static_assert(detail::tile_size<Group> != 0 || std::is_same_v<Group, coalesced_group>,
                  "cg::reduce takes a thread_block_tile or a coalesced_group, as in CUDA: to reduce a block, reduce "
                  "each tile of 32 threads, then the tiles' results (through shared memory)");
    static_assert(std::is_void_v<Input> || std::is_same_v<Input, Value>,
                  "cg::reduce: the operator's type differs from the value's type (as nvcc, the simulator requires "
                  "them to be the same: cg::plus<float> for a float value)");
    using Result = decltype(op(val, val));
    Result v = val;
    if constexpr (detail::tile_size<Group> != 0) {
        // Each step combines the two halves of every segment twice as wide: every thread ends
        // with the whole tile's result.
        for (unsigned offset = detail::tile_size<Group> / 2; offset > 0; offset /= 2)
            v = op(v, group.shfl_xor(v, offset, loc));
        return v;
    } else {
        // Rank r combines ranks r to r + 2 * offset - 1 at each step; rank 0 ends with all of
        // them and hands its result to the others.
        const unsigned rank = group.thread_rank(), n = group.num_threads();
        for (unsigned offset = 1; offset < n; offset *= 2) {
            const Result other = group.shfl_down(v, offset, loc);
            if (rank + offset < n) v = op(v, other);
        }
        return group.shfl(v, 0, loc);
    }
}

/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
void reduce_update_async(A&&...) {
    static_assert(detail::unsupported<A...>,
                  "cg::reduce_update_async does not run on the pd::sim CPU simulator: use cg::reduce, then an atomic "
                  "from one thread of the group");
}
/// Not provided by the simulator: fails to compile, saying why.
template <typename... A>
void reduce_store_async(A&&...) {
    static_assert(detail::unsupported<A...>,
                  "cg::reduce_store_async does not run on the pd::sim CPU simulator: use cg::reduce, then a store from "
                  "one thread of the group");
}

}  // namespace cooperative_groups
