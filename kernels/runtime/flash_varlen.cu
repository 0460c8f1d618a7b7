/// @file flash_varlen.cu
/// @brief The runtime's attention of a mixed batch over the KV cache: what the model runs for
/// every prompt, chunk and mixed step. It combines
///  - chapter 07's flash attention v3 (kernels/attention/ch07_v3_causal_skip.cu): the kernel
///    body, split-Q with causal block skipping;
///  - chapter 05's packed batch (varlen_attention.hpp): sequences of different query counts,
///    token-major, each over its own cache slot (cache_rows.cuh's PackedQueries and SlotRows);
///  - chapter 06's paged cache (paged_attention.hpp): the rows found through a block table
///    (PagedRows);
///  - chapter 08's 8-bit cache (kv_quant.hpp): fp8 or int8 rows, multiplied by their scales as a
///    tile is loaded.
/// On v3's own problem (an fp32 or bf16 cache, one sequence per slot, its queries the last of its
/// keys) it computes v3's bits (tests/kernels/test_runtime.cpp). Also the shape checks of
/// varlen_attention() and paged_varlen_attention().
#include "attention/cache_rows.cuh"
#include "attention/flash_attention.hpp"
#include "attention/kv_quant.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace pd::kernels::attention {

// [flash_varlen_kernel]
/// Block (query tile x of 16, head h, sequence b): queries 16 x ... 16 x + 15 of sequence b (where
/// @p queries says its rows are: chapter 05's packed batch) attend to their allowed keys, wherever
/// @p rows says they live (chapter 04's slots or chapter 06's pages). v3's body
/// (ch07_v3_causal_skip.cu): split-Q, causal block skipping; what differs is how a row is found
/// (the block looks up where each of a tile's keys lives before loading it; a key with no row is
/// zeros, masked) and TKV, the cache's element: fp32, bf16, or chapter 08's 8-bit code, whose row
/// is multiplied by its scale from @p k_scales / @p v_scales as the tile is loaded (null for fp32
/// and bf16). On v3's problem (an fp32 or bf16 cache, one sequence per slot) it computes v3's bits.
template <typename TKV, typename Queries, typename Rows>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_varlen_kernel(const float* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v,
                        const float* __restrict__ k_scales, const float* __restrict__ v_scales, Queries queries,
                        Rows rows, float* __restrict__ out, int heads, int kv_heads, int d, float scale) {
    __shared__ float qs[kFlashSimtQueries][kMaxHeadDim];  // the block's queries, pre-scaled
    // K padded by one float: lane j reads row j at column c, bank (j + c) % 32, all different
    __shared__ float ks[kFlashSimtKeys][kMaxHeadDim + 1], vs[kFlashSimtKeys][kMaxHeadDim];
    __shared__ float ps[kDecodeWarps][kFlashQueriesPerWarp][kFlashSimtKeys];  // each warp's p of the tile
    __shared__ long long row_at[kFlashSimtKeys];                              // the tile's rows, -1 for none
    constexpr int kScales = kIsKv8<TKV> ? kFlashSimtKeys : 1;  // an 8-bit cache's row scales (none for fp32, bf16)
    __shared__ float k_scale_at[kScales], v_scale_at[kScales];
    const int h = blockIdx.y, b = blockIdx.z, first = blockIdx.x * kFlashSimtQueries;
    if (!rows.valid(b)) return;
    const int len = queries.keys(b), n = queries.queries(b);
    // Blocks past this sequence's queries (the grid is sized for the longest) leave whole, so
    // no barrier below waits for them.
    if (first >= n) return;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const auto head = rows.of(b, h / (heads / kv_heads));  // where the sequence's KV head lives

    for (int e = threadIdx.x; e < kFlashSimtQueries * d; e += blockDim.x) {  // rows past n: zeros
        const int g = e / d, c = e % d;
        qs[g][c] = first + g < n ? to_f32(q[queries.row(b, h, first + g) * d + c]) * scale : 0.f;
    }
    const int i0 = first + warp * kFlashQueriesPerWarp;          // this warp's first query
    const int mine = max(0, min(kFlashQueriesPerWarp, n - i0));  // and how many it has
    int keys[kFlashQueriesPerWarp];                              // keys each query may see (0 for none)
    float m[kFlashQueriesPerWarp], l[kFlashQueriesPerWarp];      // running max; this lane's part of the sum
    float acc[kFlashQueriesPerWarp][kLaneDims];                  // this lane's dimensions of O, unnormalized
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        keys[g] = g < mine ? allowed_keys(i0 + g, n, len, true) : 0;
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) acc[g][r] = 0.f;
    }
    // v3's skipping: no tile after the block's last allowed key is loaded, none after a warp's computed
    const int block_end = allowed_keys(min(first + kFlashSimtQueries, n) - 1, n, len, true);
    const int warp_end = mine > 0 ? keys[mine - 1] : 0;

    for (int j0 = 0; j0 < block_end; j0 += kFlashSimtKeys) {
        const int tile = min(kFlashSimtKeys, block_end - j0);
        for (int r = threadIdx.x; r < kFlashSimtKeys; r += blockDim.x) {
            row_at[r] = r < tile ? head.row(j0 + r) : -1;
            if constexpr (kIsKv8<TKV>) {  // an 8-bit cache: each row's scale, looked up once per tile
                k_scale_at[r] = row_at[r] >= 0 ? kv_row_scale<TKV>(k_scales, row_at[r], d) : 0.f;
                v_scale_at[r] = row_at[r] >= 0 ? kv_row_scale<TKV>(v_scales, row_at[r], d) : 0.f;
            }
        }
        __syncthreads();  // the rows' places are known (and the query tile written)
        // The whole block loads the tile, consecutive threads reading consecutive elements of a
        // row (coalesced); a key with no row is zeros. An 8-bit row is dequantized here, once
        // for the block's 16 queries.
        for (int e = threadIdx.x; e < kFlashSimtKeys * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            const bool here = row_at[r] >= 0;
            if constexpr (kIsKv8<TKV>) {
                ks[r][c] = here ? kv_value(k, row_at[r] + c, k_scale_at[r]) : 0.f;
                vs[r][c] = here ? kv_value(v, row_at[r] + c, v_scale_at[r]) : 0.f;
            } else {
                ks[r][c] = here ? to_f32(k[row_at[r] + c]) : 0.f;
                vs[r][c] = here ? to_f32(v[row_at[r] + c]) : 0.f;
            }
        }
        __syncthreads();  // the tile is complete before any warp reads it
        if (j0 < warp_end) {
            // 1. lane j scores key j for each query, the warp takes the tile's maximum, rescales
            //    the state once and leaves p_j = exp(s_j - m_new) for the P V below
            const bool here = lane < tile && row_at[lane] >= 0;
#pragma unroll
            for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
                if (g >= mine) break;
                float s = 0.f;
                for (int c = 0; c < d; ++c) s = fmaf(qs[warp * kFlashQueriesPerWarp + g][c], ks[lane][c], s);
                if (!here || j0 + lane >= keys[g]) s = -INFINITY;  // masked, or no row
                const float m_new = fmaxf(m[g], warp_reduce(s, MaxOp{}));
                float p = 0.f;
                if (m_new != -INFINITY) {  // every key so far masked: nothing to add (and no NaN)
                    const float correction = expf(m[g] - m_new);  // 0 while the state is empty
                    p = s == -INFINITY ? 0.f : expf(s - m_new);
                    l[g] = l[g] * correction + p;
#pragma unroll
                    for (int r = 0; r < kLaneDims; ++r) acc[g][r] *= correction;
                    m[g] = m_new;
                }
                ps[warp][g][lane] = p;
            }
            __syncwarp();  // every lane's p is in shared memory

            // 2. O += P V: lane l adds p_j v_j over its dimensions; a masked key (p = 0) is
            //    skipped, whatever its V row holds
#pragma unroll
            for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
                if (g >= mine) break;
                for (int j = 0; j < tile; ++j) {
                    const float p = ps[warp][g][j];
                    if (p == 0.f) continue;  // the same in every lane
#pragma unroll
                    for (int r = 0; r < kLaneDims; ++r)
                        if (lane + r * kWarpSize < d) acc[g][r] = fmaf(p, vs[j][lane + r * kWarpSize], acc[g][r]);
                }
            }
        }
        __syncthreads();  // every warp is done with the tile (and row_at, ps) before the next overwrites it
    }

    // A warp has seen every key of its queries: no merge across warps, only the lanes' parts of
    // l to add. A query that saw no key (l = 0: a broken block table) writes zeros.
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        if (g >= mine) break;
        const float L = warp_reduce_sum(l[g]);
        const std::size_t row = queries.row(b, h, i0 + g);
        float* o = out + row * d;
        const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = acc[g][r] * inv;
        }
    }
}

namespace {

/// Launches the kernel on @p rows: grid (query tiles of the longest sequence, H, sequences), 128
/// threads. @p k_scales and @p v_scales: an 8-bit cache's row scales (null for fp32 and bf16).
template <typename TKV, typename Queries, typename Rows>
void launch_varlen(const float* q, const TKV* k, const TKV* v, const float* k_scales, const float* v_scales,
                   const Queries& queries, const Rows& rows, float* out, int sequences, int heads, int kv_heads,
                   int head_dim, int max_q_len, cudaStream_t stream) {
    const dim3 grid(unsigned(ceil_div(max_q_len, kFlashSimtQueries)), unsigned(heads), unsigned(sequences));
    flash_varlen_kernel<TKV, Queries, Rows><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, k_scales, v_scales, queries, rows, out, heads, kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)));
    PD_CHECK_LAUNCH();
}

}  // namespace

void check_varlen_shape(const VarlenShape& s) {
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("varlen attention: " + msg); };
    const auto str = [](int v) { return std::to_string(v); };
    const std::pair<const char*, int> sizes[] = {
        {"sequences", s.sequences}, {"tokens", s.tokens}, {"heads", s.heads},     {"kv_heads", s.kv_heads},
        {"head_dim", s.head_dim},   {"slots", s.slots},   {"max_seq", s.max_seq}, {"max_q_len", s.max_q_len}};
    for (const auto& [name, v] : sizes)
        if (v < 1) fail(std::string(name) + " must be >= 1, got " + str(v));
    if (s.heads % s.kv_heads != 0)
        fail("heads = " + str(s.heads) + " must be a multiple of kv_heads = " + str(s.kv_heads));
    if (s.head_dim > kMaxHeadDim) fail("head_dim = " + str(s.head_dim) + " exceeds " + str(kMaxHeadDim));
    if (s.tokens < s.sequences)
        fail("tokens = " + str(s.tokens) + " is less than sequences = " + str(s.sequences) +
             " (every sequence brings at least one query)");
    if (s.max_q_len > s.tokens) fail("max_q_len = " + str(s.max_q_len) + " exceeds tokens = " + str(s.tokens));
    if (s.max_q_len > s.max_seq)
        fail("max_q_len = " + str(s.max_q_len) + " exceeds the cache's max_seq = " + str(s.max_seq));
    if (s.sequences > 65535 || s.heads > 65535)
        fail("sequences and heads must be <= 65535 (grid limits), got " + str(s.sequences) + " and " + str(s.heads));
}

namespace {

/// Chapter 05: over the slots of the contiguous cache.
template <typename T>
void launch_slots(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                  const int* q_start, const int* q_len, const int* kv_len, const int* slot, float* out,
                  const VarlenShape& s, cudaStream_t stream) {
    check_varlen_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "varlen attention");
    const SlotRows rows{.slot = slot, .slots = s.slots, .kv_heads = s.kv_heads, .max_seq = s.max_seq, .d = s.head_dim};
    const PackedQueries queries{q_start, q_len, kv_len, s.heads, s.max_seq};
    launch_varlen(q, k, v, k_scales, v_scales, queries, rows, out, s.sequences, s.heads, s.kv_heads, s.head_dim,
                  s.max_q_len, stream);
}

/// Chapter 06: through the block table of the paged cache.
template <typename T>
void launch_pages(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                  const int* q_start, const int* q_len, const int* kv_len, const int* table, float* out,
                  const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    check_paged_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "paged varlen attention");
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("paged varlen attention: " + msg); };
    const auto str = [](long long v) { return std::to_string(v); };
    if (tokens < s.batch)
        fail("tokens = " + str(tokens) + " is less than batch = " + str(s.batch) +
             " (every sequence brings at least one query)");
    if (max_q_len < 1) fail("max_q_len must be >= 1, got " + str(max_q_len));
    if (max_q_len > tokens) fail("max_q_len = " + str(max_q_len) + " exceeds tokens = " + str(tokens));
    if (max_q_len > s.capacity())
        fail("max_q_len = " + str(max_q_len) + " exceeds max_blocks * block_size = " + str(s.capacity()));
    const PagedRows rows = paged_rows(table, s);
    const PackedQueries queries{q_start, q_len, kv_len, s.heads, int(s.capacity())};
    launch_varlen(q, k, v, k_scales, v_scales, queries, rows, out, s.batch, s.heads, s.kv_heads, s.head_dim, max_q_len,
                  stream);
}

}  // namespace

void varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start, const int* q_len,
                      const int* kv_len, const int* slot, float* out, const VarlenShape& s, cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, nullptr, nullptr, q_start, q_len, kv_len, slot, out, s, stream);
}
void varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* q_start,
                      const int* q_len, const int* kv_len, const int* slot, float* out, const VarlenShape& s,
                      cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, nullptr, nullptr, q_start, q_len, kv_len, slot, out, s, stream);
}

void paged_varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start,
                            const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, nullptr, nullptr, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len,
                 stream);
}
void paged_varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* q_start, const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, nullptr, nullptr, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len,
                 stream);
}

void varlen_attention(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                      const float* v_scales, const int* q_start, const int* q_len, const int* kv_len, const int* slot,
                      float* out, const VarlenShape& s, cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, k_scales, v_scales, q_start, q_len, kv_len, slot, out, s, stream);
}
void varlen_attention(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                      const float* v_scales, const int* q_start, const int* q_len, const int* kv_len, const int* slot,
                      float* out, const VarlenShape& s, cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, k_scales, v_scales, q_start, q_len, kv_len, slot, out, s, stream);
}

void paged_varlen_attention(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                            const float* v_scales, const int* q_start, const int* q_len, const int* kv_len,
                            const int* block_table, float* out, const PagedShape& s, int tokens, int max_q_len,
                            cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, k_scales, v_scales, q_start, q_len, kv_len, block_table, out, s, tokens,
                 max_q_len, stream);
}
void paged_varlen_attention(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                            const float* v_scales, const int* q_start, const int* q_len, const int* kv_len,
                            const int* block_table, float* out, const PagedShape& s, int tokens, int max_q_len,
                            cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, k_scales, v_scales, q_start, q_len, kv_len, block_table, out, s, tokens,
                 max_q_len, stream);
}

}  // namespace pd::kernels::attention
