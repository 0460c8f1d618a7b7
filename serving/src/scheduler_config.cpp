// The scheduler's configuration (scheduler.hpp): the policies by name, the check of the
// limits, and the bound on the tokens of any step the scheduler builds.
#include "pd/serving/scheduler.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

namespace pd::serving {

std::string to_string(Policy p) {
    switch (p) {
        case Policy::static_batch:
            return "static";
        case Policy::continuous:
            return "continuous";
        case Policy::chunked:
            return "chunked";
    }
    return "?";
}

Policy policy_from(const std::string& name) {
    for (Policy p : {Policy::static_batch, Policy::continuous, Policy::chunked})
        if (to_string(p) == name) return p;
    throw std::invalid_argument("SchedulerConfig.policy = " + name + " is not one of static, continuous, chunked");
}

const SchedulerConfig& checked(const SchedulerConfig& config) {
    const auto at_least_one = [](const char* field, long long value, const char* unit) {
        if (value < 1)
            throw std::invalid_argument(std::string("SchedulerConfig.") + field + " = " + std::to_string(value) +
                                        " must be >= 1" + unit);
    };
    at_least_one("token_budget", config.token_budget, "");
    at_least_one("max_seqs", config.max_seqs, "");
    at_least_one("kv_capacity", config.kv_capacity, " position");
    // chunked never skips a running decode, so one step must hold a decode of every slot
    if (config.policy == Policy::chunked && config.token_budget < config.max_seqs)
        throw std::invalid_argument("SchedulerConfig.token_budget (" + std::to_string(config.token_budget) +
                                    ") must be >= SchedulerConfig.max_seqs (" + std::to_string(config.max_seqs) +
                                    ") under chunked: every running request decodes in every step");
    if (config.reserve_whole && config.policy != Policy::continuous)
        throw std::invalid_argument("SchedulerConfig.reserve_whole is a rule of continuous batching, not of " +
                                    to_string(config.policy));
    return config;
}

long long max_step_tokens(const SchedulerConfig& config, const std::vector<Request>& requests) {
    const long long capacity = BlockManager::capacity_of(checked(config));
    std::vector<long long> longest;  // each request's longest prefill: after a preemption at its last token
    for (const Request& r : requests) longest.push_back(static_cast<long long>(r.prompt_tokens) + r.output_tokens - 1);
    std::sort(longest.begin(), longest.end(), std::greater<>());
    long long any = 0;  // one item per running request, each at most its longest prefill
    for (std::size_t i = 0; i < longest.size() && static_cast<int>(i) < config.max_seqs; ++i) any += longest[i];
    // every policy plans its new positions within the capacity (make_room_for_decodes, the admission checks)
    const long long bound = std::min(any, capacity);
    switch (config.policy) {
        case Policy::chunked:
            return std::min<long long>(bound, config.token_budget);  // check_chunked_plan
        case Policy::continuous: {  // whole prompts up to the budget, at least one; or a decode per slot
            const long long prompts = std::max<long long>(config.token_budget, longest.empty() ? 0 : longest[0]);
            return std::min(bound, std::max<long long>(prompts, config.max_seqs));
        }
        case Policy::static_batch:
            return bound;  // a batch's whole prefills, within the capacity
    }
    return bound;
}

}  // namespace pd::serving
