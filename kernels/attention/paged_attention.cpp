/// @file paged_attention.cpp
/// @brief Chapter 06's paged attention: the shape check, v2's split rule and the dispatch. The
/// kernels are chapter 04's and 05's read through the block table: v2 is ch06_v2_paged.cu (chapter
/// 04's v4 through the table; on an 8-bit cache, kernels/runtime/paged_decode.cu), the varlen
/// form flash attention v3's body (kernels/runtime/flash_varlen.cu), the KV append
/// the runtime's kv_append_rows.cu; v1 is lab 06 (block_table_walk.cu).
#include "attention/paged_attention.hpp"

#include "pd/common.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

void check_paged_shape(const PagedShape& s) {
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("paged attention: " + msg); };
    const auto str = [](long long v) { return std::to_string(v); };
    const std::pair<const char*, int> sizes[] = {{"batch", s.batch},           {"heads", s.heads},
                                                 {"kv_heads", s.kv_heads},     {"head_dim", s.head_dim},
                                                 {"block_size", s.block_size}, {"num_blocks", s.num_blocks},
                                                 {"max_blocks", s.max_blocks}, {"max_kv_len", s.max_kv_len}};
    for (const auto& [name, v] : sizes)
        if (v < 1) fail(std::string(name) + " must be >= 1, got " + str(v));
    if (s.heads % s.kv_heads != 0)
        fail("heads = " + str(s.heads) + " must be a multiple of kv_heads = " + str(s.kv_heads));
    if (s.head_dim > kMaxHeadDim) fail("head_dim = " + str(s.head_dim) + " exceeds " + str(kMaxHeadDim));
    const long long capacity = (long long)s.max_blocks * s.block_size;
    if (capacity > INT_MAX)
        fail("max_blocks * block_size = " + str(s.max_blocks) + " * " + str(s.block_size) + " exceeds " + str(INT_MAX) +
             " positions");
    if (s.max_kv_len > capacity)
        fail("max_kv_len = " + str(s.max_kv_len) + " exceeds max_blocks * block_size = " + str(capacity));
    if (s.batch > 65535 || s.heads > 65535)
        fail("batch and heads must be <= 65535 (grid limits), got " + str(s.batch) + " and " + str(s.heads));
}

namespace {

/// Blocks of the longest sequence: ceil(max_kv_len / block_size).
int longest_blocks(const PagedShape& s) {
    return ceil_div(s.max_kv_len, s.block_size);
}

template <typename T>
void dispatch(const std::string& version, const float* q, const T* k, const T* v, const int* table, const int* kv_len,
              float* out, float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream) {
    if (version == "v1") return paged_decode_attention_v1(q, k, v, table, kv_len, out, s, stream);
    if (version == "v2")
        return paged_decode_attention_v2(q, k, v, table, kv_len, out, workspace, paged_splits(s, sm_count), s, stream);
    throw std::invalid_argument("paged attention: version = " + version + " is not one of v1, v2");
}

}  // namespace

// [paged_split_rule]
int paged_splits(const PagedShape& s, int sm_count) {
    check_paged_shape(s);
    // Chapter 04's rule on the same heads and lengths, then whole blocks per split: a split of
    // ceil(blocks / wanted) blocks, and as many splits as that takes (never an empty one at
    // the end of the longest sequence).
    const int wanted = decode_splits(s.contiguous(), sm_count);
    const int blocks = longest_blocks(s);
    return whole_block_splits(blocks, wanted);
}
// [paged_split_rule]

std::size_t paged_workspace_floats(const std::string& version, const PagedShape& s, int sm_count) {
    check_paged_shape(s);
    if (version == "v2") return std::size_t(s.batch) * s.heads * paged_splits(s, sm_count) * (s.head_dim + 2);
    return 0;
}

void paged_decode_attention(const std::string& version, const float* q, const float* k_cache, const float* v_cache,
                            const int* block_table, const int* kv_len, float* out, float* workspace,
                            const PagedShape& s, int sm_count, cudaStream_t stream) {
    dispatch(version, q, k_cache, v_cache, block_table, kv_len, out, workspace, s, sm_count, stream);
}
void paged_decode_attention(const std::string& version, const float* q, const __nv_bfloat16* k_cache,
                            const __nv_bfloat16* v_cache, const int* block_table, const int* kv_len, float* out,
                            float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream) {
    dispatch(version, q, k_cache, v_cache, block_table, kv_len, out, workspace, s, sm_count, stream);
}

}  // namespace pd::kernels::attention
