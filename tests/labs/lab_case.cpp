/// @file lab_case.cpp
/// @brief The grader's case of PD_LAB_CASE (lab_case.hpp).
#include "lab_case.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <stdexcept>

namespace pd::testing {

namespace {

nlohmann::json parse(const std::string& text) {
    nlohmann::json c = nlohmann::json::parse(text, nullptr, false);
    if (c.is_discarded() || !c.is_object()) throw std::runtime_error("PD_LAB_CASE is not a JSON object: " + text);
    return c;
}

/// The field @p key, which must be there.
nlohmann::json field(const std::string& text, const char* key) {
    const nlohmann::json c = parse(text);
    if (!c.contains(key)) throw std::runtime_error(std::string("the case has no field '") + key + "': " + text);
    return c[key];
}

template <typename T>
T get(const std::string& text, const char* key, const nlohmann::json& value) {
    try {
        return value.get<T>();
    } catch (const nlohmann::json::exception&) {
        throw std::runtime_error(std::string("the case's field '") + key + "' has another type: " + text);
    }
}

}  // namespace

LabCase LabCase::from_environment() {
    const char* text = std::getenv("PD_LAB_CASE");
    if (text == nullptr)
        throw std::runtime_error("PD_LAB_CASE is not set: this test runs a case that scripts/grade gives it");
    parse(text);
    return LabCase(text);
}

int LabCase::integer(const char* key) const {
    return get<int>(text_, key, field(text_, key));
}

std::uint64_t LabCase::seed() const {
    return get<std::uint64_t>(text_, "seed", field(text_, "seed"));
}

bool LabCase::flag(const char* key, bool otherwise) const {
    const nlohmann::json c = parse(text_);
    return c.contains(key) ? get<bool>(text_, key, c[key]) : otherwise;
}

float LabCase::number(const char* key, float otherwise) const {
    const nlohmann::json c = parse(text_);
    return c.contains(key) ? get<float>(text_, key, c[key]) : otherwise;
}

std::string LabCase::word(const char* key, const char* otherwise) const {
    const nlohmann::json c = parse(text_);
    return c.contains(key) ? get<std::string>(text_, key, c[key]) : std::string(otherwise);
}

std::vector<int> LabCase::integers(const char* key) const {
    return get<std::vector<int>>(text_, key, field(text_, key));
}

}  // namespace pd::testing
