/// @file chunked_plan.hpp
/// @brief What the scheduler checks of a plan of the `chunked` step builder (lab 05,
/// chunked_step.hpp) before it runs it (host C++, no backend): the builder is a student's code,
/// so a plan that breaks the contract stops the run with a message naming what is wrong,
/// instead of a broken cache later.
#pragma once

#include "pd/serving/chunked_step.hpp"

#include <vector>

namespace pd::serving {

/// Checks that @p plan is a batch the scheduler can run for the inputs it was built from.
/// @param plan    what build_chunked_step() returned
/// @param running its running requests  @param waiting its waiting head  @param room its room
/// @throws std::logic_error "build_chunked_step (lab 05): ..." naming the first fault: an
///         admission count past the waiting head, an item of a request that is neither running
///         nor admitted, a request twice, an item of no token or at the wrong context, or a
///         step past the budget or the free cache
void check_chunked_plan(const ChunkedPlan& plan, const std::vector<RunningRequest>& running,
                        const std::vector<WaitingRequest>& waiting, const StepRoom& room);

}  // namespace pd::serving
