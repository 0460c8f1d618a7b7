// Lab 05: the step builder of the chunked policy (build_chunked_step, in
// <lab tree>/05_batching/chunked_step.cpp): hand-made running and waiting queues, each with the
// exact batch it must produce (decodes first, then the prefills in progress, then admissions,
// cut by the token budget, the free slots and the free cache), and the scheduler running the
// builder over a whole queue.
#include "pd/rng.hpp"
#include "pd/serving/chunked_step.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/scheduler.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace sv = pd::serving;

namespace {

constexpr const char* kWhere = "lab 05: build_chunked_step in <lab tree>/05_batching/chunked_step.cpp";

/// The queues and the room as text, for the failure message.
std::string describe(const std::vector<sv::RunningRequest>& running, const std::vector<sv::WaitingRequest>& waiting,
                     const sv::StepRoom& room) {
    std::ostringstream os;
    os << "running (id computed/prefill_len):";
    for (const sv::RunningRequest& r : running) os << " " << r.id << " " << r.computed << "/" << r.prefill_len;
    os << "; waiting (id prefill_len):";
    for (const sv::WaitingRequest& w : waiting) os << " " << w.id << " " << w.prefill_len;
    os << "; budget " << room.token_budget << ", free slots " << room.free_slots << ", free cache " << room.kv_free;
    return os.str();
}

/// Builds the step and compares it with @p step, written as sv::to_string() writes it
/// ("(request tokens@context P|D)", "!" when the item emits), and the admissions with @p admitted.
void check_step(const std::vector<sv::RunningRequest>& running, const std::vector<sv::WaitingRequest>& waiting,
                const sv::StepRoom& room, const std::string& step, int admitted) {
    INFO(kWhere);
    INFO(describe(running, waiting, room));
    const sv::ChunkedPlan plan = sv::build_chunked_step(running, waiting, room);
    CHECK(sv::to_string(plan.step) == step);
    CHECK(plan.admitted == admitted);
}

}  // namespace

TEST_CASE("lab05: only decodes, one token each at its context", "[lab05]") {
    // every request has finished its prefill (computed >= prefill_len): one decode each, in
    // admission order, and nothing waits
    check_step({{0, 5, 5}, {1, 12, 10}, {2, 7, 7}}, {}, {.token_budget = 8, .free_slots = 1, .kv_free = 100},
               "(0 1@5 D!)(1 1@12 D!)(2 1@7 D!)", 0);
}

TEST_CASE("lab05: decodes first, then the prefills in progress cut to the budget", "[lab05]") {
    // budget 6: the two decodes (requests 0 and 2) take 2, request 1 gets 4 of its 7
    // remaining prompt tokens (no token out yet), and the waiting request finds no budget left
    check_step({{0, 6, 5}, {1, 3, 10}, {2, 4, 4}}, {{3, 5}}, {.token_budget = 6, .free_slots = 1, .kv_free = 100},
               "(0 1@6 D!)(2 1@4 D!)(1 4@3 P)", 0);
    // three prefills in progress, in admission order: the first completes, the second is cut,
    // the third waits for the next step
    check_step({{0, 1, 6}, {1, 2, 9}, {2, 1, 5}}, {}, {.token_budget = 8, .free_slots = 0, .kv_free = 100},
               "(0 5@1 P!)(1 3@2 P)", 0);
}

TEST_CASE("lab05: decodes that use the whole budget leave no room for prefills", "[lab05]") {
    // budget 4, four decodes: request 4's prefill in progress and the waiting request 5 wait
    check_step({{0, 3, 3}, {1, 9, 8}, {2, 4, 2}, {3, 6, 6}, {4, 2, 7}}, {{5, 3}},
               {.token_budget = 4, .free_slots = 3, .kv_free = 100}, "(0 1@3 D!)(1 1@9 D!)(2 1@4 D!)(3 1@6 D!)", 0);
}

TEST_CASE("lab05: new requests are admitted first come first served, the last one chunked", "[lab05]") {
    // budget 10: the decode takes 1, requests 1 (3) and 2 (4) are admitted whole and emit,
    // request 3 gets the last 2 of its 6 and does not emit; request 4 stays in the queue
    check_step({{0, 5, 5}}, {{1, 3}, {2, 4}, {3, 6}, {4, 2}}, {.token_budget = 10, .free_slots = 4, .kv_free = 100},
               "(0 1@5 D!)(1 3@0 P!)(2 4@0 P!)(3 2@0 P)", 3);
    // nothing runs yet: a prompt longer than the budget is admitted as its first chunk
    check_step({}, {{0, 20}, {1, 2}}, {.token_budget = 8, .free_slots = 2, .kv_free = 100}, "(0 8@0 P)", 1);
}

TEST_CASE("lab05: no admission past the free slots", "[lab05]") {
    // one free slot: only the head of the queue is admitted, though budget and cache remain
    check_step({{0, 2, 6}}, {{1, 3}, {2, 3}}, {.token_budget = 20, .free_slots = 1, .kv_free = 100},
               "(0 4@2 P!)(1 3@0 P!)", 1);
    // no free slot: the prefill in progress continues, nobody is admitted
    check_step({{0, 2, 6}}, {{1, 3}, {2, 3}}, {.token_budget = 20, .free_slots = 0, .kv_free = 100}, "(0 4@2 P!)", 0);
}

TEST_CASE("lab05: chunks are cut to the free cache, decodes included", "[lab05]") {
    // 4 free positions: the decode takes 1, request 1's prefill gets the other 3 of its 6,
    // and nothing is admitted though budget and a slot remain
    check_step({{0, 10, 10}, {1, 2, 8}}, {{2, 5}}, {.token_budget = 32, .free_slots = 2, .kv_free = 4},
               "(0 1@10 D!)(1 3@2 P)", 0);
    // 5 free positions: after the decode, the admitted request's chunk is 4 of its 8
    check_step({{0, 10, 10}}, {{1, 8}}, {.token_budget = 32, .free_slots = 2, .kv_free = 5}, "(0 1@10 D!)(1 4@0 P)", 1);
}

TEST_CASE("lab05: a prefill that completes exactly on the budget emits", "[lab05]") {
    // request 0 has 6 prompt tokens left and the budget is 6: the chunk completes it and emits
    check_step({{0, 4, 10}}, {{1, 6}}, {.token_budget = 6, .free_slots = 1, .kv_free = 100}, "(0 6@4 P!)", 0);
    // one token short: no emit
    check_step({{0, 4, 10}}, {}, {.token_budget = 5, .free_slots = 1, .kv_free = 100}, "(0 5@4 P)", 0);
    // an admitted prompt that fills exactly what is left of the budget emits too
    check_step({{0, 4, 10}}, {{1, 6}}, {.token_budget = 12, .free_slots = 1, .kv_free = 100}, "(0 6@4 P!)(1 6@0 P!)",
               1);
}

TEST_CASE("lab05: a request recomputed after a preemption prefills its prompt and its tokens", "[lab05]") {
    // request 1 (prompt 6) had generated 3 tokens when it was preempted: it is prefilled anew
    // over 9 positions, and emits its 4th token only when all 9 are in its cache
    check_step({{0, 7, 5}}, {{1, 9}}, {.token_budget = 8, .free_slots = 1, .kv_free = 100}, "(0 1@7 D!)(1 7@0 P)", 1);
    check_step({{0, 8, 5}, {1, 7, 9}}, {}, {.token_budget = 8, .free_slots = 0, .kv_free = 100}, "(0 1@8 D!)(1 2@7 P!)",
               0);
}

TEST_CASE("lab05: the scheduler runs the builder over a whole queue", "[lab05]") {
    // budget 8, two requests (5 prompt + 3 output, 10 + 2): step 1 prefills r0 whole and the
    // first 3 of r1's 10; step 2 decodes r0 and finishes r1's prompt; step 3 decodes both.
    // Then a cache of 12 positions that two decoding requests outgrow: the newest is
    // preempted, recomputed over its prompt and tokens, and both finish.
    INFO(kWhere);
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 8, .max_seqs = 4});
    for (const sv::Request& r : std::vector<sv::Request>{{0, 0.0, 5, 3}, {1, 0.0, 10, 2}}) s.arrive(r);
    std::vector<std::string> steps;
    while (s.has_work() && steps.size() < 10) {
        const sv::Step step = s.next_step();
        steps.push_back(sv::to_string(step));
        s.complete(step);
        s.check_invariants();
    }
    CHECK(steps == std::vector<std::string>{"(0 5@0 P!)(1 3@0 P)", "(0 1@5 D!)(1 7@3 P!)", "(0 1@6 D!)(1 1@10 D!)"});

    sv::Scheduler tight({.policy = sv::Policy::chunked, .token_budget = 16, .max_seqs = 2, .kv_capacity = 12});
    class OneSecond : public sv::Executor {
    public:
        double run(const sv::Step&) override { return 1.0; }
        std::string describe() const override { return "one second per step"; }
    } exec;
    const sv::Timeline t = sv::run_engine({{0, 0.0, 4, 6}, {1, 0.0, 4, 6}}, tight, exec, true);
    CHECK(tight.preemptions() >= 1);
    CHECK(t.requests[0].token_s.size() == 6);
    CHECK(t.requests[1].token_s.size() == 6);
}

TEST_CASE("lab05: a case the grader gives", "[.][lab05-case]") {
    // {requests, max_prompt, max_output, token_budget, max_seqs, kv_capacity, seed}: a seeded
    // queue that arrives at once, scheduled to the end. Every step keeps the budget, puts its
    // decodes before its prefills, and moves every request on; every request gets its tokens.
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO(kWhere);
    INFO("the grader's case " << c.text());
    const int n = c.integer("requests");
    std::vector<float> lengths(std::size_t(2) * n);  // small integers, exact in a float
    pd::fill_integers<float>(lengths, 0, 1 << 20, c.seed());
    sv::Scheduler s({.policy = sv::Policy::chunked,
                     .token_budget = c.integer("token_budget"),
                     .max_seqs = c.integer("max_seqs"),
                     .kv_capacity = c.integer("kv_capacity")});
    std::vector<int> wanted(std::size_t(n), 0), got(std::size_t(n), 0);
    for (int i = 0; i < n; ++i) {
        const int prompt = 1 + int(lengths[2 * std::size_t(i)]) % c.integer("max_prompt");
        wanted[std::size_t(i)] = 1 + int(lengths[2 * std::size_t(i) + 1]) % c.integer("max_output");
        s.arrive({i, 0.0, prompt, wanted[std::size_t(i)]});
    }
    int steps = 0;
    while (s.has_work()) {
        REQUIRE(++steps <= 100000);  // every step moves a request on: the queue ends
        const sv::Step step = s.next_step();
        INFO("step " << steps << ": " << sv::to_string(step));
        REQUIRE(!step.empty());
        CHECK(step.tokens() <= s.config().token_budget);
        bool prefill_seen = false;
        for (const sv::BatchItem& item : step.items) {
            CHECK((item.prefill || !prefill_seen));  // decodes first
            prefill_seen = prefill_seen || item.prefill;
            if (item.emits) ++got[std::size_t(item.request)];
        }
        s.complete(step);
        s.check_invariants();
    }
    CHECK(got == wanted);
}
