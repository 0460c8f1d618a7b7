/// @file paged_layout.cpp
/// @brief Chapter 06's layout helpers (paged_layout.hpp): a shuffled block table, and a
/// contiguous cache scattered into the blocks it names.
#include "attention/paged_layout.hpp"

#include "pd/rng.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

using std::size_t;

// [paged_layout]
std::vector<int> shuffled_block_table(std::span<const int> lens, int block_size, int num_blocks, int max_blocks,
                                      std::uint64_t seed) {
    if (block_size < 1 || num_blocks < 1 || max_blocks < 1)
        throw std::invalid_argument("shuffled_block_table: block_size, num_blocks and max_blocks must be >= 1");
    std::vector<int> pool(static_cast<size_t>(num_blocks));
    for (int i = 0; i < num_blocks; ++i) pool[size_t(i)] = i;
    Rng rng(derive_seed(seed, 7));
    for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[size_t(rng.integer(0, int(i) - 1))]);
    std::vector<int> table(lens.size() * size_t(max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
        const int blocks = (lens[s] + block_size - 1) / block_size;
        if (lens[s] < 0 || blocks > max_blocks)
            throw std::invalid_argument("shuffled_block_table: context " + std::to_string(lens[s]) + " of sequence " +
                                        std::to_string(s) +
                                        " needs more than max_blocks = " + std::to_string(max_blocks));
        for (int i = 0; i < blocks; ++i) {
            if (next == pool.size())
                throw std::invalid_argument("shuffled_block_table: the contexts need more than num_blocks = " +
                                            std::to_string(num_blocks) + " blocks");
            table[s * size_t(max_blocks) + size_t(i)] = pool[next++];
        }
    }
    return table;
}

std::vector<float> scatter_to_blocks(std::span<const float> contiguous, std::span<const int> lens,
                                     std::span<const int> table, int kv_heads, int head_dim, int max_seq,
                                     int block_size, int max_blocks, int total_blocks, int first_block, float fill) {
    const size_t B = lens.size(), Hkv = size_t(kv_heads), d = size_t(head_dim), S = size_t(max_seq);
    if (contiguous.size() != B * Hkv * S * d || table.size() != B * size_t(max_blocks))
        throw std::invalid_argument(
            "scatter_to_blocks: the cache must be [B, Hkv, S_max, d] and the table [B, max_blocks]");
    const size_t block = Hkv * size_t(block_size) * d;
    std::vector<float> paged(size_t(total_blocks) * block, fill);
    for (size_t b = 0; b < B; ++b)
        for (int p = 0; p < lens[b]; ++p) {
            const long long physical = first_block + table[b * size_t(max_blocks) + size_t(p / block_size)];
            if (p >= max_seq || physical < 0 || physical >= total_blocks)
                throw std::invalid_argument("scatter_to_blocks: position " + std::to_string(p) + " of sequence " +
                                            std::to_string(b) + " has no block of the result");
            for (size_t h = 0; h < Hkv; ++h) {
                const size_t from = ((b * Hkv + h) * S + size_t(p)) * d;
                const size_t to = ((size_t(physical) * Hkv + h) * size_t(block_size) + size_t(p % block_size)) * d;
                std::copy_n(contiguous.begin() + std::ptrdiff_t(from), d, paged.begin() + std::ptrdiff_t(to));
            }
        }
    return paged;
}
// [paged_layout]

}  // namespace pd::kernels::attention
