/// @file lab_case.hpp
/// @brief The grader's cases (scripts/grade, docs/grading.md): each lab's test file has a test
/// "labNN: a case the grader gives" (tags [.][labNN-case]: hidden, no ordinary run selects it),
/// which runs the lab's check on the case in the environment variable PD_LAB_CASE, one JSON
/// object whose fields are that lab's (its shape, its seed). Course staff's hidden cases reach
/// the student's code this way, one process per case. (The JSON is read in lab_case.cpp,
/// compiled once, so that the lab tests do not each compile a JSON library.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pd::testing {

/// One case of PD_LAB_CASE. Each accessor throws std::runtime_error naming the field when it is
/// missing or of another type (a required one), which Catch2 reports as the test's failure.
class LabCase {
public:
    /// The case of PD_LAB_CASE; throws naming the variable when it is missing or not a JSON object.
    static LabCase from_environment();
    /// The case as given, for the failure message.
    const std::string& text() const { return text_; }
    int integer(const char* key) const;                              ///< a required integer field
    std::uint64_t seed() const;                                      ///< the field "seed", required
    bool flag(const char* key, bool otherwise) const;                ///< a boolean field, or @p otherwise
    float number(const char* key, float otherwise) const;            ///< a number field, or @p otherwise
    std::string word(const char* key, const char* otherwise) const;  ///< a string field, or @p otherwise
    std::vector<int> integers(const char* key) const;                ///< a required array of integers

private:
    explicit LabCase(std::string text) : text_(std::move(text)) {}
    std::string text_;
};

}  // namespace pd::testing
