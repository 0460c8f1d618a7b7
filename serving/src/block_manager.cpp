#include "pd/serving/block_manager.hpp"

#include "pd/serving/scheduler.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

namespace pd::serving {

long long BlockManager::capacity_of(const SchedulerConfig& config) {
    if (config.block_size <= 0) {
        if (config.prefix_caching)
            throw std::invalid_argument(
                "SchedulerConfig.prefix_caching needs the paged cache (SchedulerConfig.block_size > 0)");
        return config.kv_capacity;
    }
    // [paged_capacity]
    // Paged: each running request holds at most one partly filled block, so planning with
    // block_size - 1 positions fewer per slot guarantees that every plan fits in whole blocks.
    const long long blocks = config.kv_capacity / config.block_size;
    const long long capacity =
        blocks * config.block_size - static_cast<long long>(config.block_size - 1) * config.max_seqs;
    // [paged_capacity]
    if (blocks < 1 || capacity < 1)
        throw std::invalid_argument("the paged cache of " + std::to_string(blocks) + " blocks of " +
                                    std::to_string(config.block_size) +
                                    " positions cannot hold a partly filled block "
                                    "for each of SchedulerConfig.max_seqs = " +
                                    std::to_string(config.max_seqs) +
                                    " requests: raise SchedulerConfig.kv_capacity or lower SchedulerConfig.block_size");
    return capacity;
}

BlockManager::BlockManager(const SchedulerConfig& config)
    : block_size_(std::max(config.block_size, 0)), slots_(config.max_seqs), capacity_(capacity_of(config)) {
    if (block_size_ > 0)
        paged_.emplace(static_cast<int>(config.kv_capacity / block_size_), block_size_, config.prefix_caching);
    for (int s = slots_ - 1; s >= 0; --s) free_slots_.push_back(s);  // slot 0 handed out first
}

long long BlockManager::used(const std::vector<Sequence>& running) const {
    long long used = 0;
    for (const Sequence& s : running) used += s.computed - s.prefix_hit;
    if (paged_) {  // the prefix blocks shared from the cache, each counted once (held()'s buffers)
        fill_.resize(static_cast<std::size_t>(paged_->num_blocks()), 0);
        touched_.clear();
        for (const Sequence& s : running) {
            const std::vector<int>& t = paged_->table(s.request.id);
            for (int i = 0; i < s.prefix_hit / block_size_; ++i) {
                long long& seen = fill_[static_cast<std::size_t>(t[static_cast<std::size_t>(i)])];
                if (seen == 0) touched_.push_back(t[static_cast<std::size_t>(i)]);
                seen = 1;
            }
        }
        for (int block : touched_) fill_[static_cast<std::size_t>(block)] = 0;
        used += static_cast<long long>(touched_.size()) * block_size_;
    }
    return used;
}

long long BlockManager::held(const std::vector<Sequence>& running, const Step& step) const {
    // (once per step of every replay: sorted vectors and reused buffers, no hash maps; a review
    // of 30,000 traced requests spent a third of its time here and in the allocator)
    std::vector<std::pair<int, long long>> adds;  // (request, tokens the step adds), by request
    adds.reserve(step.items.size());
    for (const BatchItem& i : step.items) adds.emplace_back(i.request, i.tokens);
    std::sort(adds.begin(), adds.end());
    const auto after = [&](const Sequence& s) {
        long long n = s.computed;
        for (auto it = std::lower_bound(adds.begin(), adds.end(), std::pair<int, long long>(s.request.id, LLONG_MIN));
             it != adds.end() && it->first == s.request.id; ++it)
            n += it->second;
        return n;
    };
    long long held = 0;
    if (!paged_ || !paged_->prefix_caching()) {  // no block shared: each request holds exactly its positions
        for (const Sequence& s : running) held += after(s);
        return held;
    }
    // each block once, filled as far as the furthest of the requests that hold it
    fill_.resize(static_cast<std::size_t>(paged_->num_blocks()), 0);
    touched_.clear();
    const long long bs = block_size_;
    for (const Sequence& s : running) {
        const std::vector<int>& t = paged_->table(s.request.id);
        const long long n = after(s);
        for (std::size_t i = 0; i < t.size() && static_cast<long long>(i) * bs < n; ++i) {
            long long& f = fill_[static_cast<std::size_t>(t[i])];
            if (f == 0) touched_.push_back(t[i]);
            f = std::max(f, std::min(bs, n - static_cast<long long>(i) * bs));
        }
    }
    for (int block : touched_) held += std::exchange(fill_[static_cast<std::size_t>(block)], 0);
    return held;
}

Allocation BlockManager::can_allocate(const Sequence& waiting) const {
    Allocation a;
    a.slot = !free_slots_.empty();
    a.prefill = waiting.request.prompt_tokens + waiting.generated;  // after a preemption: recompute what it generated
    if (!paged_) return a;
    const std::vector<int> hit = paged_->cached_prefix(waiting.request.prompt);
    a.prefix_hit = static_cast<int>(hit.size()) * block_size_;
    a.blocks = paged_->blocks_for(a.prefill) - static_cast<long long>(hit.size());
    for (int b : hit) a.blocks += paged_->ref_count(b) == 0 ? 1 : 0;  // an idle cached block stops being available
    return a;
}

void BlockManager::allocate(Sequence& seq) {
    if (free_slots_.empty())
        throw std::logic_error("allocate: no free slot for request " + std::to_string(seq.request.id));
    seq.slot = free_slots_.back();
    free_slots_.pop_back();
    seq.prefill_len = seq.request.prompt_tokens + seq.generated;
    // the longest cached run of its prompt's blocks is already computed
    seq.prefix_hit = paged_ ? paged_->match_prefix(seq.request.id, seq.request.prompt) : 0;
    seq.computed = seq.prefix_hit;
}

void BlockManager::append(const BatchItem& item) {
    if (paged_ && !paged_->grow(item.request, static_cast<long long>(item.context) + item.tokens))
        throw std::logic_error("paged cache: no block for request " + std::to_string(item.request) + " at position " +
                               std::to_string(item.context + item.tokens - 1));
}

void BlockManager::commit(const Sequence& seq) {
    if (paged_) paged_->commit(seq.request.id, seq.request.prompt, seq.computed);
}

void BlockManager::trim(const Sequence& seq) {
    if (paged_) paged_->shrink(seq.request.id, seq.computed);
}

void BlockManager::release(Sequence& seq) {
    free_slots_.push_back(seq.slot);
    if (paged_) paged_->release(seq.request.id);
    seq.slot = -1;
    seq.computed = 0;
    seq.prefill_len = 0;
    seq.prefix_hit = 0;
}

void BlockManager::check_invariants(const std::vector<Sequence>& running, const std::deque<Sequence>& waiting) const {
    const auto fail = [](const std::string& what) { throw std::logic_error("block manager invariant: " + what); };
    std::vector<int> used_slots(static_cast<std::size_t>(slots_), 0);
    for (int s : free_slots_) {
        if (s < 0 || s >= slots_) fail("free slot " + std::to_string(s) + " out of range");
        ++used_slots[static_cast<std::size_t>(s)];
    }
    for (const Sequence& s : running) {
        if (s.slot < 0 || s.slot >= slots_) fail("request " + std::to_string(s.request.id) + " has no slot");
        ++used_slots[static_cast<std::size_t>(s.slot)];
    }
    for (std::size_t i = 0; i < used_slots.size(); ++i)
        if (used_slots[i] != 1)
            fail("slot " + std::to_string(i) + (used_slots[i] ? " is shared or both free and used" : " leaked"));
    if (used(running) > capacity_) fail("the cache holds more than its capacity");
    for (const Sequence& w : waiting)
        if (w.slot != -1 || w.computed != 0) fail("waiting request " + std::to_string(w.request.id) + " holds cache");
    if (!paged_) return;
    paged_->check_invariants();
    for (const Sequence& s : running)
        if (static_cast<long long>(paged_->table(s.request.id).size()) < paged_->blocks_for(s.computed))
            fail("request " + std::to_string(s.request.id) + " holds fewer blocks than its positions need");
    for (const Sequence& w : waiting)
        if (!paged_->table(w.request.id).empty())
            fail("waiting request " + std::to_string(w.request.id) + " holds blocks");
}

}  // namespace pd::serving
