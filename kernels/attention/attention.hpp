/// @file attention.hpp
/// @brief Chapter 01: naive causal attention in three kernels (scores, softmax, P V), and its
/// launchers. Includable from plain C++ (tests, programs).
///
/// Layout, for every tensor: row-major [B, H, rows, d].
///  - Q, O: [B, H, Sq, d];  K, V: [B, H, Sk, d];  scores / P: [B, H, Sq, Sk].
///
/// The mask rule (used again by chunked prefill and decode): the Sq queries are the last Sq
/// positions of the Sk-long sequence, so query i sits at position Sk - Sq + i and, when
/// causal, may attend to keys 0 .. Sk - Sq + i (the mask is aligned bottom-right):
///
///     Sq = 3, Sk = 5        keys j: 0 1 2 3 4
///     query 0 (position 2)          x x x . .
///     query 1 (position 3)          x x x x .
///     query 2 (position 4)          x x x x x
///
/// Softmax writes exact zeros at masked positions, so P V may sum over the allowed keys only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::attention {

/// Sizes of one attention problem.
struct Shape {
    int batch = 1;      ///< B
    int heads = 1;      ///< H
    int q_len = 1;      ///< Sq, queries
    int kv_len = 1;     ///< Sk, keys and values (Sk >= Sq)
    int head_dim = 64;  ///< d
    /// true: query i attends to keys 0 .. Sk - Sq + i (the mask rule above); false: to all Sk keys
    bool causal = true;

    /// Elements of the score matrix: B * H * Sq * Sk.
    std::size_t score_elements() const { return std::size_t(batch) * heads * q_len * kv_len; }
    /// Elements of Q (and O): B * H * Sq * d.
    std::size_t q_elements() const { return std::size_t(batch) * heads * q_len * head_dim; }
    /// Elements of K (and V): B * H * Sk * d.
    std::size_t kv_elements() const { return std::size_t(batch) * heads * kv_len * head_dim; }
};

/// Keys query @p i may attend to: Sk - Sq + i + 1 when causal, else Sk.
inline int allowed_keys(const Shape& s, int i) { return s.causal ? s.kv_len - s.q_len + i + 1 : s.kv_len; }

/// Throws std::invalid_argument naming the first parameter out of range (sizes below 1,
/// Sq > Sk, B * H above the grid limit of 65535, Sq above 524280).
/// @param s the sizes to check
void check_shape(const Shape& s);

/// scores = Q K^T / sqrt(d): one thread per score (v1 step 1).
/// @param q [B, H, Sq, d]  @param k [B, H, Sk, d]  @param scores [B, H, Sq, Sk]
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void scores(const float* q, const float* k, float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// In place: causal mask and numerically stable softmax of every score row; one block per
/// row, reductions through a shared-memory tree. Lab 01.
/// @param scores [B, H, Sq, Sk]: the scores in, the probabilities out (exact zeros where masked)
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void softmax_v1(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// As softmax_v1, with the row reductions done by warp shuffles (fewer barriers).
/// @param scores [B, H, Sq, Sk], in place  @param s the sizes  @param stream the stream to launch on
void softmax_v2(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// As softmax_v1, with the row reductions done by CUB's BlockReduce (CUDA only; on the
/// simulator it throws std::invalid_argument).
/// @param scores [B, H, Sq, Sk], in place  @param s the sizes  @param stream the stream to launch on
void softmax_v3(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// O = P V over the allowed keys: one thread per output element (v1 step 3).
/// @param p [B, H, Sq, Sk]  @param v [B, H, Sk, d]  @param out [B, H, Sq, d]
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void pv(const float* p, const float* v, float* out, const Shape& s, cudaStream_t stream = nullptr);

/// The versions of the chapter: v1 (tree softmax), v2 (shuffle softmax), v3 (CUB softmax).
/// scores and pv are shared by all three.
std::vector<std::string> versions();

/// Runs the three kernels of @p version: scores into @p workspace, softmax in place, then P V.
/// @param version "v1", "v2" or "v3" (one of versions(); any other name throws std::invalid_argument)
/// @param q [B, H, Sq, d]  @param k [B, H, Sk, d]  @param v [B, H, Sk, d]  @param out [B, H, Sq, d]
/// @param workspace [B, H, Sq, Sk] scratch for the score matrix
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void naive_attention(const std::string& version, const float* q, const float* k, const float* v, float* out,
                     float* workspace, const Shape& s, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
