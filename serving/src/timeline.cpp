#include "pd/serving/timeline.hpp"

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

Timeline timeline_from_json(const nlohmann::json& j) {
    try {
        Timeline t;
        t.policy = j.at("policy").get<std::string>();
        for (const auto& s : j.at("steps")) {
            Timeline::StepRecord r{
                s.at("start_s").get<double>(), s.at("end_s").get<double>(), {},
                s.value("kv_used", 0LL),       s.value("running", 0),       s.value("kv_blocks", 0LL)};
            for (const auto& i : s.at("items"))
                r.step.items.push_back({i.at("request").get<int>(), i.at("tokens").get<int>(),
                                        i.at("context").get<int>(), i.at("prefill").get<bool>(),
                                        i.at("emits").get<bool>(), i.value("slot", -1)});
            t.steps.push_back(r);
        }
        for (const auto& r : j.at("requests")) {
            Timeline::RequestRecord rec;
            rec.request = {r.at("id").get<int>(), r.at("arrival_s").get<double>(), r.at("prompt_tokens").get<int>(),
                           r.at("output_tokens").get<int>()};
            rec.preemptions = r.at("preemptions").get<int>();
            rec.prefix_hit = r.value("prefix_hit", 0LL);
            rec.token_s = r.at("token_s").get<std::vector<double>>();
            t.requests.push_back(rec);
        }
        return t;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("timeline JSON: ") + e.what());
    }
}

}  // namespace pd::serving
