/// @file engine.hpp
/// @brief The engine loop (host C++, no backend): requests through a scheduler and an executor
/// on a clock, leaving a timeline. Chapter 05 replays a workload on a clock that jumps
/// (run_engine()); chapter 13 runs the same loop online, on the wall clock, with requests
/// submitted and cancelled from other threads while it steps and their tokens streamed to
/// listeners as each step completes.
#pragma once

#include "pd/serving/types.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace pd::serving {

class Scheduler;  // scheduler.hpp

/// The clock an Engine steps on, in seconds from its start. A replay's clock jumps: a step
/// takes the executor's time and an idle engine jumps to the next arrival. The wall clock
/// (chapter 13) follows std::chrono::steady_clock: a step of a cost model's predicted time is
/// slept (so a machine without a GPU serves at the predicted rate), a step that ran for real
/// has taken its time already.
class EngineClock {
public:
    /// @param real false: a clock that jumps (starting at 0); true: the wall clock from now
    explicit EngineClock(bool real = false) : real_(real), start_(std::chrono::steady_clock::now()) {}
    /// True for the wall clock.
    bool real() const { return real_; }
    /// Seconds since the start.
    double now() const {
        return real_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() : now_;
    }
    /// A step that began at @p start took @p seconds: afterwards the clock reads at least their end
    /// (a jumping clock jumps there; the wall clock sleeps until then if it is not there yet).
    /// @param start when it began (now() then)  @param seconds its duration
    void step_ran(double start, double seconds);
    /// Nothing runs until @p t: a jumping clock jumps there (never back); the wall clock is not
    /// moved (the engine waits for it, or for a submission, whichever comes first).
    /// @param t seconds from the start
    void idle_until(double t) {
        if (!real_ && t > now_) now_ = t;
    }
    /// The wall-clock instant @p t seconds after the start. @param t seconds from the start
    std::chrono::steady_clock::time_point at(double t) const {
        return start_ +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(t));
    }

private:
    bool real_;
    std::chrono::steady_clock::time_point start_;
    double now_ = 0;  // a jumping clock's reading
};

/// A token on its way to a request's stream, or the end of a cancelled request.
struct TokenEvent {
    int request = 0;                 ///< Request::id
    int index = 0;                   ///< its place in the request's output (0: the first token)
    int token = -1;                  ///< its id (-1: the executor has none, or a cancellation)
    double time_s = 0;               ///< when its step ended, on the engine's clock
    bool last = false;               ///< true for the request's last event
    Finish finish = Finish::length;  ///< how the request ended (when last)
};
/// Called on the engine's thread with each event, in order per request; it must not call back
/// into the engine except submit() and cancel().
using TokenListener = std::function<void(const TokenEvent&)>;

/// The engine: a scheduler and an executor stepping on a clock. submit() and cancel() may be
/// called from any thread; step(), run() and serve() from one thread only (the engine's), which
/// also calls the executor and the listeners.
///
/// Each step: the submitted requests whose arrival time has come join the scheduler (the
/// executor learns of them), the cancellations take effect (their slots and blocks are free
/// for this step), the scheduler builds the step, the executor runs it and the clock advances,
/// and the tokens it emitted go to the timeline and the listeners. A request whose token is one
/// of its stop_ids ends with it (Scheduler::end_request()).
class Engine {
public:
    /// @param scheduler a scheduler with nothing waiting or running  @param executor runs (or
    /// predicts) each step  @param clock the clock (jumping for a replay)
    /// @param check if true, the scheduler's invariants are checked after every step (on a cache
    ///        and queue of more than 4,096 blocks, slots and requests, as often as keeps the checks'
    ///        visits within 16 per scheduled item) and when the last request leaves
    Engine(Scheduler& scheduler, Executor& executor, EngineClock& clock, bool check = false);

    /// Submits @p r to arrive at r.arrival_s on the engine's clock (a trace's arrival; not before
    /// the last submitted arrival). Its id becomes the next id: 0, 1, 2, ... in submission order.
    /// Thread-safe. @param r the request  @param listener receives its tokens (may be empty)
    /// @return its id
    /// @throws std::invalid_argument for an arrival before the last submitted one, or not finite
    int submit(Request r, TokenListener listener = {});
    /// Submits @p r to arrive now (the clock's reading, or the last submitted arrival if that is
    /// later). Thread-safe. @param r the request  @param listener receives its tokens  @return its id
    int submit_now(Request r, TokenListener listener = {});
    /// Cancels request @p id: at the start of the next step it leaves the scheduler (its slot and
    /// blocks free for that step) and its listener gets a last event with Finish::cancelled. A
    /// request not yet arrived is cancelled as it arrives; one that has finished is left alone.
    /// Thread-safe. @param id a request id
    void cancel(int id);

    /// One iteration: arrivals, cancellations, then a step if one can run.
    /// @return true if a step ran (false: nothing runs until a later arrival or submission)
    /// @throws std::logic_error when requests wait, none is still to arrive and no step can run,
    ///         or an invariant breaks; what Scheduler::arrive() throws for a request
    bool step();
    /// A replay: steps until every submitted request has finished, idling (the clock jumping or
    /// waiting) until the next arrival when nothing can run.
    /// @throws what step() throws
    void run();
    /// Online: steps, and waits for submissions and arrivals when nothing can run, until stop()
    /// (then returns after the step in progress; the requests still running stay as they are).
    void serve();
    /// Makes serve() return. Thread-safe.
    void stop();

    /// The timeline so far: every arrived request and every step (engine thread, or after it stopped).
    const Timeline& timeline() const { return timeline_; }
    /// The timeline, moved out (after the engine stopped).
    Timeline take_timeline() { return std::move(timeline_); }
    /// The clock.
    const EngineClock& clock() const { return clock_; }
    /// Requests submitted whose arrival has not come yet. Thread-safe.
    std::size_t pending() const;
    /// True while a submitted request has not finished (engine thread).
    bool busy() const;

private:
    int submit_locked(Request r, TokenListener listener);
    void arrive_due(std::vector<TokenEvent>& events);                    // pending requests whose time has come
    void leave(int id, Finish finish, std::vector<TokenEvent>& events);  // it ends: record, event
    void deliver(const std::vector<TokenEvent>& events);                 // to the listeners, outside the lock

    Scheduler& scheduler_;
    Executor& executor_;
    EngineClock& clock_;
    bool check_;
    Timeline timeline_;                     // engine thread only
    std::vector<TokenListener> listeners_;  // by id (engine thread only)
    std::vector<bool> done_;                // by id: it has left (engine thread only)
    std::size_t items_ = 0, checked_ = 0;   // the invariant checks' budget

    mutable std::mutex mutex_;  // guards what follows
    std::condition_variable wake_;
    std::deque<std::pair<Request, TokenListener>> pending_;  // submitted, not arrived, in arrival order
    std::set<int> cancels_;                                  // cancelled, not yet applied
    int next_id_ = 0;
    double last_arrival_ = 0;
    bool stop_ = false;
    unsigned long long wakes_ = 0;  // submissions, cancellations and stop() so far
};

/// Runs @p requests through @p scheduler and @p executor on a clock that jumps (an Engine fed
/// the whole trace up front): arrivals join at their time, each step takes the executor's time,
/// a step's tokens are emitted at its end, and the clock jumps to the next arrival when nothing
/// can run.
/// @param requests the workload, ids 0, 1, 2, ... sorted by arrival
/// @param scheduler a scheduler with nothing waiting or running
/// @param executor runs (or predicts) each step and says how long it took
/// @param check if true, the scheduler's invariants are checked after every step (on a cache
///        and queue of more than 4,096 blocks, slots and requests, as often as keeps the checks'
///        visits within 16 per scheduled item) and after the last
/// @return every step with its times and cache use, every request's token times, preemptions
///         and prefix hits
/// @throws std::invalid_argument for ids out of order or arrivals not sorted (and what
///         Scheduler::arrive() rejects); std::logic_error when requests wait but no step can
///         run, or an invariant breaks
Timeline run_engine(const std::vector<Request>& requests, Scheduler& scheduler, Executor& executor, bool check = false);

}  // namespace pd::serving
