#include "pd/serving/engine.hpp"

#include "pd/serving/scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pd::serving {

// [run_engine]
Timeline run_engine(const std::vector<Request>& requests, Scheduler& scheduler, Executor& executor, bool check) {
    Timeline t;
    t.policy = to_string(scheduler.config().policy);
    for (const Request& r : requests) {
        if (r.id != static_cast<int>(t.requests.size()))
            throw std::invalid_argument("run_engine: request ids must be 0, 1, 2, ... in arrival order");
        if (!t.requests.empty() && r.arrival_s < t.requests.back().request.arrival_s)
            throw std::invalid_argument("run_engine: requests must be sorted by arrival");
        t.requests.push_back({.request = r});
    }
    double clock = 0;
    std::size_t next = 0;  // the next request to arrive
    // The invariants after every step while a check visits at most 4,096 blocks, slots and
    // requests; on a larger cache or queue, as often as keeps the visits within 16 per scheduled
    // item; and always after the last step.
    std::size_t items = 0, checked = 0;
    while (next < requests.size() || scheduler.has_work()) {
        while (next < requests.size() && requests[next].arrival_s <= clock) scheduler.arrive(requests[next++]);
        const Step step = scheduler.next_step();
        if (step.empty()) {
            if (next == requests.size())
                throw std::logic_error("run_engine: requests wait but no step can run (" + t.policy + ")");
            clock = std::max(clock, requests[next].arrival_s);  // idle until the next arrival
            continue;
        }
        const double start = clock;
        clock += executor.run(step);
        // the cache while the step runs: the running requests' positions, this step's included
        t.steps.push_back({start, clock, step, scheduler.kv_held(step), static_cast<int>(scheduler.running().size()),
                           scheduler.paged() ? scheduler.paged()->used() : 0});
        for (int id : scheduler.complete(step, executor.accepted()))
            t.requests[static_cast<std::size_t>(id)].token_s.push_back(clock);
        items += step.items.size();
        const std::size_t cost = scheduler.check_cost();
        if (check && (cost <= 4096 || checked + cost <= 16 * items || !scheduler.has_work())) {
            checked += cost;
            scheduler.check_invariants();
        }
    }
    for (Timeline::RequestRecord& r : t.requests) {
        r.preemptions = scheduler.preemptions_of(r.request.id);
        r.prefix_hit = scheduler.prefix_hits_of(r.request.id);
    }
    return t;
}
// [run_engine]

}  // namespace pd::serving
