/// @file paged_common.cuh
/// @brief Device pieces of chapter 06's paged kernels: where a sequence's logical position
/// lives in a paged cache (the block-table walk that lab 06 writes by hand in v1), for v2, the
/// varlen kernel and the KV append.
#pragma once

#include "model/decode_common.cuh"
#include "model/paged_attention.hpp"

#include <cstddef>

namespace pd::kernels::model {

// [paged_rows]
/// One sequence's view of a paged cache [num_blocks, Hkv, block_size, d] through its row of
/// the block table: logical position j is in physical block table[j / block_size], at offset
/// j % block_size. An entry outside 0 ... num_blocks - 1 (-1: no block allocated) is no block.
struct PagedRows {
    const int* table;  ///< the sequence's row of the block table: max_blocks entries
    int block_size;    ///< positions per block
    int num_blocks;    ///< physical blocks of the cache
    int kv_heads;      ///< Hkv
    int d;             ///< head dim

    /// The physical block holding logical position @p j, or -1 when the table's entry is no
    /// block of the cache. @param j a logical position, 0 ... max_blocks * block_size - 1
    __device__ __forceinline__ int block(int j) const {
        const int p = table[j / block_size];
        return p >= 0 && p < num_blocks ? p : -1;
    }
    /// The first element of the row of KV head @p kvh at logical position @p j in physical
    /// block @p p = block(j) >= 0: K's row is k_cache + offset, V's v_cache + offset.
    /// @param p the physical block  @param kvh the KV head  @param j the logical position
    __device__ __forceinline__ std::size_t offset(int p, int kvh, int j) const {
        return ((std::size_t(p) * kv_heads + kvh) * block_size + j % block_size) * d;
    }
};
// [paged_rows]

/// The PagedRows of sequence @p b: its row of @p block_table [B, max_blocks].
/// @param block_table [B, max_blocks]  @param b the sequence  @param max_blocks columns of the table
/// @param block_size positions per block  @param num_blocks blocks of the cache  @param kv_heads Hkv  @param d head dim
__device__ __forceinline__ PagedRows paged_rows(const int* block_table, int b, int max_blocks, int block_size,
                                                int num_blocks, int kv_heads, int d) {
    return {block_table + std::size_t(b) * max_blocks, block_size, num_blocks, kv_heads, d};
}

}  // namespace pd::kernels::model
