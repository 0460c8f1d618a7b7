// Serving timelines (pd::serving::timeline_from_json, what scripts and tests read back from
// --timeline): any JSON is read or refused with std::invalid_argument, and what is read writes
// back (to_json) to a JSON that reads again to the same timeline.
#include "fuzz_input.hpp"
#include "pd/serving/timeline.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace sv = pd::serving;
    const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;  // not JSON: the parser's business, not the reader's
    try {
        const sv::Timeline t = sv::timeline_from_json(j);
        const nlohmann::json back = sv::to_json(t);
        const sv::Timeline again = sv::timeline_from_json(back);
        pd::fuzz::require(sv::to_json(again) == back, "a timeline read back writes the same JSON");
    } catch (const std::invalid_argument&) {
    }
    return 0;
}
