/// @file chunked_step.cpp
/// @brief Lab 05: the step builder of the `chunked` policy (Sarathi-Serve's stall-free
/// batching). Given the running requests, the waiting queue and what the step may use (token
/// budget, free slots, free cache positions), it returns the next batch: every running decode,
/// then the prefills in progress, then new requests, each prompt cut to what is left.
///
/// Host C++, built into pd_serving from the lab tree: Scheduler::next_step() calls it under
/// `--policy chunked`, so the scheduler's tests and `ch05_batching` run this code. The
/// scheduler does what changes its state around it: before, it preempts until every decode
/// fits in the cache; after, it admits the `admitted` first waiting requests into slots, and
/// when the step is empty although requests run, it preempts the newest and asks again.
#include "pd/serving/chunked_step.hpp"

#include <algorithm>
#include <cstddef>

namespace pd::serving {

// [chunked_step]
ChunkedPlan build_chunked_step(const std::vector<RunningRequest>& running, const std::vector<WaitingRequest>& waiting,
                               const StepRoom& room) {
    ChunkedPlan plan;
    std::vector<BatchItem>& items = plan.step.items;  // BatchItem{request, tokens, context, prefill, emits}
    int budget = room.token_budget;                   // tokens the step may still take
    long long kv_free = room.kv_free;                 // cache positions still free
    // 1. Every running decode, one token each: a stream never waits a step (the scheduler
    // keeps the budget >= max_seqs and made room in the cache for them).
    // TODO(student): 1. for each running request past its prefill (!prefilling()), in order, a decode item {id, 1 token, context computed, prefill false, emits true}; then take one token of budget and one position of kv_free per decode (~4 lines)
    // 2. The prefills in progress, in admission order, each cut to what is left.
    // TODO(student): 2. for each running request still prefilling, while budget and kv_free are > 0: a chunk of min(prefill_len - computed, budget, kv_free) tokens at context computed, a prefill, which emits only if it completes the prefill (computed + chunk == prefill_len); subtract the chunk from budget and kv_free (~7 lines)
    // 3. New requests, first come first served, while budget, slots and cache remain.
    // TODO(student): 3. admit waiting[0], waiting[1], ... in order while budget > 0, kv_free > 0 and a slot is free (plan.admitted < room.free_slots) and the queue lasts: each a prefill chunk of min(prefill_len, budget, kv_free) tokens at context 0, emitting if it is the whole prompt; count them in plan.admitted and subtract each chunk (~8 lines)
    (void)items;
    (void)budget;
    (void)kv_free;
    return plan;
}
// [chunked_step]

}  // namespace pd::serving
