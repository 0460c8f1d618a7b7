/// @file lab_case.cpp
/// @brief The grader's case of PD_LAB_CASE (lab_case.hpp).
#include "lab_case.hpp"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace pd::testing {

namespace {

/// @p value as an integer in [lo, hi], all of it; throws naming @p key otherwise.
long long whole(const std::string& key, const std::string& value, long long lo, long long hi) {
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != value.size() || v < lo || v > hi)
        throw std::runtime_error("the case's " + key + " = '" + value + "' is not an integer in range");
    return v;
}

}  // namespace

LabCase LabCase::from_environment() {
    const char* text = std::getenv("PD_LAB_CASE");
    if (text == nullptr)
        throw std::runtime_error("PD_LAB_CASE is not set: this test runs a case that scripts/grade gives it");
    std::map<std::string, std::string> fields;
    std::istringstream words(text);
    for (std::string word; words >> word;) {
        const std::size_t eq = word.find('=');
        if (eq == 0 || eq == std::string::npos || eq + 1 == word.size())
            throw std::runtime_error("PD_LAB_CASE: '" + word + "' is not key=value (in '" + text + "')");
        fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    return LabCase(text, std::move(fields));
}

const std::string* LabCase::find(const char* key) const {
    const auto it = fields_.find(key);
    return it == fields_.end() ? nullptr : &it->second;
}

const std::string& LabCase::need(const char* key) const {
    if (const std::string* v = find(key)) return *v;
    throw std::runtime_error(std::string("the case has no ") + key + ": " + text_);
}

int LabCase::integer(const char* key) const {
    return int(whole(key, need(key), -(1LL << 31), (1LL << 31) - 1));
}

std::uint64_t LabCase::seed() const {
    const std::string& v = need("seed");
    std::size_t used = 0;
    unsigned long long s = 0;
    try {
        s = std::stoull(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != v.size() || v[0] == '-')
        throw std::runtime_error("the case's seed = '" + v + "' is not a seed");
    return s;
}

bool LabCase::flag(const char* key, bool otherwise) const {
    const std::string* v = find(key);
    if (v == nullptr) return otherwise;
    if (*v != "true" && *v != "false")
        throw std::runtime_error(std::string("the case's ") + key + " is not true or false");
    return *v == "true";
}

float LabCase::number(const char* key, float otherwise) const {
    const std::string* v = find(key);
    if (v == nullptr) return otherwise;
    std::size_t used = 0;
    float f = 0;
    try {
        f = std::stof(*v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != v->size()) throw std::runtime_error(std::string("the case's ") + key + " is not a number");
    return f;
}

std::string LabCase::word(const char* key, const char* otherwise) const {
    const std::string* v = find(key);
    return v == nullptr ? std::string(otherwise) : *v;
}

std::vector<int> LabCase::integers(const char* key) const {
    std::vector<int> out;
    std::istringstream items(need(key));
    for (std::string item; std::getline(items, item, ',');)
        out.push_back(int(whole(key, item, -(1LL << 31), (1LL << 31) - 1)));
    return out;
}

}  // namespace pd::testing
