// The scheduler (scheduler.hpp): a request arrives, waits, is admitted, runs and leaves. Each
// step is built in three moves: make room (preempt the newest until the running decodes fit),
// apply the policy (static, continuous or chunked), allocate (the block manager's blocks for
// every new position). Its configuration's checks and the bound on a step are in
// scheduler_config.cpp; the cache's accounting is the BlockManager's.
#include "pd/serving/scheduler.hpp"

#include "pd/serving/chunked_plan.hpp"
#include "pd/serving/chunked_step.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace pd::serving {

Scheduler::Scheduler(const SchedulerConfig& config) : config_(checked(config)), cache_(config_) {}

void Scheduler::arrive(const Request& r) {
    if (r.prompt_tokens < 1 || r.output_tokens < 1)
        throw std::invalid_argument("request " + std::to_string(r.id) + ": prompt and output must be >= 1 token");
    if (!r.prompt.empty() && static_cast<int>(r.prompt.size()) != r.prompt_tokens)
        throw std::invalid_argument("request " + std::to_string(r.id) + ": " + std::to_string(r.prompt.size()) +
                                    " prompt tokens given for a prompt of " + std::to_string(r.prompt_tokens));
    // so that one request alone always fits: the policies rely on it to make progress
    if (static_cast<long long>(r.prompt_tokens) + r.output_tokens > cache_.capacity())
        throw std::invalid_argument("request " + std::to_string(r.id) + ": prompt + output = " +
                                    std::to_string(static_cast<long long>(r.prompt_tokens) + r.output_tokens) +
                                    " positions never fit in the cache's " + std::to_string(cache_.capacity()));
    if (r.cached && (r.output_tokens < 2 || config_.block_size > 0))
        throw std::invalid_argument("request " + std::to_string(r.id) +
                                    ": a request that arrives with its cache needs an output of >= 2 tokens (its "
                                    "first came with the cache) and a cache of slots (SchedulerConfig.block_size = 0)");
    waiting_.push_back(Sequence{.request = r});
}

int Scheduler::preemptions_of(int id) const {
    const auto it = preempted_.find(id);
    return it == preempted_.end() ? 0 : it->second;
}

long long Scheduler::prefix_hits_of(int id) const {
    const auto it = hits_.find(id);
    return it == hits_.end() ? 0 : it->second;
}

// ---- one step: make room, plan, allocate ---------------------------------------------------

Step Scheduler::next_step() {
    // Make room and plan: each policy preempts before it plans decodes, and admits what its
    // plan takes, each admission starting after its prefix hit.
    Step step;
    switch (config_.policy) {
        case Policy::static_batch:
            step = static_step();
            break;
        case Policy::continuous:
            step = continuous_step();
            break;
        case Policy::chunked:
            step = chunked_step();
            break;
    }
    add_drafts(step);
    // Allocate: blocks for every new position (a plan within capacity() always finds them),
    // and each item's slot, where its cache lives.
    for (BatchItem& item : step.items) {
        cache_.append(item);
        item.slot = find(item.request)->slot;
    }
    return step;
}

// [add_drafts]
/// Chapter 09: the draft tokens request @p s may add to its decode in a step of @p decodes
/// decodes: what it asks, cut to the rule's limit for that batch and to its output left after
/// the step's token (no draft past the end).
int Scheduler::draft_of(const Sequence& s, int decodes) const {
    const int limit = decodes < static_cast<int>(config_.draft_limit.size())
                          ? config_.draft_limit[static_cast<std::size_t>(decodes)]
                          : std::numeric_limits<int>::max();
    return std::max(0, std::min({s.request.speculate, limit, s.request.output_tokens - s.generated - 1}));
}

/// Each decode of a request that speculates carries k = draft_of() draft tokens after its own, a
/// verify of k + 1 positions, as far as the token budget and the cache left after the plan
/// allow (the draft's positions are reserved in the cache for the step; complete() gives back
/// those not kept). Requests in the step's order.
void Scheduler::add_drafts(Step& step) const {
    const int decodes = static_cast<int>(
        std::count_if(step.items.begin(), step.items.end(), [](const BatchItem& i) { return !i.prefill; }));
    long long budget = config_.token_budget - step.tokens();
    long long cache = cache_.capacity() - cache_.used(running_) - step.tokens();
    for (BatchItem& item : step.items) {
        if (item.prefill) continue;
        const Sequence& s = running_[index_of(item.request)];
        const long long k = std::min<long long>({draft_of(s, decodes), budget, cache});
        if (k <= 0) continue;
        item.draft = static_cast<int>(k);
        item.tokens = item.logits = 1 + item.draft;
        budget -= k;
        cache -= k;
    }
}
// [add_drafts]

const Sequence& Scheduler::admit_front() {
    Sequence s = waiting_.front();
    waiting_.pop_front();
    cache_.allocate(s);                          // a slot, and its prefix hit counted as computed
    if (s.request.cached && s.generated == 0) {  // its prompt's positions came with it, and its first token
        s.computed = s.prefill_len = s.request.prompt_tokens;
        s.generated = 1;
    }
    hits_[s.request.id] += s.prefix_hit;
    running_.push_back(s);
    return running_.back();
}

int Scheduler::preempt_newest() {
    auto newest = std::max_element(running_.begin(), running_.end(),
                                   [](const Sequence& a, const Sequence& b) { return a.request.id < b.request.id; });
    Sequence s = *newest;
    running_.erase(newest);
    cache_.release(s);  // it keeps what it generated, and will compute its positions again
    ++s.preemptions;
    ++preemptions_;
    ++preempted_[s.request.id];
    // back to the waiting queue, in arrival order: ahead of every request that arrived after it
    auto at =
        std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence& w) { return w.request.id > s.request.id; });
    waiting_.insert(at, s);
    return s.request.id;
}

void Scheduler::make_room_for_decodes() {
    const auto decoding = [this] {
        return static_cast<long long>(
            std::count_if(running_.begin(), running_.end(), [](const Sequence& s) { return !s.prefilling(); }));
    };
    while (!running_.empty() && cache_.used(running_) + decoding() > cache_.capacity()) preempt_newest();
}

/// The decode items of every running request that has finished its prefill.
static std::vector<BatchItem> decodes_of(const std::vector<Sequence>& running) {
    std::vector<BatchItem> items;
    for (const Sequence& s : running)
        if (!s.prefilling()) items.push_back({s.request.id, 1, s.computed, false, true});
    return items;
}

/// The rest of @p s's prefill in one item: from its first position not computed (after its
/// prefix hit, when just admitted) to its end, which emits its next token.
static BatchItem rest_of_prefill(const Sequence& s) {
    return {s.request.id, s.prefill_len - s.computed, s.computed, true, true};
}

// ---- the policies --------------------------------------------------------------------------
// Admissions are planned with whole prefills, prefix hits included: an upper bound on what a
// request adds to the cache (its hit's blocks, shared or not, and what it computes), so a
// static or continuous step always fits.

// [static_step]
Step Scheduler::static_step() {
    Step step;
    if (running_.empty()) {  // a new batch: every waiting request that fits, whole
        long long kv = 0;
        while (!waiting_.empty()) {
            const Allocation a = cache_.can_allocate(waiting_.front());
            const long long need = a.prefill + 1;  // its prefill and its first decode
            if (!a.slot || (kv + need > cache_.capacity() && kv > 0)) break;
            kv += need;
            admit_front();
        }
    }
    if (std::any_of(running_.begin(), running_.end(), [](const Sequence& s) { return s.prefilling(); })) {
        for (const Sequence& s : running_)  // the batch's first step: every prompt, whole
            if (s.prefilling()) step.items.push_back(rest_of_prefill(s));
        return step;
    }
    make_room_for_decodes();
    step.items = decodes_of(running_);
    return step;
}
// [static_step]

// [continuous_step]
Step Scheduler::continuous_step() {
    Step step;
    // Waiting prompts first, whole, first come first served, up to the budget (at least one);
    // the running decodes pause for this step. A request that arrives with its cache brings no
    // prompt: it joins the decodes. With reserve_whole, each running request holds room for its
    // whole sequence.
    const auto whole = [](const Request& r) { return static_cast<long long>(r.prompt_tokens) + r.output_tokens; };
    long long kv = cache_.used(running_);
    if (config_.reserve_whole) {
        kv = 0;
        for (const Sequence& s : running_) kv += whole(s.request);
    }
    int tokens = 0;
    while (!waiting_.empty()) {
        const Allocation a = cache_.can_allocate(waiting_.front());
        if (!a.slot) break;
        const Sequence& w = waiting_.front();
        const bool cached = w.request.cached && w.generated == 0;  // as it arrived, not after a preemption
        const int prompt = cached ? 0 : a.prefill;
        const long long need = config_.reserve_whole ? whole(w.request) : a.prefill;
        if (tokens > 0 && tokens + prompt > config_.token_budget) break;
        if (kv + need > cache_.capacity()) break;  // no preemption to admit: it waits
        kv += need;
        tokens += prompt;
        const Sequence& s = admit_front();
        if (!cached) step.items.push_back(rest_of_prefill(s));
    }
    if (!step.empty()) return step;
    // Otherwise one decode token for every running request.
    make_room_for_decodes();
    step.items = decodes_of(running_);
    return step;
}
// [continuous_step]

// [chunked_step]
Step Scheduler::chunked_step() {
    for (;;) {
        // Every running decode must fit in the cache: preempt the newest until they do.
        make_room_for_decodes();
        // The batch is the lab's decision (build_chunked_step, <lab tree>/05_batching), made on
        // copies of the queues; only the waiting queue's head can be admitted, one per free slot.
        std::vector<RunningRequest> running;
        for (const Sequence& s : running_) running.push_back({s.request.id, s.computed, s.prefill_len});
        std::vector<WaitingRequest> waiting;
        for (std::size_t i = 0; i < waiting_.size() && static_cast<int>(i) < cache_.free_slots(); ++i)
            waiting.push_back({waiting_[i].request.id, cache_.can_allocate(waiting_[i]).prefill});
        // Chapter 09: the running decodes' draft tokens come before new prefill chunks (as vLLM
        // schedules running requests first): the lab plans with what they leave.
        long long drafts = 0, decodes = 0;
        for (const Sequence& s : running_) decodes += !s.prefilling();
        for (const Sequence& s : running_)
            if (!s.prefilling()) drafts += draft_of(s, static_cast<int>(decodes));
        drafts = std::max(0LL, std::min({drafts, config_.token_budget - decodes,
                                         cache_.capacity() - cache_.used(running_) - decodes}));
        const StepRoom room{static_cast<int>(config_.token_budget - drafts), cache_.free_slots(),
                            cache_.capacity() - cache_.used(running_) - drafts};
        ChunkedPlan plan = build_chunked_step(running, waiting, room);
        check_chunked_plan(plan, running, waiting, room);  // the lab's code is a student's
        // The lab plans a new request from position 0: admitted, its chunk starts after its
        // prefix hit instead, no longer than what is left of its prefill.
        for (int i = 0; i < plan.admitted; ++i) admit_front();
        for (BatchItem& item : plan.step.items) {
            const Sequence& s = *find(item.request);
            if (!item.prefill || item.context >= s.computed) continue;
            item.context = s.computed;
            item.tokens = std::min(item.tokens, s.prefill_len - s.computed);
            item.emits = item.context + item.tokens == s.prefill_len;
        }
        // A hit on blocks no running request held takes them from the free cache, which the
        // plan did not count: while the step does not fit, the newest admissions give theirs
        // back (preempted, they wait again at the front).
        while (!plan.step.empty() && cache_.used(running_) + plan.step.tokens() > cache_.capacity()) {
            const int newest = preempt_newest();
            std::erase_if(plan.step.items, [newest](const BatchItem& i) { return i.request == newest; });
        }
        if (!plan.step.empty() || running_.empty()) return plan.step;
        // Partial prefills fill the cache with no decode left to run: drop the newest and plan
        // again (one request alone always fits: arrive() checked it).
        preempt_newest();
    }
}
// [chunked_step]

// ---- after a step --------------------------------------------------------------------------

std::size_t Scheduler::index_of(int id) const {
    const std::size_t n = running_.size();
    for (std::size_t k = 0, i = next_find_ < n ? next_find_ : 0; k < n; ++k, i = i + 1 < n ? i + 1 : 0) {
        if (running_[i].request.id == id) {
            next_find_ = i + 1;
            return i;
        }
    }
    return n;
}

Sequence* Scheduler::find(int id) {
    const std::size_t i = index_of(id);
    return i < running_.size() ? &running_[i] : nullptr;
}

std::vector<int> Scheduler::complete(const Step& step) {
    return complete(step, {});
}

std::vector<int> Scheduler::complete(const Step& step, const std::vector<int>& accepted) {
    if (!accepted.empty() && accepted.size() != step.items.size())
        throw std::logic_error("complete: " + std::to_string(accepted.size()) + " accepted counts for " +
                               std::to_string(step.items.size()) + " items");
    std::vector<int> emitted;
    for (std::size_t i = 0; i < step.items.size(); ++i) {
        const BatchItem& item = step.items[i];
        Sequence* s = find(item.request);
        if (!s) throw std::logic_error("complete: request " + std::to_string(item.request) + " is not running");
        if (item.context != s->computed)
            throw std::logic_error("complete: request " + std::to_string(item.request) + " ran at context " +
                                   std::to_string(item.context) + " but holds " + std::to_string(s->computed));
        const int kept = accepted.empty() ? 0 : accepted[i];
        if (kept < 0 || kept > item.draft)
            throw std::logic_error("complete: request " + std::to_string(item.request) + " kept " +
                                   std::to_string(kept) + " of " + std::to_string(item.draft) + " draft tokens");
        // a speculative decode keeps its token and the accepted drafts; the rest are rolled back
        s->computed += item.tokens - (item.draft - kept);
        if (item.draft > 0) cache_.trim(*s);
        cache_.commit(*s);  // its full prompt blocks become cached prefixes
        if (item.emits) {
            for (int t = 0; t <= kept; ++t) emitted.push_back(item.request);
            s->generated += 1 + kept;
        }
    }
    // finished requests leave and give back their slots and blocks
    for (auto it = running_.begin(); it != running_.end();) {
        if (it->generated == it->request.output_tokens) {
            cache_.release(*it);
            it = running_.erase(it);
        } else {
            ++it;
        }
    }
    return emitted;
}

bool Scheduler::end_request(int id) {
    if (const auto w =
            std::find_if(waiting_.begin(), waiting_.end(), [id](const Sequence& s) { return s.request.id == id; });
        w != waiting_.end()) {
        waiting_.erase(w);  // a waiting request holds nothing (a preempted one gave its cache back)
        return true;
    }
    const std::size_t i = index_of(id);
    if (i == running_.size()) return false;
    cache_.release(running_[i]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    next_find_ = 0;
    return true;
}

void Scheduler::check_invariants() const {
    const auto fail = [](const std::string& what) { throw std::logic_error("scheduler invariant: " + what); };
    if (static_cast<int>(running_.size()) > config_.max_seqs) fail("more requests run than there are slots");
    for (const Sequence& s : running_) {
        if (s.generated > s.request.output_tokens)
            fail("request " + std::to_string(s.request.id) + " has too many tokens");
        if (s.computed > s.request.prompt_tokens + s.request.output_tokens)
            fail("request " + std::to_string(s.request.id) + " holds more positions than prompt + output");
    }
    cache_.check_invariants(running_, waiting_);
    if (const PagedCache* pages = cache_.paged())  // between steps: no reservation left (chapter 09's drafts)
        for (const Sequence& r : running_)
            if (static_cast<long long>(pages->table(r.request.id).size()) > pages->blocks_for(r.computed))
                fail("request " + std::to_string(r.request.id) +
                     " holds blocks past its positions (a draft's reservation not given back)");
    for (std::size_t i = 1; i < waiting_.size(); ++i)
        if (waiting_[i - 1].request.id > waiting_[i].request.id) fail("the waiting queue is out of arrival order");
    for (const Sequence& r : running_)
        if (!waiting_.empty() && r.request.id > waiting_.front().request.id)
            fail("request " + std::to_string(r.request.id) + " runs while the earlier request " +
                 std::to_string(waiting_.front().request.id) + " waits (first come, first served)");
}

}  // namespace pd::serving
