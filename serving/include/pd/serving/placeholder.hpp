/// @file placeholder.hpp
/// @brief Tokens for an executor that only predicts times (host C++, no backend): the cost
/// model serving "llama-3-8b on an H200" on a machine without a GPU streams deterministic
/// placeholder words at the predicted rate, and can be told to end each request with an
/// end-of-sequence token after N tokens, so that a server, its clients and its stop handling
/// can be exercised in real time without the model.
#pragma once

#include "pd/serving/types.hpp"

#include <string>
#include <vector>

namespace pd::serving {

/// An executor (the cost model) that emits placeholder token ids: a request's token k is a
/// word of a fixed list chosen by (its id, k), and, when eos_after > 0, its token eos_after - 1
/// is placeholder_eos() instead. Times, drafts and descriptions are the wrapped executor's.
class PlaceholderTokens : public Executor {
public:
    /// @param inner the executor that runs (or predicts) the steps (it must outlive this one)
    /// @param eos_after 0: no end-of-sequence token; N >= 1: each request's N-th token is one
    /// @throws std::invalid_argument for eos_after < 0
    PlaceholderTokens(Executor& inner, int eos_after = 0);

    /// Runs @p step on the wrapped executor and makes the ids of the tokens it emits.
    double run(const Step& step) override;
    /// The wrapped executor's description, with "placeholder tokens" (and the end-of-sequence rule).
    std::string describe() const override;
    /// The wrapped executor's accepted drafts.
    std::vector<int> accepted() const override { return inner_.accepted(); }
    /// The ids the last step emitted, in Scheduler::complete()'s order.
    std::vector<int> tokens() const override { return tokens_; }
    /// Passes the arrival on to the wrapped executor.
    void arrive(const Request& r) override;

    /// The placeholder vocabulary's size: its words, then the end-of-sequence id.
    static int vocab();
    /// The end-of-sequence id (vocab() - 1), whose text is empty.
    static int placeholder_eos() { return vocab() - 1; }
    /// The text of placeholder id @p id: " " and a word ("" for the end of sequence).
    /// @throws std::invalid_argument for an id outside 0 ... vocab() - 1
    static std::string text(int id);

private:
    Executor& inner_;
    int eos_after_;
    std::vector<int> emitted_;  // tokens made so far, by request id
    std::vector<int> tokens_;   // the last step's ids
};

}  // namespace pd::serving
