// Chapter 06's engine on the paged cache: the scheduler's invariants and the cache's (no block
// both free and used, reference counts equal to the tables, nothing leaked) after every step
// of seeded workloads under every policy, block size and prefix-cache setting, with a cache
// tight enough to force preemptions; and a shared system prompt computed once.
#include "pd/serving/engine.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/workload.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

/// A step costs a fixed time plus a time per token.
class FixedCost : public sv::Executor {
public:
    double run(const sv::Step& s) override { return 1e-3 + 1e-5 * s.tokens(); }
    std::string describe() const override { return "fixed cost"; }
};

long long prefill_tokens(const sv::Timeline& t) {
    long long n = 0;
    for (const auto& s : t.steps)
        for (const auto& i : s.step.items) n += i.prefill ? i.tokens : 0;
    return n;
}

}  // namespace

TEST_CASE("paged engine: the invariants hold after every step, and every request finishes", "[paged][scheduler]") {
    sv::WorkloadSpec w{.requests = 60, .rate = 400, .seed = 7};
    w.prompt = {.dist = sv::LengthDist::lognormal, .mean = 60, .spread = 1.0, .min = 1, .max = 400};
    w.output = {.dist = sv::LengthDist::lognormal, .mean = 20, .spread = 1.0, .min = 1, .max = 200};
    std::vector<sv::Request> requests = sv::poisson_workload(w);
    for (sv::Request& r : requests)  // prompts that share beginnings, so the prefix cache has hits
        for (int i = 0; i < r.prompt_tokens; ++i) r.prompt.push_back(i < 32 ? r.id % 3 : 1000 + r.id * 7 + i);
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        for (int bs : {1, 16})
            for (bool prefix : {false, true}) {
                INFO("policy " << sv::to_string(p) << ", block size " << bs << ", prefix cache " << prefix);
                // 2,000 positions: fewer than the workload wants at once, so requests wait and are preempted
                sv::Scheduler s({.policy = p,
                                 .token_budget = 128,
                                 .max_seqs = 16,
                                 .kv_capacity = 2000,
                                 .block_size = bs,
                                 .prefix_caching = prefix});
                FixedCost cost;
                const sv::Timeline t = sv::run_engine(requests, s, cost, true);
                for (const auto& r : t.requests) CHECK(static_cast<int>(r.token_s.size()) == r.request.output_tokens);
                REQUIRE(s.paged() != nullptr);
                CHECK(s.paged()->used() == 0);  // every block given back
                s.paged()->check_invariants();
                long long hits = 0;
                for (const auto& r : t.requests) hits += r.prefix_hit;
                CHECK((hits > 0) == (prefix && bs <= 32));
                for (const auto& step : t.steps) CHECK(step.kv_blocks * bs <= 2000);
            }
}

TEST_CASE("paged engine: a shared system prompt is computed once, the rest from the cache", "[paged][scheduler]") {
    // 20 requests, one every 10 ms: each arrives after the previous one's prompt is in the cache
    const std::vector<sv::Request> requests = sv::shared_prefix_scenario(
        {.requests = 20, .rate = 100, .burstiness = 1e3, .output = {.mean = 4}, .seed = 3}, 64, 8, 500);
    REQUIRE(requests[5].prompt.size() == 72);
    CHECK(std::equal(requests[0].prompt.begin(), requests[0].prompt.begin() + 64, requests[19].prompt.begin()));
    for (bool prefix : {false, true}) {
        sv::Scheduler s({.policy = sv::Policy::chunked,
                         .token_budget = 64,
                         .max_seqs = 8,
                         .kv_capacity = 4096,
                         .block_size = 16,
                         .prefix_caching = prefix});
        FixedCost cost;
        const sv::Timeline t = sv::run_engine(requests, s, cost, true);
        INFO("prefix cache " << prefix);
        if (!prefix) {
            CHECK(prefill_tokens(t) == 20 * 72);
        } else {
            // the first computes all 72; the others find the system prompt's 4 full blocks
            CHECK(t.requests[0].prefix_hit == 0);
            for (int i = 1; i < 20; ++i) CHECK(t.requests[static_cast<std::size_t>(i)].prefix_hit == 64);
            CHECK(prefill_tokens(t) == 72 + 19 * 8);
        }
    }
}

TEST_CASE("paged engine: limits it cannot meet are rejected by name", "[paged][scheduler]") {
    CHECK_THROWS_WITH(sv::Scheduler({.max_seqs = 64, .kv_capacity = 512, .block_size = 16}),
                      Contains("the paged cache of 32 blocks of 16 positions cannot hold a partly filled block for "
                               "each of SchedulerConfig.max_seqs = 64 requests: raise SchedulerConfig.kv_capacity or "
                               "lower SchedulerConfig.block_size"));
    CHECK_THROWS_WITH(sv::Scheduler({.kv_capacity = 512, .prefix_caching = true}),
                      Contains("SchedulerConfig.prefix_caching needs the paged cache "
                               "(SchedulerConfig.block_size > 0)"));
    sv::Scheduler s({.max_seqs = 4, .kv_capacity = 1024, .block_size = 16});
    CHECK(s.capacity() == 1024 - 15 * 4);
    sv::Request r{.id = 0, .prompt_tokens = 3, .output_tokens = 1, .prompt = {1, 2}};
    CHECK_THROWS_WITH(s.arrive(r), Contains("2 prompt tokens given for a prompt of 3"));
}
