/// @file model_reference.hpp
/// @brief CPU references of chapter 04 (plain loops, double precision): the small kernels of
/// kernels/model/layers.hpp, decode attention over a KV cache, and the whole Llama-style model
/// (pd::ModelConfig, pd::ModelWeights) run one sequence at a time with its own cache.
///
/// Layouts are those of the kernels: activations token-major ([T, ...]), a head's pairs
/// adjacent (x[2i], x[2i+1], as llama2.c), a layer's cache [B, Hkv, S_max, d], a linear
/// layer's W [out, in] row-major. Every function checks its sizes and throws
/// std::invalid_argument naming the first one that is wrong.
#pragma once

#include "pd/model_config.hpp"

#include <cstdint>
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

/// q [B, Hq, d]; k, v [B, Hkv, S_max, d] given as float; kv_len[b] in 1..S_max; returns [B, Hq, d]; query head h uses
/// KV head h / (Hq/Hkv); scale 1/sqrt(d); softmax over keys 0..kv_len[b]-1
/// @param q [B, Hq, d]  @param k [B, Hkv, S_max, d]  @param v [B, Hkv, S_max, d]
/// @param kv_len [B] positions of each sequence's cache in use  @param batch B
/// @param heads Hq  @param kv_heads Hkv (Hq % Hkv == 0)  @param head_dim d  @param max_seq S_max
/// @return [B, Hq, d]
std::vector<double> decode_attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                     std::span<const int> kv_len, int batch, int heads, int kv_heads, int head_dim,
                                     int max_seq);

/// The whole model on the CPU in double: one sequence with its own cache.
///
/// forward() reads as the math of one block, for all fed tokens layer by layer (as a prefill
/// does): x = embed[token]; per layer h = rmsnorm(x), q, k, v = Wq h, Wk h, Wv h, RoPE on q and
/// k at the token's position, k and v appended to the cache, causal attention of each query
/// head h over positions 0 .. pos with KV head h / (Hq / Hkv) and scale 1 / sqrt(d),
/// x += Wo att, h = rmsnorm(x), x += W_down (silu(W_gate h) * (W_up h)); then
/// logits = lm_head rmsnorm(x). Every sum and product is in double.
class ModelReference {
public:
    /// Keeps references to @p c and @p w (the caller keeps them alive) and an empty cache.
    /// Throws std::invalid_argument when @p c is out of range or @p w does not match it.
    ModelReference(const ModelConfig& c, const ModelWeights& w);
    /// Feeds `tokens` at positions length() ... length()+n-1 (appending K and V to its cache; throws
    /// std::invalid_argument past c.max_seq) and returns the logits of every fed token, [n][V]. Also throws, before
    /// changing anything, on a token id outside 0 .. V-1.
    std::vector<std::vector<double>> forward(std::span<const int> tokens);
    /// The positions fed so far (the cache's length).
    int length() const;

private:
    const ModelConfig& c_;
    const ModelWeights& w_;
    int length_ = 0;
    /// Per layer, the cached K and V in double: [S_max, Hkv, d].
    std::vector<std::vector<double>> k_cache_, v_cache_;
};

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

/// Chapter 06's layout of a batch in a paged cache: sequence s of context lens[s] gets
/// ceil(lens[s] / block_size) blocks, taken in turn from the pool 0 ... num_blocks - 1 shuffled
/// by @p seed (so a sequence's blocks are scattered and out of order, as a serving engine's
/// become). Throws std::invalid_argument when the pool or a row of the table is too small.
/// @param lens [B] contexts, >= 0  @param block_size positions per block, >= 1
/// @param num_blocks blocks of the pool  @param max_blocks columns of the table
/// @param seed the shuffle's seed
/// @return the block table [B, max_blocks], -1 past each sequence's blocks
std::vector<int> shuffled_block_table(std::span<const int> lens, int block_size, int num_blocks, int max_blocks,
                                      std::uint64_t seed);

/// @p contiguous, one layer's cache [B, Hkv, S_max, d] in chapter 04's layout, scattered into a
/// paged cache [total_blocks, Hkv, block_size, d]: position p < lens[b] of sequence b goes to
/// physical block first_block + table[b * max_blocks + p / block_size], at offset
/// p % block_size; every other element is @p fill. (first_block > 0 leaves room for guard
/// blocks before the cache.)
/// @param contiguous [B, Hkv, S_max, d]  @param lens [B] contexts, <= S_max
/// @param table [B, max_blocks] from shuffled_block_table()  @param kv_heads Hkv  @param head_dim d
/// @param max_seq S_max  @param block_size positions per block  @param max_blocks columns of @p table
/// @param total_blocks blocks of the result  @param first_block the result's block of table entry 0
/// @param fill the value of every element no position lands on
/// @return [total_blocks, Hkv, block_size, d]
std::vector<float> scatter_to_blocks(std::span<const float> contiguous, std::span<const int> lens,
                                     std::span<const int> table, int kv_heads, int head_dim, int max_seq,
                                     int block_size, int max_blocks, int total_blocks, int first_block, float fill);

}  // namespace pd::reference
