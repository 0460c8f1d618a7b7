// Summary statistics of timed runs.
#include "pd/timer.hpp"

namespace pd {

TimingStats summarize_times(std::vector<double> times_ms) {
    if (times_ms.empty()) throw std::invalid_argument("summarize_times: no runs");
    std::sort(times_ms.begin(), times_ms.end());
    const std::size_t n = times_ms.size();
    TimingStats s;
    s.runs = static_cast<int>(n);
    s.min_ms = times_ms.front();
    s.max_ms = times_ms.back();
    s.median_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
    return s;
}

}  // namespace pd
