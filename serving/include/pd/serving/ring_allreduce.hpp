/// @file ring_allreduce.hpp
/// @brief Chapter 10's lab: the ring all-reduce, written against the few things one rank of a
/// ring can do (RingLinks), so that the same code runs on NCCL's send and receive and the
/// device's adds (pd::model::NcclCollectives with the ring algorithm: chapter 10's model and its
/// benchmark) and on host arrays (the lab's tests). Host C++ with no backend, built into
/// pd_serving from the lab tree (10_tensor_parallel/ring_allreduce.cpp of solutions/ or exercises/).
///
/// The ring (Patarasuk and Yuan, 2009; NCCL's ring algorithm): the count elements are cut into
/// n chunks. In the reduce-scatter, n - 1 steps, rank r sends chunk (r - s) mod n to rank r + 1
/// and adds the chunk (r - s - 1) mod n it receives from rank r - 1 into its own: after them it
/// holds the sum of chunk (r + 1) mod n. In the all-gather, n - 1 more steps, it sends chunk
/// (r + 1 - s) mod n, whole now, and stores the chunk (r - s) mod n it receives. Each rank sends
/// 2 (n - 1) chunks, 2 (n - 1) / n of the data: the bytes nccl-tests' busbw counts.
#pragma once

#include <cstddef>
#include <functional>

namespace pd::serving {

/// One chunk of the ring: elements [offset, offset + count) of the data.
struct RingChunk {
    std::size_t offset = 0;  ///< its first element
    std::size_t count = 0;   ///< its elements
};

/// Chunk @p i of @p count elements cut into @p ranks chunks: the first count % ranks chunks have
/// one element more than the others (chunks may be empty when count < ranks).
/// @param count elements  @param ranks n  @param i the chunk, 0 ... n - 1
inline RingChunk ring_chunk(std::size_t count, int ranks, int i) {
    const std::size_t n = std::size_t(ranks), base = count / n, extra = count % n, k = std::size_t(i);
    return {k * base + (k < extra ? k : extra), base + (k < extra ? 1 : 0)};
}

/// What rank `rank` of a ring of `ranks` can do with its data (count elements) and a scratch
/// buffer of at least one chunk, bound by the caller.
struct RingLinks {
    int rank = 0;   ///< this rank, 0 ... ranks - 1
    int ranks = 1;  ///< n
    /// One step: sends data[send.offset, + send.count) to rank (rank + 1) mod n and receives
    /// receive_count elements from rank (rank - 1) mod n into scratch[0, receive_count), at once
    /// (every rank of the ring takes the step together).
    std::function<void(RingChunk send, std::size_t receive_count)> exchange;
    /// data[into.offset + i] += scratch[i] for i < into.count.
    std::function<void(RingChunk into)> accumulate;
    /// data[into.offset + i] = scratch[i] for i < into.count.
    std::function<void(RingChunk into)> store;
};

/// Lab 10: the ring all-reduce of @p count elements on one rank: when every rank of the ring has
/// returned, each one's data holds the sum over the ranks. Exactly 2 (n - 1) exchanges, each
/// followed by an accumulate (the n - 1 of the reduce-scatter) or a store (the n - 1 of the
/// all-gather) of the chunk received; nothing on a ring of one.
/// @param count elements of the data  @param links what this rank can do
/// @throws std::invalid_argument when links.ranks < 1 or links.rank is not in 0 ... ranks - 1
void ring_all_reduce(std::size_t count, const RingLinks& links);

}  // namespace pd::serving
