/// @file kv_append.cu
/// @brief Lab 04, part 2: the KV append. Before a step attends to the cache, it writes the K
/// and V of its new tokens there: token t of sequence b goes to position start[b] + t of every
/// KV head. The projections produce K and V token-major ([B, n, Hkv, d]); the cache is
/// head-major ([B, Hkv, S_max, d]) so that decode attention reads each head's positions as one
/// contiguous run. This kernel is that change of layout (and of type, for a bf16 cache).
#include "layers/kv_append.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/half.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::layers {

/// The cache's element from fp32: the identity for float, round to nearest even for bf16.
///@{
__device__ __forceinline__ void store_as(float* dst, float x) {
    *dst = x;
}
__device__ __forceinline__ void store_as(__nv_bfloat16* dst, float x) {
    *dst = __float2bfloat16_rn(x);
}
///@}

// [kv_append_kernel]
/// Block (t, b), thread c of head h: copies element c of head h of new token t of sequence b
/// into K and V of the cache at position start[b] + t. Consecutive threads handle consecutive
/// elements of a head: the reads and the writes are both contiguous.
template <typename C>
__global__ void kv_append_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                 C* __restrict__ k_cache, C* __restrict__ v_cache, const int* __restrict__ start, int n,
                                 int kv_heads, int max_seq, int d) {
    const int t = blockIdx.x, b = blockIdx.y;
    // TODO(student): 1. pos = start[b] + t; leave (write nothing) when pos is outside [0, max_seq). Then for every element i = threadIdx.x, threadIdx.x + blockDim.x, ... below kv_heads * d: h = i / d, c = i % d; the source is k_new / v_new[((b * n + t) * kv_heads + h) * d + c] (token-major), the destination k_cache / v_cache[((b * kv_heads + h) * max_seq + pos) * d + c] (head-major); write with store_as() (which rounds for a bf16 cache); index in std::size_t (~10 lines)
    (void)k_new;
    (void)v_new;
    (void)k_cache;
    (void)v_cache;
    (void)start;
    (void)n;
    (void)kv_heads;
    (void)max_seq;
    (void)d;
    (void)t;
    (void)b;
}
// [kv_append_kernel]

/// Checks the sizes and launches: grid (n, B), 128 threads.
template <typename C>
void launch_kv_append(const float* k_new, const float* v_new, C* k_cache, C* v_cache, const int* start, int n,
                      const CacheShape& s, cudaStream_t stream) {
    attention::check_cache_shape(s);
    if (n < 1 || n > s.max_seq)
        throw std::invalid_argument("kv_append: new tokens n = " + std::to_string(n) +
                                    " must be in 1 .. max_seq = " + std::to_string(s.max_seq));
    if (s.batch > 65535)
        throw std::invalid_argument("kv_append: batch = " + std::to_string(s.batch) + " exceeds 65535");
    const dim3 grid(unsigned(n), unsigned(s.batch));
    kv_append_kernel<C>
        <<<grid, 128, 0, stream>>>(k_new, v_new, k_cache, v_cache, start, n, s.kv_heads, s.max_seq, s.head_dim);
    PD_CHECK_LAUNCH();
}

void kv_append(const float* k_new, const float* v_new, float* k_cache, float* v_cache, const int* start, int n,
               const CacheShape& s, cudaStream_t stream) {
    launch_kv_append(k_new, v_new, k_cache, v_cache, start, n, s, stream);
}

void kv_append(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const int* start,
               int n, const CacheShape& s, cudaStream_t stream) {
    launch_kv_append(k_new, v_new, k_cache, v_cache, start, n, s, stream);
}

}  // namespace pd::kernels::layers
