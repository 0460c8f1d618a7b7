/// @file kv_cache.hpp
/// @brief The model's KV cache behind one interface, in the two layouts the course builds:
/// chapter 04's slots (one contiguous run of S_max positions per sequence) and chapter 06's
/// pages (blocks of a few positions, found through a block table). A forward pass appends each
/// layer's new K and V and attends over it; the cache picks the kernels of its layout. Its
/// element type (fp32 or bf16) is chosen once, when it is made. Includable from plain C++.
#pragma once

#include "runtime/runtime.hpp"

#include "pd/half.hpp"
#include "pd/model_config.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pd::model {

/// The device-side description of one forward pass's batch: S sequences, packed one after
/// another into T rows. Arrays are on the device; the flags were decided on the host.
struct BatchView {
    int sequences = 0;                 ///< S
    int tokens = 0;                    ///< T, the sum of q_len
    int max_q_len = 0;                 ///< the longest q_len
    int max_kv_len = 0;                ///< the longest context after the pass (context + q_len)
    const int* q_len = nullptr;        ///< [S] new tokens of each sequence
    const int* context = nullptr;      ///< [S] positions already cached: its first new token's position
    const int* slot = nullptr;         ///< [S] its slot (slots) or its row of the block table (pages)
    const int* q_start = nullptr;      ///< [S] its first row
    const int* kv_len = nullptr;       ///< [S] context + q_len
    const int* positions = nullptr;    ///< [T] the position of each row
    const int* row_seq = nullptr;      ///< [T] the slot (slots) or the table row (pages) of each row
    const int* block_table = nullptr;  ///< [S, max_blocks] (pages)
    /// Sequence s is in slot s of a contiguous cache and every sequence brings `uniform` tokens:
    /// the layout of chapter 04's kernels (lab 04's append, decode attention v1 ... v4).
    bool rows_in_order = false;
    int uniform = 0;  ///< the tokens of every sequence when they are equal, 0 otherwise
    /// The stream the cache's kernels go to: the model's (chapter 12: a stream being captured).
    cudaStream_t stream = nullptr;
    /// Chapter 12: a decode batch on a fixed grid: [splits, chunk] on the device
    /// (kernels::runtime::fixed_grid_decode_plan()), and decode_attention() launches the
    /// runtime's fixed-grid form; null: the eager launch, its splits from max_kv_len.
    const int* split_plan = nullptr;
};

/// Where one block of one layer of a paged cache lies on the device (KvCache::block_span()):
/// what chapter 11 copies to another device, block by block. K and V are each [Hkv, block_size,
/// d] elements of the cache's type, contiguous; an 8-bit cache also has an fp32 scale per row,
/// K's and V's each [Hkv, block_size] (null otherwise).
struct KvBlockSpan {
    void* k = nullptr;            ///< the block's K
    void* v = nullptr;            ///< the block's V
    void* k_scales = nullptr;     ///< its K scales (8-bit caches; null otherwise)
    void* v_scales = nullptr;     ///< its V scales (8-bit caches; null otherwise)
    std::size_t bytes = 0;        ///< bytes of k, and of v
    std::size_t scale_bytes = 0;  ///< bytes of k_scales, and of v_scales (0 without scales)
};

/// One layer-indexed KV cache on the device.
class KvCache {
public:
    virtual ~KvCache() = default;
    /// Writes layer @p layer's new K and V (rows of the batch, [T, Hkv, d] fp32, after RoPE) to
    /// each row's position.
    virtual void append(int layer, const float* k, const float* v, const BatchView& batch) = 0;
    /// True when decode_attention() can run @p batch (every sequence brings one token): pages
    /// always; slots when the sequences are in slots 0 ... S - 1 (chapter 04's kernels address
    /// the cache by sequence).
    virtual bool serves_decode(const BatchView& batch) const = 0;
    /// out [S, Hq, d] = each sequence's one query [S, Hq, d] against its whole context, with the
    /// decode attention version of the model's options. @pre serves_decode(batch)
    virtual void decode_attention(int layer, const float* q, float* out, const BatchView& batch) = 0;
    /// Chapter 12: the fixed-grid form's sizes for a decode batch of @p rows sequences
    /// (kernels::runtime::FixedGridDecode): what decode_attention() launches when the batch brings a
    /// split_plan. @throws std::invalid_argument when the cache's decode version has no fixed-grid
    /// form (slots: v4; pages: v2)
    virtual kernels::runtime::FixedGridDecode fixed_grid(int rows) const = 0;
    /// out [T, Hq, d] = varlen attention of the batch's queries over their contexts (the
    /// bottom-right causal rule; chapter 05's kernel).
    virtual void varlen_attention(int layer, const float* q, float* out, const BatchView& batch) = 0;
    /// The element type.
    virtual DType dtype() const = 0;
    /// Bytes of the whole cache (every layer, K and V).
    virtual double bytes() const = 0;
    /// "8 slots of 64 positions" or "96 blocks of 16 positions".
    virtual std::string describe() const = 0;
    /// The first @p positions of every slot as an fp32 host array [L, slots, Hkv, positions, d]:
    /// K when @p values is false, V when true. @throws std::invalid_argument for a paged cache
    virtual std::vector<float> download(bool values, int positions) const = 0;
    /// Where block @p block of layer @p layer lies (chapter 11 copies it to another device).
    /// @param layer 0 ... L - 1  @param block 0 ... num_blocks - 1
    /// @throws std::invalid_argument for a cache in slots ("the cache is not paged") or an index out of range
    virtual KvBlockSpan block_span(int layer, int block) = 0;
};

/// Sizes of a cache: slots of max_seq positions, or (block_size > 0) num_blocks blocks.
struct KvCacheShape {
    int layers = 1;                      ///< L
    int kv_heads = 1;                    ///< Hkv
    int heads = 1;                       ///< Hq (attention's query heads)
    int head_dim = 1;                    ///< d
    int slots = 1;                       ///< sequences a pass takes at most (slots, or rows of the block table)
    int max_seq = 1;                     ///< positions a sequence holds at most
    int block_size = 0;                  ///< 0: slots; > 0: positions per block
    int num_blocks = 0;                  ///< pages: blocks of the cache
    std::string attention = "v4";        ///< slots: decode attention version (v1 ... v4)
    std::string paged_attention = "v2";  ///< pages: paged decode attention version (v1, v2)
    int sm_count = 1;                    ///< the device's SMs (v4's and paged v2's splits)
};

/// A cache of @p shape holding elements of @p dtype (fp32 or bf16): the slots of chapter 04,
/// or (shape.block_size > 0) the pages of chapter 06. Allocates it, with every workspace its
/// attention needs.
/// @throws std::invalid_argument naming the field out of range (KvCacheShape.attention = v7 ...)
std::unique_ptr<KvCache> make_kv_cache(const KvCacheShape& shape, DType dtype);

}  // namespace pd::model
