/// @file kv_append_rows.cu
/// @brief The runtime's KV append of packed rows (runtime.hpp): lab 04's append
/// (solutions/04_kv_cache/kv_append.cu, B equal sequences) for chapter 05's packed rows, written
/// into either layout of the cache through its row accessor (attention/cache_rows.cuh): chapter
/// 05's slots and chapter 06's block tables, and into chapter 08's 8-bit cache (codes and a
/// scale per row). The model's passes write their K and V with it.
#include "runtime/runtime.hpp"

#include "attention/cache_rows.cuh"
#include "attention/kv_quant.cuh"
#include "pd/cuda_check.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::runtime {

using attention::CacheShape;
using attention::Fp8Kv;
using attention::Int8Kv;
using attention::kIsKv8;
using attention::PagedRows;
using attention::PagedShape;
using attention::SlotRows;

namespace {

/// Stores an fp32 value in the cache's type: as is, or rounded to the nearest even bf16.
__device__ __forceinline__ void store(float* p, float v) {
    *p = v;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    *p = __float2bfloat16_rn(v);
}

}  // namespace

// [append_rows_kernel]
/// Block t, thread c of head h: element c of head h of row t into K and V of the cache at
/// position positions[t] of sequence row_seq[t] (a slot, or a row of the block table), wherever
/// @p rows says that position lives. A row whose sequence or position has no place in the cache
/// writes nothing. Consecutive threads handle consecutive elements of a head: the reads and the
/// writes are both contiguous.
///
/// An 8-bit cache (chapter 08: C = Fp8Kv or Int8Kv) also gets each (row, head)'s scale, which
/// needs the head's largest magnitude before any code is written: there warp w takes heads w,
/// w + 4, ..., its lanes the head's elements (lane, lane + 32, ...), a warp reduction gives the
/// maximum of K's and of V's, lane 0 writes the scales to @p k_scales and @p v_scales at the
/// row's index (its element offset / d) and every lane its codes.
template <typename C, typename Rows>
__global__ void append_rows_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                   C* __restrict__ k_cache, C* __restrict__ v_cache, float* __restrict__ k_scales,
                                   float* __restrict__ v_scales, Rows rows, const int* __restrict__ row_seq,
                                   const int* __restrict__ positions) {
    const int t = blockIdx.x, seq = row_seq[t], pos = positions[t];
    if (!rows.valid(seq)) return;
    const std::size_t src = std::size_t(t) * rows.kv_heads * rows.d;
    if constexpr (kIsKv8<C>) {
        const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, d = rows.d;
        for (int h = warp; h < rows.kv_heads; h += blockDim.x / kWarpSize) {
            const long long at = rows.of(seq, h).row(pos);
            if (at < 0) return;  // no row for this position (the same for every head and lane)
            const float* kh = k_new + src + std::size_t(h) * d;
            const float* vh = v_new + src + std::size_t(h) * d;
            float k_max = 0.f, v_max = 0.f;
            for (int c = lane; c < d; c += kWarpSize) {
                k_max = fmaxf(k_max, fabsf(kh[c]));
                v_max = fmaxf(v_max, fabsf(vh[c]));
            }
            const float k_scale = warp_reduce(k_max, MaxOp{}) / attention::kKvCodeMax<C>;
            const float v_scale = warp_reduce(v_max, MaxOp{}) / attention::kKvCodeMax<C>;
            if (lane == 0) {
                k_scales[at / d] = k_scale;  // the row's index: its element offset / d
                v_scales[at / d] = v_scale;
            }
            for (int c = lane; c < d; c += kWarpSize) {
                k_cache[at + c] = attention::kv_encode<C>(kh[c], k_scale);
                v_cache[at + c] = attention::kv_encode<C>(vh[c], v_scale);
            }
        }
    } else {
        for (int i = threadIdx.x; i < rows.kv_heads * rows.d; i += blockDim.x) {
            const int h = i / rows.d, c = i % rows.d;
            const long long at = rows.of(seq, h).row(pos);
            if (at < 0) return;  // no row for this position (the same for every head of the row)
            store(k_cache + at + c, k_new[src + i]);
            store(v_cache + at + c, v_new[src + i]);
        }
    }
}
// [append_rows_kernel]

namespace {

template <typename C, typename Rows>
void launch_append_rows(const float* k_new, const float* v_new, C* k_cache, C* v_cache, float* k_scales,
                        float* v_scales, const Rows& rows, const int* row_seq, const int* positions, int T,
                        const char* who, cudaStream_t stream) {
    if (T < 1) throw std::invalid_argument(std::string(who) + ": T must be >= 1, got " + std::to_string(T));
    attention::check_kv_scales<C>(k_scales, v_scales, who);
    append_rows_kernel<C, Rows>
        <<<unsigned(T), 128, 0, stream>>>(k_new, v_new, k_cache, v_cache, k_scales, v_scales, rows, row_seq, positions);
    PD_CHECK_LAUNCH();
}

SlotRows slot_rows(const CacheShape& s) {
    attention::check_cache_shape(s);
    return {.slot = nullptr, .slots = s.batch, .kv_heads = s.kv_heads, .max_seq = s.max_seq, .d = s.head_dim};
}

PagedRows checked_paged_rows(const int* block_table, const PagedShape& s) {
    attention::check_paged_shape(s);
    return attention::paged_rows(block_table, s);
}

}  // namespace

void kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache, const int* token_slot,
                    const int* positions, int T, const CacheShape& s, cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, nullptr, nullptr, slot_rows(s), token_slot, positions, T,
                       "kv_append_rows", stream);
}
void kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                    const int* token_slot, const int* positions, int T, const CacheShape& s, cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, nullptr, nullptr, slot_rows(s), token_slot, positions, T,
                       "kv_append_rows", stream);
}

void paged_kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, nullptr, nullptr, checked_paged_rows(block_table, s), row_seq,
                       positions, T, "paged_kv_append_rows", stream);
}
void paged_kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, nullptr, nullptr, checked_paged_rows(block_table, s), row_seq,
                       positions, T, "paged_kv_append_rows", stream);
}

void kv_append_rows(const float* k_new, const float* v_new, Fp8Kv* k_cache, Fp8Kv* v_cache, float* k_scales,
                    float* v_scales, const int* token_slot, const int* positions, int T, const CacheShape& s,
                    cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, k_scales, v_scales, slot_rows(s), token_slot, positions, T,
                       "kv_append_rows", stream);
}
void kv_append_rows(const float* k_new, const float* v_new, Int8Kv* k_cache, Int8Kv* v_cache, float* k_scales,
                    float* v_scales, const int* token_slot, const int* positions, int T, const CacheShape& s,
                    cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, k_scales, v_scales, slot_rows(s), token_slot, positions, T,
                       "kv_append_rows", stream);
}

void paged_kv_append_rows(const float* k_new, const float* v_new, Fp8Kv* k_cache, Fp8Kv* v_cache, float* k_scales,
                          float* v_scales, const int* block_table, const int* row_seq, const int* positions, int T,
                          const PagedShape& s, cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, k_scales, v_scales, checked_paged_rows(block_table, s), row_seq,
                       positions, T, "paged_kv_append_rows", stream);
}
void paged_kv_append_rows(const float* k_new, const float* v_new, Int8Kv* k_cache, Int8Kv* v_cache, float* k_scales,
                          float* v_scales, const int* block_table, const int* row_seq, const int* positions, int T,
                          const PagedShape& s, cudaStream_t stream) {
    launch_append_rows(k_new, v_new, k_cache, v_cache, k_scales, v_scales, checked_paged_rows(block_table, s), row_seq,
                       positions, T, "paged_kv_append_rows", stream);
}

}  // namespace pd::kernels::runtime
