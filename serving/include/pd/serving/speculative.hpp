/// @file speculative.hpp
/// @brief Speculative decoding on the host (chapter 09, no backend): the acceptance rules of a
/// verify step (greedy, and the rejection sampler of lab 09), the proposers that need no model
/// (prompt lookup, and an oracle of known acceptance rate), vLLM's acceptance metrics, and
/// Leviathan et al.'s formulas for the tokens per target step and the speed-up.
///
/// A verify step runs the target model once over the last accepted token and k draft tokens
/// (k + 1 positions) and keeps the longest prefix of the draft it agrees with, plus one token of
/// its own: the correction at the first disagreement, or a bonus token when all k are kept. A
/// step therefore adds between 1 and k + 1 tokens. The rejection sampler (Leviathan et al.,
/// "Fast Inference from Transformers via Speculative Decoding", ICML 2023; Chen et al.,
/// "Accelerating Large Language Model Decoding with Speculative Sampling", 2023) makes the
/// tokens it adds distributed exactly as the target's own samples, whatever the draft proposes.
///
/// rejection_sample() is the canonical code of lab 09 (solutions/09_speculative/
/// rejection_sampler.cpp), built into pd_serving from the lab tree like lab 05's step builder.
#pragma once

#include "pd/registry.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace pd::serving {

/// Greedy acceptance: the draft tokens the target keeps when it decodes greedily.
/// @param draft         [k] the draft tokens
/// @param target_choice [k + 1] the target's argmax after the last accepted token (position 0)
///                      and after each draft token (position i + 1 after draft[i])
/// @return n, the length of the longest prefix of @p draft with `draft[i] == target_choice[i]`;
///         the token the target adds after them is `target_choice[n]`
/// @pre `target_choice.size() == draft.size() + 1` (std::invalid_argument otherwise)
int accept_greedy(std::span<const int> draft, std::span<const int> target_choice);

/// A verify step's verdict for one sequence.
struct SpecVerdict {
    int accepted = 0;  ///< the draft tokens kept, a prefix of the draft (0 ... k)
    /// The token the target adds after them: the correction drawn from the residual at the first
    /// rejection, or the bonus token drawn from the target's last row when all were kept.
    int token = -1;
};

/// The rejection sampler (lab 09; Leviathan et al. 2023, Chen et al. 2023). For i = 0 ... k - 1,
/// with x = draft[i]: keep x when `u[i] * q_i(x) < p_i(x)` (the product in double, where it is
/// exact), that is with probability min(1, p_i(x) / q_i(x)); at the first rejection, draw the
/// token from the residual max(p_i - q_i, 0) (normalized, by sample_index() with `u[k]`) and stop.
/// When all k are kept, draw the bonus token from p_k with `u[k]`. The tokens it adds are
/// distributed as the target's own samples, whatever q is.
///
/// @param p     [(k + 1), V] row-major: the target's probabilities; row i is its distribution of
///              the token after i accepted draft tokens
/// @param q     [k, V] row-major: the draft's probabilities, row i the one draft[i] was drawn
///              from (a deterministic proposer passes one-hot rows)
/// @param draft [k] the draft tokens, each in [0, V)
/// @param V     the vocabulary size
/// @param u     [k + 1] uniforms in [0, 1): u[i] decides draft[i], u[k] draws the added token
/// @return how many draft tokens are kept, and the token added after them
/// @pre V >= 1; p.size() == (k + 1) * V, q.size() == k * V, u.size() == k + 1 where
///      k = draft.size() (k may be 0: the token is drawn from p_0); rows of p and q are
///      distributions (entries >= 0, sums 1 within rounding) and q_i(draft[i]) > 0, as when
///      draft[i] was drawn from q_i. The sizes and tokens are checked (std::invalid_argument
///      naming the argument).
SpecVerdict rejection_sample(std::span<const float> p, std::span<const float> q, std::span<const int> draft, int V,
                             std::span<const float> u);

/// Inverse-CDF draw in index order: the first index i with `w[0] + ... + w[i] > u * sum(w)`
/// (sums in double). Not part of lab 09; the lab's sampler uses it for its draws. Defined here,
/// inline, so that the lab's library (which links nothing of the engine) reaches it.
/// @param w the weights, >= 0 and finite, with sum > 0 (need not be normalized)
/// @param u a uniform in [0, 1)
/// @return the index drawn; an index whose weight is 0 is never returned
/// @pre as above (std::invalid_argument naming `w` or `u` otherwise)
inline int sample_index(std::span<const double> w, double u) {
    if (!(u >= 0.0 && u < 1.0))
        throw std::invalid_argument("sample_index: u = " + std::to_string(u) + " must be in [0, 1)");
    double total = 0.0;
    for (const double x : w) {
        if (!(x >= 0.0) || !std::isfinite(x))
            throw std::invalid_argument("sample_index: the weights w must be finite and >= 0 (found " +
                                        std::to_string(x) + ")");
        total += x;
    }
    if (!(total > 0.0)) throw std::invalid_argument("sample_index: the weights w must have a positive sum");
    const double target = u * total;
    double c = 0.0;
    int last = -1;  // the last index of positive weight: the draw when rounding leaves target >= c
    for (std::size_t i = 0; i < w.size(); ++i) {
        if (w[i] <= 0.0) continue;
        c += w[i];
        last = static_cast<int>(i);
        if (c > target) return last;
    }
    return last;
}

/// vLLM's acceptance metrics (`num_drafts`, `num_draft_tokens`, `num_accepted_tokens`, and
/// the acceptance per draft position), accumulated over verify steps.
struct AcceptanceStats {
    long long drafts = 0;                ///< verify steps that carried a draft of >= 1 token (vLLM's num_drafts)
    long long draft_tokens = 0;          ///< draft tokens proposed
    long long accepted = 0;              ///< draft tokens accepted
    std::vector<long long> proposed_at;  ///< per draft position i: the drafts with a token at i
    std::vector<long long> accepted_at;  ///< per draft position i: the drafts whose token i was accepted

    /// Adds one verify step of one sequence.
    /// @param proposed the draft's length (0: a step without a draft, which counts nothing)
    /// @param accepted how many of its tokens were kept (a prefix)
    /// @pre 0 <= accepted <= proposed (std::invalid_argument naming them otherwise)
    void record(int proposed, int accepted);
    /// Adds another set of counts (another sequence's, another run's).
    /// @param other the counts to add
    void merge(const AcceptanceStats& other);
    /// @return accepted / draft_tokens, or 0 when no token was proposed
    double acceptance_rate() const;
    /// @return 1 + accepted / drafts: the tokens a verify step adds, its correction or bonus
    ///         token included (1 when no draft was recorded)
    double mean_acceptance_length() const;
    /// @return accepted_at[i] / proposed_at[i] for each draft position i
    std::vector<double> per_position() const;
};

/// Leviathan et al.'s expected tokens per target step when each draft token is accepted with
/// probability @p a, independently, and the draft has @p k tokens: (1 - a^(k+1)) / (1 - a).
/// @param a the acceptance rate, in [0, 1]
/// @param k the draft tokens per step, >= 0
/// @return the expected tokens per verify step, 1 ... k + 1 (k + 1 at a = 1)
/// @throws std::invalid_argument naming `a` or `k` when out of range
double expected_tokens_per_step(double a, int k);

/// The predicted speed-up over plain decoding: expected_tokens_per_step(a, k) over the cost of
/// a step in decode steps, `k * c_draft + c_verify`. Leviathan et al.'s
/// (1 - a^(k+1)) / ((1 - a)(k c + 1)) is the case c_verify = 1.
/// @param a       the acceptance rate, in [0, 1]
/// @param k       the draft tokens per step, >= 0
/// @param c_draft a draft step's time over a target decode step's, >= 0
/// @param c_verify the verify pass's time (k + 1 tokens) over a target decode step's, > 0
/// @return the tokens per unit of decode-step time, relative to plain decoding's 1
/// @throws std::invalid_argument naming the argument out of range
double predicted_speedup(double a, int k, double c_draft, double c_verify);

/// Prompt lookup (vLLM's "ngram" speculative method, no draft model): for n from @p max_n down
/// to @p min_n, find the latest earlier occurrence of the last n tokens of @p tokens that is
/// followed by at least one token, and propose the up to @p k tokens that follow it.
/// @param tokens the prompt and the output so far
/// @param k      the most tokens to propose, >= 1
/// @param max_n  the longest suffix tried, >= min_n
/// @param min_n  the shortest suffix tried, >= 1
/// @return the proposal (1 ... k tokens), or empty when no suffix of length min_n ... max_n
///         occurs earlier
/// @throws std::invalid_argument naming `k`, `max_n` or `min_n` out of range
std::vector<int> propose_ngram(std::span<const int> tokens, int k, int max_n = 3, int min_n = 1);

/// The oracle draft (for tests and the lesson): its token i is truth[i] (the target's own
/// choice) with probability @p a, otherwise a token drawn uniformly from the V - 1 others. Its
/// decision for i is pd::philox_uniform(seed, stream, index0 + 2i) < a, the other token from
/// pd::philox_uniform(seed, stream, index0 + 2i + 1) (pd/philox.hpp): reproducible, and under
/// greedy acceptance each token is accepted with probability a, independently.
/// @param truth  the target's choices, each in [0, V)
/// @param V      the vocabulary size, >= 2
/// @param a      the probability of proposing the truth, in [0, 1]
/// @param seed   the run's seed  @param stream the sequence of draws  @param index0 the first draw's index
/// @return truth.size() tokens
/// @throws std::invalid_argument naming `V`, `a` or `truth` out of range
std::vector<int> propose_oracle(std::span<const int> truth, int V, double a, std::uint64_t seed, std::uint64_t stream,
                                std::uint64_t index0);

/// Chapter 09's proposers, as `--kernel` names them: the chapter's versions (its page's table).
inline const std::vector<Version>& proposer_versions() {
    static const std::vector<Version> v = {
        {"ngram",
         {DType::fp32, DType::bf16},
         Units::simt,
         "prompt lookup: the tokens that followed the latest earlier match of the last n tokens (no model)"},
        {"draft",
         {DType::fp32, DType::bf16},
         Units::simt,
         "a draft model: the target's first layers, sharing its embedding and LM head"},
        {"oracle",
         {DType::fp32, DType::bf16},
         Units::simt,
         "the target's own choice with probability a, another token otherwise: the formula's assumption"}};
    return v;
}

}  // namespace pd::serving
