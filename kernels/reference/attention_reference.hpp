/// @file attention_reference.hpp
/// @brief CPU references of attention, plain loops in double: causal scaled dot-product
/// attention (chapter 01, the layout of kernels/attention/attention.hpp and its mask rule
/// allowed_keys(), the same function the kernels call), decode attention over a KV cache
/// (chapter 04) and the varlen attention of a mixed batch (chapter 05).
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
std::vector<double> attention(std::span<const float> q, std::span<const float> k, std::span<const float> v, int batch,
                              int heads, int q_len, int kv_len, int head_dim, bool causal);

/// Chapter 07's attention: as attention() with grouped-query heads (query head h reads KV head
/// h / (H / Hkv)), and the logsumexp of each row, log sum_j exp(q . k_j / sqrt(d)) over its
/// allowed keys, which flash attention writes beside O.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param batch B  @param heads H  @param kv_heads Hkv (H % Hkv == 0)  @param q_len Sq  @param kv_len Sk
/// @param head_dim d  @param causal the mask rule, as in attention()
/// @param lse [B, H, Sq] out, when not null
/// @param bf16_probabilities round each unnormalized probability exp(s - max) to bf16 before it
/// weights V, as the tensor-core kernels round P for their P V products (FlashAttention-2's
/// recipe); the row's sum stays unrounded, as theirs does. Their yardstick of bf16 error.
/// @pre 1 <= Sq <= Sk and the spans hold exactly their shapes' elements (else std::invalid_argument)
/// @return O [B, H, Sq, d]
std::vector<double> attention_gqa(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                  int batch, int heads, int kv_heads, int q_len, int kv_len, int head_dim, bool causal,
                                  std::vector<double>* lse = nullptr, bool bf16_probabilities = false);

/// O and the logsumexp of the query rows @p rows only (indices into [B, H, Sq]) of
/// attention_gqa()'s problem, appended to @p out ([rows, d]) and @p lse: each row alone is one
/// query over its allowed keys of its KV head, so a check of a large problem costs its rows,
/// not the whole square. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param batch B  @param heads H  @param kv_heads Hkv  @param q_len Sq  @param kv_len Sk
/// @param head_dim d  @param causal the mask rule  @param rows the rows, each below B H Sq
/// @param out O's rows out, appended  @param lse their logsumexp, appended
/// @param bf16_probabilities as in attention_gqa()
void attention_gqa_rows(std::span<const float> q, std::span<const float> k, std::span<const float> v, int batch,
                        int heads, int kv_heads, int q_len, int kv_len, int head_dim, bool causal,
                        std::span<const std::size_t> rows, std::vector<double>& out, std::vector<double>& lse,
                        bool bf16_probabilities = false);

/// The query rows (indices into [B, H, Sq]) a check of an attention output compares, in order:
/// every row when @p all, else 64 rows spread over the Sq queries of the first and of the last
/// of the @p batch_heads (sequence, head) pairs (fewer when Sq < 64).
/// @param batch_heads B H  @param q_len Sq  @param all every row
std::vector<std::size_t> attention_check_rows(std::size_t batch_heads, int q_len, bool all);

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
std::vector<double> attention_probabilities(std::span<const float> q, std::span<const float> k, int batch, int heads,
                                            int q_len, int kv_len, int head_dim, bool causal);

/// q [B, Hq, d]; k, v [B, Hkv, S_max, d] given as float; kv_len[b] in 1..S_max; returns [B, Hq, d]; query head h uses
/// KV head h / (Hq/Hkv); scale 1/sqrt(d); softmax over keys 0..kv_len[b]-1
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d]  @param v [B, Hkv, S_max, d]
/// @param kv_len [B] positions of each sequence's cache in use  @param batch B
/// @param heads Hq  @param kv_heads Hkv (Hq % Hkv == 0)  @param head_dim d  @param max_seq S_max
/// @return [B, Hq, d]
std::vector<double> decode_attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                     std::span<const int> kv_len, int batch, int heads, int kv_heads, int head_dim,
                                     int max_seq);

/// Varlen attention of a mixed batch (chapter 05): sequence s has q_len[s] queries at rows
/// q_start[s] ... q_start[s] + q_len[s] - 1 of q, the last q_len[s] of the kv_len[s] positions
/// of cache slot slot[s]; query i of it attends to keys 0 ... allowed_keys(i, q_len[s],
/// kv_len[s]) - 1 of that slot (the causal rule of attention::allowed_keys()), query head h to
/// KV head h / (Hq/Hkv), scale 1/sqrt(d). Rows of q that no sequence owns come back as zeros.
/// @param q [T, Hq, d]  @param k [slots, Hkv, S_max, d]  @param v [slots, Hkv, S_max, d]
/// @param q_start [S] first row of each sequence  @param q_len [S] queries, 1 ... kv_len[s]
/// @param kv_len [S] positions in use, 1 ... S_max  @param slot [S] each sequence's slot, 0 ... slots - 1
/// @param heads Hq  @param kv_heads Hkv (Hq % Hkv == 0)  @param head_dim d  @param max_seq S_max
/// @return [T, Hq, d]
std::vector<double> varlen_attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                     std::span<const int> q_start, std::span<const int> q_len,
                                     std::span<const int> kv_len, std::span<const int> slot, int heads, int kv_heads,
                                     int head_dim, int max_seq);

}  // namespace pd::reference
