/// @file varlen_attention.cu
/// @brief Varlen attention over the KV cache (chapter 05): chapter 04's v2 (the online softmax,
/// lanes holding a head's dimensions) for many queries of a sequence at once, with the causal
/// mask of chapter 01, and K and V tiles in shared memory shared by a block's queries. One
/// kernel body reads either cache: chapter 05's slots, or chapter 06's blocks through the block
/// table (paged_varlen_attention, launched here too).
#include "attention/varlen_attention.hpp"

#include "attention/attention.hpp"
#include "attention/cache_rows.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"
#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

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

/// Queries whose online softmax one warp keeps.
constexpr int kQueriesPerWarp = 4;
/// Queries of one sequence a block serves: they share every K and V tile it loads.
constexpr int kQueriesPerBlock = kDecodeWarps * kQueriesPerWarp;
/// Keys (K and V rows) per shared-memory tile: 2 x 32 x 128 floats = 32 KiB.
constexpr int kKeyTile = 32;

// [varlen_attention_kernel]
/// Block (query tile x, head h, sequence b): queries x * 16 ... x * 16 + 15 of sequence b (warp w
/// owns 4 of them) attend to its cached positions, wherever @p rows says they live (its slot, or
/// its blocks). The block walks the keys in tiles of kKeyTile rows: it looks up where the tile's
/// rows are, loads them once into shared memory for all 16 queries, and each warp folds every
/// key one of its queries may see into that query's OnlineState (v2's update), skipping masked
/// keys and keys with no row (no block in the table).
template <typename T, typename Rows>
__global__ void varlen_attention_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        Rows rows, const int* __restrict__ q_start, const int* __restrict__ q_len,
                                        const int* __restrict__ kv_len, float* __restrict__ out, int heads,
                                        int kv_heads, int d, float scale) {
    __shared__ float ks[kKeyTile][kMaxHeadDim], vs[kKeyTile][kMaxHeadDim];
    __shared__ long long row_at[kKeyTile];  // the tile's rows in the cache, -1 for none
    const int h = blockIdx.y, b = blockIdx.z;
    const int len = context_length(kv_len, b, rows.capacity());
    const int n = min(q_len[b], len);                 // the sequence's queries: its last n positions
    const int first = blockIdx.x * kQueriesPerBlock;  // the block's first query
    // Blocks past this sequence's queries (the grid is sized for the longest) leave whole, so
    // no barrier below waits for them.
    if (first >= n || !rows.valid(b)) return;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const auto head = rows.of(b, h / (heads / kv_heads));  // where the sequence's KV head lives

    const int i0 = first + warp * kQueriesPerWarp;          // this warp's first query
    const int mine = max(0, min(kQueriesPerWarp, n - i0));  // and how many it has (0 in a last, short tile)
    float qr[kQueriesPerWarp][kLaneDims];                   // the queries' lane dimensions, pre-scaled by 1 / sqrt(d)
    int keys[kQueriesPerWarp];                              // keys each query may see (0 for none)
    OnlineState st[kQueriesPerWarp];
#pragma unroll
    for (int g = 0; g < kQueriesPerWarp; ++g) {
        keys[g] = g < mine ? allowed_keys(i0 + g, n, len) : 0;
        const int row = q_start[b] + min(i0 + g, n - 1);  // a query past n loads a valid row it never uses
        load_lane_dims(q + (std::size_t(row) * heads + h) * d, d, qr[g]);
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) qr[g][r] *= scale;
    }
    const int warp_keys = mine > 0 ? keys[mine - 1] : 0;  // a later query sees more keys
    const int block_keys = allowed_keys(min(first + kQueriesPerBlock, n) - 1, n, len);

    for (int j0 = 0; j0 < block_keys; j0 += kKeyTile) {
        const int tile = min(kKeyTile, block_keys - j0);
        for (int r = threadIdx.x; r < tile; r += blockDim.x) row_at[r] = head.row(j0 + r);  // 1. where the rows are
        __syncthreads();  // the rows' places are known to every thread
        // 2. The whole block loads the tile, consecutive threads reading consecutive elements of
        // a row (coalesced: a row is contiguous in its slot or block); each K and V element is
        // read from memory once for 16 queries.
        for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            if (row_at[r] < 0) continue;
            ks[r][c] = to_f32(k[row_at[r] + c]);
            vs[r][c] = to_f32(v[row_at[r] + c]);
        }
        __syncthreads();                                        // the tile is complete before any warp reads it
        for (int r = 0; r < tile && j0 + r < warp_keys; ++r) {  // 3. fold the tile into the queries
            if (row_at[r] < 0) continue;                        // no row: the same for the whole warp
            float kr[kLaneDims], vr[kLaneDims];
            load_lane_dims(&ks[r][0], d, kr);
            load_lane_dims(&vs[r][0], d, vr);
#pragma unroll
            for (int g = 0; g < kQueriesPerWarp; ++g) {
                // Masked by the causal rule: the same in every lane, so the shuffles stay converged.
                if (j0 + r >= keys[g]) continue;
                online_update(st[g], dot_lanes(qr[g], kr), vr);
            }
        }
        __syncthreads();  // every warp is done with the tile (and row_at) before the next overwrites it
    }

    // A warp has seen every key of its queries, so there is no merge across warps. A query saw
    // at least its own key unless every key it may see had no row (a broken block table): then
    // l = 0 and it writes zeros. A NaN read from the cache stays visible (NaN != 0).
    for (int g = 0; g < mine; ++g) {
        float* o = out + (std::size_t(q_start[b] + i0 + g) * heads + h) * d;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = st[g].l != 0.f ? st[g].acc[r] / st[g].l : 0.f;
        }
    }
}
// [varlen_attention_kernel]

namespace {

/// Launches the kernel on @p rows: grid (query tiles of the longest sequence, Hq, S), 128 threads.
template <typename T, typename Rows>
void launch_varlen(const float* q, const T* k, const T* v, const Rows& rows, const int* q_start, const int* q_len,
                   const int* kv_len, float* out, int sequences, int heads, int kv_heads, int head_dim, int max_q_len,
                   cudaStream_t stream) {
    const dim3 grid(unsigned(ceil_div(max_q_len, kQueriesPerBlock)), unsigned(heads), unsigned(sequences));
    varlen_attention_kernel<T, Rows><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, rows, q_start, q_len, kv_len, out, heads, kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)));
    PD_CHECK_LAUNCH();
}

/// Chapter 05: over the slots of the contiguous cache.
template <typename T>
void launch_slots(const float* q, const T* k, const T* v, const int* q_start, const int* q_len, const int* kv_len,
                  const int* slot, float* out, const VarlenShape& s, cudaStream_t stream) {
    check_varlen_shape(s);
    const SlotRows rows{.slot = slot, .slots = s.slots, .kv_heads = s.kv_heads, .max_seq = s.max_seq, .d = s.head_dim};
    launch_varlen(q, k, v, rows, q_start, q_len, kv_len, out, s.sequences, s.heads, s.kv_heads, s.head_dim, s.max_q_len,
                  stream);
}

/// Chapter 06: through the block table of the paged cache.
template <typename T>
void launch_pages(const float* q, const T* k, const T* v, const int* q_start, const int* q_len, const int* kv_len,
                  const int* table, float* out, const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    check_paged_shape(s);
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
    launch_varlen(q, k, v, rows, q_start, q_len, kv_len, out, s.batch, s.heads, s.kv_heads, s.head_dim, max_q_len,
                  stream);
}

}  // namespace

void varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start, const int* q_len,
                      const int* kv_len, const int* slot, float* out, const VarlenShape& s, cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, q_start, q_len, kv_len, slot, out, s, stream);
}
void varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* q_start,
                      const int* q_len, const int* kv_len, const int* slot, float* out, const VarlenShape& s,
                      cudaStream_t stream) {
    launch_slots(q, k_cache, v_cache, q_start, q_len, kv_len, slot, out, s, stream);
}

void paged_varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start,
                            const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len, stream);
}
void paged_varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* q_start, const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_pages(q, k_cache, v_cache, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len, stream);
}

}  // namespace pd::kernels::attention
