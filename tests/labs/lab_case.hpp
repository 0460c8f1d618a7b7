/// @file lab_case.hpp
/// @brief The grader's cases (scripts/grade, docs/grading.md): each lab's test file has a test
/// "labNN: a case the grader gives" (tags [.][labNN-case]: hidden, no ordinary run selects it),
/// which runs the lab's check on the case in the environment variable PD_LAB_CASE, one JSON
/// object whose fields are that lab's (its shape, its seed). Course staff's hidden cases reach
/// the student's code this way, one process per case.
#pragma once

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace pd::testing {

/// The case of PD_LAB_CASE; fails the test naming the variable when it is missing or not JSON.
inline nlohmann::json lab_case() {
    const char* text = std::getenv("PD_LAB_CASE");
    if (text == nullptr) FAIL("PD_LAB_CASE is not set: this test runs a case that scripts/grade gives it");
    nlohmann::json c = nlohmann::json::parse(text, nullptr, false);
    if (c.is_discarded() || !c.is_object()) FAIL("PD_LAB_CASE is not a JSON object: " << text);
    return c;
}

}  // namespace pd::testing
