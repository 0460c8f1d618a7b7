/// @file layers.hpp
/// @brief Chapter 04: the small kernels of a Llama-style block besides the projections and the
/// attention: embedding gather, RMSNorm, RoPE, SwiGLU, residual add, fp32 -> bf16, the token-major
/// <-> head-major permutes of prefill, the bookkeeping of a mixed batch and the greedy argmax (lab
/// 04's KV append: kv_append.hpp; the model's: runtime/runtime.hpp). Includable from plain C++
/// (tests, programs).
///
/// Activations are token-major: row t of an [T, ...] array is token t (T = B x tokens per
/// sequence, sequence-major).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace pd::kernels::layers {

/// x[t][:] = table[tokens[t]][:], one block per token.
/// @param tokens [T] token ids  @param table [V, D]  @param x [T, D] fp32
/// @param T tokens  @param D width  @param V rows of the table  @param stream the stream to launch on
/// @pre 0 <= tokens[t] < V (the launcher cannot see device memory; an id out of range writes
/// zeros instead of reading out of bounds)
void embedding(const int* tokens, const float* table, float* x, int T, int D, int V, cudaStream_t stream = nullptr);
/// As above with a bf16 table (the values are widened to fp32).
/// @param tokens [T] token ids  @param table [V, D] bf16  @param x [T, D] fp32
/// @param T tokens  @param D width  @param V rows of the table  @param stream the stream to launch on
void embedding(const int* tokens, const __nv_bfloat16* table, float* x, int T, int D, int V,
               cudaStream_t stream = nullptr);
/// Chapter 10's vocabulary-parallel lookup: @p table holds rows first ... first + V - 1 of the
/// vocabulary; x[t][:] = its row tokens[t] - first, or zeros for a token of another rank's rows
/// (the all-reduce that follows adds the one rank's row that holds it).
/// @param tokens [T] token ids  @param table [V, D]  @param x [T, D] fp32  @param T tokens
/// @param D width  @param first the table's first token  @param V rows of the table
/// @param stream the stream to launch on
void embedding_shard(const int* tokens, const float* table, float* x, int T, int D, int first, int V,
                     cudaStream_t stream = nullptr);
/// As above with a bf16 table. @param tokens [T]  @param table [V, D]  @param x [T, D]  @param T tokens
/// @param D width  @param first the table's first token  @param V rows  @param stream the stream
void embedding_shard(const int* tokens, const __nv_bfloat16* table, float* x, int T, int D, int first, int V,
                     cudaStream_t stream = nullptr);
/// Chapter 10's vocabulary-parallel logits: an all-gather leaves each rank's [rows, cols] block
/// one after the other; out[r][s cols + c] = gathered[s][r][c] puts each row's vocabulary in order.
/// @param gathered [shards, rows, cols]  @param out [rows, shards x cols]  @param shards ranks
/// @param rows rows of logits  @param cols each rank's vocabulary  @param stream the stream to launch on
void interleave_shards(const float* gathered, float* out, int shards, int rows, int cols,
                       cudaStream_t stream = nullptr);

/// RMSNorm of each row: y[t][i] = weight[i] * x[t][i] / sqrt(mean_i(x[t][i]^2) + eps); one
/// block per row, the sum of squares by a block reduction in fp32.
/// @param x [T, D]  @param weight [D]  @param y [T, D] fp32
/// @param T rows  @param D width  @param eps epsilon  @param stream the stream to launch on
void rmsnorm(const float* x, const float* weight, float* y, int T, int D, float eps, cudaStream_t stream = nullptr);
/// As above, writing bf16 (the input of a bf16 projection).
/// @param x [T, D]  @param weight [D]  @param y [T, D] bf16
/// @param T rows  @param D width  @param eps epsilon  @param stream the stream to launch on
void rmsnorm(const float* x, const float* weight, __nv_bfloat16* y, int T, int D, float eps,
             cudaStream_t stream = nullptr);

/// RoPE in place on adjacent pairs (x[2i], x[2i+1]) of every head (the llama2.c layout): the
/// pair turns by the angle pos * theta^(-2i / d), computed in double so that long contexts
/// keep their precision.
/// @param x [T, H, d] (the output of the Q or K projection)  @param positions [T] position of each token
/// @param T tokens  @param H heads  @param d head dim (even)  @param theta base
/// @param stream the stream to launch on
void rope(float* x, const int* positions, int T, int H, int d, double theta, cudaStream_t stream = nullptr);

/// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
/// @param gate [n]  @param up [n]  @param out [n] fp32  @param n elements  @param stream the stream to launch on
void swiglu(const float* gate, const float* up, float* out, std::size_t n, cudaStream_t stream = nullptr);
/// As above, writing bf16.
/// @param gate [n]  @param up [n]  @param out [n] bf16  @param n elements  @param stream the stream to launch on
void swiglu(const float* gate, const float* up, __nv_bfloat16* out, std::size_t n, cudaStream_t stream = nullptr);

/// The residual connection, in place: x[i] += y[i].
/// @param x [n]  @param y [n]  @param n elements  @param stream the stream to launch on
void add(float* x, const float* y, std::size_t n, cudaStream_t stream = nullptr);

/// out[i] = bf16(x[i]), round to nearest even: the activation a bf16 projection reads.
/// @param x [n]  @param out [n]  @param n elements  @param stream the stream to launch on
void to_bf16(const float* x, __nv_bfloat16* out, std::size_t n, cudaStream_t stream = nullptr);

/// In place, x[i] = float(bf16(x[i])) (round to nearest even, widened back exactly): the values
/// a bf16 KV cache holds, for attention that reads fresh K and V instead of the cache.
/// @param x [n]  @param n elements  @param stream the stream to launch on
void round_to_bf16(float* x, std::size_t n, cudaStream_t stream = nullptr);

/// Token-major to head-major: out[b][h][s][c] = x[b][s][h][c] (prefill's Q, K, V for
/// chapter 01's attention kernels).
/// @param x [B, S, H, d]  @param out [B, H, S, d]  @param B sequences  @param S tokens per sequence
/// @param H heads  @param d head dim  @param stream the stream to launch on
void tokens_to_heads(const float* x, float* out, int B, int S, int H, int d, cudaStream_t stream = nullptr);
/// Head-major to token-major: out[b][s][h][c] = x[b][h][s][c] (attention's output for Wo).
/// @param x [B, H, S, d]  @param out [B, S, H, d]  @param B sequences  @param S tokens per sequence
/// @param H heads  @param d head dim  @param stream the stream to launch on
void heads_to_tokens(const float* x, float* out, int B, int S, int H, int d, cudaStream_t stream = nullptr);

// ---- mixed batches (chapter 05) ---------------------------------------------------------------

/// The bookkeeping of a mixed batch: S sequences bring q_len[s] new tokens each, packed one
/// after another into T = sum(q_len) rows. Computes each sequence's first row q_start[s] =
/// q_len[0] + ... + q_len[s - 1] (an exclusive scan, Thrust's), its context after the step
/// kv_len[s] = context[s] + q_len[s], and for every packed row its position context[s] + i
/// and its cache slot. Runs on the default stream (Thrust's scan).
/// @param q_len [S] (device) new tokens of each sequence, >= 1
/// @param context [S] (device) positions already in each sequence's cache
/// @param slot [S] (device) the cache slot of each sequence
/// @param q_start [S] (device, out)  @param kv_len [S] (device, out)
/// @param positions [T] (device, out)  @param token_slot [T] (device, out)
/// @param S sequences, >= 1
/// @param scratch device memory for the scan's temporary storage, allocated once by the caller
/// (kPackBatchScratchBytes), so that a step allocates nothing  @param scratch_bytes its size
/// @throws std::invalid_argument when the scan needs more scratch than @p scratch_bytes
void pack_batch(const int* q_len, const int* context, const int* slot, int* q_start, int* kv_len, int* positions,
                int* token_slot, int S, void* scratch, std::size_t scratch_bytes);

/// Scratch bytes pack_batch() needs at most: its scan's temporary storage for up to 65,535
/// sequences (CUB's tile states and Thrust's bookkeeping take a few kilobytes).
constexpr std::size_t kPackBatchScratchBytes = std::size_t(1) << 20;

/// out[s][:] = x[q_start[s] + q_len[s] - 1][:]: the last row of each sequence of a mixed batch
/// (the one whose logits the step needs).
/// @param x [T, D]  @param q_start [S] (device)  @param q_len [S] (device)  @param out [S, D]
/// @param S sequences  @param D row length  @param stream the stream to launch on
void gather_last_rows(const float* x, const int* q_start, const int* q_len, float* out, int S, int D,
                      cudaStream_t stream = nullptr);

/// Greedy sampling: out[b] = the index of the largest of logits[b][:], the lowest index on a
/// tie; one block per row. On the cuda backend the block reduction is CUB's BlockReduce with
/// cub::ArgMax; on the simulator a shared-memory tree with the same tie rule.
/// @param logits [B, V]  @param out [B]  @param B rows  @param V vocabulary  @param stream the stream to launch on
void argmax(const float* logits, int* out, int B, int V, cudaStream_t stream = nullptr);

}  // namespace pd::kernels::layers
