/// @file block_table_walk.cu
/// @brief Lab 06: v1 of paged decode attention = chapter 04's v2 (Predecessor:
/// solutions/04_kv_cache/decode_attention_online.cu; lab 04: one block per
/// (sequence, query head), the online softmax) reading K and V through a block table.
///
/// The paged cache is a pool of blocks, [num_blocks, Hkv, block_size, d]; a sequence owns the
/// blocks its row of the block table names, in order: its logical position j lives in
/// physical block table[j / block_size], at offset j % block_size. The blocks of one sequence
/// are anywhere in the pool, in any order; an entry of -1 means no block is allocated there.
/// Warp w of the block walks logical positions w, w + 4, w + 8, ... of its sequence, finds each
/// one's block and offset, loads the K and V rows there, and folds the key into its running
/// state exactly as lab 04 did; merge_warps() then combines the four warps' states.
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>

namespace pd::kernels::attention {

// [paged_v1_kernel]
/// Block (h, b): out[b][h][:] = softmax(q k^T / sqrt(d)) v over the first kv_len[b] logical
/// positions of KV head h / (Hq / Hkv) of sequence b, wherever the block table put them.
template <typename T>
__global__ void paged_decode_v1_kernel(const float* __restrict__ q, const T* __restrict__ k_cache,
                                       const T* __restrict__ v_cache, const int* __restrict__ block_table,
                                       const int* __restrict__ kv_len, float* __restrict__ out, int heads, int kv_heads,
                                       int d, int block_size, int num_blocks, int max_blocks, int max_kv_len,
                                       float scale) {
    __shared__ WarpStates<1> shared;
    const int h = blockIdx.x, b = blockIdx.y;
    const int warp = threadIdx.x / kWarpSize;
    const int kvh = h / (heads / kv_heads);  // the KV head this query head reads
    const int len = context_length(kv_len, b, max_kv_len);
    const int* table = block_table + std::size_t(b) * max_blocks;  // sequence b's row: max_blocks entries

    float qr[kLaneDims];  // this lane's dimensions of the query, pre-scaled by 1 / sqrt(d)
    load_lane_dims(q + (std::size_t(b) * heads + h) * d, d, qr);
    for (float& x : qr) x *= scale;

    OnlineState st[1];  // this warp's running state (m, l, acc) for the block's one query
    // TODO(student): 1. for each logical position j of this warp (j = warp, warp + kDecodeWarps, ... below len): the physical block p = table[j / block_size] holds it, at offset j % block_size; skip the key when p is no block of the cache (p < 0, an unallocated entry, or p >= num_blocks: never read through it); otherwise the K and V rows of KV head kvh start at element ((p * kv_heads + kvh) * block_size + offset) * d of k_cache and v_cache (in std::size_t): load this lane's dimensions of both (load_lane_dims), s = dot_lanes(qr, kr), and fold the key in with online_update(st[0], s, vr) (~10 lines)
    (void)k_cache;
    (void)v_cache;
    (void)kv_heads;
    (void)block_size;
    (void)num_blocks;
    (void)warp;
    (void)kvh;
    (void)len;
    (void)table;

    float* out_bh = out + (std::size_t(b) * heads + h) * d;
    merge_warps<1>(st, 1, d, shared, [&](int, int c, float, float L, float A) { out_bh[c] = L > 0.f ? A / L : 0.f; });
}
// [paged_v1_kernel]

/// Checks the shape and launches v1: grid (Hq, B), 128 threads.
template <typename T>
void launch_paged_v1(const float* q, const T* k_cache, const T* v_cache, const int* block_table, const int* kv_len,
                     float* out, const PagedShape& s, cudaStream_t stream) {
    check_paged_shape(s);
    const dim3 grid(unsigned(s.heads), unsigned(s.batch));
    paged_decode_v1_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(
        q, k_cache, v_cache, block_table, kv_len, out, s.heads, s.kv_heads, s.head_dim, s.block_size, s.num_blocks,
        s.max_blocks, s.max_kv_len, 1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

void paged_decode_attention_v1(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, const PagedShape& s, cudaStream_t stream) {
    launch_paged_v1(q, k_cache, v_cache, block_table, kv_len, out, s, stream);
}

void paged_decode_attention_v1(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, const PagedShape& s,
                               cudaStream_t stream) {
    launch_paged_v1(q, k_cache, v_cache, block_table, kv_len, out, s, stream);
}

}  // namespace pd::kernels::attention
