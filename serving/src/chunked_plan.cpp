#include "pd/serving/chunked_plan.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pd::serving {

void check_chunked_plan(const ChunkedPlan& plan, const std::vector<RunningRequest>& running,
                        const std::vector<WaitingRequest>& waiting, const StepRoom& room) {
    const auto fail = [](const std::string& what) { throw std::logic_error("build_chunked_step (lab 05): " + what); };
    if (plan.admitted < 0 || plan.admitted > static_cast<int>(waiting.size()))
        fail("admitted = " + std::to_string(plan.admitted) + ", but only " + std::to_string(waiting.size()) +
             " waiting requests can be (queue length, free slots)");
    // (request, positions in its cache) for every request the step may name, by request; an
    // item's request is marked -1 once named (once per step: no map, no string unless it fails)
    std::vector<std::pair<int, int>> context;
    context.reserve(running.size() + static_cast<std::size_t>(plan.admitted));
    for (const RunningRequest& r : running) context.emplace_back(r.id, r.computed);
    for (int i = 0; i < plan.admitted; ++i) context.emplace_back(waiting[static_cast<std::size_t>(i)].id, 0);
    std::sort(context.begin(), context.end());
    for (const BatchItem& item : plan.step.items) {
        const auto who = [&] { return "request " + std::to_string(item.request); };
        const auto it = std::lower_bound(context.begin(), context.end(), std::pair<int, int>(item.request, INT_MIN));
        if (it == context.end() || it->first != item.request || it->second < 0)
            fail(who() + " is in the step but neither running nor admitted (or is in it twice)");
        if (item.tokens < 1) fail(who() + " has " + std::to_string(item.tokens) + " tokens");
        if (item.context != it->second)
            fail(who() + " is at context " + std::to_string(item.context) + " but holds " + std::to_string(it->second));
        it->second = -1;
    }
    if (plan.step.tokens() > room.token_budget || plan.step.tokens() > room.kv_free)
        fail("the step has " + std::to_string(plan.step.tokens()) + " tokens, past the budget (" +
             std::to_string(room.token_budget) + ") or the free cache (" + std::to_string(room.kv_free) + ")");
}

}  // namespace pd::serving
