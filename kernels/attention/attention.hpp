/// @file attention.hpp
/// @brief Chapter 01: naive causal attention in three kernels (scores, softmax, P V), and its
/// launchers. Includable from plain C++ (tests, programs).
///
/// Layout, for every tensor: row-major [B, heads, rows, d].
///  - Q, O: [B, H, Sq, d];  K, V: [B, Hkv, Sk, d] (Hkv = H unless grouped);  scores / P: [B, H, Sq, Sk].
///
/// The mask rule, allowed_keys() (used again by decode and chunked prefill): the Sq queries are
/// the last Sq positions of the Sk-long sequence, so query i sits at position Sk - Sq + i and,
/// when causal, may attend to keys 0 .. Sk - Sq + i (the mask is aligned bottom-right):
///
///     Sq = 3, Sk = 5        keys j: 0 1 2 3 4
///     query 0 (position 2)          x x x . .
///     query 1 (position 3)          x x x x .
///     query 2 (position 4)          x x x x x
///
/// Softmax writes exact zeros at masked positions, so P V may sum over the allowed keys only.
#pragma once

#include "pd/common.hpp"
#include "pd/registry.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::attention {

// [allowed_keys]
/// The mask rule, for every attention kernel of the course, its reference and the host code:
/// the keys query row @p i may attend to are keys 0 ... allowed_keys - 1. The @p q_len queries
/// are the last q_len of @p kv_len positions, so query i sits at position kv_len - q_len + i
/// and, when @p causal, sees every key up to its own position (the mask is aligned
/// bottom-right). Decode is q_len = 1 (the new token sees the whole cache); chunked prefill is
/// a chunk of q_len queries after kv_len - q_len cached positions.
/// @pre 0 <= i < q_len <= kv_len
PD_HOST_DEVICE constexpr int allowed_keys(int i, int q_len, int kv_len, bool causal = true) {
    return causal ? kv_len - q_len + i + 1 : kv_len;
}
// [allowed_keys]

/// Sizes of one attention problem.
struct Shape {
    int batch = 1;      ///< B
    int heads = 1;      ///< H, query heads
    int q_len = 1;      ///< Sq, queries
    int kv_len = 1;     ///< Sk, keys and values (Sk >= Sq)
    int head_dim = 64;  ///< d
    /// true: query i attends to keys 0 .. Sk - Sq + i (allowed_keys()); false: to all Sk keys
    bool causal = true;
    /// Hkv, heads of K and V (0: the same as H). With grouped-query attention (Hkv < H), query
    /// head h reads KV head h / (H / Hkv): chapter 04's prefill.
    int kv_heads = 0;

    /// Hkv: kv_heads, or heads when kv_heads is 0.
    int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
    /// Elements of the score matrix: B * H * Sq * Sk.
    std::size_t score_elements() const { return std::size_t(batch) * heads * q_len * kv_len; }
    /// Elements of Q (and O): B * H * Sq * d.
    std::size_t q_elements() const { return std::size_t(batch) * heads * q_len * head_dim; }
    /// Elements of K (and V): B * Hkv * Sk * d.
    std::size_t kv_elements() const { return std::size_t(batch) * kv_head_count() * kv_len * head_dim; }
    /// Score entries that P V uses: the allowed keys of every query of every head,
    /// B H (Sq (Sk - Sq) + Sq (Sq + 1) / 2) when causal, B H Sq Sk otherwise.
    double allowed_scores() const {
        const double sq = q_len, sk = kv_len;
        return double(batch) * heads * (causal ? sq * (sk - sq) + sq * (sq + 1) / 2 : sq * sk);
    }

    // [attention_cost]
    /// FLOPs of the three kernels: 2 d per score (every score is computed, masked or not),
    /// about 5 per score for the softmax (maximum, subtract, exponential, sum, scale), and
    /// 2 d per allowed score for P V.
    double flops() const {
        const double scores = double(score_elements());
        return 2.0 * scores * head_dim + 5.0 * scores + 2.0 * allowed_scores() * head_dim;
    }
    /// Bytes the three kernels must move in fp32: scores reads Q and K and writes the matrix;
    /// the softmax reads and writes it; P V reads it and V and writes O. The score matrix
    /// crosses memory four times: that is the cost naive attention pays.
    double min_bytes() const {
        const double q = double(q_elements()), kv = double(kv_elements()), s = double(score_elements());
        return 4.0 * (q + kv + s) + 4.0 * 2.0 * s + 4.0 * (s + kv + q);
    }
    // [attention_cost]
};

/// Keys query @p i of @p s may attend to: allowed_keys() with the sizes of @p s.
inline int allowed_keys(const Shape& s, int i) {
    return allowed_keys(i, s.q_len, s.kv_len, s.causal);
}

/// Throws std::invalid_argument naming the first parameter out of range (sizes below 1,
/// Sq > Sk, H not a multiple of Hkv, B * H above the grid limit of 65535, Sq above 524280).
/// @param s the sizes to check
void check_shape(const Shape& s);

/// scores = Q K^T / sqrt(d): one thread per score (the first kernel of every version).
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param scores [B, H, Sq, Sk]
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void scores(const float* q, const float* k, float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// In place: causal mask and numerically stable softmax of every score row; one block per
/// row, both reductions through a shared-memory tree. v1, lab 01.
/// @param scores [B, H, Sq, Sk]: the scores in, the probabilities out (exact zeros where masked)
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void softmax_smem_tree(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// As softmax_smem_tree, with the row reductions done by warp shuffles (fewer barriers). v2.
/// @param scores [B, H, Sq, Sk], in place  @param s the sizes  @param stream the stream to launch on
void softmax_warp_shuffle(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// As softmax_smem_tree, with the row reductions done by CUB's BlockReduce. v3, CUDA only: on
/// the simulator it throws std::invalid_argument.
/// @param scores [B, H, Sq, Sk], in place  @param s the sizes  @param stream the stream to launch on
void softmax_cub(float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// O = P V over the allowed keys: one thread per output element (the last kernel of every
/// version).
/// @param p [B, H, Sq, Sk]  @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void pv(const float* p, const float* v, float* out, const Shape& s, cudaStream_t stream = nullptr);

// [attention_versions]
/// The versions of chapter 01: they share scores() and pv() and differ in their softmax.
inline const std::vector<Version>& versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1", {fp32}, simt, "one block per score row, reductions through a shared-memory tree (lab 01)"},
        {"v2", {fp32}, simt, "v1 + warp-shuffle reductions: one value per warp crosses shared memory"},
        {"v3", {fp32}, simt, "v1 with CUB's BlockReduce doing both reductions", Backends::cuda_only},
    };
    return list;
}
// [attention_versions]

/// The simulator work of one run of @p version on @p s (pd::sim_launch_work()): scores() and
/// pv() start a thread per score and per output element (blocks of 32 x 8, those past the edges
/// included), every softmax a block of 256 threads per score row; v2's two block reductions take
/// 45 warp shuffles each. @param version a name of versions()  @param s the sizes
inline double sim_work(const std::string& version, const Shape& s) {
    const double bh = double(s.batch) * s.heads, rows = double(ceil_div(s.q_len, 8)) * 8;
    const double threads =
        bh * rows * 32.0 * (ceil_div(s.kv_len, 32) + ceil_div(s.head_dim, 32)) + bh * s.q_len * 256.0;
    return sim_launch_work(threads, s.flops(), 0, version == "v2" ? 90 * bh * s.q_len : 0);
}

/// The softmax launcher of @p version: softmax_smem_tree (v1), softmax_warp_shuffle (v2) or
/// softmax_cub (v3). Throws std::invalid_argument for a name not in versions(), or v3 on the
/// simulator.
/// @param version a name from versions()  @param scores [B, H, Sq, Sk], in place
/// @param s the sizes  @param stream the stream to launch on
void softmax(const std::string& version, float* scores, const Shape& s, cudaStream_t stream = nullptr);

/// Runs the three kernels of @p version: scores into @p workspace, softmax() in place, then P V.
/// @param version a name from versions() (any other throws std::invalid_argument)
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]
/// @param workspace [B, H, Sq, Sk] scratch for the score matrix
/// @param s the sizes, checked by check_shape  @param stream the stream to launch on
void naive_attention(const std::string& version, const float* q, const float* k, const float* v, float* out,
                     float* workspace, const Shape& s, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::attention
