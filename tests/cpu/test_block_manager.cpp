// The scheduler's cache on its own: can_allocate() answers before anything is allocated (and
// changes nothing), allocate, append and release give back exactly what they took, and a
// prompt that starts like a cached one shares its blocks, as can_allocate() foresaw.
#include "pd/serving/block_manager.hpp"
#include "pd/serving/scheduler.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <stdexcept>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

/// A waiting request of @p prompt_tokens tokens; its ids are @p first, first + 1, ... (none
/// when @p first < 0: a prompt shared with no one).
sv::Sequence waiting(int id, int prompt_tokens, int output_tokens, int first = -1) {
    sv::Sequence s{.request = {.id = id, .prompt_tokens = prompt_tokens, .output_tokens = output_tokens}};
    if (first >= 0) {
        s.request.prompt.resize(static_cast<std::size_t>(prompt_tokens));
        std::iota(s.request.prompt.begin(), s.request.prompt.end(), first);
    }
    return s;
}

/// Runs @p s's whole prefill as one step: blocks for it, then its positions computed.
void prefill(sv::BlockManager& m, sv::Sequence& s) {
    m.append({s.request.id, s.prefill_len - s.computed, s.computed, true, true});
    s.computed = s.prefill_len;
    m.commit(s);
}

}  // namespace

TEST_CASE("block manager: slots, and what admitting a request takes, asked before it is admitted", "[block_manager]") {
    sv::BlockManager m({.max_seqs = 2, .kv_capacity = 100});
    CHECK(m.capacity() == 100);
    CHECK(m.paged() == nullptr);
    CHECK(m.free_slots() == 2);
    sv::Sequence a = waiting(0, 10, 5), b = waiting(1, 20, 5), c = waiting(2, 30, 5);
    c.generated = 3;  // preempted after 3 tokens: it recomputes them too
    const sv::Allocation ask = m.can_allocate(c);
    CHECK(ask.slot);
    CHECK(ask.prefill == 33);
    CHECK(ask.prefix_hit == 0);
    CHECK(ask.blocks == 0);
    CHECK(ask.computes() == 33);
    CHECK(m.free_slots() == 2);  // asking took nothing

    m.allocate(a);
    m.allocate(b);
    CHECK(a.slot == 0);  // slot 0 first
    CHECK(b.slot == 1);
    CHECK(a.prefill_len == 10);
    CHECK(a.computed == 0);
    CHECK(m.free_slots() == 0);
    CHECK_FALSE(m.can_allocate(c).slot);
    CHECK_THROWS_AS(m.allocate(c), std::logic_error);

    std::vector<sv::Sequence> running{a, b};
    prefill(m, running[0]);
    CHECK(m.used(running) == 10);
    sv::Step b_prefill;
    b_prefill.items.push_back({1, 20, 0, true, true});
    CHECK(m.held(running, b_prefill) == 30);  // b's prefill counted in
    m.check_invariants(running, {});

    m.release(running[1]);
    CHECK(running[1].slot == -1);
    CHECK(running[1].computed == 0);
    CHECK(m.free_slots() == 1);
    running.pop_back();
    m.check_invariants(running, {});
    m.release(running[0]);
    CHECK(m.free_slots() == 2);
    m.check_invariants({}, {});
}

TEST_CASE("block manager: allocate, append and release restore the free blocks", "[block_manager]") {
    // 10 blocks of 16; the policies plan with 160 - 15 x 2 = 130 positions
    sv::BlockManager m({.max_seqs = 2, .kv_capacity = 160, .block_size = 16});
    REQUIRE(m.paged() != nullptr);
    CHECK(m.capacity() == 130);
    CHECK(sv::BlockManager::capacity_of({.max_seqs = 2, .kv_capacity = 160, .block_size = 16}) == 130);
    const sv::PagedCache& cache = *m.paged();
    CHECK(cache.available() == 10);

    sv::Sequence s = waiting(0, 40, 8);
    const sv::Allocation ask = m.can_allocate(s);
    CHECK(ask.blocks == 3);  // 40 positions: 2 full blocks and a partly filled one
    CHECK(cache.available() == 10);
    m.allocate(s);
    std::vector<sv::Sequence> running{s};
    prefill(m, running[0]);
    CHECK(cache.used() == ask.blocks);
    CHECK(cache.available() == 10 - ask.blocks);
    CHECK(m.used(running) == 40);
    // 8 more positions fill the third block: no new block; a 9th takes a fourth
    m.append({0, 8, 40, true, true});
    CHECK(cache.used() == 3);
    m.append({0, 9, 40, true, true});
    CHECK(cache.used() == 4);
    m.check_invariants(running, {});

    m.release(running[0]);
    CHECK(cache.used() == 0);
    CHECK(cache.available() == 10);  // all back (nothing cached without prefix caching)
    CHECK(m.free_slots() == 2);
    m.check_invariants({}, {});
}

TEST_CASE("block manager: a prompt that starts like a cached one shares its blocks", "[block_manager]") {
    // 16 blocks of 4 positions, prefix caching on
    sv::BlockManager m({.max_seqs = 4, .kv_capacity = 64, .block_size = 4, .prefix_caching = true});
    const sv::PagedCache& cache = *m.paged();
    sv::Sequence a = waiting(0, 10, 4, 100);  // tokens 100 .. 109
    CHECK(m.can_allocate(a).prefix_hit == 0);
    m.allocate(a);
    std::vector<sv::Sequence> running{a};
    prefill(m, running[0]);  // blocks of 100..103 and 104..107 are cached now; 108, 109 partly fill a third
    REQUIRE(cache.used() == 3);

    // b's first 8 tokens are a's: it shares a's two full blocks and computes its last 2
    sv::Sequence b = waiting(1, 10, 4, 100);
    b.request.prompt[8] = 7;
    b.request.prompt[9] = 8;
    const sv::Allocation ask = m.can_allocate(b);
    CHECK(ask.prefix_hit == 8);
    CHECK(ask.computes() == 2);
    CHECK(ask.blocks == 1);                          // the shared blocks are held already: only its own last one
    CHECK(cache.ref_count(cache.table(0)[0]) == 1);  // asking took nothing
    m.allocate(b);
    CHECK(b.prefix_hit == ask.prefix_hit);
    CHECK(b.computed == 8);
    CHECK(cache.table(1)[0] == cache.table(0)[0]);
    CHECK(cache.table(1)[1] == cache.table(0)[1]);
    CHECK(cache.ref_count(cache.table(0)[0]) == 2);
    running.push_back(b);
    prefill(m, running[1]);
    CHECK(cache.used() == 3 + ask.blocks);
    // a computed its 10; b computed 2 past its hit and shares 2 blocks: counted once each
    CHECK(m.used(running) == 10 + 2 + 8);
    CHECK(m.held(running, {}) == 12);  // the positions themselves, each once
    m.check_invariants(running, {});

    // both leave; the two full blocks stay cached, idle, and a third request finds them
    m.release(running[1]);
    m.release(running[0]);
    running.clear();
    CHECK(cache.used() == 0);
    CHECK(cache.cached() == 2);
    CHECK(cache.available() == 16);
    sv::Sequence c = waiting(2, 10, 4, 100);
    const sv::Allocation again = m.can_allocate(c);
    CHECK(again.prefix_hit == 8);
    CHECK(again.blocks == 3);  // the 2 idle cached blocks leave the available ones, and 1 of its own
    m.allocate(c);
    running.push_back(c);
    prefill(m, running[0]);
    CHECK(cache.used() == again.blocks);
    CHECK(cache.available() == 16 - again.blocks);
    m.check_invariants(running, {});
}

TEST_CASE("block manager: caches it cannot plan with are rejected, naming the fields", "[block_manager]") {
    CHECK_THROWS_WITH(sv::BlockManager({.max_seqs = 64, .kv_capacity = 512, .block_size = 16}),
                      Contains("the paged cache of 32 blocks of 16 positions") &&
                          Contains("SchedulerConfig.max_seqs = 64 requests: raise SchedulerConfig.kv_capacity or lower "
                                   "SchedulerConfig.block_size"));
    CHECK_THROWS_WITH(sv::BlockManager::capacity_of({.max_seqs = 1, .kv_capacity = 8, .block_size = 16}),
                      Contains("the paged cache of 0 blocks of 16 positions"));
    CHECK_THROWS_WITH(sv::BlockManager({.kv_capacity = 512, .prefix_caching = true}),
                      Contains("SchedulerConfig.prefix_caching needs the paged cache "
                               "(SchedulerConfig.block_size > 0)"));
}
