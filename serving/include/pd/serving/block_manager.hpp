/// @file block_manager.hpp
/// @brief The scheduler's cache (host C++, no backend): its slots, the positions the policies
/// may plan with, and on the paged cache (chapter 06) the block tables and the prefix cache.
///
/// The scheduler decides who runs; the block manager says what their cache holds and what
/// admitting one more request would take, and hands out and takes back slots and blocks. A
/// request's cache, call by call:
///  - can_allocate(): while it waits, what admitting it would take, asked before the step is
///    planned and changing nothing;
///  - allocate(): at its admission, a slot, and its prefix hit (positions counted as computed);
///  - append(): before each step it is in, blocks for the step's new positions;
///  - commit(): after each step, its full prompt blocks become cached prefixes;
///  - release(): when it finishes or is preempted, its slot and its blocks go back.
/// (nano-vllm's block manager has the same calls: can_allocate, allocate, may_append and
/// append, deallocate.)
///
/// The policies plan in positions against capacity(), as on slots (chapter 05). On pages the
/// capacity is smaller by one partly filled block per slot, so that a plan that fits in
/// positions always finds its blocks: append() never runs out.
#pragma once

#include "pd/serving/paged_cache.hpp"
#include "pd/serving/types.hpp"

#include <deque>
#include <optional>
#include <vector>

namespace pd::serving {

struct SchedulerConfig;  // scheduler.hpp
struct Sequence;         // scheduler.hpp

/// What admitting a waiting request would take (BlockManager::can_allocate()).
struct Allocation {
    bool slot = false;  ///< a cache slot is free
    /// Positions its prefill covers: its prompt, plus after a preemption the tokens it had
    /// generated (what the policies plan with).
    int prefill = 0;
    /// Of them, the prompt positions the prefix cache holds: computed already (whole blocks; 0
    /// without prefix caching).
    int prefix_hit = 0;
    /// Paged: blocks its whole prefill would take from the available ones: the blocks of its hit
    /// that no running request holds, and the blocks of the positions it computes (0 on slots).
    long long blocks = 0;
    /// Positions its prefill computes: the prefill less the hit.
    int computes() const { return prefill - prefix_hit; }
};

/// The slots, the capacity and the paged cache of one Scheduler.
class BlockManager {
public:
    /// @param config the scheduler's limits (kv_capacity and max_seqs >= 1, as Scheduler checks
    ///        them; block_size; prefix_caching)
    /// @throws std::invalid_argument as capacity_of()
    explicit BlockManager(const SchedulerConfig& config);

    /// The positions the policies may plan with in the cache @p config describes: kv_capacity,
    /// or paged, the whole blocks less one partly filled block per slot.
    /// @param config the scheduler's limits
    /// @throws std::invalid_argument naming the fields when the paged cache cannot hold a partly
    ///         filled block per slot, or when prefix caching is asked for without it
    static long long capacity_of(const SchedulerConfig& config);

    /// The positions the policies may plan with (capacity_of() the configuration).
    long long capacity() const { return capacity_; }
    /// Slots free: how many more requests can run.
    int free_slots() const { return static_cast<int>(free_slots_.size()); }
    /// Positions held by @p running: on slots what they computed; paged, what they computed
    /// beyond their prefix hits, plus every prefix block they share, counted once.
    /// @param running the running requests
    long long used(const std::vector<Sequence>& running) const;
    /// Positions holding K and V once @p step has run (its new tokens counted in), each
    /// position once even in a block several requests share.
    /// @param running the running requests  @param step the step about to run (of their items)
    long long held(const std::vector<Sequence>& running, const Step& step) const;
    /// The paged cache (nullptr on slots).
    const PagedCache* paged() const { return paged_ ? &*paged_ : nullptr; }

    /// What admitting @p waiting would take now, changing nothing: whether a slot is free, the
    /// positions of its prefill, how many of them the prefix cache holds, and the blocks it
    /// would take. Whether its positions fit is the planner's sum: capacity() less used() less
    /// what the step has planned so far.
    /// @param waiting a waiting request (it holds no slot and no block)
    Allocation can_allocate(const Sequence& waiting) const;
    /// Admits @p seq: gives it a slot and its prefix hit, and sets its slot, prefill_len,
    /// prefix_hit and computed (= prefix_hit) as can_allocate() said.
    /// @param seq a waiting request
    /// @throws std::logic_error if no slot is free
    void allocate(Sequence& seq);
    /// Blocks for the positions @p item adds to its request (paged; nothing on slots).
    /// @param item an item of the step about to run, of an allocated request
    /// @throws std::logic_error if the blocks are not there (a plan past capacity())
    void append(const BatchItem& item);
    /// After a step: the full prompt blocks among the positions @p seq has computed become
    /// cached prefixes (paged with prefix caching; nothing otherwise).
    /// @param seq a running request, its computed positions advanced
    void commit(const Sequence& seq);
    /// After a speculative step (chapter 09): gives back the blocks @p seq holds past its computed
    /// positions, reserved for draft tokens that were not kept (paged; nothing otherwise).
    /// @param seq a running request, its computed positions advanced
    void trim(const Sequence& seq);
    /// Takes back @p seq's slot and blocks (a block still shared, or a cached prefix, stays),
    /// and resets its slot, prefill_len, prefix_hit and computed.
    /// @param seq a running request that finishes or is preempted
    void release(Sequence& seq);
    /// Throws std::logic_error naming the broken invariant: every running request has its own
    /// slot and no free slot is used (no slot leaked or shared), the running requests hold no
    /// more than capacity(), no waiting request holds a slot or a position; paged: the paged
    /// cache's own invariants, every running request holds the blocks of its positions, no
    /// waiting request holds a block.
    /// @param running the running requests  @param waiting the waiting queue
    void check_invariants(const std::vector<Sequence>& running, const std::deque<Sequence>& waiting) const;

private:
    int block_size_;  // 0 on slots
    int slots_;       // max_seqs
    long long capacity_;
    std::vector<int> free_slots_;  // a stack: the back is handed out next
    std::optional<PagedCache> paged_;
    mutable std::vector<long long> fill_;  // held()'s buffers, reused from step to step: each
    mutable std::vector<int> touched_;     // block's fill, zero between calls; the blocks filled
};

}  // namespace pd::serving
