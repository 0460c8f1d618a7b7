#include "pd/serving/scheduler.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pd::serving {

std::string to_string(Policy p) {
    switch (p) {
        case Policy::static_batch: return "static";
        case Policy::continuous: return "continuous";
        case Policy::chunked: return "chunked";
    }
    return "?";
}

Policy policy_from(const std::string& name) {
    for (Policy p : {Policy::static_batch, Policy::continuous, Policy::chunked})
        if (to_string(p) == name) return p;
    throw std::invalid_argument("--policy " + name + ": not one of static, continuous, chunked");
}

std::string to_string(const Step& step) {
    std::ostringstream os;
    for (const BatchItem& i : step.items)
        os << "(" << i.request << " " << i.tokens << "@" << i.context << " " << (i.prefill ? "P" : "D")
           << (i.emits ? "!" : "") << ")";
    return os.str();
}

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config) {
    if (config_.token_budget < 1)
        throw std::invalid_argument("--token-budget must be >= 1, got " + std::to_string(config_.token_budget));
    if (config_.max_seqs < 1) throw std::invalid_argument("--max-seqs must be >= 1, got " + std::to_string(config_.max_seqs));
    if (config_.kv_capacity < 1)
        throw std::invalid_argument("the KV capacity must be >= 1 position, got " + std::to_string(config_.kv_capacity));
    // chunked never skips a running decode, so one step must hold a decode of every slot
    if (config_.policy == Policy::chunked && config_.token_budget < config_.max_seqs)
        throw std::invalid_argument("--token-budget (" + std::to_string(config_.token_budget) +
                                    ") must be >= --max-seqs (" + std::to_string(config_.max_seqs) +
                                    ") under chunked: every running request decodes in every step");
    for (int s = config_.max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);  // slot 0 handed out first
    capacity_ = config_.kv_capacity;
    if (config_.block_size > 0) {
        // [paged_capacity]
        // Paged: each running request holds at most one partly filled block, so planning with
        // block_size - 1 positions fewer per slot guarantees that every plan fits in whole blocks.
        const long long blocks = config_.kv_capacity / config_.block_size;
        capacity_ = blocks * config_.block_size - static_cast<long long>(config_.block_size - 1) * config_.max_seqs;
        // [paged_capacity]
        if (blocks < 1 || capacity_ < 1)
            throw std::invalid_argument("the paged cache of " + std::to_string(blocks) + " blocks of " +
                                        std::to_string(config_.block_size) + " positions cannot hold a partly filled "
                                        "block for each of --max-seqs " + std::to_string(config_.max_seqs) +
                                        " requests: raise the KV memory or lower --block-size");
        paged_.emplace(static_cast<int>(blocks), config_.block_size, config_.prefix_caching);
    } else if (config_.prefix_caching) {
        throw std::invalid_argument("--prefix-cache needs the paged cache (a block size)");
    }
}

int Scheduler::preemptions_of(int id) const {
    const auto it = preempted_.find(id);
    return it == preempted_.end() ? 0 : it->second;
}

long long Scheduler::prefix_hits_of(int id) const {
    const auto it = hits_.find(id);
    return it == hits_.end() ? 0 : it->second;
}

void Scheduler::arrive(const Request& r) {
    if (r.prompt_tokens < 1 || r.output_tokens < 1)
        throw std::invalid_argument("request " + std::to_string(r.id) + ": prompt and output must be >= 1 token");
    if (!r.prompt.empty() && static_cast<int>(r.prompt.size()) != r.prompt_tokens)
        throw std::invalid_argument("request " + std::to_string(r.id) + ": " + std::to_string(r.prompt.size()) +
                                    " prompt tokens given for a prompt of " + std::to_string(r.prompt_tokens));
    if (static_cast<long long>(r.prompt_tokens) + r.output_tokens > capacity_)
        throw std::invalid_argument("request " + std::to_string(r.id) + ": prompt + output = " +
                                    std::to_string(r.prompt_tokens + r.output_tokens) +
                                    " positions never fit in the cache's " + std::to_string(capacity_));
    waiting_.push_back(Sequence{.request = r});
}

long long Scheduler::kv_used() const {
    long long used = 0;
    for (const Sequence& s : running_) used += s.computed - s.prefix_hit;
    if (paged_) {  // the prefix blocks shared from the cache, each counted once
        std::set<int> shared;
        for (const Sequence& s : running_) {
            const std::vector<int>& t = paged_->table(s.request.id);
            for (int i = 0; i < s.prefix_hit / config_.block_size; ++i) shared.insert(t[static_cast<std::size_t>(i)]);
        }
        used += static_cast<long long>(shared.size()) * config_.block_size;
    }
    return used;
}

long long Scheduler::kv_held(const Step& step) const {
    std::unordered_map<int, int> adds;
    for (const BatchItem& i : step.items) adds[i.request] += i.tokens;
    const auto after = [&](const Sequence& s) {
        const auto it = adds.find(s.request.id);
        return static_cast<long long>(s.computed) + (it == adds.end() ? 0 : it->second);
    };
    long long held = 0;
    if (!paged_) {
        for (const Sequence& s : running_) held += after(s);
        return held;
    }
    // each block once, filled as far as the furthest of the requests that hold it
    std::unordered_map<int, long long> fill;
    const long long bs = config_.block_size;
    for (const Sequence& s : running_) {
        const std::vector<int>& t = paged_->table(s.request.id);
        const long long n = after(s);
        for (std::size_t i = 0; i < t.size() && static_cast<long long>(i) * bs < n; ++i) {
            long long& f = fill[t[i]];
            f = std::max(f, std::min(bs, n - static_cast<long long>(i) * bs));
        }
    }
    for (const auto& [block, f] : fill) held += f;
    return held;
}

// ---- admission, preemption -----------------------------------------------------------------

bool Scheduler::admit_front() {
    if (waiting_.empty() || free_slots_.empty()) return false;
    Sequence s = waiting_.front();
    waiting_.pop_front();
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    s.computed = 0;
    s.prefill_len = s.request.prompt_tokens + s.generated;  // after a preemption: recompute what it generated
    s.prefix_hit = 0;
    if (paged_) {  // the longest cached run of its prompt's blocks is already computed
        s.prefix_hit = paged_->match_prefix(s.request.id, s.request.prompt);
        s.computed = s.prefix_hit;
        hits_[s.request.id] += s.prefix_hit;
    }
    running_.push_back(s);
    return true;
}

void Scheduler::preempt_newest() {
    auto newest = std::max_element(running_.begin(), running_.end(),
                                   [](const Sequence& a, const Sequence& b) { return a.request.id < b.request.id; });
    Sequence s = *newest;
    running_.erase(newest);
    free_slots_.push_back(s.slot);
    s.slot = -1;
    s.computed = 0;
    s.prefill_len = 0;
    s.prefix_hit = 0;
    if (paged_) paged_->release(s.request.id);
    ++s.preemptions;
    ++preemptions_;
    ++preempted_[s.request.id];
    // back to the waiting queue, in arrival order: ahead of every request that arrived after it
    auto at = std::find_if(waiting_.begin(), waiting_.end(),
                           [&](const Sequence& w) { return w.request.id > s.request.id; });
    waiting_.insert(at, s);
}

void Scheduler::make_room_for_decodes() {
    const auto decoding = [this] {
        return static_cast<long long>(
            std::count_if(running_.begin(), running_.end(), [](const Sequence& s) { return !s.prefilling(); }));
    };
    while (!running_.empty() && kv_used() + decoding() > capacity_) preempt_newest();
}

// ---- the policies --------------------------------------------------------------------------

Step Scheduler::next_step() {
    Step step;
    switch (config_.policy) {
        case Policy::static_batch: step = static_step(); break;
        case Policy::continuous: step = continuous_step(); break;
        case Policy::chunked: step = chunked_step(); break;
    }
    if (paged_ && !fit_to_cache(step)) return next_step();  // it preempted every request of the step: plan again
    for (BatchItem& item : step.items) item.slot = find(item.request)->slot;  // where its cache lives
    return step;
}

/// The decode items of every running request that has finished its prefill.
static std::vector<BatchItem> decodes_of(const std::vector<Sequence>& running) {
    std::vector<BatchItem> items;
    for (const Sequence& s : running)
        if (!s.prefilling()) items.push_back({s.request.id, 1, s.computed, false, true});
    return items;
}

// [static_step]
Step Scheduler::static_step() {
    Step step;
    if (running_.empty()) {  // a new batch: every waiting request that fits, whole
        long long kv = 0;
        while (!waiting_.empty() && !free_slots_.empty()) {
            const Sequence& w = waiting_.front();
            const long long need = w.request.prompt_tokens + w.generated + 1;
            if (kv + need > capacity_ && kv > 0) break;
            kv += need;
            admit_front();
        }
    }
    if (std::any_of(running_.begin(), running_.end(), [](const Sequence& s) { return s.prefilling(); })) {
        for (const Sequence& s : running_)  // the batch's first step: every prompt, whole
            if (s.prefilling()) step.items.push_back({s.request.id, s.prefill_len, 0, true, true});
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
    // the running decodes pause for this step.
    long long kv = kv_used();
    int tokens = 0;
    while (!waiting_.empty() && !free_slots_.empty()) {
        const Sequence& w = waiting_.front();
        const int need = w.request.prompt_tokens + w.generated;
        if (tokens > 0 && tokens + need > config_.token_budget) break;
        if (kv + need > capacity_) break;  // no preemption to admit: it waits
        kv += need;
        tokens += need;
        admit_front();
        const Sequence& s = running_.back();
        step.items.push_back({s.request.id, s.prefill_len, 0, true, true});
    }
    if (!step.empty()) return step;
    // Otherwise one decode token for every running request.
    make_room_for_decodes();
    step.items = decodes_of(running_);
    return step;
}
// [continuous_step]

/// Throws std::logic_error naming what is wrong if @p plan is not a batch the scheduler can run:
/// an admission count past the waiting head, an item of a request that is neither running nor
/// admitted, a request twice, an item of no token or at the wrong context, or a step past the
/// budget or the free cache. (The lab's step builder is written by students.)
static void check_plan(const ChunkedPlan& plan, const std::vector<RunningRequest>& running,
                       const std::vector<WaitingRequest>& waiting, const StepRoom& room) {
    const auto fail = [](const std::string& what) { throw std::logic_error("build_chunked_step (lab 05): " + what); };
    if (plan.admitted < 0 || plan.admitted > static_cast<int>(waiting.size()))
        fail("admitted = " + std::to_string(plan.admitted) + ", but only " + std::to_string(waiting.size()) +
             " waiting requests can be (queue length, free slots)");
    std::map<int, int> context;  // request -> positions in its cache, for every request the step may name
    for (const RunningRequest& r : running) context[r.id] = r.computed;
    for (int i = 0; i < plan.admitted; ++i) context[waiting[static_cast<std::size_t>(i)].id] = 0;
    for (const BatchItem& item : plan.step.items) {
        const std::string who = "request " + std::to_string(item.request);
        const auto it = context.find(item.request);
        if (it == context.end()) fail(who + " is in the step but neither running nor admitted (or is in it twice)");
        if (item.tokens < 1) fail(who + " has " + std::to_string(item.tokens) + " tokens");
        if (item.context != it->second)
            fail(who + " is at context " + std::to_string(item.context) + " but holds " + std::to_string(it->second));
        context.erase(it);
    }
    if (plan.step.tokens() > room.token_budget || plan.step.tokens() > room.kv_free)
        fail("the step has " + std::to_string(plan.step.tokens()) + " tokens, past the budget (" +
             std::to_string(room.token_budget) + ") or the free cache (" + std::to_string(room.kv_free) + ")");
}

// [chunked_step]
Step Scheduler::chunked_step() {
    // Every running decode must fit in the cache: preempt the newest until they do.
    make_room_for_decodes();
    // The batch is the lab's decision (build_chunked_step, <lab tree>/05_batching), made on
    // copies of the queues; only the waiting queue's head can be admitted, one per free slot.
    std::vector<RunningRequest> running;
    for (const Sequence& s : running_) running.push_back({s.request.id, s.computed, s.prefill_len});
    std::vector<WaitingRequest> waiting;
    for (std::size_t i = 0; i < waiting_.size() && i < free_slots_.size(); ++i)
        waiting.push_back({waiting_[i].request.id, waiting_[i].request.prompt_tokens + waiting_[i].generated});
    const StepRoom room{config_.token_budget, static_cast<int>(free_slots_.size()), capacity_ - kv_used()};
    const ChunkedPlan plan = build_chunked_step(running, waiting, room);
    check_plan(plan, running, waiting, room);
    for (int i = 0; i < plan.admitted; ++i) admit_front();
    // Partial prefills can fill the cache with no decode left to run: drop the newest and
    // try again (one request alone always fits: arrive() checked it).
    if (plan.step.empty() && !running_.empty()) {
        preempt_newest();
        return chunked_step();
    }
    return plan.step;
}
// [chunked_step]

// ---- after a step --------------------------------------------------------------------------

Sequence* Scheduler::find(int id) {
    for (Sequence& s : running_)
        if (s.request.id == id) return &s;
    return nullptr;
}

// [fit_to_cache]
bool Scheduler::fit_to_cache(Step& step) {
    // A request admitted with a prefix hit starts its prefill after the hit: its first chunk
    // moves there (and shrinks if it would run past the prompt).
    for (BatchItem& item : step.items) {
        const Sequence* s = find(item.request);
        if (!item.prefill || item.context >= s->computed) continue;
        const int end = std::min(s->computed + item.tokens, s->prefill_len);
        item.context = s->computed;
        item.tokens = end - s->computed;
        item.emits = end == s->prefill_len;
    }
    // A hit on blocks no running request held takes them from the cache's free memory: if the
    // step no longer fits, the newest requests give theirs back (they will be recomputed).
    bool preempted = false;
    while (!step.empty() && kv_used() + step.tokens() > capacity_) {
        const int newest = std::max_element(running_.begin(), running_.end(), [](const Sequence& a, const Sequence& b) {
                               return a.request.id < b.request.id;
                           })->request.id;
        preempt_newest();
        preempted = true;
        std::erase_if(step.items, [newest](const BatchItem& i) { return i.request == newest; });
    }
    if (preempted && step.empty()) return false;
    // Blocks for every new position (the capacity rule guarantees them).
    for (const BatchItem& item : step.items)
        if (!paged_->grow(item.request, static_cast<long long>(item.context) + item.tokens))
            throw std::logic_error("paged cache: no block for request " + std::to_string(item.request) + " at position " +
                                   std::to_string(item.context + item.tokens - 1));
    return true;
}
// [fit_to_cache]

std::vector<int> Scheduler::complete(const Step& step) {
    std::vector<int> emitted;
    for (const BatchItem& item : step.items) {
        Sequence* s = find(item.request);
        if (!s) throw std::logic_error("complete: request " + std::to_string(item.request) + " is not running");
        if (item.context != s->computed)
            throw std::logic_error("complete: request " + std::to_string(item.request) + " ran at context " +
                                   std::to_string(item.context) + " but holds " + std::to_string(s->computed));
        s->computed += item.tokens;
        if (paged_) paged_->commit(item.request, s->request.prompt, s->computed);
        if (item.emits) {
            ++s->generated;
            emitted.push_back(item.request);
        }
    }
    // finished requests leave and free their slots
    for (auto it = running_.begin(); it != running_.end();) {
        if (it->generated == it->request.output_tokens) {
            free_slots_.push_back(it->slot);
            if (paged_) paged_->release(it->request.id);
            it = running_.erase(it);
        } else {
            ++it;
        }
    }
    return emitted;
}

void Scheduler::check_invariants() const {
    const auto fail = [](const std::string& what) { throw std::logic_error("scheduler invariant: " + what); };
    if (static_cast<int>(running_.size()) > config_.max_seqs) fail("more requests run than there are slots");
    std::vector<int> used(static_cast<std::size_t>(config_.max_seqs), 0);
    for (int s : free_slots_) {
        if (s < 0 || s >= config_.max_seqs) fail("free slot " + std::to_string(s) + " out of range");
        ++used[static_cast<std::size_t>(s)];
    }
    for (const Sequence& s : running_) {
        if (s.slot < 0 || s.slot >= config_.max_seqs) fail("request " + std::to_string(s.request.id) + " has no slot");
        ++used[static_cast<std::size_t>(s.slot)];
        if (s.generated > s.request.output_tokens) fail("request " + std::to_string(s.request.id) + " has too many tokens");
        if (s.computed > s.request.prompt_tokens + s.request.output_tokens)
            fail("request " + std::to_string(s.request.id) + " holds more positions than prompt + output");
    }
    for (std::size_t i = 0; i < used.size(); ++i)
        if (used[i] != 1) fail("slot " + std::to_string(i) + (used[i] ? " is shared or both free and used" : " leaked"));
    if (kv_used() > capacity_) fail("the cache holds more than its capacity");
    if (paged_) {
        paged_->check_invariants();
        for (const Sequence& s : running_)
            if (static_cast<long long>(paged_->table(s.request.id).size()) < paged_->blocks_for(s.computed))
                fail("request " + std::to_string(s.request.id) + " holds fewer blocks than its positions need");
        for (const Sequence& w : waiting_)
            if (!paged_->table(w.request.id).empty()) fail("waiting request " + std::to_string(w.request.id) + " holds blocks");
    }
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
        if (waiting_[i].slot != -1 || waiting_[i].computed != 0) fail("a waiting request holds cache");
        if (i > 0 && waiting_[i - 1].request.id > waiting_[i].request.id) fail("the waiting queue is out of arrival order");
    }
    for (const Sequence& r : running_)
        if (!waiting_.empty() && r.request.id > waiting_.front().request.id)
            fail("request " + std::to_string(r.request.id) + " runs while the earlier request " +
                 std::to_string(waiting_.front().request.id) + " waits (first come, first served)");
}

// ---- the engine ------------------------------------------------------------------------------

// [run_engine]
Timeline run_engine(const std::vector<Request>& requests, Scheduler& scheduler, Executor& executor, bool check) {
    Timeline t;
    t.policy = to_string(scheduler.config().policy);
    for (const Request& r : requests) {
        if (r.id != static_cast<int>(t.requests.size()))
            throw std::invalid_argument("run_engine: request ids must be 0, 1, 2, ... in arrival order");
        if (!t.requests.empty() && r.arrival_s < t.requests.back().request.arrival_s)
            throw std::invalid_argument("run_engine: requests must be sorted by arrival");
        t.requests.push_back({.request = r});
    }
    double clock = 0;
    std::size_t next = 0;  // the next request to arrive
    while (next < requests.size() || scheduler.has_work()) {
        while (next < requests.size() && requests[next].arrival_s <= clock) scheduler.arrive(requests[next++]);
        const Step step = scheduler.next_step();
        if (step.empty()) {
            if (next == requests.size())
                throw std::logic_error("run_engine: requests wait but no step can run (" + t.policy + ")");
            clock = std::max(clock, requests[next].arrival_s);  // idle until the next arrival
            continue;
        }
        const double start = clock;
        clock += executor.run(step);
        // the cache while the step runs: the running requests' positions, this step's included
        t.steps.push_back({start, clock, step, scheduler.kv_held(step),
                           static_cast<int>(scheduler.running().size()),
                           scheduler.paged() ? scheduler.paged()->used() : 0});
        for (int id : scheduler.complete(step)) t.requests[static_cast<std::size_t>(id)].token_s.push_back(clock);
        if (check) scheduler.check_invariants();
    }
    for (Timeline::RequestRecord& r : t.requests) {
        r.preemptions = scheduler.preemptions_of(r.request.id);
        r.prefix_hit = scheduler.prefix_hits_of(r.request.id);
    }
    return t;
}
// [run_engine]

// ---- the timeline as JSON -------------------------------------------------------------------

nlohmann::json to_json(const Timeline& t) {
    nlohmann::json steps = nlohmann::json::array(), requests = nlohmann::json::array();
    for (const Timeline::StepRecord& s : t.steps) {
        nlohmann::json items = nlohmann::json::array();
        for (const BatchItem& i : s.step.items)
            items.push_back({{"request", i.request}, {"tokens", i.tokens}, {"context", i.context},
                             {"prefill", i.prefill}, {"emits", i.emits}, {"slot", i.slot}});
        steps.push_back({{"start_s", s.start_s}, {"end_s", s.end_s}, {"kv_used", s.kv_used}, {"running", s.running},
                         {"kv_blocks", s.kv_blocks}, {"items", items}});
    }
    for (const Timeline::RequestRecord& r : t.requests)
        requests.push_back({{"id", r.request.id},
                            {"arrival_s", r.request.arrival_s},
                            {"prompt_tokens", r.request.prompt_tokens},
                            {"output_tokens", r.request.output_tokens},
                            {"preemptions", r.preemptions},
                            {"prefix_hit", r.prefix_hit},
                            {"token_s", r.token_s}});
    return {{"policy", t.policy}, {"steps", steps}, {"requests", requests}};
}

Timeline timeline_from_json(const nlohmann::json& j) {
    try {
        Timeline t;
        t.policy = j.at("policy").get<std::string>();
        for (const auto& s : j.at("steps")) {
            Timeline::StepRecord r{s.at("start_s").get<double>(), s.at("end_s").get<double>(), {},
                                   s.value("kv_used", 0LL), s.value("running", 0), s.value("kv_blocks", 0LL)};
            for (const auto& i : s.at("items"))
                r.step.items.push_back({i.at("request").get<int>(), i.at("tokens").get<int>(), i.at("context").get<int>(),
                                        i.at("prefill").get<bool>(), i.at("emits").get<bool>(), i.value("slot", -1)});
            t.steps.push_back(r);
        }
        for (const auto& r : j.at("requests")) {
            Timeline::RequestRecord rec;
            rec.request = {r.at("id").get<int>(), r.at("arrival_s").get<double>(), r.at("prompt_tokens").get<int>(),
                           r.at("output_tokens").get<int>()};
            rec.preemptions = r.at("preemptions").get<int>();
            rec.prefix_hit = r.value("prefix_hit", 0LL);
            rec.token_s = r.at("token_s").get<std::vector<double>>();
            t.requests.push_back(rec);
        }
        return t;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("timeline JSON: ") + e.what());
    }
}

}  // namespace pd::serving
