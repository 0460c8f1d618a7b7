#include "pd/serving/timeline.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pd::serving {

std::string to_string(const Step& step) {
    std::ostringstream os;
    for (const BatchItem& i : step.items)
        os << "(" << i.request << " " << i.tokens << "@" << i.context << " " << (i.prefill ? "P" : "D")
           << (i.emits ? "!" : "") << ")";
    return os.str();
}

nlohmann::json to_json(const Timeline& t) {
    nlohmann::json steps = nlohmann::json::array(), requests = nlohmann::json::array();
    for (const Timeline::StepRecord& s : t.steps) {
        nlohmann::json items = nlohmann::json::array();
        for (const BatchItem& i : s.step.items)
            items.push_back({{"request", i.request},
                             {"tokens", i.tokens},
                             {"context", i.context},
                             {"prefill", i.prefill},
                             {"emits", i.emits},
                             {"slot", i.slot}});
        steps.push_back({{"start_s", s.start_s},
                         {"end_s", s.end_s},
                         {"kv_used", s.kv_used},
                         {"running", s.running},
                         {"kv_blocks", s.kv_blocks},
                         {"items", items}});
    }
    for (const Timeline::RequestRecord& r : t.requests)
        requests.push_back({{"id", r.request.id},
                            {"arrival_s", r.request.arrival_s},
                            {"prompt_tokens", r.request.prompt_tokens},
                            {"output_tokens", r.request.output_tokens},
                            {"preemptions", r.preemptions},
                            {"prefix_hit", r.prefix_hit},
                            {"token_s", r.token_s}});
    return {{"policy", t.policy}, {"steps", steps}, {"requests", requests}};
}

namespace {

/// The integer at @p key of @p j (or @p missing when the key is absent and one is given), checked
/// to be an integer that fits an I: a JSON number such as 1e100 read as an int would be undefined.
template <typename I>
I integer_at(const nlohmann::json& j, const char* key, std::optional<I> missing = std::nullopt) {
    if (missing && !j.contains(key)) return *missing;
    const nlohmann::json& v = j.at(key);
    const bool fits = v.is_number_unsigned()  ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<I>::max())
                      : v.is_number_integer() ? v.get<std::int64_t>() >= std::int64_t(std::numeric_limits<I>::min()) &&
                                                    v.get<std::int64_t>() <= std::int64_t(std::numeric_limits<I>::max())
                                              : false;
    if (!fits)
        throw std::invalid_argument(std::string("timeline JSON: ") + key + " = " + v.dump() +
                                    " is not an integer in range");
    return static_cast<I>(v.get<std::int64_t>());
}

}  // namespace

Timeline timeline_from_json(const nlohmann::json& j) {
    try {
        Timeline t;
        t.policy = j.at("policy").get<std::string>();
        for (const auto& s : j.at("steps")) {
            Timeline::StepRecord r{s.at("start_s").get<double>(),
                                   s.at("end_s").get<double>(),
                                   {},
                                   integer_at<long long>(s, "kv_used", 0),
                                   integer_at<int>(s, "running", 0),
                                   integer_at<long long>(s, "kv_blocks", 0)};
            for (const auto& i : s.at("items"))
                r.step.items.push_back({integer_at<int>(i, "request"), integer_at<int>(i, "tokens"),
                                        integer_at<int>(i, "context"), i.at("prefill").get<bool>(),
                                        i.at("emits").get<bool>(), integer_at<int>(i, "slot", -1)});
            t.steps.push_back(r);
        }
        for (const auto& r : j.at("requests")) {
            Timeline::RequestRecord rec;
            rec.request = {integer_at<int>(r, "id"), r.at("arrival_s").get<double>(),
                           integer_at<int>(r, "prompt_tokens"), integer_at<int>(r, "output_tokens")};
            rec.preemptions = integer_at<int>(r, "preemptions");
            rec.prefix_hit = integer_at<long long>(r, "prefix_hit", 0);
            rec.token_s = r.at("token_s").get<std::vector<double>>();
            t.requests.push_back(rec);
        }
        return t;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("timeline JSON: ") + e.what());
    }
}

}  // namespace pd::serving
