/// @file scheduler.hpp
/// @brief Chapter 05's iteration-level scheduler and the engine loop (host C++, no backend).
///
/// A request's life: it waits (first come, first served), is admitted to a cache slot, has its
/// prompt prefilled (whole, or in chunks), then decodes one token per step until it has its
/// output, and leaves, freeing its slot. Its cache holds `computed` positions: after a prefill
/// of P positions the first output token is out; each decode step feeds the last token and
/// emits the next. If the cache runs out, the newest running request is preempted: its cache
/// is dropped and it waits again, at the front, to be prefilled anew with the prompt and the
/// tokens it has generated (recomputation).
///
/// The three policies build each step differently:
///  - static: request-level batching. A batch is formed from the waiting requests when none
///    is running; it prefills them whole, then decodes until its last request finishes; no
///    request joins meanwhile.
///  - continuous: iteration-level batching (Orca). When requests wait and fit, the step
///    prefills whole prompts, first come first served, up to the token budget (at least one,
///    even a longer one), and the running decodes pause; otherwise every running request
///    decodes.
///  - chunked: stall-free batching (Sarathi-Serve). Every step first takes one decode token
///    of each running request, then continues the prefills in progress, then admits waiting
///    requests, each prompt cut to what is left of the token budget. The batch is decided by
///    build_chunked_step() (lab 05, chunked_step.hpp); the scheduler preempts and admits.
#pragma once

#include "pd/serving/chunked_step.hpp"
#include "pd/serving/paged_cache.hpp"
#include "pd/serving/types.hpp"

#include <nlohmann/json.hpp>

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pd::serving {

/// How steps are built.
enum class Policy { static_batch, continuous, chunked };
/// "static", "continuous" or "chunked".
std::string to_string(Policy p);
/// The policy named @p name; std::invalid_argument naming `--policy` otherwise.
Policy policy_from(const std::string& name);
/// @p step as text, one `(request tokens@context P|D)` per item, `P` for a prefill and `D`
/// for a decode, with `!` after it when the item emits a token: "(0 1@5 D!)(1 7@3 P)".
std::string to_string(const Step& step);

/// The scheduler's limits.
struct SchedulerConfig {
    Policy policy = Policy::chunked;  ///< how steps are built
    int token_budget = 512;           ///< tokens per step (`--token-budget`); continuous may exceed it for one prompt
    int max_seqs = 64;                ///< cache slots: requests running at once (`--max-seqs`)
    long long kv_capacity = 1 << 20;  ///< positions the cache holds over all running requests
    /// 0: the capacity counts the positions in use (chapter 05). > 0: a paged cache of
    /// kv_capacity / block_size blocks (chapter 06), allocated as sequences grow.
    int block_size = 0;
    bool prefix_caching = false;      ///< paged only: reuse cached full prompt blocks (`--prefix-cache`)
};

/// A request inside the scheduler.
struct Sequence {
    Request request;     ///< as it arrived
    int computed = 0;    ///< positions whose K and V are in its cache
    int generated = 0;   ///< output tokens emitted so far
    int prefill_len = 0; ///< positions to prefill since its admission: the prompt, plus after a preemption its generated tokens
    int slot = -1;       ///< its cache slot while running, -1 while waiting
    int preemptions = 0; ///< times its cache was dropped
    int prefix_hit = 0;  ///< positions of its prompt found in the prefix cache at its admission
    /// True while its prefill is not complete (it decodes afterwards).
    bool prefilling() const { return computed < prefill_len; }
};

/// The scheduler of one engine: a waiting queue, the running requests, the slots.
class Scheduler {
public:
    /// @throws std::invalid_argument naming the first limit below 1
    explicit Scheduler(const SchedulerConfig& config);

    /// A request arrives and joins the waiting queue. @throws std::invalid_argument if its
    /// prompt and output can never fit in the cache (prompt + output > kv_capacity)
    void arrive(const Request& r);
    /// The next step, by the policy; may preempt running requests to make room. Empty when
    /// nothing can run (nothing has arrived, or everything waits for a static batch to end).
    Step next_step();
    /// Records that @p step ran: advances each request's cache and output, frees the slots of
    /// finished requests, and returns the ids of the requests that emitted a token, in order.
    std::vector<int> complete(const Step& step);

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
    long long kv_used() const;
    /// The positions the policies may plan with: kv_capacity, or paged, kv_capacity less one
    /// partly filled block per slot (block_size - 1 positions each), so that every plan fits
    /// in whole blocks.
    long long capacity() const { return capacity_; }
    /// Positions holding K and V once @p step has run (what it is about to run counted in):
    /// each position once, even in a block several requests share.
    /// @param step the step about to run (its items belong to running requests)
    long long kv_held(const Step& step) const;
    /// The paged cache (nullptr unless block_size > 0).
    const PagedCache* paged() const { return paged_ ? &*paged_ : nullptr; }
    /// Times request @p id was preempted so far.
    /// @param id a request id
    int preemptions_of(int id) const;
    /// Prompt positions of request @p id found in the prefix cache, over its admissions.
    /// @param id a request id
    long long prefix_hits_of(int id) const;
    /// Throws std::logic_error naming the broken invariant: every running request has its own
    /// slot and no free slot is used (no slot leaked or shared), the cache holds no more than
    /// its capacity, at most max_seqs run, no request has more output than it asked for, and
    /// the waiting queue is in arrival order except preempted requests at its front.
    void check_invariants() const;
    /// The limits.
    const SchedulerConfig& config() const { return config_; }

private:
    Step static_step();
    Step continuous_step();
    Step chunked_step();
    bool admit_front();                   // moves the first waiting request into a slot
    void preempt_newest();                // drops the newest running request's cache
    void make_room_for_decodes();         // preempts the newest until every decode fits in the cache
    Sequence* find(int id);
    bool fit_to_cache(Step& step);        // paged: starts admissions after their prefix hits; preempts until the step fits

    SchedulerConfig config_;
    std::deque<Sequence> waiting_;
    std::vector<Sequence> running_;
    std::vector<int> free_slots_;
    bool static_batch_open_ = true;       // static: the batch may still take requests
    int preemptions_ = 0;
    long long capacity_ = 0;
    std::optional<PagedCache> paged_;
    std::unordered_map<int, int> preempted_;        // preemptions per request
    std::unordered_map<int, long long> hits_;        // prefix-cache positions per request
};

/// Runs @p requests (sorted by arrival) through @p scheduler and @p executor on a simulated
/// clock: arrivals join at their time, each step takes the executor's time, a step's tokens
/// are emitted at its end, and the clock jumps to the next arrival when nothing can run. If
/// @p check is true, the scheduler's invariants are checked after every step.
Timeline run_engine(const std::vector<Request>& requests, Scheduler& scheduler, Executor& executor, bool check = false);

/// The timeline as JSON: policy; steps [{start_s, end_s, kv_used, running, items [{request, tokens, context,
/// prefill, emits, slot}]}]; requests [{id, arrival_s, prompt_tokens, output_tokens, preemptions,
/// token_s [...]}] (what `--timeline` writes, one object per policy).
nlohmann::json to_json(const Timeline& t);
/// The timeline that to_json() wrote. @throws std::invalid_argument naming a missing or bad field
Timeline timeline_from_json(const nlohmann::json& j);

}  // namespace pd::serving
