/// @file attention_reference.hpp
/// @brief CPU reference of causal scaled dot-product attention (chapter 01): plain loops,
/// double accumulation, the layout of kernels/attention/attention.hpp and its mask rule
/// (allowed_keys(), the same function the kernels call).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace pd::reference {

/// O = softmax(mask(Q K^T / sqrt(d))) V for every batch and head.
/// @param q [B, H, Sq, d]  @param k [B, H, Sk, d]  @param v [B, H, Sk, d]
/// @param batch B  @param heads H  @param q_len Sq, queries  @param kv_len Sk, keys and values
/// @param head_dim d
/// @param causal query i attends to keys 0 .. Sk - Sq + i when true, to all keys otherwise
/// @pre 1 <= Sq <= Sk, and the spans hold exactly the elements of their shapes (else
/// std::invalid_argument). @return [B, H, Sq, d]
std::vector<double> attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                              int batch, int heads, int q_len, int kv_len, int head_dim, bool causal);

/// The scores S = Q K^T / sqrt(d), every one of the Sq x Sk of each head (no mask: the scores
/// kernel computes them all), [B, H, Sq, Sk].
/// @param q [B, H, Sq, d]  @param k [B, H, Sk, d]
/// @param batch B  @param heads H  @param q_len Sq, queries  @param kv_len Sk, keys
/// @param head_dim d  @pre as in attention(). @return [B, H, Sq, Sk]
std::vector<double> attention_scores(std::span<const float> q, std::span<const float> k, int batch, int heads,
                                     int q_len, int kv_len, int head_dim);

/// The probabilities P (after mask and softmax), [B, H, Sq, Sk], exact zeros where masked.
/// @param q [B, H, Sq, d]  @param k [B, H, Sk, d]
/// @param batch B  @param heads H  @param q_len Sq, queries  @param kv_len Sk, keys
/// @param head_dim d  @param causal the mask rule, as in attention()
/// @pre as in attention(). @return [B, H, Sq, Sk]
std::vector<double> attention_probabilities(std::span<const float> q, std::span<const float> k, int batch,
                                            int heads, int q_len, int kv_len, int head_dim, bool causal);

}  // namespace pd::reference
