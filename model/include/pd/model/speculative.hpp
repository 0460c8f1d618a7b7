/// @file speculative.hpp
/// @brief Chapter 09: speculative decoding on chapter 04's model. A proposer guesses k tokens;
/// the target model checks them all in one pass over k + 1 positions (a small prefill over the
/// cache: chapter 05's varlen path), keeps the longest acceptable prefix plus one token of its
/// own, and rolls the cache back past it. Includable from plain C++.
///
/// Like the executor (executor.hpp), this joins the model to pd_serving's host algorithms: the
/// acceptance rules, the proposers that need no model, the acceptance metrics
/// (pd/serving/speculative.hpp).
#pragma once

#include "pd/model/model.hpp"
#include "pd/serving/speculative.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pd::model {

/// The most draft tokens one step proposes per sequence.
inline constexpr int kMaxDraft = 16;

/// How speculative decoding runs. Its errors name these fields (SpecOptions.k = 0 ...).
struct SpecOptions {
    /// "none" (plain decoding: one token per target pass), "ngram" (prompt lookup, no model),
    /// "draft" (a draft model: the target's first layers), "oracle" (the target's own choice with
    /// probability accept_rate, otherwise another token: for tests and the lesson).
    std::string proposer = "none";
    int k = 4;                 ///< draft tokens per step, 1 ... kMaxDraft (fewer near the end)
    double accept_rate = 0.8;  ///< oracle: the probability a that a proposal is the target's choice
    int ngram_max = 3;         ///< ngram: the longest suffix matched
    int ngram_min = 1;         ///< ngram: the shortest
    int draft_layers = 1;      ///< draft: the target's first layers it keeps (draft_config())
    /// Greedy (temperature 0: greedy acceptance, the longest matching prefix) or sampled (the
    /// rejection sampler: the output keeps the target's distribution exactly).
    kernels::layers::SamplingParams sampling;
};

/// One speculative generation of G tokens for each of B sequences.
struct SpecGeneration {
    std::vector<int> tokens;         ///< [G, B] the generated tokens
    serving::AcceptanceStats stats;  ///< vLLM's acceptance metrics over every verify step
    int target_passes = 0;           ///< target passes after the prefill (verify or decode steps)
    int draft_passes = 0;            ///< passes of the draft model
    double prefill_ms = 0;           ///< the prompts' pass (and the draft's)
    double target_ms = 0;            ///< every verify pass (CUDA events; CPU time on the simulator)
    double draft_ms = 0;             ///< every draft pass
    std::vector<int> context;        ///< [B] positions in each sequence's cache at the end
    int blocks_held = 0;             ///< pages: blocks the sequences hold at the end
    long long sequence_steps = 0;    ///< verify steps summed over the sequences (a pass of S sequences: S)
    long long step_tokens = 0;       ///< tokens those steps produced (all but each sequence's first)
    /// Greedy runs: the ids of the 5 largest logits of the target's row that emitted each token,
    /// largest first [G, B, 5] (compare_spec_tokens() needs them; empty when sampled).
    std::vector<int> top5;
    /// Oracle runs: the first generated position at which each sequence left the oracle's truth
    /// (its tokens are the target's greedy choices, which the truth, a plain run's tokens, should
    /// be), G when it never did [B]. The acceptance metrics (stats, sequence_steps,
    /// step_tokens) count only the steps before it: past it the truth proposes another
    /// sequence's tokens. Empty for the other proposers.
    std::vector<int> off_truth;
    /// Tokens per target step of a sequence: step_tokens / sequence_steps (1 for plain decoding;
    /// vLLM's mean acceptance length when every step carries a draft of k tokens).
    double tokens_per_step() const { return sequence_steps > 0 ? double(step_tokens) / double(sequence_steps) : 0.0; }
};

/// Greedy speculation's tokens against plain decoding's, by the rule of compare_generations():
/// fp32, the same tokens at every position; bf16 (whose verify pass, a GEMM and varlen flash
/// attention, rounds differently from a decode step's GEMV and decode attention), the same tokens
/// up to a first divergence, where each side's token is among the other side's top 5 (a near tie
/// between two tokens that the roundings split differently). Returns a one-line verdict and sets
/// @p passed. @param plain the baseline (proposer "none")  @param spec a speculative run
/// @param B sequences  @param d the rule (fp32 or bf16)  @param passed the verdict
std::string compare_spec_tokens(const SpecGeneration& plain, const SpecGeneration& spec, int B, DType d, bool& passed);

/// The draft model's shape: the target's first @p layers (sharing its embedding, final norm and
/// LM head). @param target the target's shape  @param layers 1 ... target.layers - 1
/// @throws std::invalid_argument naming SpecOptions.draft_layers
ModelConfig draft_config(const ModelConfig& target, int layers);
/// The draft model's weights from the target's (download_weights()): its first @p layers.
/// @param target the target's weights  @param c the target's shape  @param layers as draft_config()
ModelWeights draft_weights(const ModelWeights& target, const ModelConfig& c, int layers);

/// Throws std::invalid_argument naming the field of @p o out of range for these models and
/// this generation (what generate_speculative() checks before it runs).
/// @param o the options  @param target the target  @param draft the draft model or null
/// @param B sequences  @param P prompt tokens  @param G tokens to generate  @param truth the oracle's
void check_spec(const SpecOptions& o, const Model& target, const Model* draft, int B, int P, int G,
                std::span<const int> truth);

/// Generates @p G tokens after each of the prompts [B, P] (B = the target's batch), speculating
/// with @p o: prefill; then each step proposes up to k tokens per sequence, verifies them in one
/// target pass of k + 1 tokens per sequence (every row's logits), accepts (greedy or the
/// rejection sampler), and rolls back: each sequence's length moves to its accepted tokens, a
/// paged cache frees the blocks past it, the draft model's length moves back too. With proposer
/// "none" every step is a plain decode step: the baseline, through the same loop.
/// @param target the model that decides (slots in order, or pages)
/// @param draft the draft model (proposer "draft"; batch B, slots), else null
/// @param prompt [B, P]  @param P prompt tokens  @param G tokens to generate per sequence
/// @param o how to speculate  @param truth oracle: the target's greedy tokens [G, B] (a plain run)
/// @return the tokens, the acceptance metrics, the passes and their times
SpecGeneration generate_speculative(Model& target, Model* draft, std::span<const int> prompt, int P, int G,
                                    const SpecOptions& o, std::span<const int> truth = {});

}  // namespace pd::model
