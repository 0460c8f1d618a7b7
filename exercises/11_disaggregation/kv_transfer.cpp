/// @file kv_transfer.cpp
/// @brief Lab 11: the KV cache transfers of a disaggregated setup on their links
/// (pd/serving/kv_transfer.hpp). Each link is a queue: first come, first served by the end of
/// the prefill, one transfer at a time. A transfer after the prefill starts when both the
/// prefill and the link are done; a layer-by-layer transfer starts with the prefill and sends
/// each layer's part as the prefill finishes it, so only the last part (and whatever the link
/// cannot keep up with) is left when the prefill ends.
///
/// Host C++, built into pd_serving from the lab tree (as labs 05, 09 and 10 are), so chapter
/// 11's cost model runs this schedule.
#include "pd/serving/kv_transfer.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

void check(const std::vector<TransferJob>& jobs, const LinkModel& link) {
    if (!(link.bytes_per_s > 0))
        throw std::invalid_argument("schedule_transfers: LinkModel.bytes_per_s must be > 0, got " +
                                    std::to_string(link.bytes_per_s));
    if (!(link.latency_s >= 0))
        throw std::invalid_argument("schedule_transfers: LinkModel.latency_s must be >= 0, got " +
                                    std::to_string(link.latency_s));
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        const TransferJob& j = jobs[i];
        const auto bad = [&](const std::string& what) {
            throw std::invalid_argument("schedule_transfers: job " + std::to_string(i) + ": " + what);
        };
        if (j.link < 0) bad("link must be >= 0, got " + std::to_string(j.link));
        if (!(j.bytes >= 0)) bad("bytes must be >= 0, got " + std::to_string(j.bytes));
        if (j.layers < 1) bad("layers must be >= 1, got " + std::to_string(j.layers));
        if (!(j.prefill_end_s >= j.prefill_start_s))
            bad("prefill_end_s must be >= prefill_start_s, got " + std::to_string(j.prefill_end_s) + " < " +
                std::to_string(j.prefill_start_s));
    }
}

}  // namespace

// [schedule_transfers]
std::vector<TransferTime> schedule_transfers(const std::vector<TransferJob>& jobs, const LinkModel& link,
                                             bool layerwise) {
    check(jobs, link);
    std::vector<TransferTime> times(jobs.size());
    // The order the links take their jobs in: by the end of the prefill, ties as given.
    std::vector<std::size_t> order(jobs.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return jobs[a].prefill_end_s < jobs[b].prefill_end_s; });
    int links = 0;
    for (const TransferJob& j : jobs) links = std::max(links, j.link + 1);
    std::vector<double> free_at(static_cast<std::size_t>(links), 0.0);  // when each link is next idle
    for (std::size_t i : order) {
        const TransferJob& j = jobs[i];
        double& free = free_at[static_cast<std::size_t>(j.link)];
        const double d = j.bytes / link.bytes_per_s;  // seconds on the wire
        TransferTime& t = times[i];
        // TODO(student): 1. after the prefill: start when the prefill and the link are both done; end after latency_s + d (~3 lines)
        // TODO(student): 2. layer by layer: start at max(prefill_start_s, free); then each of the L parts (d / L) once its layer is done (~8 lines)
        (void)d;
        free = t.end_s;
    }
    return times;
}
// [schedule_transfers]

}  // namespace pd::serving
