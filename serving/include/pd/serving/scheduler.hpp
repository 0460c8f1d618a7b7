/// @file scheduler.hpp
/// @brief Chapter 05's iteration-level scheduler (host C++, no backend).
///
/// A request's life: it waits (first come, first served), is admitted to a cache slot, has its
/// prompt prefilled (whole, or in chunks), then decodes one token per step until it has its
/// output, and leaves, freeing its slot. Its cache holds `computed` positions: after a prefill
/// of P positions the first output token is out; each decode step feeds the last token and
/// emits the next. If the cache runs out, the newest running request is preempted: its cache
/// is dropped and it waits again, at the front, to be prefilled anew with the prompt and the
/// tokens it has generated (recomputation). The cache itself (slots, capacity, blocks, prefix
/// hits) is the BlockManager's (block_manager.hpp).
///
/// The three policies build each step differently:
///  - static: request-level batching. A batch is formed from the waiting requests when none
///    is running; it prefills them whole, then decodes until its last request finishes; no
///    request joins meanwhile.
///  - continuous: iteration-level batching, prefill first (vLLM's original scheduler). When
///    requests wait and fit, the step prefills whole prompts, first come first served, up to
///    the token budget (at least one, even a longer one), and the running decodes pause;
///    otherwise every running request decodes. (Orca, which introduced iteration-level
///    scheduling, runs prefills and decodes in one iteration instead: selective batching.)
///  - chunked: stall-free batching (Sarathi-Serve). Every step first takes one decode token
///    of each running request, then continues the prefills in progress, then admits waiting
///    requests, each prompt cut to what is left of the token budget. The batch is decided by
///    build_chunked_step() (lab 05, chunked_step.hpp); the scheduler preempts and admits.
///
/// The engine loop is run_engine() (engine.hpp), the timeline's JSON to_json() (timeline.hpp).
#pragma once

#include "pd/serving/block_manager.hpp"
#include "pd/serving/types.hpp"
// The engine loop and the text and JSON forms, for the programs and tests that include only
// this header:
#include "pd/serving/engine.hpp"
#include "pd/serving/timeline.hpp"

#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace pd::serving {

/// How steps are built.
enum class Policy { static_batch, continuous, chunked };
/// "static", "continuous" or "chunked".
std::string to_string(Policy p);
/// The policy named @p name.
/// @throws std::invalid_argument naming SchedulerConfig.policy and @p name otherwise
Policy policy_from(const std::string& name);

/// The scheduler's limits.
struct SchedulerConfig {
    Policy policy = Policy::chunked;  ///< how steps are built
    int token_budget = 512;           ///< tokens per step; continuous may exceed it for one prompt
    int max_seqs = 64;                ///< cache slots: requests running at once
    long long kv_capacity = 1 << 20;  ///< positions the cache holds over all running requests
    /// 0: the capacity counts the positions in use (chapter 05). > 0: a paged cache of
    /// kv_capacity / block_size blocks (chapter 06), allocated as sequences grow.
    int block_size = 0;
    bool prefix_caching = false;  ///< paged only: reuse cached full prompt blocks
    /// Chapter 09's rule for speculative decoding: draft_limit[B] is the most draft tokens a
    /// request may add to its decode token in a step of B decodes (the requests ask for
    /// Request::speculate); past its end, or empty, no limit. speculation_limits() makes it from
    /// the cost model: 0 where verifying would make the step slower than the tokens it gains.
    std::vector<int> draft_limit;
    /// Chapter 11's decode instances, under continuous: a request is admitted only when its
    /// whole sequence (prompt + output) fits beside the whole sequences of the running requests,
    /// so no decode ever waits for room and nothing is preempted (false: chapter 05's rule, the
    /// positions in use).
    bool reserve_whole = false;
};

/// @p config, if a scheduler can run with it.
/// @throws std::invalid_argument naming the first field it cannot run with
/// ("SchedulerConfig.token_budget = 0 must be >= 1"; the cache's own rules are BlockManager's)
const SchedulerConfig& checked(const SchedulerConfig& config);

/// A request inside the scheduler.
struct Sequence {
    Request request;    ///< as it arrived
    int computed = 0;   ///< positions whose K and V are in its cache
    int generated = 0;  ///< output tokens emitted so far
    /// positions to prefill since its admission: the prompt, plus after a preemption its generated tokens
    int prefill_len = 0;
    int slot = -1;        ///< its cache slot while running, -1 while waiting
    int preemptions = 0;  ///< times its cache was dropped
    int prefix_hit = 0;   ///< positions of its prompt found in the prefix cache at its admission
    /// True while its prefill is not complete (it decodes afterwards).
    bool prefilling() const { return computed < prefill_len; }
};

/// The scheduler of one engine: a waiting queue, the running requests, and their cache.
class Scheduler {
public:
    /// @param config the limits
    /// @throws std::invalid_argument naming the first field of @p config that cannot be run
    ///         ("SchedulerConfig.token_budget = 0 must be >= 1"; under chunked, token_budget
    ///         below max_seqs; on pages, a cache too small for its slots)
    explicit Scheduler(const SchedulerConfig& config);

    /// A request arrives and joins the waiting queue.
    /// @param r the request (ids need not be dense here; run_engine() wants 0, 1, 2, ...)
    /// @throws std::invalid_argument if its prompt or output is below 1 token, its prompt's
    ///         token ids do not match prompt_tokens, or its prompt and output can never fit in
    ///         the cache (prompt + output > capacity())
    void arrive(const Request& r);
    /// The next step: room made (preempting while the running decodes do not fit), the policy's
    /// plan (admitting what it takes), and blocks for every new position. Empty when nothing
    /// can run (nothing has arrived, or everything waits for a static batch to end).
    Step next_step();
    /// Records that @p step ran: advances each request's cache and output, frees the slots of
    /// finished requests, and returns the ids of the requests that emitted a token, in order.
    /// @param step the step next_step() returned
    /// @throws std::logic_error for an item of a request that is not running, or at the wrong context
    std::vector<int> complete(const Step& step);
    /// As above for a step with drafts (chapter 09): item i kept @p accepted[i] of its draft
    /// tokens (empty: none), so its request advances by 1 + accepted[i] positions and tokens
    /// (emitting one id per token), and a paged cache gives back the blocks past them.
    /// @param step the step next_step() returned  @param accepted per item, 0 ... its draft
    /// @throws std::logic_error as above, or for an accepted count outside 0 ... draft
    std::vector<int> complete(const Step& step, const std::vector<int>& accepted);

    /// Chapter 13: ends request @p id now, whether it waits or runs (cancelled, or stopped early
    /// at an end-of-sequence or stop token): its slot and its blocks, prefix-cache references
    /// included, are free for the next step. A request that has left already is not an error.
    /// @param id a request id  @return true if it was waiting or running
    bool end_request(int id);

    /// True while a request waits or runs.
    bool has_work() const { return !waiting_.empty() || !running_.empty(); }
    /// Preemptions so far.
    int preemptions() const { return preemptions_; }
    /// The running requests, in admission order.
    const std::vector<Sequence>& running() const { return running_; }
    /// The waiting requests, in queue order.
    const std::deque<Sequence>& waiting() const { return waiting_; }
    /// Positions held in the cache by the running requests. Paged: the positions they computed
    /// beyond their prefix hits, plus every prefix block they share, counted once.
    long long kv_used() const { return cache_.used(running_); }
    /// The positions the policies may plan with: kv_capacity, or paged, kv_capacity less one
    /// partly filled block per slot (block_size - 1 positions each), so that every plan fits
    /// in whole blocks.
    long long capacity() const { return cache_.capacity(); }
    /// Positions holding K and V once @p step has run (what it is about to run counted in):
    /// each position once, even in a block several requests share.
    /// @param step the step about to run (its items belong to running requests)
    long long kv_held(const Step& step) const { return cache_.held(running_, step); }
    /// The paged cache (nullptr unless block_size > 0).
    const PagedCache* paged() const { return cache_.paged(); }
    /// The slots, the capacity and the paged cache.
    const BlockManager& block_manager() const { return cache_; }
    /// Times request @p id was preempted so far.
    /// @param id a request id
    int preemptions_of(int id) const;
    /// Prompt positions of request @p id found in the prefix cache, over its admissions.
    /// @param id a request id
    long long prefix_hits_of(int id) const;
    /// Throws std::logic_error naming the broken invariant: at most max_seqs run, no request
    /// has more output than it asked for or holds more than prompt + output positions, the
    /// waiting queue is in arrival order and no running request arrived after the waiting
    /// queue's head (first come, first served), no paged request holding blocks past its
    /// positions (chapter 09's draft reservations given back), and the cache's
    /// (BlockManager::check_invariants(): no slot leaked or shared, no more than the capacity).
    void check_invariants() const;
    /// About how many elements check_invariants() visits now: the waiting and running requests,
    /// the slots and the paged cache's blocks (run_engine() checks as often as it can afford).
    std::size_t check_cost() const {
        return waiting_.size() + running_.size() + std::size_t(config_.max_seqs) +
               (paged() ? std::size_t(paged()->num_blocks()) : 0);
    }
    /// The limits.
    const SchedulerConfig& config() const { return config_; }

private:
    Step static_step();
    Step continuous_step();
    Step chunked_step();
    void add_drafts(Step& step) const;  // chapter 09: the decodes' draft tokens, within budget, cache and rule
    int draft_of(const Sequence& s, int decodes) const;  // chapter 09: the draft tokens s may add
    const Sequence& admit_front();  // the first waiting request runs (valid until running_ changes)
    int preempt_newest();           // drops the newest running request's cache; returns its id
    void make_room_for_decodes();   // preempts the newest until every decode fits in the cache
    // Where running request @p id is in running_ (running_.size() if it is not running). The
    // search starts after the last one found: a step's items come in running order, so the items
    // of a step cost one pass over running_, not one pass each (a placement search of chapter 11
    // spent a third of its time in these searches).
    std::size_t index_of(int id) const;
    Sequence* find(int id);  // running request @p id, or null

    SchedulerConfig config_;
    BlockManager cache_;
    std::deque<Sequence> waiting_;
    std::vector<Sequence> running_;
    mutable std::size_t next_find_ = 0;  // index_of()'s starting point
    int preemptions_ = 0;
    std::unordered_map<int, int> preempted_;   // preemptions per request
    std::unordered_map<int, long long> hits_;  // prefix-cache positions per request
};

/// The most tokens a step that a Scheduler with @p config builds for @p requests can hold: a
/// bound for a model that allocates its activations once. It is the smallest of
///  - what any step holds: one item per running request, at most max_seqs of them, each no
///    longer than that request's longest prefill, prompt + output - 1 (after a preemption
///    with all but its last token generated); so the sum of the max_seqs longest;
///  - the capacity the policies plan with (every step's new positions fit in the cache);
///  - by policy: chunked, token_budget (every step is cut to the budget); continuous,
///    max(token_budget, max_seqs, the longest prefill) (prompts join up to the budget, at
///    least one however long; a decode step is one token per slot); static, no more (a
///    batch's first step prefills each request whole, which the two bounds above cover).
///
/// @param config the limits (checked as the Scheduler checks them)
/// @param requests the workload (prompt and output >= 1 token each)
/// @return the bound, 0 for no requests
/// @throws std::invalid_argument for a @p config that Scheduler's constructor rejects
long long max_step_tokens(const SchedulerConfig& config, const std::vector<Request>& requests);

}  // namespace pd::serving
