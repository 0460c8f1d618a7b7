/// @file executor.hpp
/// @brief Chapter 05's real executor: runs each step of the scheduler on chapter 04's model
/// (on a GPU or on the simulator) and times it. Includable from plain C++.
///
/// The model's cache has one slot per running request (the scheduler's slot, BatchItem::slot).
/// Every request gets a seeded synthetic prompt; the executor keeps what each has generated
/// (greedy), so an item's tokens are always the request's own: its prompt (the workload's, or a
/// seeded synthetic one) followed by its
/// output, from position `context` on (a decode feeds the last token generated; a recomputation
/// after a preemption re-feeds the prompt and the output so far).
#pragma once

#include "model/model.hpp"

#include "pd/buffer.hpp"
#include "pd/serving/paged_cache.hpp"
#include "pd/serving/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace pd::kernels::model {

/// Runs the scheduler's steps on a Model whose batch is the scheduler's slot count.
class ModelExecutor : public serving::Executor {
public:
    /// @param model the model (its batch = the scheduler's max_seqs, its max_seq >= every
    /// request's prompt + output)  @param requests the workload, by id (a request's own prompt
    /// tokens are used when it has them)  @param seed the synthetic prompts' seed
    /// @param pages the scheduler's paged cache, whose block tables the steps read (chapter 06;
    /// nullptr: the model's slots)
    /// @throws std::invalid_argument naming the request whose prompt and output exceed the cache slot
    ModelExecutor(Model& model, const std::vector<serving::Request>& requests, std::uint64_t seed,
                  const serving::PagedCache* pages = nullptr);

    /// Runs @p step as one mixed forward pass and greedy sampling; returns its wall-clock
    /// duration in seconds (host bookkeeping, uploads, kernels and the download of the sampled
    /// tokens: what a serving loop waits for).
    /// @throws std::logic_error if an item asks for tokens the request does not have yet
    double run(const serving::Step& step) override;
    /// "model: tiny, fp32 weights, fp32 cache, 8 slots of 64 positions, <device name> (wall-clock step times)".
    std::string describe() const override;

    /// The prompt of request @p id.
    /// @param id a request id of the workload
    const std::vector<int>& prompt(int id) const { return prompts_.at(std::size_t(id)); }
    /// The tokens request @p id has generated so far.
    /// @param id a request id of the workload
    const std::vector<int>& generated(int id) const { return generated_.at(std::size_t(id)); }

private:
    Model& model_;
    const serving::PagedCache* pages_;
    std::vector<std::vector<int>> prompts_, generated_;
    DeviceBuffer<int> next_;  // the sampled token of each sequence of a step
};

/// A seeded prompt of @p n token ids in [0, @p vocab): what the executor gives request @p id.
/// @param n tokens  @param vocab vocabulary size  @param seed the workload's seed  @param id the request
std::vector<int> synthetic_prompt(int n, int vocab, std::uint64_t seed, int id);

}  // namespace pd::kernels::model
