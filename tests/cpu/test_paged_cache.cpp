// Chapter 06's paged cache on the host: blocks handed out as sequences grow and given back,
// shared prefixes found by their chained hashes, unreferenced cached blocks evicted least
// recently used first; and the invariants (no block both free and used, reference counts equal
// the tables holding each block, nothing leaked) after every operation of seeded random runs.
#include "pd/rng.hpp"
#include "pd/serving/paged_cache.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <vector>

using Catch::Matchers::Contains;
using pd::serving::PagedCache;

namespace {

std::vector<int> tokens(int n, int first) {
    std::vector<int> t(static_cast<std::size_t>(n));
    std::iota(t.begin(), t.end(), first);
    return t;
}

}  // namespace

TEST_CASE("paged cache: blocks are handed out as a sequence grows and given back", "[paged_cache]") {
    PagedCache c(8, 16, false);
    CHECK(c.blocks_for(0) == 0);
    CHECK(c.blocks_for(1) == 1);
    CHECK(c.blocks_for(16) == 1);
    CHECK(c.blocks_for(17) == 2);
    REQUIRE(c.grow(0, 17));
    CHECK(c.table(0) == std::vector<int>{0, 1});
    REQUIRE(c.grow(0, 32));  // still two blocks
    CHECK(c.table(0).size() == 2);
    REQUIRE(c.grow(1, 5 * 16));
    CHECK(c.available() == 1);
    CHECK_FALSE(c.grow(2, 2 * 16));  // not enough: nothing changes
    CHECK(c.table(2).empty());
    CHECK(c.available() == 1);
    c.check_invariants();
    c.release(0);
    CHECK(c.available() == 3);
    CHECK(c.used() == 5);
    c.release(1);
    CHECK(c.used() == 0);
    CHECK(c.available() == 8);
    c.check_invariants();
}

TEST_CASE("paged cache: a prompt's full blocks are reused by the next prompt that starts the same", "[paged_cache]") {
    PagedCache c(16, 16, true);
    const std::vector<int> system = tokens(40, 1000);  // 2 full blocks and 8 tokens
    REQUIRE(c.grow(0, 40));
    c.commit(0, system, 40);
    CHECK(c.cached() == 2);
    const std::vector<int> a_blocks = c.table(0);
    c.release(0);  // the cached blocks stay, unreferenced
    CHECK(c.available() == 16);
    c.check_invariants();

    // B: the same 40 tokens, then its own question
    std::vector<int> b = system;
    for (int t : tokens(10, 5000)) b.push_back(t);
    CHECK(c.match_prefix(1, b) == 32);
    CHECK(c.table(1) == std::vector<int>{a_blocks[0], a_blocks[1]});
    CHECK(c.ref_count(a_blocks[0]) == 1);
    REQUIRE(c.grow(1, 50));
    c.check_invariants();
    // C shares them at the same time: reference counts 2
    CHECK(c.match_prefix(2, b) == 32);
    CHECK(c.ref_count(a_blocks[1]) == 2);
    c.check_invariants();

    SECTION("the last token is always computed: a prompt of exactly two blocks reuses one") {
        CHECK(c.match_prefix(3, std::span(system).first(32)) == 16);
    }
    SECTION("hashes are chained: the same second block after a different first one is no hit") {
        std::vector<int> d = tokens(16, 7);
        d.insert(d.end(), system.begin() + 16, system.end());
        CHECK(c.match_prefix(3, d) == 0);
        CHECK(c.table(3).empty());
    }
    SECTION("a different first token: no hit") {
        std::vector<int> e = b;
        e[0] = -5;
        CHECK(c.match_prefix(3, e) == 0);
    }
    c.check_invariants();
}

TEST_CASE("paged cache: unreferenced cached blocks are evicted least recently used first", "[paged_cache]") {
    PagedCache c(6, 4, true);
    const std::vector<int> p = tokens(9, 0), q = tokens(9, 100);  // 2 full blocks and 1 token each
    REQUIRE(c.grow(0, 9));
    c.commit(0, p, 9);
    c.release(0);  // p's two full blocks stay cached, its third is freed
    REQUIRE(c.grow(1, 9));
    c.commit(1, q, 9);
    c.release(1);  // now q's blocks are the most recent
    CHECK(c.cached() == 4);
    CHECK(c.available() == 6);
    c.check_invariants();
    // a sequence needing 4 blocks takes the 2 free ones, then evicts p's two (the oldest)
    REQUIRE(c.grow(2, 16));
    CHECK(c.evictions() == 2);
    CHECK(c.match_prefix(3, p) == 0);  // forgotten
    CHECK(c.match_prefix(4, q) == 8);  // kept
    c.check_invariants();
}

TEST_CASE("paged cache: the invariants hold after every operation of random runs", "[paged_cache]") {
    for (bool prefix : {false, true}) {
        for (int block_size : {1, 4, 16}) {
            INFO("prefix caching " << prefix << ", block size " << block_size);
            PagedCache c(40, block_size, prefix);
            pd::Rng rng(91 + block_size);
            // prompts drawn from three shared beginnings, so that prefixes repeat
            std::map<int, std::vector<int>> prompt;
            std::map<int, long long> held;
            int next = 0;
            for (int op = 0; op < 600; ++op) {
                const int what = rng.integer(0, 3);
                if (what == 0 || held.empty()) {  // a new sequence
                    const int id = next++;
                    std::vector<int> t = tokens(rng.integer(1, 3) * block_size * 2, 1000 * rng.integer(0, 2));
                    for (int x : tokens(rng.integer(1, 2 * block_size), 50000 + id * 100)) t.push_back(x);
                    const int hit = c.match_prefix(id, t);
                    CHECK(hit % block_size == 0);
                    CHECK(hit < static_cast<int>(t.size()));
                    prompt[id] = t;
                    held[id] = hit;
                } else {
                    auto it = held.begin();
                    std::advance(it, rng.integer(0, static_cast<int>(held.size()) - 1));
                    if (what == 1) {  // it grows, and what it computed is committed
                        const long long to = it->second + rng.integer(1, 3 * block_size);
                        if (c.grow(it->first, to)) {
                            it->second = to;
                            c.commit(it->first, prompt[it->first], to);
                        }
                    } else {  // it finishes or is preempted
                        c.release(it->first);
                        held.erase(it);
                    }
                }
                c.check_invariants();
                for (const auto& [id, n] : held) CHECK(static_cast<long long>(c.table(id).size()) >= c.blocks_for(n));
            }
            for (const auto& [id, n] : held) c.release(id);
            c.check_invariants();
            CHECK(c.used() == 0);  // nothing leaked
            CHECK(c.available() == 40);
        }
    }
}

TEST_CASE("paged cache: bad sizes are rejected by name", "[paged_cache]") {
    CHECK_THROWS_WITH(PagedCache(0, 16, false), Contains("PagedCache.num_blocks = 0 must be >= 1"));
    CHECK_THROWS_WITH(PagedCache(8, 0, false), Contains("PagedCache.block_size = 0 must be >= 1"));
    PagedCache c(4, 4, true);
    REQUIRE(c.grow(0, 4));
    CHECK_THROWS_WITH(c.match_prefix(0, tokens(9, 0)), Contains("already holds blocks"));
}
