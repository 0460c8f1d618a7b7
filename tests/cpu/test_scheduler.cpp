// Chapter 05's scheduler: the exact steps of hand-made queues under each policy, preemption
// and recomputation when the cache runs out, and the invariants after every step of seeded
// random workloads (the budget holds, no slot leaked or shared, the cache within capacity,
// first come first served, no running decode skipped under chunked, every request finishes
// with its full output); and max_step_tokens(), the bound on a step, against every step of
// seeded runs; and the check of a lab's chunked plan, each fault named.
#include "pd/rng.hpp"
#include "pd/serving/chunked_plan.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/timeline.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

/// A step costs a fixed time plus a time per token: enough to order events.
class FixedCost : public sv::Executor {
public:
    explicit FixedCost(double per_step = 1.0, double per_token = 0.0) : step_(per_step), token_(per_token) {}
    double run(const sv::Step& s) override { return step_ + token_ * s.tokens(); }
    std::string describe() const override { return "fixed cost"; }

private:
    double step_, token_;
};

/// Runs the scheduler by hand over @p requests (all arrived at t = 0) and returns each step as text.
std::vector<std::string> steps_of(sv::Scheduler& s, const std::vector<sv::Request>& requests) {
    for (const sv::Request& r : requests) s.arrive(r);
    std::vector<std::string> out;
    while (s.has_work()) {
        const sv::Step step = s.next_step();
        REQUIRE_FALSE(step.empty());
        out.push_back(sv::to_string(step));
        s.complete(step);
        s.check_invariants();
        REQUIRE(out.size() < 1000);
    }
    return out;
}

const std::vector<sv::Request> kTwo = {{0, 0.0, 5, 3}, {1, 0.0, 10, 2}};

}  // namespace

TEST_CASE("scheduler: chunked steps of a hand-made queue", "[scheduler]") {
    // budget 8: step 1 prefills r0 whole (5, its first token out) and the first 3 of r1's 10;
    // step 2 decodes r0 at context 5 and finishes r1's prompt (7 at context 3, first token
    // out); step 3 decodes both, and both are done (r0 has 3 tokens, r1 2).
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 8, .max_seqs = 4});
    CHECK(steps_of(s, kTwo) ==
          std::vector<std::string>{"(0 5@0 P!)(1 3@0 P)", "(0 1@5 D!)(1 7@3 P!)", "(0 1@6 D!)(1 1@10 D!)"});
}

TEST_CASE("scheduler: continuous steps of a hand-made queue", "[scheduler]") {
    // budget 8: r0's prompt (5) fits, r1's (10) does not join it; next step r1 alone (a prompt
    // longer than the budget still runs, whole) while r0's decode pauses; then both decode.
    sv::Scheduler s({.policy = sv::Policy::continuous, .token_budget = 8, .max_seqs = 4});
    CHECK(steps_of(s, kTwo) ==
          std::vector<std::string>{"(0 5@0 P!)", "(1 10@0 P!)", "(0 1@5 D!)(1 1@10 D!)", "(0 1@6 D!)"});
}

TEST_CASE("scheduler: static batching waits for the whole batch", "[scheduler]") {
    // r0 and r1 form a batch at t = 0; r2 arrives at 0.5 s and waits until the batch's last
    // request is done (3 steps of 1 s), then runs alone.
    sv::Scheduler s({.policy = sv::Policy::static_batch, .token_budget = 8, .max_seqs = 4});
    FixedCost exec(1.0);
    const sv::Timeline t = sv::run_engine({{0, 0.0, 5, 3}, {1, 0.0, 10, 2}, {2, 0.5, 2, 1}}, s, exec, true);
    REQUIRE(t.steps.size() == 4);
    CHECK(sv::to_string(t.steps[0].step) == "(0 5@0 P!)(1 10@0 P!)");
    CHECK(sv::to_string(t.steps[1].step) == "(0 1@5 D!)(1 1@10 D!)");
    CHECK(sv::to_string(t.steps[2].step) == "(0 1@6 D!)");
    CHECK(sv::to_string(t.steps[3].step) == "(2 2@0 P!)");
    CHECK(t.requests[2].token_s == std::vector<double>{4.0});  // arrived at 0.5, served in the 4th step
}

TEST_CASE("scheduler: requests that arrive with their cache decode at once, each reserving its whole sequence",
          "[scheduler]") {
    // Chapter 11's decode instance: r0 (prompt 4, 3 tokens, its first already out) and r1 (prompt
    // 6, 3 tokens) arrive with their caches; in a cache of 18 positions r0 reserves 7 and r1 9, so
    // both run, with no prefill; r2 (prompt 5, 4 tokens: 9) arrives at 0.5 s and waits for room
    // (7 + 9 + 9 = 25 > 18) although the positions in use after one step (5 + 7, and its 5: 17)
    // would have fit it, and joins when r0 and r1 finish. Without reserve_whole (chapter 05's rule)
    // it is admitted on those positions, preempted as the decodes grow, and recomputed later.
    const std::vector<sv::Request> arrivals{
        {.id = 0, .arrival_s = 0.0, .prompt_tokens = 4, .output_tokens = 3, .cached = true},
        {.id = 1, .arrival_s = 0.0, .prompt_tokens = 6, .output_tokens = 3, .cached = true},
        {.id = 2, .arrival_s = 0.5, .prompt_tokens = 5, .output_tokens = 4, .cached = true}};
    sv::Scheduler s({.policy = sv::Policy::continuous, .max_seqs = 4, .kv_capacity = 18, .reserve_whole = true});
    FixedCost exec(1.0);
    const sv::Timeline t = sv::run_engine(arrivals, s, exec, true);
    std::vector<std::string> steps;
    for (const auto& st : t.steps) steps.push_back(sv::to_string(st.step));
    CHECK(steps == std::vector<std::string>{"(0 1@4 D!)(1 1@6 D!)", "(0 1@5 D!)(1 1@7 D!)", "(2 1@5 D!)", "(2 1@6 D!)",
                                            "(2 1@7 D!)"});
    CHECK(t.requests[0].token_s == std::vector<double>{1.0, 2.0});  // the other two of its 3 tokens
    CHECK(t.requests[2].token_s == std::vector<double>{3.0, 4.0, 5.0});
    CHECK(t.steps[0].kv_used == 4 + 1 + 6 + 1);  // each request's cache with this step's token
    CHECK(s.preemptions() == 0);

    sv::Scheduler in_use({.policy = sv::Policy::continuous, .max_seqs = 4, .kv_capacity = 18});
    const sv::Timeline u = sv::run_engine(arrivals, in_use, exec, true);
    CHECK(u.requests[2].preemptions == 1);
    bool recomputed = false;  // its prompt and the token it came with, from position 0
    for (const auto& st : u.steps)
        for (const sv::BatchItem& i : st.step.items) recomputed |= i.request == 2 && i.prefill && i.tokens == 5 + 1;
    CHECK(recomputed);
    CHECK(u.requests[2].token_s.size() == 3);

    // what cannot be: a cached request with one token (it is done), or on pages; the rule under chunked
    sv::Scheduler slots({.policy = sv::Policy::continuous, .max_seqs = 4, .kv_capacity = 16});
    CHECK_THROWS_WITH(slots.arrive({.id = 0, .prompt_tokens = 4, .output_tokens = 1, .cached = true}),
                      Contains("needs an output of >= 2 tokens"));
    sv::Scheduler pages({.policy = sv::Policy::continuous, .max_seqs = 4, .kv_capacity = 64, .block_size = 4});
    CHECK_THROWS_WITH(pages.arrive({.id = 0, .prompt_tokens = 4, .output_tokens = 3, .cached = true}),
                      Contains("a cache of slots (SchedulerConfig.block_size = 0)"));
    CHECK_THROWS_WITH(sv::Scheduler({.policy = sv::Policy::chunked, .reserve_whole = true}),
                      Contains("SchedulerConfig.reserve_whole is a rule of continuous batching, not of chunked"));
}

TEST_CASE("scheduler: when the cache is full the newest request is preempted and recomputed", "[scheduler]") {
    // two requests of 4 + 6 positions in a cache of 12: both fit at first (8), but as they
    // decode they need 2 x 9 = 18 > 12, so r1 (the newest) is dropped, waits, and is prefilled
    // again with its prompt and the tokens it had made, after r0 finishes.
    for (sv::Policy p : {sv::Policy::chunked, sv::Policy::continuous, sv::Policy::static_batch}) {
        INFO(sv::to_string(p));
        sv::Scheduler s({.policy = p, .token_budget = 16, .max_seqs = 2, .kv_capacity = 12});
        FixedCost exec(1.0);
        const sv::Timeline t = sv::run_engine({{0, 0.0, 4, 6}, {1, 0.0, 4, 6}}, s, exec, true);
        CHECK(s.preemptions() >= 1);
        CHECK(t.requests[0].preemptions == 0);
        CHECK(t.requests[1].preemptions >= 1);
        CHECK(t.requests[0].token_s.size() == 6);
        CHECK(t.requests[1].token_s.size() == 6);
        bool recomputed = false;  // a prefill of r1 from position 0 longer than its prompt
        for (const auto& st : t.steps)
            for (const sv::BatchItem& i : st.step.items)
                recomputed |= i.request == 1 && i.prefill && i.context == 0 && i.tokens > 4;
        CHECK(recomputed);
    }
}

TEST_CASE("scheduler: invariants after every step of random workloads", "[scheduler]") {
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked}) {
        for (long long capacity : {100000LL, 600LL}) {  // roomy, and tight enough to preempt
            INFO(sv::to_string(p) << " capacity " << capacity);
            pd::Rng rng(77);
            std::vector<sv::Request> requests;
            double t = 0;
            for (int i = 0; i < 60; ++i) {
                t += rng.uniform(0.f, 0.6f);
                requests.push_back({i, t, rng.integer(1, 300), rng.integer(1, 40)});
            }
            const sv::SchedulerConfig cfg{.policy = p, .token_budget = 64, .max_seqs = 8, .kv_capacity = capacity};
            sv::Scheduler s(cfg);
            FixedCost exec(0.05, 0.001);
            std::size_t next = 0;
            double clock = 0;
            int steps = 0;
            while (next < requests.size() || s.has_work()) {
                while (next < requests.size() && requests[next].arrival_s <= clock) s.arrive(requests[next++]);
                std::set<int> decoding;  // running requests past their prefill: chunked must not skip them
                for (const sv::Sequence& q : s.running())
                    if (!q.prefilling()) decoding.insert(q.request.id);
                const sv::Step step = s.next_step();
                if (step.empty()) {
                    REQUIRE(next < requests.size());
                    clock = requests[next].arrival_s;
                    continue;
                }
                // the budget holds (continuous: a single prompt longer than the budget runs alone)
                if (p == sv::Policy::chunked) CHECK(step.tokens() <= cfg.token_budget);
                if (p == sv::Policy::continuous && step.items.size() > 1) CHECK(step.tokens() <= cfg.token_budget);
                std::set<int> in_step;
                for (const sv::BatchItem& i : step.items) CHECK(in_step.insert(i.request).second);  // once per step
                if (p == sv::Policy::chunked)
                    for (const sv::Sequence& q : s.running())
                        if (decoding.count(q.request.id)) CHECK(in_step.count(q.request.id) == 1);
                clock += exec.run(step);
                s.complete(step);
                s.check_invariants();
                REQUIRE(++steps < 100000);
            }
            if (capacity == 600) CHECK(s.preemptions() > 0);
            // and through run_engine: every request finishes with its full output, in time order
            sv::Scheduler again(cfg);
            const sv::Timeline tl = sv::run_engine(requests, again, exec, true);
            for (const auto& r : tl.requests) {
                CHECK(static_cast<int>(r.token_s.size()) == r.request.output_tokens);
                CHECK(r.token_s.front() > r.request.arrival_s);
                CHECK(std::is_sorted(r.token_s.begin(), r.token_s.end()));
            }
        }
    }
}

TEST_CASE("scheduler: bad limits and impossible requests are rejected, naming them", "[scheduler]") {
    REQUIRE_THROWS_WITH(sv::Scheduler({.token_budget = 0}), Contains("SchedulerConfig.token_budget = 0 must be >= 1"));
    REQUIRE_THROWS_WITH(sv::Scheduler({.max_seqs = 0}), Contains("SchedulerConfig.max_seqs = 0 must be >= 1"));
    REQUIRE_THROWS_WITH(sv::Scheduler({.kv_capacity = 0}),
                        Contains("SchedulerConfig.kv_capacity = 0 must be >= 1 position"));
    REQUIRE_THROWS_WITH(sv::Scheduler({.policy = sv::Policy::chunked, .token_budget = 8, .max_seqs = 16}),
                        Contains("SchedulerConfig.token_budget (8) must be >= SchedulerConfig.max_seqs (16) under "
                                 "chunked: every running request decodes in every step"));
    sv::Scheduler s({.kv_capacity = 100});
    REQUIRE_THROWS_WITH(s.arrive({3, 0.0, 90, 20}), Contains("request 3") && Contains("never fit"));
    REQUIRE_THROWS_WITH(sv::policy_from("fifo"),
                        Contains("SchedulerConfig.policy = fifo is not one of static, continuous, chunked"));
    FixedCost exec;
    sv::Scheduler t({});
    REQUIRE_THROWS_WITH(sv::run_engine({{1, 0.0, 5, 1}}, t, exec), Contains("ids must be 0, 1, 2"));
}

TEST_CASE("scheduler: a chunked plan that breaks the contract is refused, naming its fault", "[scheduler]") {
    // running: request 4 decoding at 30, request 7 prefilling at 8 of 20; waiting: 9 and 12
    const std::vector<sv::RunningRequest> running{{4, 30, 30}, {7, 8, 20}};
    const std::vector<sv::WaitingRequest> waiting{{9, 16}, {12, 5}};
    const sv::StepRoom room{.token_budget = 16, .free_slots = 2, .kv_free = 64};
    const auto plan = [](std::vector<sv::BatchItem> items, int admitted) {
        return sv::ChunkedPlan{.step = {.items = std::move(items)}, .admitted = admitted};
    };
    const sv::BatchItem decode{4, 1, 30, false, true}, chunk{7, 6, 8, true, false}, admit{9, 4, 0, true, false};
    sv::check_chunked_plan(plan({decode, chunk, admit}, 1), running, waiting, room);  // a valid plan passes
    sv::check_chunked_plan(plan({admit, chunk, decode}, 1), running, waiting, room);  // in any order
    const std::string lab = "build_chunked_step (lab 05): ";
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode}, 3), running, waiting, room),
                        Contains(lab + "admitted = 3, but only 2 waiting requests can be"));
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode, admit}, 0), running, waiting, room),
                        Contains(lab + "request 9 is in the step but neither running nor admitted"));
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode, {5, 1, 0, false, true}}, 0), running, waiting, room),
                        Contains(lab + "request 5 is in the step but neither running nor admitted"));
    REQUIRE_THROWS_WITH(
        sv::check_chunked_plan(plan({decode, chunk, decode}, 0), running, waiting, room),
        Contains(lab + "request 4 is in the step but neither running nor admitted (or is in it twice)"));
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode, {7, 0, 8, true, false}}, 0), running, waiting, room),
                        Contains(lab + "request 7 has 0 tokens"));
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode, {7, 6, 7, true, false}}, 0), running, waiting, room),
                        Contains(lab + "request 7 is at context 7 but holds 8"));
    REQUIRE_THROWS_WITH(
        sv::check_chunked_plan(plan({decode, {7, 12, 8, true, true}, admit}, 1), running, waiting, room),
        Contains(lab + "the step has 17 tokens, past the budget (16) or the free cache (64)"));
    REQUIRE_THROWS_WITH(sv::check_chunked_plan(plan({decode, chunk}, 0), running, waiting,
                                               {.token_budget = 16, .free_slots = 2, .kv_free = 6}),
                        Contains(lab + "the step has 7 tokens, past the budget (16) or the free cache (6)"));
}

TEST_CASE("scheduler: max_step_tokens of hand-made limits", "[scheduler]") {
    // kTwo: prompts 5 and 10, outputs 3 and 2, so prefills of at most 7 and 11 (after a preemption)
    CHECK(sv::max_step_tokens({.policy = sv::Policy::chunked, .token_budget = 8, .max_seqs = 4}, kTwo) == 8);
    CHECK(sv::max_step_tokens({.policy = sv::Policy::continuous, .token_budget = 8, .max_seqs = 4}, kTwo) == 11);
    CHECK(sv::max_step_tokens({.policy = sv::Policy::continuous, .token_budget = 32, .max_seqs = 4}, kTwo) == 18);
    CHECK(sv::max_step_tokens({.policy = sv::Policy::static_batch, .token_budget = 8, .max_seqs = 4}, kTwo) == 18);
    CHECK(sv::max_step_tokens({.policy = sv::Policy::static_batch, .token_budget = 8, .max_seqs = 1}, kTwo) == 11);
    CHECK(sv::max_step_tokens({.policy = sv::Policy::static_batch, .max_seqs = 4, .kv_capacity = 16}, kTwo) == 16);
    // paged: the capacity the policies plan with, 3 blocks of 8 less 7 for each of 2 slots
    const std::vector<sv::Request> two_short = {{0, 0.0, 6, 2}, {1, 0.0, 6, 2}};
    CHECK(sv::max_step_tokens({.policy = sv::Policy::static_batch, .max_seqs = 2, .kv_capacity = 24, .block_size = 8},
                              two_short) == 10);
    CHECK(sv::max_step_tokens({}, {}) == 0);
    CHECK_THROWS_WITH(sv::max_step_tokens({.token_budget = 0}, kTwo), Contains("SchedulerConfig.token_budget = 0"));
}

TEST_CASE("scheduler: max_step_tokens bounds every step, and chunked fills its budget", "[scheduler]") {
    // Seeded workloads, dense enough to queue: short prompts with long outputs, and long prompts
    // (up to 1,500 tokens) with short outputs; some prompts share their first 64 tokens.
    std::vector<std::vector<sv::Request>> workloads;
    pd::Rng rng(21);
    for (const auto& [max_prompt, max_output] : {std::pair{60, 80}, std::pair{1500, 20}}) {
        std::vector<sv::Request> requests;
        double t = 0;
        for (int i = 0; i < 40; ++i) {
            t += rng.uniform(0.f, 0.02f);
            sv::Request r{i, t, rng.integer(1, max_prompt), rng.integer(1, max_output)};
            for (int k = 0; k < r.prompt_tokens; ++k) r.prompt.push_back(k < 64 ? i % 2 : 1000 + i * 3 + k);
            requests.push_back(r);
        }
        workloads.push_back(requests);
    }
    struct Cache {
        int block_size;
        bool prefix_caching;
        bool tight;  // a cache that the workload overfills: requests are preempted
    };
    const Cache caches[] = {{0, false, false}, {0, false, true}, {16, true, true}, {1, true, true}};
    const long long tight_capacity[] = {800, 2000};
    int preemptions = 0;
    for (std::size_t w = 0; w < workloads.size(); ++w)
        for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
            for (const Cache& c : caches) {
                const sv::SchedulerConfig cfg{.policy = p,
                                              .token_budget = 128,
                                              .max_seqs = 16,
                                              .kv_capacity = c.tight ? tight_capacity[w] : 1 << 20,
                                              .block_size = c.block_size,
                                              .prefix_caching = c.prefix_caching};
                const long long bound = sv::max_step_tokens(cfg, workloads[w]);
                INFO("workload " << w << ", " << sv::to_string(p) << ", capacity " << cfg.kv_capacity << ", block size "
                                 << c.block_size << ": bound " << bound);
                sv::Scheduler s(cfg);
                FixedCost exec(0.01, 1e-5);
                const sv::Timeline t = sv::run_engine(workloads[w], s, exec, true);
                int most = 0;
                for (const auto& step : t.steps) {
                    CHECK(step.step.tokens() <= bound);
                    most = std::max(most, step.step.tokens());
                }
                if (c.tight) preemptions += s.preemptions();
                if (p == sv::Policy::chunked) {
                    CHECK(bound == cfg.token_budget);
                    if (w == 1) CHECK(most == cfg.token_budget);  // long prompts fill the budget
                }
                if (p == sv::Policy::continuous && w == 1) CHECK(most >= bound - 20);  // the longest prompt, whole
            }
    CHECK(preemptions > 0);
}

TEST_CASE(
    "scheduler: speculative decodes carry drafts within the budget, the cache and the rule, and give back what "
    "was rejected",
    "[scheduler][speculative]") {
    // 24 requests, half of them speculating 4 tokens; the cost model's oracle keeps a draft token
    // with probability 0.5; the rule allows 4 draft tokens with up to 2 decodes, 1 with 3 to 5, none above
    std::vector<sv::Request> requests;
    pd::Rng rng(20261204);
    for (int i = 0; i < 24; ++i)
        requests.push_back({.id = i,
                            .arrival_s = 0,  // all at once: full batches and cache pressure
                            .prompt_tokens = rng.integer(3, 40),
                            .output_tokens = rng.integer(1, 30),
                            .speculate = i % 2 == 0 ? 4 : 0});
    const std::vector<int> rule = {0, 4, 4, 1, 1, 1};
    sv::CostModelConfig cc = sv::cost_model_config(*pd::find_model("tiny"), *pd::roofline::find_gpu("H100-SXM"), 1);
    cc.accept_rate = 0.5;
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        for (int block : {0, 4}) {
            INFO("policy " << sv::to_string(p) << ", block size " << block);
            // 80 positions for 6 slots: preemptions
            const sv::SchedulerConfig cfg{.policy = p,
                                          .token_budget = 24,
                                          .max_seqs = 6,
                                          .kv_capacity = 80,
                                          .block_size = block,
                                          .draft_limit = rule};
            sv::Scheduler s(cfg);
            sv::CostModel exec(cc);
            std::size_t next = 0;
            double clock = 0;
            long long drafted = 0, kept = 0, tokens = 0;
            std::vector<int> out(requests.size(), 0);
            while (next < requests.size() || s.has_work()) {
                while (next < requests.size() && requests[next].arrival_s <= clock) s.arrive(requests[next++]);
                const sv::Step step = s.next_step();
                if (step.empty()) {
                    REQUIRE(next < requests.size());
                    clock = requests[next].arrival_s;
                    continue;
                }
                if (p == sv::Policy::chunked) CHECK(step.tokens() <= cfg.token_budget);
                int decodes = 0;
                for (const sv::BatchItem& i : step.items) decodes += !i.prefill;
                for (const sv::BatchItem& i : step.items) {
                    if (i.draft == 0) continue;
                    CHECK(requests[std::size_t(i.request)].speculate > 0);
                    CHECK(i.draft <= std::min(4, decodes < 6 ? rule[std::size_t(decodes)] : 4));
                    CHECK(i.tokens == 1 + i.draft);
                    CHECK(i.logits == i.tokens);
                    drafted += i.draft;
                }
                clock += exec.run(step);
                const std::vector<int> acc = exec.accepted();
                for (std::size_t i = 0; i < acc.size(); ++i) kept += acc[i];
                for (int id : s.complete(step, acc)) ++out[std::size_t(id)], ++tokens;
                s.check_invariants();  // paged: no block kept past a request's positions
                REQUIRE(tokens < 100000);
            }
            for (const sv::Request& r : requests) CHECK(out[std::size_t(r.id)] == r.output_tokens);
            INFO(drafted << " draft tokens, " << kept << " kept");
            CHECK(drafted > 0);
            CHECK(kept > 0);
            CHECK(kept < drafted);
            if (p == sv::Policy::continuous) CHECK(s.preemptions() > 0);  // prefills first: decodes overflow
            // and through run_engine: every request gets its whole output, in time order
            sv::Scheduler again(cfg);
            const sv::Timeline tl = sv::run_engine(requests, again, exec, true);
            for (const auto& r : tl.requests) {
                CHECK(static_cast<int>(r.token_s.size()) == r.request.output_tokens);
                CHECK(std::is_sorted(r.token_s.begin(), r.token_s.end()));
            }
        }
    // a kept count outside the draft is refused
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 16, .max_seqs = 2});
    s.arrive({.id = 0, .prompt_tokens = 3, .output_tokens = 8, .speculate = 2});
    s.complete(s.next_step());  // the prefill
    const sv::Step step = s.next_step();
    REQUIRE(step.items.size() == 1);
    CHECK(step.items[0].draft == 2);
    CHECK_THROWS_WITH(s.complete(step, {3}), Contains("kept 3 of 2 draft tokens"));
}

TEST_CASE("scheduler: the cost model's rule drafts while verifying gains over plain decoding",
          "[scheduler][speculative]") {
    // llama-3-8b on an H200 at a 1,024-token context: a verify of 5 tokens costs a decode step up to
    // dozens of decodes (the weights dominate); at a = 0.8 the rule drafts k = 4 there
    sv::CostModelConfig cc = sv::cost_model_config(*pd::find_model("llama-3-8b"), *pd::roofline::find_gpu("H200"), 1);
    const std::vector<int> limits = sv::speculation_limits(sv::CostModel(cc), 4, 1024, 64);
    REQUIRE(limits.size() == 65);
    CHECK(limits[1] == 4);
    CHECK(limits[16] == 4);
    // a hopeless proposer (a = 0.01) on a compute-bound step gains nothing: no draft
    cc.accept_rate = 0.01;
    cc.bandwidth_efficiency = 1;
    cc.compute_efficiency = 0.001;  // a machine whose arithmetic is scarce: every extra token costs
    const std::vector<int> none = sv::speculation_limits(sv::CostModel(cc), 4, 1024, 8);
    for (int B = 1; B <= 8; ++B) CHECK(none[std::size_t(B)] == 0);
}
