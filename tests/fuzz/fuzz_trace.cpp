// Request traces (pd::serving::read_trace, chapters 05 and 06's --trace): a file is read into
// requests in the documented ranges, sorted, numbered and starting at 0, or refused with
// std::invalid_argument.
#include "fuzz_input.hpp"
#include "pd/serving/workload.hpp"

#include <cmath>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace sv = pd::serving;
    const std::string path = pd::fuzz::input_file("trace.csv", data, size);
    try {
        const std::vector<sv::Request> w = sv::read_trace(path);
        pd::fuzz::require(!w.empty() && w.size() <= sv::kMaxTraceRequests, "1 to kMaxTraceRequests requests");
        pd::fuzz::require(w.front().arrival_s == 0, "times count from the first arrival");
        for (std::size_t i = 0; i < w.size(); ++i) {
            const sv::Request& r = w[i];
            pd::fuzz::require(r.id == int(i), "ids follow the order");
            pd::fuzz::require(std::isfinite(r.arrival_s) && r.arrival_s >= 0 && r.arrival_s < sv::kMaxTraceArrival,
                              "arrivals finite, >= 0 and below 2^32 s");
            pd::fuzz::require(i == 0 || w[i - 1].arrival_s <= r.arrival_s, "sorted by arrival");
            pd::fuzz::require(r.prompt_tokens >= 1 && r.prompt_tokens <= sv::kMaxTracePromptTokens, "prompt in range");
            pd::fuzz::require(r.output_tokens >= 1 && r.output_tokens <= sv::kMaxTraceOutputTokens, "output in range");
        }
    } catch (const std::invalid_argument&) {
    }
    return 0;
}
