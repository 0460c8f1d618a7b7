/// @file engine.hpp
/// @brief Chapter 05's engine loop (host C++, no backend): a workload through a scheduler and
/// an executor on a simulated clock, leaving a timeline.
#pragma once

#include "pd/serving/types.hpp"

#include <vector>

namespace pd::serving {

class Scheduler;  // scheduler.hpp

/// Runs @p requests through @p scheduler and @p executor on a simulated clock: arrivals join at
/// their time, each step takes the executor's time, a step's tokens are emitted at its end,
/// and the clock jumps to the next arrival when nothing can run.
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
