/// @file sampling.hpp
/// @brief Chapter 09: sampling the next token on the device, with temperature, top-k and top-p
/// (nucleus), from Philox draws (pd/philox.hpp) that the host can recompute. Includable from
/// plain C++ (tests, programs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace pd::kernels::layers {

/// How a next token is chosen from a row of logits (the rules of llama2.c's `run.c` and of
/// Hugging Face's generate(), applied in this order).
struct SamplingParams {
    /// 0: greedy, the argmax (lowest index on a tie). > 0: softmax(logits / temperature).
    float temperature = 0.f;
    /// > 0: keep the top_k most likely tokens (every token tied with the k-th is kept); 0: all.
    int top_k = 0;
    /// < 1: keep the smallest set of most likely tokens whose probability reaches top_p (of the
    /// mass top-k kept), the nucleus; 1: all.
    float top_p = 1.f;
    std::uint64_t seed = 0;  ///< the Philox key of every draw
    /// True when the rule is the argmax. @return temperature == 0
    bool greedy() const { return temperature == 0.f; }
};

/// Throws std::invalid_argument naming the field out of range: temperature in [0, 100], top_k in
/// [0, V], top_p in (0, 1]. @param p the parameters  @param V the vocabulary
void check_sampling(const SamplingParams& p, int V);

/// "greedy", or "temperature 0.8, top-k 40, top-p 0.95" (the parts that act).
/// @param p the parameters
std::string describe(const SamplingParams& p);

/// Samples one token from each row of logits, one block per row:
///  1. greedy (temperature 0): the argmax; probs is the one-hot row of it;
///  2. otherwise p = softmax(logits / temperature) in fp32; top-k keeps the values >= the k-th
///     largest and top-p the values >= the largest threshold whose kept mass reaches top_p of
///     what top-k kept (each threshold found by bisection on the float's bits, 31 block-wide
///     counts, no sort); probs holds the kept p, renormalized, and zeros elsewhere;
///  3. the token: with u = pd::philox_uniform(seed, streams[r], positions[r]), the first index
///     (in vocabulary order) where the cumulative kept mass exceeds u times the total.
/// A sequence's draw for a position is the same in any batch, on either backend.
/// @param logits [R, V]  @param probs [R, V], written (the distribution each token was drawn from)
/// @param tokens [R], written  @param streams [R] (device) each row's stream: its sequence's id
/// @param positions [R] (device) each row's draw index: the position of the token it chooses
/// @param R rows  @param V vocabulary  @param p the rule  @param stream the stream to launch on
/// @pre check_sampling(p, V)
void sample(const float* logits, float* probs, int* tokens, const int* streams, const int* positions, int R, int V,
            const SamplingParams& p, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::layers
