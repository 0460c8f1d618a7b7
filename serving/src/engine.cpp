#include "pd/serving/engine.hpp"

#include "pd/serving/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

namespace pd::serving {

std::string to_string(Finish f) {
    switch (f) {
        case Finish::length:
            return "length";
        case Finish::stop:
            return "stop";
        case Finish::cancelled:
            return "cancelled";
    }
    return "?";
}

void EngineClock::step_ran(double start, double seconds) {
    if (!real_) {
        now_ = start + seconds;
        return;
    }
    std::this_thread::sleep_until(at(start + seconds));  // returns at once if it is there already
}

Engine::Engine(Scheduler& scheduler, Executor& executor, EngineClock& clock, bool check)
    : scheduler_(scheduler), executor_(executor), clock_(clock), check_(check) {
    timeline_.policy = to_string(scheduler.config().policy);
}

int Engine::submit_locked(Request r, TokenListener listener) {
    if (!std::isfinite(r.arrival_s) || r.arrival_s < last_arrival_)
        throw std::invalid_argument("engine: request arrivals must be finite and in order (" +
                                    std::to_string(r.arrival_s) + " s after " + std::to_string(last_arrival_) + " s)");
    r.id = next_id_++;
    last_arrival_ = r.arrival_s;
    pending_.emplace_back(std::move(r), std::move(listener));
    ++wakes_;
    wake_.notify_all();
    return pending_.back().first.id;
}

int Engine::submit(Request r, TokenListener listener) {
    const std::lock_guard lock(mutex_);
    return submit_locked(std::move(r), std::move(listener));
}

int Engine::submit_now(Request r, TokenListener listener) {
    const std::lock_guard lock(mutex_);
    r.arrival_s = std::max(clock_.now(), last_arrival_);
    return submit_locked(std::move(r), std::move(listener));
}

void Engine::cancel(int id) {
    const std::lock_guard lock(mutex_);
    cancels_.insert(id);
    ++wakes_;
    wake_.notify_all();
}

void Engine::stop() {
    const std::lock_guard lock(mutex_);
    stop_ = true;
    ++wakes_;
    wake_.notify_all();
}

std::size_t Engine::pending() const {
    const std::lock_guard lock(mutex_);
    return pending_.size();
}

bool Engine::busy() const {
    return scheduler_.has_work() || pending() > 0;
}

void Engine::leave(int id, Finish finish, std::vector<TokenEvent>& events) {
    Timeline::RequestRecord& r = timeline_.requests[static_cast<std::size_t>(id)];
    done_[static_cast<std::size_t>(id)] = true;
    r.finish = finish;
    r.preemptions = scheduler_.preemptions_of(id);
    r.prefix_hit = scheduler_.prefix_hits_of(id);
    if (finish == Finish::cancelled)
        events.push_back({id, static_cast<int>(r.token_s.size()), -1, clock_.now(), true, finish});
}

void Engine::arrive_due(std::vector<TokenEvent>& events) {
    std::set<int> cancels;
    {
        const std::lock_guard lock(mutex_);
        const double now = clock_.now();
        while (!pending_.empty() && pending_.front().first.arrival_s <= now) {
            auto [request, listener] = std::move(pending_.front());
            pending_.pop_front();
            scheduler_.arrive(request);
            executor_.arrive(request);
            timeline_.requests.push_back({.request = std::move(request)});
            listeners_.push_back(std::move(listener));
            done_.push_back(false);
        }
        // a cancellation of a request still to arrive waits for it
        for (auto it = cancels_.begin(); it != cancels_.end();) {
            if (*it < static_cast<int>(timeline_.requests.size())) {
                cancels.insert(*it);
                it = cancels_.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (int id : cancels) {
        if (id < 0 || done_[static_cast<std::size_t>(id)]) continue;  // unknown, or finished already
        scheduler_.end_request(id);
        leave(id, Finish::cancelled, events);
    }
}

void Engine::deliver(const std::vector<TokenEvent>& events) {
    for (const TokenEvent& e : events)
        if (const TokenListener& l = listeners_[static_cast<std::size_t>(e.request)]) l(e);
}

// [engine_step]
bool Engine::step() {
    std::vector<TokenEvent> events;
    arrive_due(events);
    const Step step = scheduler_.next_step();
    if (step.empty()) {
        deliver(events);
        if (scheduler_.has_work() && pending() == 0)
            throw std::logic_error("run_engine: requests wait but no step can run (" + timeline_.policy + ")");
        return false;
    }
    const double start = clock_.now();
    const double seconds = executor_.run(step);
    clock_.step_ran(start, seconds);
    const double end = start + seconds;  // its tokens are emitted at its end
    // the cache while the step runs: the running requests' positions, this step's included
    timeline_.steps.push_back({start, end, step, scheduler_.kv_held(step),
                               static_cast<int>(scheduler_.running().size()),
                               scheduler_.paged() ? scheduler_.paged()->used() : 0});
    const std::vector<int> emitted = scheduler_.complete(step, executor_.accepted());
    const std::vector<int> tokens = executor_.tokens();
    if (!tokens.empty() && tokens.size() != emitted.size())
        throw std::logic_error("engine: the executor gave " + std::to_string(tokens.size()) + " token ids for " +
                               std::to_string(emitted.size()) + " tokens");
    for (std::size_t k = 0; k < emitted.size(); ++k) {
        const int id = emitted[k];
        if (done_[static_cast<std::size_t>(id)]) continue;  // a draft token after its stop token
        Timeline::RequestRecord& r = timeline_.requests[static_cast<std::size_t>(id)];
        const int token = tokens.empty() ? -1 : tokens[k];
        r.token_s.push_back(end);
        if (!tokens.empty()) r.tokens.push_back(token);
        const bool stop = token >= 0 && std::find(r.request.stop_ids.begin(), r.request.stop_ids.end(), token) !=
                                            r.request.stop_ids.end();
        // (a request that arrived with its cache brought its first token: chapter 11)
        const bool length = static_cast<int>(r.token_s.size()) == r.request.output_tokens - (r.request.cached ? 1 : 0);
        events.push_back({id, static_cast<int>(r.token_s.size()) - 1, token, end, stop || length,
                          stop ? Finish::stop : Finish::length});
        if (stop) scheduler_.end_request(id);  // still running unless that was its last token anyway
        if (stop || length) leave(id, events.back().finish, events);
    }
    // The invariants after every step while a check visits at most 4,096 blocks, slots and
    // requests; on a larger cache or queue, as often as keeps the visits within 16 per scheduled
    // item; and always when the last request has left.
    items_ += step.items.size();
    const std::size_t cost = scheduler_.check_cost();
    if (check_ && (cost <= 4096 || checked_ + cost <= 16 * items_ || !scheduler_.has_work())) {
        checked_ += cost;
        scheduler_.check_invariants();
    }
    deliver(events);
    return true;
}
// [engine_step]

void Engine::run() {
    while (busy()) {
        if (step()) continue;
        double next = 0;
        {
            const std::lock_guard lock(mutex_);
            if (pending_.empty()) continue;  // a cancellation emptied the scheduler
            next = pending_.front().first.arrival_s;
        }
        if (clock_.real())
            std::this_thread::sleep_until(clock_.at(next));
        else
            clock_.idle_until(next);  // idle until the next arrival
    }
}

void Engine::serve() {
    for (;;) {
        unsigned long long seen = 0;
        {
            const std::lock_guard lock(mutex_);
            if (stop_) return;
            seen = wakes_;
        }
        if (step()) continue;
        std::unique_lock lock(mutex_);
        const auto woken = [&] { return stop_ || wakes_ != seen; };
        if (pending_.empty())
            wake_.wait(lock, woken);
        else if (clock_.real())
            wake_.wait_until(lock, clock_.at(pending_.front().first.arrival_s), woken);
        else
            clock_.idle_until(pending_.front().first.arrival_s);
    }
}

// [run_engine]
Timeline run_engine(const std::vector<Request>& requests, Scheduler& scheduler, Executor& executor, bool check) {
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i].id != static_cast<int>(i))
            throw std::invalid_argument("run_engine: request ids must be 0, 1, 2, ... in arrival order");
        if (i > 0 && requests[i].arrival_s < requests[i - 1].arrival_s)
            throw std::invalid_argument("run_engine: requests must be sorted by arrival");
    }
    EngineClock clock;  // one that jumps
    Engine engine(scheduler, executor, clock, check);
    for (const Request& r : requests) engine.submit(r);
    engine.run();
    return engine.take_timeline();
}
// [run_engine]

}  // namespace pd::serving
