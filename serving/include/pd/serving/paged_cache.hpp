/// @file paged_cache.hpp
/// @brief Chapter 06's paged KV cache on the host: the block allocator and the prefix cache
/// (host C++, no backend). The device kernels only read the block tables it builds.
///
/// The cache is `num_blocks` blocks of `block_size` positions. A sequence's block table lists
/// the physical blocks that hold its positions, in order: logical position p lives in block
/// table[p / block_size] at offset p % block_size. Blocks are handed out as the sequence grows
/// and given back when it finishes or is preempted, so a sequence holds at most one partly
/// filled block (its last).
///
/// Prefix caching: each full block of a prompt is identified by a hash chained over the tokens
/// of every block before it and its own, so equal hashes mean equal prefixes (a hit is still
/// confirmed by comparing the tokens). A new sequence takes the longest run of cached blocks
/// that starts its prompt (their reference counts go up: blocks are shared, never copied) and
/// computes only the rest. When a block's last user leaves, a cached block is not freed but
/// kept, unreferenced, in least-recently-used order; it is evicted (its hash forgotten) only
/// when an allocation finds no free block.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace pd::serving {

/// The blocks of a paged KV cache, their owners, and the cached prefixes.
class PagedCache {
public:
    /// @param num_blocks blocks in the cache (>= 1)  @param block_size positions per block (>= 1)
    /// @param prefix_caching keep full prompt blocks for reuse
    /// @throws std::invalid_argument naming the parameter below 1 and its value
    ///         ("PagedCache.block_size = 0 must be >= 1")
    PagedCache(int num_blocks, int block_size, bool prefix_caching);
    /// True when full prompt blocks are kept for reuse (and may be shared by several requests).
    bool prefix_caching() const { return prefix_caching_; }

    /// Blocks needed for @p positions positions: ceil(positions / block_size).
    /// @param positions positions (>= 0)
    long long blocks_for(long long positions) const { return (positions + block_size_ - 1) / block_size_; }
    /// Blocks an allocation can take now: the free ones and the cached ones no sequence uses.
    int available() const { return static_cast<int>(free_.size() + lru_.size()); }

    /// The longest run of cached blocks that starts @p prompt, leaving at least its last token
    /// to compute (its logits are needed): what match_prefix() would give a sequence now,
    /// found without taking anything.
    /// @param prompt a prompt's tokens (empty: no hits)
    /// @return the blocks in prompt order (none without prefix caching)
    std::vector<int> cached_prefix(std::span<const int> prompt) const;
    /// Gives sequence @p seq the blocks of cached_prefix(@p prompt), sharing them (their
    /// reference counts go up). Returns the positions it can skip (a multiple of block_size).
    /// @param seq the sequence (a request id)  @param prompt its prompt's tokens (empty: no hits)
    /// @throws std::logic_error if @p seq already holds blocks
    int match_prefix(int seq, std::span<const int> prompt);
    /// Grows @p seq's table to hold @p positions positions, taking free blocks first, then
    /// evicting the least recently used cached ones. Returns false, changing nothing, when there
    /// are not enough.
    /// @param seq the sequence  @param positions positions it must hold
    bool grow(int seq, long long positions);
    /// Records that @p seq has computed its first @p computed positions, whose tokens begin with
    /// @p prompt: every full block of the prompt among them becomes a cached prefix (with
    /// prefix caching on; a prefix already cached in another block stays in that one).
    /// @param seq the sequence  @param prompt its prompt's tokens  @param computed positions computed
    void commit(int seq, std::span<const int> prompt, long long computed);
    /// Gives back every block of @p seq: a block no one else uses becomes free, or, when it
    /// holds a cached prefix, stays cached as the most recently used.
    /// @param seq the sequence
    void release(int seq);
    /// Gives back the blocks of @p seq past the first @p positions positions, as release() does
    /// (chapter 09: the blocks reserved for draft tokens that were not kept).
    /// @param seq the sequence  @param positions the positions it keeps
    void shrink(int seq, long long positions);

    /// The block table of @p seq (empty if it holds none).
    /// @param seq the sequence
    const std::vector<int>& table(int seq) const;
    /// The tables that hold block @p block.
    /// @param block a block index
    int ref_count(int block) const { return ref_.at(static_cast<std::size_t>(block)); }
    /// Blocks held by at least one sequence.
    int used() const;
    /// Positions per block.
    int block_size() const { return block_size_; }
    /// Blocks in the cache.
    int num_blocks() const { return static_cast<int>(ref_.size()); }
    /// Cached blocks (referenced or not).
    int cached() const { return static_cast<int>(by_hash_.size()); }
    /// Cached blocks evicted so far.
    long long evictions() const { return evictions_; }
    /// Throws std::logic_error naming the broken invariant: no block both free and used (or
    /// both free and cached), every reference count equal to the number of tables that hold the
    /// block, the unreferenced cached blocks exactly the LRU list, every block accounted for.
    void check_invariants() const;

private:
    int take_block();      // a free block, or the least recently used cached one (evicted); -1 if none
    void drop(int block);  // one table lets go of block: free, or cached and most recently used, when no one holds it
    static std::uint64_t chain_hash(std::uint64_t parent, std::span<const int> tokens);

    int block_size_;
    bool prefix_caching_;
    std::vector<int> ref_;                          // tables holding each block
    std::vector<int> free_;                         // blocks holding nothing (a stack)
    std::list<int> lru_;                            // cached blocks no sequence holds, oldest first
    std::vector<std::list<int>::iterator> lru_at_;  // each block's place in lru_ (end() if absent)
    std::vector<bool> is_cached_;                   // the block holds a registered prefix
    std::vector<std::uint64_t> hash_;               // its prefix hash, when cached
    std::vector<std::vector<int>> tokens_;          // its tokens, when cached (to confirm a hit)
    std::unordered_map<std::uint64_t, int> by_hash_;
    std::unordered_map<int, std::vector<int>> tables_;
    long long evictions_ = 0;
};

}  // namespace pd::serving
