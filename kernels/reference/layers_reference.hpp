/// @file layers_reference.hpp
/// @brief CPU references of chapter 04's small layers (kernels/layers/layers.hpp), plain loops in
/// double: RMSNorm, RoPE, SwiGLU, the greedy argmax, and chapter 09's sampling rule
/// (kernels/layers/sampling.hpp). Layouts are those of the kernels:
/// activations token-major ([T, ...]), a head's pairs adjacent (x[2i], x[2i+1], as llama2.c).
/// Every function checks its sizes and throws std::invalid_argument naming the first one that
/// is wrong.
#pragma once

#include <span>
#include <vector>

namespace pd::reference {

/// y[t][i] = w[i] * x[t][i] / sqrt(mean(x[t]^2) + eps)
/// @param x [T, D]  @param w [D]  @param T rows  @param D width  @param eps epsilon (>= 0)
/// @return [T, D]
std::vector<double> rmsnorm(std::span<const float> x, std::span<const float> w, int T, int D, double eps);

/// adjacent pairs per head, angle pos*theta^(-2i/d): for each token t, head h and pair
/// i < d/2, (x0, x1) = (x[t][h][2i], x[t][h][2i+1]) becomes
/// (x0 cos a - x1 sin a, x0 sin a + x1 cos a) with a = positions[t] * theta^(-2i/d).
/// @param x [T, H, d]  @param positions [T]  @param T tokens  @param H heads
/// @param d head dim (even)  @param theta base (> 0)  @return [T, H, d]
std::vector<double> rope(std::span<const float> x, std::span<const int> positions, int T, int H, int d, double theta);

/// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
/// @param gate [n]  @param up [n] (the same size)  @return [n]
std::vector<double> swiglu(std::span<const float> gate, std::span<const float> up);

/// The index of the largest value of each row, the lowest index on ties.
/// @param logits [B, V]  @param B rows  @param V columns  @return [B]
std::vector<int> argmax_rows(std::span<const float> logits, int B, int V);  // lowest index on ties

/// One row sampled as chapter 09's kernel does, with a sort where the kernel bisects: p =
/// softmax(logits / temperature) in double; top-k (> 0) keeps every value >= the k-th largest;
/// top-p (< 1) keeps, of those, the largest ones (and every value tied with the last) until their
/// mass reaches top_p of the kept mass; the token is the first index, in vocabulary order, where
/// the kept mass summed so far exceeds u times its total.
struct SampledRow {
    int token = -1;             ///< the token drawn
    std::vector<double> probs;  ///< [V] the kept distribution (zeros outside)
    /// How far u times the total lies from the nearest edge of the cumulative sums, relative to
    /// the total: a kernel in fp32 may draw a neighbour when this is below its rounding.
    double margin = 0;
};
/// @param logits [V]  @param temperature > 0  @param top_k 0 (all) or 1 .. V
/// @param top_p in (0, 1]  @param u the draw, in [0, 1)  @return the token, the kept distribution, the margin
SampledRow sample_row(std::span<const float> logits, double temperature, int top_k, double top_p, double u);

}  // namespace pd::reference
