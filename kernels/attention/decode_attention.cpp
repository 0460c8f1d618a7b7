/// @file decode_attention.cpp
/// @brief Chapter 04's shape checks, v4's split rule, the workspace sizes and the dispatch by
/// name. The versions are one file each: v1 ch04_v1_scores_in_memory.cu, v2 lab 04
/// (solutions/04_kv_cache/decode_attention_online.cu), v3 ch04_v3_gqa.cu, v4 ch04_v4_split.cu;
/// chapter 08's 8-bit cache is ch08_kv8_decode.cu.
#include "attention/decode_attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

void check_cache_shape(const CacheShape& s) {
    const std::pair<const char*, int> sizes[] = {
        {"batch", s.batch}, {"kv_heads", s.kv_heads}, {"max_seq", s.max_seq}, {"head_dim", s.head_dim}};
    for (const auto& [name, v] : sizes)
        if (v < 1)
            throw std::invalid_argument(std::string("kv cache: ") + name + " must be >= 1, got " + std::to_string(v));
}

void check_decode_shape(const DecodeShape& s) {
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("decode attention: " + msg); };
    const std::pair<const char*, int> sizes[] = {{"batch", s.batch},       {"heads", s.heads},
                                                 {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim},
                                                 {"max_seq", s.max_seq},   {"max_kv_len", s.max_kv_len}};
    for (const auto& [name, v] : sizes)
        if (v < 1) fail(std::string(name) + " must be >= 1, got " + std::to_string(v));
    if (s.heads % s.kv_heads != 0)
        fail("heads = " + std::to_string(s.heads) + " must be a multiple of kv_heads = " + std::to_string(s.kv_heads));
    if (s.head_dim > kMaxHeadDim)
        fail("head_dim = " + std::to_string(s.head_dim) + " exceeds " + std::to_string(kMaxHeadDim));
    if (s.max_kv_len > s.max_seq)
        fail("max_kv_len = " + std::to_string(s.max_kv_len) +
             " exceeds the cache's max_seq = " + std::to_string(s.max_seq));
    if (s.batch > 65535 || s.heads > 65535)
        fail("batch and heads must be <= 65535 (grid limits), got " + std::to_string(s.batch) + " and " +
             std::to_string(s.heads));
}

int decode_splits(const DecodeShape& s, int sm_count) {
    check_decode_shape(s);
    return split_rule(s.batch, s.kv_heads, s.max_kv_len, sm_count);
}

std::size_t decode_workspace_floats(const std::string& version, const DecodeShape& s, int sm_count) {
    check_decode_shape(s);
    if (version == "v1") return std::size_t(s.batch) * s.heads * s.max_kv_len;
    if (version == "v4") return std::size_t(s.batch) * s.heads * decode_splits(s, sm_count) * (s.head_dim + 2);
    return 0;
}

namespace {

template <typename T>
void dispatch(const std::string& version, const float* q, const T* k, const T* v, const int* kv_len, float* out,
              float* workspace, const DecodeShape& s, int sm_count, cudaStream_t stream) {
    if (version == "v1") return decode_attention_v1(q, k, v, kv_len, out, workspace, s, stream);
    if (version == "v2") return decode_attention_v2(q, k, v, kv_len, out, s, stream);
    if (version == "v3") return decode_attention_v3(q, k, v, kv_len, out, s, stream);
    if (version == "v4")
        return decode_attention_v4(q, k, v, kv_len, out, workspace, decode_splits(s, sm_count), s, stream);
    throw std::invalid_argument("decode attention: version = " + version + " is not one of v1, v2, v3, v4");
}

}  // namespace

void decode_attention(const std::string& version, const float* q, const float* k, const float* v, const int* kv_len,
                      float* out, float* workspace, const DecodeShape& s, int sm_count, cudaStream_t stream) {
    dispatch(version, q, k, v, kv_len, out, workspace, s, sm_count, stream);
}
void decode_attention(const std::string& version, const float* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                      const int* kv_len, float* out, float* workspace, const DecodeShape& s, int sm_count,
                      cudaStream_t stream) {
    dispatch(version, q, k, v, kv_len, out, workspace, s, sm_count, stream);
}

}  // namespace pd::kernels::attention
