/// @file lab_case.hpp
/// @brief The grader's cases (scripts/grade, docs/grading.md): each lab's test file has a test
/// "labNN: a case the grader gives" (tags [.][labNN-case]: hidden, no ordinary run selects it),
/// which runs the lab's check on the case in the environment variable PD_LAB_CASE: the lab's
/// fields (its shape, its seed) as `key=value` words, a list as `1,2,3`, a flag as `true` or
/// `false` (`batch=2 lens=5,100 dtype=bf16 seed=7`). Course staff's hidden cases reach the
/// student's code this way, one process per case.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pd::testing {

/// One case of PD_LAB_CASE. Each accessor throws std::runtime_error naming the field when it is
/// missing (a required one) or not of its type, which Catch2 reports as the test's failure.
class LabCase {
public:
    /// The case of PD_LAB_CASE; throws naming the variable when it is missing or not `key=value` words.
    static LabCase from_environment();
    /// The case as given, for the failure message.
    const std::string& text() const { return text_; }
    int integer(const char* key) const;                              ///< a required integer field
    std::uint64_t seed() const;                                      ///< the field "seed", required
    bool flag(const char* key, bool otherwise) const;                ///< true or false, or @p otherwise
    float number(const char* key, float otherwise) const;            ///< a number, or @p otherwise
    std::string word(const char* key, const char* otherwise) const;  ///< a word, or @p otherwise
    std::vector<int> integers(const char* key) const;                ///< a required list of integers

private:
    LabCase(std::string text, std::map<std::string, std::string> fields)
        : text_(std::move(text)), fields_(std::move(fields)) {}
    const std::string* find(const char* key) const;
    const std::string& need(const char* key) const;
    std::string text_;
    std::map<std::string, std::string> fields_;
};

}  // namespace pd::testing
