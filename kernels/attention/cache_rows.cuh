/// @file cache_rows.cuh
/// @brief Chapter 06: where a sequence's cached positions live, the two layouts of the KV cache as
/// row accessors (chapter 04's slots, chapter 06's blocks), and where chapter 05's packed queries
/// live. Chapter 06's paged decode v2 (ch06_v2_paged.cu) reads its rows through PagedRows; the
/// runtime's kernels (kernels/runtime/) and the KV append take either accessor, so their paged form
/// is their contiguous form reading its rows through a block table, not a copy of it.
///
/// Both answer the same two questions for sequence b: may it be read at all (valid()), and
/// where does the K (or V) row of KV head kvh at logical position j start (of(b, kvh).row(j),
/// an element offset into the cache, or -1 when no row holds that position).
#pragma once

#include "attention/paged_attention.hpp"

#include <cstddef>

namespace pd::kernels::attention {

// [slot_rows]
/// Chapter 04's contiguous cache of one layer, [slots, Hkv, S_max, d]: sequence b owns the
/// whole slot `slot[b]` (its row b when @p slot is null), and its position j is row j of that
/// slot's head: the positions of one head are contiguous, what a warp streams best.
struct SlotRows {
    const int* slot;  ///< [B] the slot of each sequence (device), or nullptr: sequence b in slot b
    int slots;        ///< slots of the cache (a slot outside 0 ... slots - 1 is never read)
    int kv_heads;     ///< Hkv
    int max_seq;      ///< S_max, positions per slot
    int d;            ///< head dim

    /// The rows of one (sequence, KV head): max_seq consecutive rows from `base`.
    struct Head {
        std::size_t base;  ///< the element offset of position 0
        int max_seq;       ///< positions in the slot
        int d;             ///< head dim
        /// The first element of position @p j, or -1 past the slot.
        __device__ __forceinline__ long long row(int j) const {
            return j >= 0 && j < max_seq ? (long long)(base + std::size_t(j) * d) : -1;
        }
    };
    /// The slot of sequence @p b.
    __device__ __forceinline__ int slot_of(int b) const { return slot ? slot[b] : b; }
    /// True when sequence @p b's slot is one of the cache's.
    __device__ __forceinline__ bool valid(int b) const { return slot_of(b) >= 0 && slot_of(b) < slots; }
    /// Positions a sequence can hold.
    __device__ __forceinline__ int capacity() const { return max_seq; }
    /// The rows of KV head @p kvh of sequence @p b. @pre valid(b)
    __device__ __forceinline__ Head of(int b, int kvh) const {
        return {(std::size_t(slot_of(b)) * kv_heads + kvh) * std::size_t(max_seq) * d, max_seq, d};
    }
};
// [slot_rows]

// [paged_rows]
/// Chapter 06's paged cache of one layer, [num_blocks, Hkv, block_size, d], read through a
/// block table [B, max_blocks]: sequence b's logical position j is in physical block
/// table[b * max_blocks + j / block_size], at offset j % block_size. An entry outside
/// 0 ... num_blocks - 1 (-1: no block allocated) is no block: its positions are never read.
struct PagedRows {
    const int* block_table;  ///< [B, max_blocks] (device)
    int batch;               ///< B, the rows of the table
    int max_blocks;          ///< columns of the table
    int block_size;          ///< positions per block
    int num_blocks;          ///< physical blocks of the cache
    int kv_heads;            ///< Hkv
    int d;                   ///< head dim

    /// The rows of one (sequence, KV head), found block by block.
    struct Head {
        const int* table;  ///< the sequence's row of the table: max_blocks entries
        int max_blocks;    ///< its length
        int block_size;    ///< positions per block
        int num_blocks;    ///< blocks of the cache
        int kv_heads;      ///< Hkv
        int kvh;           ///< the KV head
        int d;             ///< head dim
        /// The first element of position @p j, or -1 when its table entry is no block.
        __device__ __forceinline__ long long row(int j) const {
            if (j < 0 || j / block_size >= max_blocks) return -1;
            const int p = table[j / block_size];  // the physical block holding logical position j
            if (p < 0 || p >= num_blocks) return -1;
            return ((long long)(p)*kv_heads + kvh) * block_size * d + (long long)(j % block_size) * d;
        }
    };
    /// True when @p b is a row of the table.
    __device__ __forceinline__ bool valid(int b) const { return b >= 0 && b < batch; }
    /// Positions a sequence can hold: max_blocks * block_size.
    __device__ __forceinline__ int capacity() const { return max_blocks * block_size; }
    /// The rows of KV head @p kvh of sequence @p b. @pre valid(b)
    __device__ __forceinline__ Head of(int b, int kvh) const {
        return {block_table + std::size_t(b) * max_blocks, max_blocks, block_size, num_blocks, kv_heads, kvh, d};
    }
};
// [paged_rows]

// [query_rows]
/// Where the queries of chapter 05's mixed batch live (Q, and in the same layout O), token-major
/// [T, H, d]: sequence b's q_len[b] queries are rows q_start[b] ... of the packed batch, the last
/// of its kv_len[b] cached positions (clamped to the cache's capacity, so that a bad length never
/// reads outside it).
struct PackedQueries {
    const int* q_start;  ///< [S] (device) first row of each sequence
    const int* q_len;    ///< [S] (device) queries of each sequence
    const int* kv_len;   ///< [S] (device) cache positions in use, new tokens included
    int heads;           ///< Hq
    int capacity;        ///< positions a sequence can hold (the Rows accessor's capacity())

    /// Keys sequence @p b attends over: kv_len[b] clamped to 0 ... capacity.
    __device__ __forceinline__ int keys(int b) const { return min(max(kv_len[b], 0), capacity); }
    /// Queries of sequence @p b, at most its keys.
    __device__ __forceinline__ int queries(int b) const { return min(q_len[b], keys(b)); }
    /// The row of query @p i of head @p h of sequence @p b.
    __device__ __forceinline__ std::size_t row(int b, int h, int i) const {
        return (std::size_t(q_start[b]) + i) * heads + h;
    }
};
// [query_rows]

/// The accessor of a paged cache of shape @p s read through @p block_table (host side; the
/// caller has checked @p s).
inline PagedRows paged_rows(const int* block_table, const PagedShape& s) {
    return {.block_table = block_table,
            .batch = s.batch,
            .max_blocks = s.max_blocks,
            .block_size = s.block_size,
            .num_blocks = s.num_blocks,
            .kv_heads = s.kv_heads,
            .d = s.head_dim};
}

}  // namespace pd::kernels::attention
