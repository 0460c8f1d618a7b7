#include "pd/serving/paged_cache.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pd::serving {

PagedCache::PagedCache(int num_blocks, int block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching) {
    if (num_blocks < 1)
        throw std::invalid_argument("PagedCache.num_blocks = " + std::to_string(num_blocks) + " must be >= 1");
    if (block_size < 1)
        throw std::invalid_argument("PagedCache.block_size = " + std::to_string(block_size) + " must be >= 1");
    const auto n = static_cast<std::size_t>(num_blocks);
    ref_.assign(n, 0);
    lru_at_.assign(n, lru_.end());
    is_cached_.assign(n, false);
    hash_.assign(n, 0);
    tokens_.resize(n);
    for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

// [chain_hash]
/// The hash of a block: FNV-1a over the parent block's hash and this block's tokens, so it
/// names the whole prefix up to the block's end, not just its own tokens.
std::uint64_t PagedCache::chain_hash(std::uint64_t parent, std::span<const int> tokens) {
    std::uint64_t h = 0xcbf29ce484222325ull ^ parent;
    const auto mix = [&h](std::uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            h ^= (v >> (8 * i)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    };
    mix(parent);
    for (int t : tokens) mix(static_cast<std::uint32_t>(t));
    return h;
}
// [chain_hash]

const std::vector<int>& PagedCache::table(int seq) const {
    static const std::vector<int> none;
    const auto it = tables_.find(seq);
    return it == tables_.end() ? none : it->second;
}

int PagedCache::used() const {
    return static_cast<int>(std::count_if(ref_.begin(), ref_.end(), [](int r) { return r > 0; }));
}

int PagedCache::take_block() {
    if (!free_.empty()) {
        const int b = free_.back();
        free_.pop_back();
        return b;
    }
    if (lru_.empty()) return -1;
    const int b = lru_.front();  // evict the least recently used cached prefix
    lru_.pop_front();
    lru_at_[static_cast<std::size_t>(b)] = lru_.end();
    by_hash_.erase(hash_[static_cast<std::size_t>(b)]);
    is_cached_[static_cast<std::size_t>(b)] = false;
    tokens_[static_cast<std::size_t>(b)].clear();
    ++evictions_;
    return b;
}

// [match_prefix]
std::vector<int> PagedCache::cached_prefix(std::span<const int> prompt) const {
    std::vector<int> blocks;
    if (!prefix_caching_ || prompt.empty()) return blocks;
    std::uint64_t h = 0;
    // full blocks only, and never the last token: its logits must be computed
    const std::size_t full = (prompt.size() - 1) / static_cast<std::size_t>(block_size_);
    for (std::size_t i = 0; i < full; ++i) {
        const std::span<const int> tokens = prompt.subspan(i * block_size_, static_cast<std::size_t>(block_size_));
        h = chain_hash(h, tokens);
        const auto it = by_hash_.find(h);
        if (it == by_hash_.end()) break;
        const std::vector<int>& held = tokens_[static_cast<std::size_t>(it->second)];
        if (!std::equal(held.begin(), held.end(), tokens.begin(), tokens.end())) break;  // a hash collision
        blocks.push_back(it->second);
    }
    return blocks;
}

int PagedCache::match_prefix(int seq, std::span<const int> prompt) {
    if (!table(seq).empty())
        throw std::logic_error("match_prefix: sequence " + std::to_string(seq) + " already holds blocks");
    const std::vector<int> hit = cached_prefix(prompt);
    for (int b : hit)
        if (ref_[static_cast<std::size_t>(b)]++ == 0) {  // it was unreferenced: leaves the LRU list
            lru_.erase(lru_at_[static_cast<std::size_t>(b)]);
            lru_at_[static_cast<std::size_t>(b)] = lru_.end();
        }
    if (!hit.empty()) tables_[seq] = hit;
    return static_cast<int>(hit.size()) * block_size_;
}
// [match_prefix]

bool PagedCache::grow(int seq, long long positions) {
    const long long have = static_cast<long long>(table(seq).size());
    const long long need = blocks_for(positions) - have;
    if (need <= 0) return true;
    if (need > available()) return false;
    std::vector<int>& t = tables_[seq];
    for (long long i = 0; i < need; ++i) {
        const int b = take_block();
        ref_[static_cast<std::size_t>(b)] = 1;
        t.push_back(b);
    }
    return true;
}

void PagedCache::commit(int seq, std::span<const int> prompt, long long computed) {
    if (!prefix_caching_) return;
    const auto it = tables_.find(seq);
    if (it == tables_.end()) return;
    const std::vector<int>& t = it->second;
    const long long full = std::min<long long>(computed, static_cast<long long>(prompt.size())) / block_size_;
    std::uint64_t h = 0;
    for (long long i = 0; i < full && i < static_cast<long long>(t.size()); ++i) {
        const std::span<const int> tokens =
            prompt.subspan(static_cast<std::size_t>(i * block_size_), static_cast<std::size_t>(block_size_));
        h = chain_hash(h, tokens);
        const auto b = static_cast<std::size_t>(t[static_cast<std::size_t>(i)]);
        if (is_cached_[b] || by_hash_.count(h)) continue;  // cached already (here or in another block)
        is_cached_[b] = true;
        hash_[b] = h;
        tokens_[b].assign(tokens.begin(), tokens.end());
        by_hash_[h] = static_cast<int>(b);
    }
}

void PagedCache::release(int seq) {
    const auto it = tables_.find(seq);
    if (it == tables_.end()) return;
    for (int b : it->second) drop(b);
    tables_.erase(it);
}

void PagedCache::drop(int b) {
    const auto i = static_cast<std::size_t>(b);
    if (--ref_[i] > 0) return;
    if (is_cached_[i])
        lru_at_[i] = lru_.insert(lru_.end(), b);  // kept, most recently used
    else
        free_.push_back(b);
}

void PagedCache::shrink(int seq, long long positions) {
    const auto it = tables_.find(seq);
    if (it == tables_.end()) return;
    std::vector<int>& t = it->second;
    while (static_cast<long long>(t.size()) > blocks_for(positions)) {
        drop(t.back());
        t.pop_back();
    }
}

void PagedCache::check_invariants() const {
    const auto fail = [](const std::string& what) { throw std::logic_error("paged cache invariant: " + what); };
    std::vector<int> holders(ref_.size(), 0);
    for (const auto& [seq, t] : tables_)
        for (int b : t) {
            if (b < 0 || b >= num_blocks())
                fail("sequence " + std::to_string(seq) + " holds block " + std::to_string(b));
            ++holders[static_cast<std::size_t>(b)];
        }
    std::vector<int> free_count(ref_.size(), 0);
    for (int b : free_) ++free_count[static_cast<std::size_t>(b)];
    std::vector<int> lru_count(ref_.size(), 0);
    for (int b : lru_) ++lru_count[static_cast<std::size_t>(b)];
    for (std::size_t b = 0; b < ref_.size(); ++b) {
        const auto name = [b] { return "block " + std::to_string(b); };  // only for a message
        if (ref_[b] != holders[b])
            fail(name() + " has reference count " + std::to_string(ref_[b]) + " but " + std::to_string(holders[b]) +
                 " tables");
        if (free_count[b] > 1 || lru_count[b] > 1) fail(name() + " is listed twice");
        if (free_count[b] && (ref_[b] > 0 || is_cached_[b])) fail(name() + " is both free and used or cached");
        if (lru_count[b] != (is_cached_[b] && ref_[b] == 0 ? 1 : 0))
            fail(name() + (lru_count[b] ? " is in the LRU list but not an unreferenced cached block"
                                        : " is cached and unreferenced but not in the LRU list"));
        if (!free_count[b] && ref_[b] == 0 && !is_cached_[b]) fail(name() + " leaked: neither free, used nor cached");
        if (is_cached_[b]) {
            const auto it = by_hash_.find(hash_[b]);
            if (it == by_hash_.end() || it->second != static_cast<int>(b))
                fail(name() + " is cached under a hash that names another block");
        }
    }
    if (static_cast<int>(by_hash_.size()) != static_cast<int>(std::count(is_cached_.begin(), is_cached_.end(), true)))
        fail("the hash table and the cached blocks disagree");
}

}  // namespace pd::serving
