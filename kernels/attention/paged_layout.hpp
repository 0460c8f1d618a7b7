/// @file paged_layout.hpp
/// @brief Host helpers that lay a batch out in chapter 06's paged cache, for the programs and
/// the tests that put the same data in both layouts: a block table whose blocks are scattered
/// (as a serving engine's become), and a contiguous cache copied into those blocks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pd::kernels::attention {

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

}  // namespace pd::kernels::attention
