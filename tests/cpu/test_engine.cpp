// The engine online (chapter 13): requests submitted and cancelled while it steps, from other
// threads on the wall clock; a cancelled request's slot and blocks (its prefix-cache references
// included) free at the next step, waiting or running, arrived or not; a stop token ending a
// request with the token, its cache given back, a speculative step's tokens after it dropped;
// each listener's events in order with one last event and its finish reason. Chapter 05's
// replay is the same engine on a clock that jumps: its tests (test_scheduler.cpp) are unchanged.
// The cost model in real time: steps paced at their predicted times, placeholder words, an
// end-of-sequence token after N that ends the requests that stop at it.
#include "pd/model_config.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/placeholder.hpp"
#include "pd/serving/scheduler.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

namespace sv = pd::serving;

namespace {

/// A fixed time per step and a token id for every emitted token: 1000 * request + its index in
/// the request's output, so a test can name the token that stops a request.
class Counting : public sv::Executor {
public:
    explicit Counting(double step_s = 1.0) : step_s_(step_s) {}
    double run(const sv::Step& step) override {
        tokens_.clear();
        for (const sv::BatchItem& item : step.items)
            if (item.emits) tokens_.push_back(1000 * item.request + count_[item.request]++);
        return step_s_;
    }
    std::string describe() const override { return "counting"; }
    std::vector<int> tokens() const override { return tokens_; }
    void arrive(const sv::Request& r) override { arrived.push_back(r.id); }
    std::vector<int> arrived;  ///< the ids it was told of, in order

private:
    double step_s_;
    std::map<int, int> count_;
    std::vector<int> tokens_;
};

/// Every event of every request, by request.
struct Events {
    std::map<int, std::vector<sv::TokenEvent>> of;
    sv::TokenListener listener() {
        return [this](const sv::TokenEvent& e) { of[e.request].push_back(e); };
    }
};

/// A prompt of @p n token ids, the same for every request (so requests share prefix blocks).
sv::Request shared_prompt(int n, int output) {
    sv::Request r{.prompt_tokens = n, .output_tokens = output};
    r.prompt.resize(static_cast<std::size_t>(n));
    std::iota(r.prompt.begin(), r.prompt.end(), 7);
    return r;
}

}  // namespace

TEST_CASE("engine: a cancelled request's slot and blocks are free at the next step", "[engine]") {
    // pages of 8 positions, prefix caching, two slots: requests 1 and 2 arrive after request 0
    // has prefilled the 32-token prompt they share; request 1 is admitted on its cached blocks,
    // request 2 waits for a slot
    sv::Scheduler s({.policy = sv::Policy::chunked,
                     .token_budget = 64,
                     .max_seqs = 2,
                     .kv_capacity = 8 * 40,
                     .block_size = 8,
                     .prefix_caching = true});
    Counting exec;
    sv::EngineClock clock;
    sv::Engine engine(s, exec, clock, true);
    Events ev;
    engine.submit(shared_prompt(32, 20), ev.listener());
    for (int i = 0; i < 2; ++i) {
        sv::Request r = shared_prompt(32, 20);
        r.arrival_s = 1.5;
        engine.submit(r, ev.listener());
    }
    for (int i = 0; i < 3; ++i) REQUIRE(engine.step());  // prefill 0, decode 0, then 1 joins
    REQUIRE(s.running().size() == 2);
    REQUIRE(s.waiting().size() == 1);
    const sv::PagedCache& pages = *s.paged();
    std::vector<int> shared;  // the blocks of the prompt that both hold
    for (std::size_t b = 0; b < pages.table(1).size() && pages.table(1)[b] == pages.table(0)[b]; ++b)
        shared.push_back(pages.table(0)[b]);
    REQUIRE(shared.size() >= 3);
    for (int b : shared) CHECK(pages.ref_count(b) == 2);

    engine.cancel(0);  // running, sharing its prompt's blocks
    engine.cancel(2);  // waiting
    REQUIRE(engine.step());
    // request 0 left before the step was built: request 1 runs alone, holding the prompt's blocks once
    REQUIRE(s.running().size() == 1);
    CHECK(s.running()[0].request.id == 1);
    CHECK(s.waiting().empty());
    for (int b : shared) CHECK(pages.ref_count(b) == 1);
    CHECK(pages.used() == static_cast<int>(pages.table(1).size()));
    s.check_invariants();

    engine.run();
    CHECK(pages.used() == 0);
    const sv::Timeline& t = engine.timeline();
    CHECK(t.requests[0].finish == sv::Finish::cancelled);
    CHECK(t.requests[1].finish == sv::Finish::length);
    CHECK(t.requests[2].finish == sv::Finish::cancelled);
    CHECK(t.requests[2].token_s.empty());
    CHECK(t.requests[1].token_s.size() == 20);
    // each cancelled listener's last event says so, after the tokens it had
    REQUIRE_FALSE(ev.of[0].empty());
    CHECK(ev.of[0].back().last);
    CHECK(ev.of[0].back().finish == sv::Finish::cancelled);
    CHECK(ev.of[0].back().token == -1);
    CHECK(ev.of[0].back().index == static_cast<int>(t.requests[0].token_s.size()));
    REQUIRE(ev.of[2].size() == 1);
    CHECK(ev.of[2][0].finish == sv::Finish::cancelled);
    // cancelling a finished request changes nothing
    engine.cancel(1);
    CHECK_FALSE(engine.step());
    CHECK(engine.timeline().requests[1].finish == sv::Finish::length);
    // the metrics count the completed request only
    CHECK(sv::compute_metrics(engine.timeline(), {}).completed == 1);
}

TEST_CASE("engine: a request cancelled before it arrives never runs", "[engine]") {
    sv::Scheduler s({.policy = sv::Policy::continuous, .token_budget = 64, .max_seqs = 4});
    Counting exec;
    sv::EngineClock clock;
    sv::Engine engine(s, exec, clock, true);
    Events ev;
    engine.submit({.arrival_s = 0, .prompt_tokens = 4, .output_tokens = 3}, ev.listener());
    const int late = engine.submit({.arrival_s = 10, .prompt_tokens = 4, .output_tokens = 3}, ev.listener());
    engine.cancel(late);
    engine.run();
    const sv::Timeline& t = engine.timeline();
    REQUIRE(t.requests.size() == 2);
    CHECK(t.requests[1].finish == sv::Finish::cancelled);
    CHECK(t.requests[1].token_s.empty());
    for (const sv::Timeline::StepRecord& step : t.steps)
        for (const sv::BatchItem& item : step.step.items) CHECK(item.request == 0);
    CHECK(exec.arrived == std::vector<int>{0, 1});  // it arrived, and left before any step
    REQUIRE(ev.of[1].size() == 1);
    CHECK(ev.of[1][0].time_s == 10);  // cancelled as it arrived, on the jumping clock
}

TEST_CASE("engine: a stop token ends its request with it and frees its cache", "[engine]") {
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 32, .max_seqs = 4, .kv_capacity = 256});
    Counting exec;
    sv::EngineClock clock;
    sv::Engine engine(s, exec, clock, true);
    Events ev;
    // request 0 stops at its third token (id 2), request 1 would stop at a token it never makes,
    // request 2 at its last (length and stop at once: the stop is the reason)
    engine.submit({.prompt_tokens = 5, .output_tokens = 10, .stop_ids = {2, 77}}, ev.listener());
    engine.submit({.prompt_tokens = 6, .output_tokens = 4, .stop_ids = {1999}}, ev.listener());
    engine.submit({.prompt_tokens = 7, .output_tokens = 3, .stop_ids = {2002}}, ev.listener());
    REQUIRE(engine.step());  // the three prefills, each emitting its first token
    REQUIRE(engine.step());
    REQUIRE(engine.step());          // request 0's third token: it stops
    CHECK(s.running().size() == 1);  // request 2 finished too (3 tokens); request 1 runs
    CHECK(s.kv_used() == 6 + 2);     // request 1's prompt and two decode tokens fed
    engine.run();
    const sv::Timeline& t = engine.timeline();
    CHECK(t.requests[0].finish == sv::Finish::stop);
    CHECK(t.requests[0].tokens == std::vector<int>{0, 1, 2});
    CHECK(t.requests[0].token_s.size() == 3);
    CHECK(t.requests[1].finish == sv::Finish::length);
    CHECK(t.requests[1].tokens == std::vector<int>{1000, 1001, 1002, 1003});
    CHECK(t.requests[2].finish == sv::Finish::stop);
    REQUIRE(ev.of[0].size() == 3);
    for (int k = 0; k < 3; ++k) {
        CHECK(ev.of[0][static_cast<std::size_t>(k)].index == k);
        CHECK(ev.of[0][static_cast<std::size_t>(k)].last == (k == 2));
    }
    CHECK(ev.of[0][2].finish == sv::Finish::stop);
    CHECK(ev.of[1].back().finish == sv::Finish::length);
    // the metrics take a stopped request's tokens as its output
    const sv::Metrics m = sv::compute_metrics(t, {});
    CHECK(m.completed == 3);
    CHECK(m.output_tokens == 3 + 4 + 3);
}

TEST_CASE("engine: a draft kept past a stop token is dropped", "[engine]") {
    // chapter 09: an executor that keeps every draft token emits several tokens per step
    class Keeps : public Counting {
    public:
        double run(const sv::Step& step) override {
            const double t = Counting::run(step);
            accepted_.clear();
            ids_.clear();
            for (const sv::BatchItem& item : step.items) {
                accepted_.push_back(item.draft);
                if (!item.emits) continue;
                for (int k = 0; k <= item.draft; ++k) ids_.push_back(1000 * item.request + next_[item.request]++);
            }
            return t;
        }
        std::vector<int> accepted() const override { return accepted_; }
        std::vector<int> tokens() const override { return ids_; }

    private:
        std::vector<int> accepted_, ids_;
        std::map<int, int> next_;
    };
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 32, .max_seqs = 2, .kv_capacity = 256});
    Keeps exec;
    sv::EngineClock clock;
    sv::Engine engine(s, exec, clock, true);
    engine.submit({.prompt_tokens = 4, .output_tokens = 20, .speculate = 4, .stop_ids = {3}});
    engine.run();
    const sv::Timeline& t = engine.timeline();
    // the prefill emits token 0; the first verify keeps 4 drafts: tokens 1 ... 5, of which 3 stops
    CHECK(t.requests[0].tokens == std::vector<int>{0, 1, 2, 3});
    CHECK(t.requests[0].finish == sv::Finish::stop);
    CHECK(t.steps.size() == 2);
    CHECK_FALSE(s.has_work());
}

TEST_CASE("engine: requests submitted from other threads on the wall clock stream their tokens", "[engine]") {
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 64, .max_seqs = 8, .kv_capacity = 4096});
    Counting exec(0.001);  // 1 ms a step, slept
    sv::EngineClock clock(true);
    sv::Engine engine(s, exec, clock, true);
    std::thread loop([&] { engine.serve(); });

    constexpr int kThreads = 4, kEach = 6, kOutput = 5;
    std::mutex m;
    std::condition_variable all_done;
    std::map<int, std::vector<sv::TokenEvent>> events;
    int finished = 0;
    const sv::TokenListener listen = [&](const sv::TokenEvent& e) {
        const std::lock_guard lock(m);
        events[e.request].push_back(e);
        if (e.last && ++finished == kThreads * kEach) all_done.notify_all();
    };
    std::vector<std::thread> clients;
    for (int c = 0; c < kThreads; ++c)
        clients.emplace_back([&, c] {
            for (int i = 0; i < kEach; ++i) {
                engine.submit_now({.prompt_tokens = 3 + c + i, .output_tokens = kOutput}, listen);
                std::this_thread::sleep_for(std::chrono::microseconds(300 * (c + 1)));
            }
        });
    for (std::thread& c : clients) c.join();
    {
        std::unique_lock lock(m);
        // at 1 ms a step, 24 requests of 5 tokens take tens of milliseconds: a minute means a hang
        REQUIRE(all_done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == kThreads * kEach; }));
    }
    engine.stop();
    loop.join();

    const sv::Timeline& t = engine.timeline();
    REQUIRE(t.requests.size() == kThreads * kEach);
    for (const sv::Timeline::RequestRecord& r : t.requests) {
        const std::vector<sv::TokenEvent>& e = events[r.request.id];
        REQUIRE(e.size() == kOutput);
        for (std::size_t k = 0; k < e.size(); ++k) {
            CHECK(e[k].index == static_cast<int>(k));
            CHECK(e[k].token == 1000 * r.request.id + static_cast<int>(k));
            CHECK(e[k].time_s == r.token_s[k]);
            CHECK(e[k].last == (k + 1 == e.size()));
            if (k > 0) CHECK(e[k].time_s >= e[k - 1].time_s);
        }
        CHECK(r.token_s.front() >= r.request.arrival_s);
        CHECK(r.finish == sv::Finish::length);
    }
    // the wall clock: a step starts after the previous one's slept millisecond has passed
    for (std::size_t i = 1; i < t.steps.size(); ++i) CHECK(t.steps[i].start_s >= t.steps[i - 1].end_s);
    CHECK_FALSE(s.has_work());
    s.check_invariants();
}

TEST_CASE("engine: submissions out of order are refused by name", "[engine]") {
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 64, .max_seqs = 8});
    Counting exec;
    sv::EngineClock clock;
    sv::Engine engine(s, exec, clock);
    engine.submit({.arrival_s = 2, .prompt_tokens = 3, .output_tokens = 2});
    CHECK_THROWS_AS(engine.submit({.arrival_s = 1, .prompt_tokens = 3, .output_tokens = 2}), std::invalid_argument);
    CHECK_THROWS_AS(engine.submit({.arrival_s = std::nan(""), .prompt_tokens = 3, .output_tokens = 2}),
                    std::invalid_argument);
    // submit_now on a jumping clock at 0 arrives with the last submitted arrival
    CHECK(engine.submit_now({.prompt_tokens = 3, .output_tokens = 2}) == 1);
    engine.run();
    CHECK(engine.timeline().requests[1].request.arrival_s == 2);
}

TEST_CASE("engine: the cost model in real time streams placeholder words at its predicted pace", "[engine]") {
    // llama-3-8b on one H200, predicted; every request's 5th token is the end of sequence, which
    // ends the requests that stop at it (the others ignore it and run to their 12 tokens)
    sv::CostModel cost(sv::cost_model_config(*pd::find_model("llama-3-8b"), *pd::roofline::find_gpu("H200"), 1));
    sv::PlaceholderTokens exec(cost, 5);
    const int eos = sv::PlaceholderTokens::placeholder_eos();
    const auto requests = [&] {
        std::vector<sv::Request> r;
        for (int i = 0; i < 6; ++i) {
            r.push_back({.prompt_tokens = 100 + 50 * i, .output_tokens = 12});
            if (i % 2 == 0) r.back().stop_ids = {eos};
        }
        return r;
    }();
    sv::Scheduler s({.policy = sv::Policy::chunked, .token_budget = 512, .max_seqs = 8, .kv_capacity = 1 << 16});
    sv::EngineClock clock(true);
    sv::Engine engine(s, exec, clock, true);
    std::mutex m;
    std::condition_variable done;
    int finished = 0;
    const auto begin = std::chrono::steady_clock::now();
    std::thread loop([&] { engine.serve(); });
    for (const sv::Request& r : requests)
        engine.submit_now(r, [&](const sv::TokenEvent& e) {
            const std::lock_guard lock(m);
            if (e.last && ++finished == 6) done.notify_all();
        });
    {
        std::unique_lock lock(m);
        REQUIRE(done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == 6; }));
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    engine.stop();
    loop.join();

    const sv::Timeline& t = engine.timeline();
    double predicted = 0;
    for (std::size_t i = 0; i < t.steps.size(); ++i) {
        const double step_s = cost.breakdown(t.steps[i].step).total_s;
        CHECK(t.steps[i].end_s - t.steps[i].start_s == Approx(step_s));
        if (i + 1 < t.steps.size()) CHECK(t.steps[i + 1].start_s >= t.steps[i].end_s);  // slept, not skipped
        predicted += step_s;
    }
    CHECK(predicted > 0.02);      // a few milliseconds a step: the pace is measurable
    CHECK(elapsed >= predicted);  // the wall clock waited for every predicted step
    for (const sv::Timeline::RequestRecord& r : t.requests) {
        INFO("request " << r.request.id);
        const bool stops = !r.request.stop_ids.empty();
        REQUIRE(r.tokens.size() == (stops ? 5u : 12u));
        CHECK(r.tokens[4] == eos);
        CHECK(r.finish == (stops ? sv::Finish::stop : sv::Finish::length));
        std::string text;
        for (int id : r.tokens) text += sv::PlaceholderTokens::text(id);
        CHECK(text.size() > r.tokens.size());  // words, each after a space (the end of sequence: none)
    }
    // the same requests replayed on a clock that jumps: the same tokens
    sv::Scheduler again({.policy = sv::Policy::chunked, .token_budget = 512, .max_seqs = 8, .kv_capacity = 1 << 16});
    sv::PlaceholderTokens replay_exec(cost, 5);
    std::vector<sv::Request> trace = requests;
    for (std::size_t i = 0; i < trace.size(); ++i) trace[i].id = int(i);
    const sv::Timeline r = sv::run_engine(trace, again, replay_exec, true);
    for (std::size_t i = 0; i < trace.size(); ++i) CHECK(r.requests[i].tokens == t.requests[i].tokens);
    CHECK_THROWS_AS(sv::PlaceholderTokens(cost, -1), std::invalid_argument);
    CHECK_THROWS_AS(sv::PlaceholderTokens::text(eos + 1), std::invalid_argument);
}
