/// @file model.hpp
/// @brief Chapter 04: a Llama-style decoder-only transformer built from the course's kernels,
/// with a KV cache. Includable from plain C++ (tests, programs).
///
/// One forward pass, as the math reads (llama2.c's `forward()`, for B sequences at once):
///
///     x = embed[token]
///     for each layer l:
///         h = RMSNorm(x) * attn_norm[l]
///         q, k, v = h Wq[l]^T, h Wk[l]^T, h Wv[l]^T      (prefill: chapter 02's GEMM, decode: chapter 03's GEMV)
///         q, k = RoPE(q, pos), RoPE(k, pos)
///         append k, v to the cache at pos                (kv_append)
///         o = attention(q, cache[0 .. pos])              (prefill: chapter 01's kernels, decode: decode_attention)
///         x = x + o Wo[l]^T
///         h = RMSNorm(x) * ffn_norm[l]
///         x = x + (silu(h Wgate[l]^T) * (h Wup[l]^T)) Wdown[l]^T
///     logits = RMSNorm(x) * final_norm  lm_head^T      (the last token of each sequence only)
///
/// The residual stream x and every accumulation are fp32. With bf16 weights the matrices are
/// bf16 and each projection's input is rounded to bf16 (the norms and the embedding of a token
/// stay as stored: norms fp32, embedding rows widened to fp32). The cache is fp32 or bf16.
#pragma once

#include "pd/buffer.hpp"
#include "pd/half.hpp"
#include "pd/model_config.hpp"

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pd::kernels::model {

/// How the model runs.
struct ModelOptions {
    DType weights = DType::fp32;    ///< type of the weight matrices (fp32 or bf16)
    DType kv = DType::fp32;         ///< type of the cache (`--kv-dtype`)
    int batch = 1;                  ///< B sequences, one cache slot each (1 ... 64, chapter 03's batch limit)
    int max_seq = 0;                ///< positions of each cache slot (0: the config's max_seq)
    std::string attention = "v4";   ///< the decode attention version (`--attention`)
    int sm_count = 1;               ///< the device's SMs, for v4's splits
    /// 0: a slot of max_seq positions per sequence. > 0 (chapter 06): a paged cache of
    /// num_blocks blocks of block_size positions, read through the block tables each step
    /// brings (only step() runs on it).
    int block_size = 0;
    int num_blocks = 0;             ///< paged: blocks of the cache (0: batch x ceil(max_seq / block_size))
};

/// One sequence of a mixed step (chapter 05): which cache slot it owns, how much of it is
/// filled, and how many new tokens it brings.
struct StepSequence {
    int slot = 0;     ///< its cache slot, 0 ... batch - 1 (one sequence per slot in a step)
    int context = 0;  ///< positions already in the slot's cache: its new tokens go to context, context + 1, ...
    int tokens = 1;   ///< its new tokens: a prefill chunk, a whole prompt, or one decode token
    /// Paged cache: the sequence's block table, covering context + tokens positions (slot is
    /// then only its row in this step; ignored with slots).
    std::span<const int> blocks = {};
};

/// A matrix of the model: fp32 or bf16 values on the device.
struct DeviceMatrix {
    DeviceBuffer<float> f32;          ///< the values when the model's weights are fp32
    DeviceBuffer<__nv_bfloat16> b16;  ///< the values when they are bf16
};

/// The model on the device: weights, KV cache, activations, and the two ways to run it.
class Model {
public:
    /// Allocates the weights (uninitialized: call init_synthetic() or load()), the cache and
    /// the activations. Throws std::invalid_argument naming the option out of range.
    Model(const ModelConfig& config, const ModelOptions& options);

    /// Seeded synthetic weights, generated on the device (seconds even for llama-3-8b): each
    /// matrix uniform with variance 1 / fan_in (Wo and Wdown also divided by sqrt(2 L), so the
    /// residual stream stays O(1) through every layer), norms uniform in [0.9, 1.1], embeddings
    /// with variance 1.
    void init_synthetic(std::uint64_t seed);
    /// Uploads @p w (rounded to bf16 when the weights are bf16). @throws std::invalid_argument on a size mismatch
    void load(const ModelWeights& w);
    /// The weights as fp32 host arrays (the rounded values when they are bf16): what the
    /// reference model and `--dump` use.
    ModelWeights download_weights() const;

    /// Prefill: resets the cache, runs tokens [B, P] (sequence-major) at positions 0 ... P - 1
    /// in one pass, writes their K and V to the cache, and leaves the logits of each
    /// sequence's last token in logits().
    /// @param tokens B * P ids in [0, V)  @param P tokens per sequence, 1 <= P <= max_seq
    void prefill(std::span<const int> tokens, int P);
    /// One decode step: token b of @p tokens (device, [B]) enters sequence b at position
    /// length(); its K and V are appended, it attends to the whole cache, and logits() holds the
    /// next logits. @pre length() < max_seq
    void decode(const int* tokens_device);
    /// As above with host tokens [B].
    void decode(std::span<const int> tokens);
    /// Forgets the positions from @p length on: the next decode step writes position @p length
    /// again (a sweep times one step at a fixed context this way).
    /// @throws std::invalid_argument unless 1 <= length <= length()
    void rewind(int length);
    /// A mixed step (chapter 05): the new tokens of several sequences, prefill chunks and
    /// decode tokens together, packed into one [T, D] activation. The projections and the FFN
    /// run once over all T rows (chapter 02's GEMM); each sequence's K and V go to its own cache
    /// slot, and its queries attend to that slot with varlen attention (bottom-right causal).
    /// Row s of logits() then holds the next-token logits of sequence s (after its last token).
    /// Slots are independent: this does not touch length(), and a slot's positions past
    /// context + tokens keep whatever they held. On a paged cache each sequence brings its block
    /// table, and its positions live where the table says.
    /// @param tokens T ids in [0, V), sequence after sequence
    /// @param sequences S <= batch sequences with distinct slots, tokens summing to T, and
    /// context + tokens <= max_seq
    /// @throws std::invalid_argument naming the sequence and the field out of range
    void step(std::span<const int> tokens, std::span<const StepSequence> sequences);
    /// Greedy sampling: the argmax of each row of logits() into @p out_device [B].
    void argmax(int* out_device) const;

    /// Positions in the cache of every sequence (0 before the first prefill).
    int length() const { return length_; }
    /// The model's shape.
    const ModelConfig& config() const { return config_; }
    /// How it runs.
    const ModelOptions& options() const { return options_; }
    /// Positions of each cache slot.
    int max_seq() const { return max_seq_; }
    /// logits [B, V] of the last token fed.
    const DeviceBuffer<float>& logits() const { return logits_; }
    /// logits [B, V], writable (tests poison it).
    DeviceBuffer<float>& logits() { return logits_; }
    /// The first @p positions of every sequence's cache as an fp32 host array
    /// [L, B, Hkv, positions, d]: K when @p values is false, V when true.
    std::vector<float> download_cache(bool values, int positions) const;

    /// Bytes of the weights on the device.
    double weight_bytes() const;
    /// Bytes of the cache per token: 2 L Hkv d (bytes of the cache's type).
    double kv_bytes_per_token() const;
    /// Bytes of the whole cache: B S_max tokens (paged: num_blocks x block_size).
    double kv_cache_bytes() const {
        return kv_bytes_per_token() * (options_.block_size > 0 ? double(options_.num_blocks) * options_.block_size
                                                               : double(options_.batch) * max_seq_);
    }
    /// Bytes one decode step must move at context @p context (tokens in the cache after the
    /// step): the weights once (the LM head included, the embedding rows of B tokens only) and the
    /// KV of @p context positions of every sequence.
    double decode_step_bytes(int context) const;
    /// FLOPs of one decode step at context @p context: 2 per weight per token, and 4 d per cached
    /// position per query head per layer for the attention.
    double decode_step_flops(int context) const;
    /// FLOPs of a prefill of P tokens per sequence (dense layers, causal attention, LM head of the last tokens).
    double prefill_flops(int P) const;
    /// The fewest bytes a prefill of P tokens per sequence must move: every weight once (of the
    /// embedding table only the B P rows it gathers, unless it is also the LM head) and the K and
    /// V it writes to the cache.
    double prefill_bytes(int P) const;
    /// Bytes of device memory the model with @p options would take, before allocating it.
    static double device_bytes(const ModelConfig& config, const ModelOptions& options, int max_prefill);

private:
    void check_tokens(std::span<const int> tokens) const;
    template <typename W> void forward_prefill(int P);
    template <typename W> void forward_decode();
    template <typename W> void forward_step(int T, int S, int max_q_len);
    void final_logits(const float* x_last, int rows);

    ModelConfig config_;
    ModelOptions options_;
    int max_seq_ = 0;
    int length_ = 0;
    DeviceMatrix embed_, wq_, wk_, wv_, wo_, w_gate_, w_up_, w_down_, lm_head_;
    DeviceBuffer<float> attn_norm_, ffn_norm_, final_norm_;
    DeviceBuffer<float> k_cache32_, v_cache32_;
    DeviceBuffer<__nv_bfloat16> k_cache16_, v_cache16_;
    // activations, sized for the largest prefill (B * max_seq tokens) once used
    int act_tokens_ = 0;
    DeviceBuffer<int> tokens_, positions_, start_, kv_len_;
    DeviceBuffer<int> step_meta_, q_start_, token_slot_;  // a mixed step: q_len, context, slot [3, B]; offsets; row slots
    int max_blocks_ = 0;                                 // paged: columns of a block table
    DeviceBuffer<int> block_table_;                      // paged: [B, max_blocks] for the step
    std::vector<int> block_table_host_;
    std::vector<int> start_host_, kv_len_host_;  // a decode step's positions and contexts, uploaded
    DeviceBuffer<float> x_, h_, q_, k_, v_, o_, y_, gate_, up_, act_, qh_, kh_, vh_, oh_, scores_, x_last_, logits_;
    DeviceBuffer<__nv_bfloat16> h16_, o16_, act16_;
    DeviceBuffer<float> attn_workspace_;
    void ensure_activations(int tokens, int P);
};

}  // namespace pd::kernels::model
