/// @file flash_attention.hpp
/// @brief Chapter 07: flash attention, attention over a whole prompt without the Sq x Sk score
/// matrix. Q, K and V pass through shared memory in tiles; each query keeps a running maximum
/// m, a running sum l and a running output O (the online softmax), rescaled whenever a tile
/// brings a larger score; the scores live in registers only. Includable from plain C++.
///
/// Layout, as chapter 01's (attention.hpp): Q and O [B, H, Sq, d], K and V [B, Hkv, Sk, d] with
/// query head h reading KV head h / (H / Hkv); the logsumexp of each query row, lse [B, H, Sq]
/// (natural log of the sum of exp(q . k / sqrt(d)) over the row's allowed keys), is an output: a
/// split of the keys, or a later combine, needs it. The mask is chapter 01's allowed_keys()
/// (causal aligned bottom-right, Sq <= Sk). O and lse are fp32 whatever the input type, and every
/// version accumulates in fp32.
///
/// Each version is a file of its own (flash_attention.cu lists them). The model's attention of a
/// mixed batch (chapter 05's varlen_attention(), chapter 06's paged_varlen_attention(), chapter
/// 08's 8-bit cache) is v3's body reading its rows through the accessors of cache_rows.cuh: the
/// runtime kernel kernels/runtime/flash_varlen.cu.
#pragma once

#include "attention/attention.hpp"
#include "pd/common.hpp"
#include "pd/half.hpp"
#include "pd/registry.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace pd::kernels::attention {

/// Queries of one block of the SIMT versions (v1 to v3): Br.
constexpr int kFlashSimtQueries = 16;
/// Keys of one K/V tile of the SIMT versions: Bc (2 x 32 x 128 floats = 32 KiB of shared memory).
constexpr int kFlashSimtKeys = 32;
/// Keys a warp folds into a query's state at once in the SIMT versions: one rescale per chunk.
constexpr int kFlashChunk = 8;
/// Queries whose state one warp keeps from v2 on (split-Q): 4 of a block's 16, a block being 4 warps.
constexpr int kFlashQueriesPerWarp = kFlashSimtQueries / 4;
/// Queries of one block of the tensor-core versions (v4 to v6): 16 per warp, 4 warps.
constexpr int kFlashMmaQueries = 64;
/// Keys of one K/V tile of the tensor-core versions.
constexpr int kFlashMmaKeys = 64;
/// The most blocks the split-KV form divides a context into.
constexpr int kFlashMaxSplits = 64;
/// The most queries the split-KV form takes: a short suffix, or a verify step.
constexpr int kFlashSplitMaxQueries = kFlashSimtQueries;

// [flash_cost]
/// FLOPs of flash attention on @p s: 4 d per allowed score (2 d for q . k, 2 d for p v), as
/// FlashAttention counts them; the softmax's few per score are left out. A causal problem does
/// about half the work of a full one. Versions that compute the masked scores too (v1, v2) do
/// more arithmetic than this; the useful work is the same for all, so their rates compare.
inline double flash_flops(const Shape& s) {
    return 4.0 * s.allowed_scores() * s.head_dim;
}
/// Bytes flash attention must move: Q, K and V read once in the input type @p t, O (fp32)
/// written once, and the logsumexp (fp32) of each row. No term grows with Sq x Sk: that is the
/// point of the chapter (chapter 01's Shape::min_bytes() has four passes over the score matrix).
inline double flash_min_bytes(const Shape& s, DType t) {
    const double q = double(s.q_elements()), kv = double(s.kv_elements());
    return size_of(t) * (q + 2.0 * kv) + 4.0 * q + 4.0 * double(s.batch) * s.heads * s.q_len;
}
// [flash_cost]

/// Throws std::invalid_argument naming the first parameter out of range: check_shape()'s
/// rules, and head_dim <= 128; for the tensor-core versions (@p tensor_cores) head_dim 64 or
/// 128 (whole m16n8k16 steps, and the fragments of a row held in registers).
/// @param s the sizes  @param tensor_cores whether a tensor-core version will run
void check_flash_shape(const Shape& s, bool tensor_cores = false);

// [flash_versions]
/// The versions of chapter 07, each one change to its predecessor.
inline const std::vector<Version>& flash_versions() {
    using enum DType;
    using enum Units;
    static const std::vector<Version> list = {
        {"v1",
         {fp32, bf16},
         simt,
         "SIMT tiles: a block per 16 queries, K/V tiles of 32 keys in shared memory, the online softmax once per 8 "
         "keys; the 4 warps split each tile's keys and merge their states through shared memory (lab 07)"},
        {"v2",
         {fp32, bf16},
         simt,
         "v1 with split-Q: each warp owns 4 of the 16 queries and sees every key (its lanes one key each for the "
         "scores, no shuffle per score), so no merge of O"},
        {"v3",
         {fp32, bf16},
         simt,
         "v2 + causal block skipping: key tiles past the block's last allowed key are never loaded"},
        {"v4",
         {bf16},
         tensor_cores,
         "v3 on tensor cores: mma.sync m16n8k16 for Q K^T and P V, P kept in registers as the A operand; 64 "
         "queries x 64 keys per tile"},
        {"v5", {bf16}, tensor_cores, "v4 + ldmatrix from a swizzled (conflict-free) shared-memory layout"},
        {"v6", {bf16}, tensor_cores, "v5 + cp.async double buffering: the next K/V tile loads while this one computes"},
    };
    return list;
}
// [flash_versions]

/// Runs @p version of flash attention: O = softmax(mask(Q K^T / sqrt(d))) V and the rows'
/// logsumexp. Throws std::invalid_argument for a name not in flash_versions(), a version that
/// does not take the input type, or a shape check_flash_shape() rejects.
/// @param version a name from flash_versions()
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d] fp32  @param lse [B, H, Sq] fp32, or nullptr to skip it
/// @param s the sizes  @param stream the stream to launch on
void flash_attention(const std::string& version, const float* q, const float* k, const float* v, float* out, float* lse,
                     const Shape& s, cudaStream_t stream = nullptr);
/// As above with bf16 inputs (v1 to v6).
/// @param version a name from flash_versions()
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d] fp32  @param lse [B, H, Sq] fp32, or nullptr
/// @param s the sizes  @param stream the stream to launch on
void flash_attention(const std::string& version, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                     float* out, float* lse, const Shape& s, cudaStream_t stream = nullptr);

/// v1 (lab 07's kernel, solutions/07_flash_attention/flash_simt_tiles.cu). @param q [B, H, Sq, d]
/// @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr
/// @param s the sizes, checked  @param stream the stream to launch on
void flash_attention_v1(const float* q, const float* k, const float* v, float* out, float* lse, const Shape& s,
                        cudaStream_t stream = nullptr);
/// v1 with bf16 inputs. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes  @param stream the stream
void flash_attention_v1(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);

/// v2 (ch07_v2_split_q.cu), the arguments as flash_attention_v1()'s.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]
/// @param lse [B, H, Sq] or nullptr  @param s the sizes, checked  @param stream the stream to launch on
void flash_attention_v2(const float* q, const float* k, const float* v, float* out, float* lse, const Shape& s,
                        cudaStream_t stream = nullptr);
/// v2 with bf16 inputs. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes  @param stream the stream
void flash_attention_v2(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);
/// v3 (ch07_v3_causal_skip.cu). @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes, checked  @param stream the stream
void flash_attention_v3(const float* q, const float* k, const float* v, float* out, float* lse, const Shape& s,
                        cudaStream_t stream = nullptr);
/// v3 with bf16 inputs. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes  @param stream the stream
void flash_attention_v3(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);
/// The tensor-core versions, bf16 only: v4 (ch07_v4_mma.cu), v5 (ch07_v5_ldmatrix_swizzle.cu), v6
/// (ch07_v6_cp_async.cu). Each checks the shape (check_flash_shape(s, true): d = 64 or 128), a GPU
/// with bf16 tensor cores, Q, K and V 16-byte aligned and O 8-byte aligned.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d] fp32  @param lse [B, H, Sq] fp32 or nullptr
/// @param s the sizes  @param stream the stream to launch on
void flash_attention_v4(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);
/// v5: v4 + ldmatrix from swizzled tiles. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]
/// @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes
/// @param stream the stream
void flash_attention_v5(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);
/// v6: v5 + cp.async double buffering. @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]
/// @param v [B, Hkv, Sk, d]  @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param s the sizes
/// @param stream the stream
void flash_attention_v6(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out, float* lse,
                        const Shape& s, cudaStream_t stream = nullptr);

// ---- split-KV: few queries over a long context --------------------------------------------

/// Blocks the split-KV form divides each (sequence, head)'s keys into on a GPU of @p sm_count
/// SMs: enough blocks for two per SM over the whole grid, at least 64 keys per split, at most
/// kFlashMaxSplits; 1 when the grid is already full. @param s the sizes  @param sm_count SMs
int flash_splits(const Shape& s, int sm_count);
/// Floats of the split-KV form's workspace: each split's O and logsumexp of every row,
/// splits x B H Sq (d + 1). @param s the sizes  @param sm_count SMs
std::size_t flash_split_workspace_floats(const Shape& s, int sm_count);

/// The split-KV form (flash decoding, ch07_split_kv.cu) for a few queries over a long context: the
/// keys of each (sequence, head) are divided among flash_splits() blocks, each running v3's body
/// over its range and writing its normalized partial O and its logsumexp; a second kernel combines them
/// (O = sum_i e^(lse_i - lse) O_i, lse = log sum_i e^(lse_i)), as chapter 04's decode v4 does.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d] fp32  @param lse [B, H, Sq] fp32 or nullptr
/// @param workspace flash_split_workspace_floats(s, sm_count) floats (device)
/// @param s the sizes; Sq <= kFlashSplitMaxQueries  @param sm_count SMs of the GPU (sizes the split)
/// @param stream the stream to launch on
void flash_attention_split_kv(const float* q, const float* k, const float* v, float* out, float* lse, float* workspace,
                              const Shape& s, int sm_count, cudaStream_t stream = nullptr);
/// As above with bf16 inputs.
/// @param q [B, H, Sq, d]  @param k [B, Hkv, Sk, d]  @param v [B, Hkv, Sk, d]
/// @param out [B, H, Sq, d]  @param lse [B, H, Sq] or nullptr  @param workspace as above
/// @param s the sizes  @param sm_count SMs  @param stream the stream to launch on
void flash_attention_split_kv(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out,
                              float* lse, float* workspace, const Shape& s, int sm_count,
                              cudaStream_t stream = nullptr);

/// The simulator work of one run of @p version on @p s (pd::sim_launch_work()): the SIMT
/// versions reduce every score over a warp (5 shuffles; v1 and v2 every score of the square,
/// v3 the tiles up to the diagonal), the tensor-core versions issue mma.sync on 16 x 8 x 16
/// tiles. @param version a name of flash_versions(), or "split" (the split-KV form)
/// @param s the sizes
double flash_sim_work(const std::string& version, const Shape& s);

}  // namespace pd::kernels::attention
