/// @file chunked_step.hpp
/// @brief The step builder of the `chunked` policy (lab 05): from the running and waiting
/// requests and what is free, the next step's batch (host C++, no backend).
///
/// It only decides: Scheduler::next_step() gives it plain copies of its queues, then admits
/// the requests it chose and, when the step comes back empty with requests running (their
/// partial prefills fill the cache), preempts the newest and asks again. The canonical code
/// is solutions/05_batching/chunked_step.cpp, built into pd_serving from the lab tree, so the
/// scheduler's tests and `ch05_batching` run the lab's code.
#pragma once

#include "pd/serving/types.hpp"

#include <vector>

namespace pd::serving {

/// A running request, as the step builder sees it.
struct RunningRequest {
    int id = 0;        ///< Request::id
    int computed = 0;  ///< positions already in its cache
    /// Positions to prefill since its admission: its prompt, plus after a preemption the
    /// tokens it had generated.
    int prefill_len = 0;
    /// True while its prefill is not complete; afterwards it decodes one token per step.
    bool prefilling() const { return computed < prefill_len; }
};

/// A waiting request, as the step builder sees it.
struct WaitingRequest {
    int id = 0;  ///< Request::id
    /// Positions to prefill once admitted: its prompt, plus after a preemption the tokens it
    /// had generated.
    int prefill_len = 0;
};

/// What the next step may use.
struct StepRoom {
    int token_budget = 0;   ///< tokens in the step, decodes included (`--token-budget`)
    int free_slots = 0;     ///< cache slots free: how many waiting requests can be admitted
    long long kv_free = 0;  ///< cache positions free now (capacity minus what the running requests hold)
};

/// The step builder's decision.
struct ChunkedPlan {
    Step step;         ///< the batch, without slots (next_step() sets them)
    int admitted = 0;  ///< how many requests at the front of the waiting queue the step admits
};

/// The next step of the `chunked` policy (Sarathi-Serve's stall-free batching), in this order:
///  1. one decode token (`tokens = 1`, `context = computed`, not a prefill, emits) for every running request that
///     has finished its prefill, in admission order;
///  2. the prefills in progress, in admission order, each a chunk of
///     `min(prefill_len - computed, budget left, cache left)` tokens at context `computed`,
///     which emits when it completes the prefill;
///  3. the waiting requests, first come first served, while budget, cache and slots remain,
///     each a chunk of `min(prefill_len, budget left, cache left)` at context 0.
///
/// Every token of the step, decodes included, takes one token of the budget and one position
/// of the cache. No request appears twice, and no item has 0 tokens.
///
/// @param running the running requests, in admission order
/// @param waiting the waiting queue's head, in queue order (it may be shorter than the
///        queue: no more than `room.free_slots` requests can be admitted)
/// @param room    the token budget, free slots and free cache positions of this step
/// @return the step, and how many of @p waiting it admits (its first items of @p waiting,
///         in order)
/// @pre every decode fits: their number is <= `room.token_budget` and <= `room.kv_free`
///      (the scheduler preempts before it asks)
ChunkedPlan build_chunked_step(const std::vector<RunningRequest>& running, const std::vector<WaitingRequest>& waiting,
                               const StepRoom& room);

}  // namespace pd::serving
