/// @file executor.hpp
/// @brief Chapter 05's real executor, the one place where the model meets the serving engine:
/// it runs each step of the scheduler as one forward pass of chapter 04's model (on a GPU or on
/// the simulator) and times it. Includable from plain C++.
///
/// The model's cache has one slot per running request (the scheduler's slot, BatchItem::slot).
/// Every request gets a seeded synthetic prompt; the executor keeps what each has generated
/// (greedy, or drawn by the request's own rule, Request::sampling), so an item's tokens are always the request's own:
/// its prompt (the workload's, or a seeded synthetic one) followed by its output, from position `context` on (a decode
/// feeds the last token generated; a recomputation after a preemption re-feeds the prompt and the output so far).
#pragma once

#include "pd/model/model.hpp"

#include "pd/bench.hpp"
#include "pd/buffer.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/options.hpp"
#include "pd/serving/paged_cache.hpp"
#include "pd/serving/scheduler.hpp"
#include "pd/serving/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace pd::model {

struct Pass;  // generate.hpp

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

    /// Runs @p step as one mixed forward pass and each request's sampling; returns its wall-clock
    /// duration in seconds (host bookkeeping, uploads, kernels and the download of the sampled
    /// tokens: what a serving loop waits for).
    /// @throws std::logic_error if an item asks for tokens the request does not have yet
    double run(const serving::Step& step) override;
    /// describe_engine_model() of its model.
    std::string describe() const override;

    /// The prompt of request @p id.
    /// @param id a request id of the workload
    const std::vector<int>& prompt(int id) const { return prompts_.at(std::size_t(id)); }
    /// The tokens request @p id has generated so far.
    /// @param id a request id of the workload
    const std::vector<int>& generated(int id) const { return generated_.at(std::size_t(id)); }
    /// The FLOPs and fewest bytes of the forward passes run so far (Model::cost() of each step).
    const Cost& spent() const { return spent_; }
    /// Chapter 09: the draft tokens each item of the last step kept (greedy acceptance of prompt
    /// lookup's guesses; 0 for an item without a draft).
    std::vector<int> accepted() const override { return accepted_; }
    /// Chapter 13: the token ids the last step emitted (each emitting item's kept drafts, then its token).
    std::vector<int> tokens() const override { return tokens_; }
    /// Chapter 13: takes on request @p r, submitted to an online engine (a request of the
    /// constructor's workload is known already). @param r the request, its id the next one
    /// @throws std::invalid_argument as the constructor, or for an id out of order
    void arrive(const serving::Request& r) override;

private:
    /// The token of each row of logits of @p step's pass @p pass, by its request's rule: the
    /// argmax when every request is greedy, else Model::sample() with a rule per row (a seeded
    /// request's rows drawn from stream 0, so its draws are keyed by its seed and position only).
    std::vector<int> choose_rows(const serving::Step& step, Pass& pass);

    Model& model_;
    const serving::PagedCache* pages_;
    std::vector<std::vector<int>> prompts_, generated_;
    DeviceBuffer<int> next_;                            // the sampled token of each sequence of a step
    Cost spent_;                                        // the steps' costs, summed
    std::vector<int> accepted_;                         // per item of the last step: its draft tokens kept
    std::vector<int> tokens_;                           // the ids the last step emitted
    std::vector<serving::Request::Sampling> sampling_;  // each request's rule
    std::uint64_t seed_;                                // the synthetic prompts' seed
};

// [engine_model_options]
/// The options of the model an engine runs on: a cache slot per request the scheduler runs at
/// once (its max_seqs), or the blocks of its paged cache, and activations for the largest step
/// it can build for @p requests (serving::max_step_tokens()), so that no timed step allocates.
/// @param config the model's shape  @param scheduler the scheduler's limits  @param requests the workload
/// @param weights the weights' type  @param kv the cache's type  @param sm_count the device's SMs
/// @param quant the weights' quantized format (QuantOptions::format: none, int8, int4, fp8)
/// @throws std::invalid_argument naming the field out of range (Model::check_options())
ModelOptions engine_model_options(const ModelConfig& config, const serving::SchedulerConfig& scheduler,
                                  const std::vector<serving::Request>& requests, DType weights, DType kv, int sm_count,
                                  const std::string& quant = "none");
// [engine_model_options]

/// "model: tiny, fp32 weights, fp32 cache, 8 slots of 512 positions, <device name> (wall-clock step
/// times)": the model an engine runs on. @param config its shape  @param options how it runs
std::string describe_engine_model(const ModelConfig& config, const ModelOptions& options);

/// One replay of @p requests on chapter 04's model: a fresh model of @p config with the options
/// of engine_model_options() (seeded synthetic weights, warmed up, so every replay starts from the
/// same state and no timed step allocates), each of the scheduler's steps one forward pass.
/// Returns the timeline (the scheduler's invariants checked after every step); @p generated, if
/// given, receives the tokens each request generated.
/// @param config the model's shape  @param scheduler the scheduler's limits  @param requests the workload
/// @param weights the weights' type  @param kv the cache's type  @param sm_count the device's SMs
/// @param quant the weights' quantized format (QuantOptions::format)
/// @param seed the weights' and the synthetic prompts' seed  @param generated where the tokens go (or null)
/// @param steps_profile when given, `--profile`'s scope around the engine's steps (the model's
/// warm-up left out): Bench::begin_profile() before them, and the profile of their kernels
/// after them (Bench::end_profile(), with the steps' summed Model::cost())
serving::Timeline serve_on_model(const ModelConfig& config, const serving::SchedulerConfig& scheduler,
                                 const std::vector<serving::Request>& requests, DType weights, DType kv, int sm_count,
                                 const std::string& quant, std::uint64_t seed,
                                 std::vector<std::vector<int>>* generated = nullptr,
                                 std::pair<Bench*, nlohmann::json*> steps_profile = {});

/// Before any replay on the model: checks the model that each of @p schedulers will run on
/// (engine_model_options(): the fields in range; its weights, cache and activations within the
/// device's memory, Bench::require_fits() with @p advice) and returns the description of the
/// executor, describe_engine_model() with every cache ("4 slots of 512 positions / 130 blocks of 16
/// positions"). @param bench the harness (`--dtype`, quantized formats included; the device)  @param config the model's
/// shape
/// @param schedulers the replays' limits  @param requests the workload  @param kv the cache's type
/// @param advice what to lower when it does not fit ("choose a smaller --preset, or lower --max-seqs")
/// @throws std::invalid_argument naming the field out of range, or what does not fit
std::string prepare_engine_models(Bench& bench, const ModelConfig& config,
                                  const std::vector<serving::SchedulerConfig>& schedulers,
                                  const std::vector<serving::Request>& requests, DType kv, const std::string& advice);

/// One replay of @p requests under @p scheduler with the executor that chapters 05 and 06 choose
/// with `--executor`: chapter 04's model (serve_on_model(), with the harness's `--dtype`, its
/// device and the options' `--kv-dtype`), or the cost model of @p cost. Returns the timeline (the
/// scheduler's invariants checked after every step); @p generated, if given, receives the tokens
/// each request generated on the model.
/// @param o the serving options  @param bench the harness  @param cost the cost model's machine and model
/// @param scheduler the scheduler's limits  @param requests the workload  @param generated where the tokens go (or
/// null)
/// @param profile with `--profile` on the model, receives the profile of the replay's steps (for
/// Bench::add_profile() to the row that reports the replay); null otherwise
serving::Timeline replay(const serving::ServingOptions& o, Bench& bench, const serving::CostModelConfig& cost,
                         const serving::SchedulerConfig& scheduler, const std::vector<serving::Request>& requests,
                         std::vector<std::vector<int>>* generated = nullptr, nlohmann::json* profile = nullptr);

/// A seeded prompt of @p n token ids in [0, @p vocab): what the executor gives request @p id.
/// @param n tokens  @param vocab vocabulary size  @param seed the workload's seed  @param id the request
std::vector<int> synthetic_prompt(int n, int vocab, std::uint64_t seed, int id);

}  // namespace pd::model
