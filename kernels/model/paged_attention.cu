/// @file paged_attention.cu
/// @brief Chapter 06's paged kernels: decode attention v2 (chapter 04's v4 through the block
/// table, split over whole blocks), varlen attention (chapter 05's through the block table) and
/// the KV append through it; the shape check, v2's split rule and the dispatch. v1 is lab 06
/// (block_table_walk.cu).
#include "model/paged_attention.hpp"
#include "model/paged_common.cuh"

#include "attention/attention.hpp"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::model {

void check_paged_shape(const PagedShape& s) {
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("paged attention: " + msg); };
    const auto str = [](long long v) { return std::to_string(v); };
    const std::pair<const char*, int> sizes[] = {
        {"batch", s.batch},           {"heads", s.heads},           {"kv_heads", s.kv_heads},
        {"head_dim", s.head_dim},     {"block_size", s.block_size}, {"num_blocks", s.num_blocks},
        {"max_blocks", s.max_blocks}, {"max_kv_len", s.max_kv_len}};
    for (const auto& [name, v] : sizes)
        if (v < 1) fail(std::string(name) + " must be >= 1, got " + str(v));
    if (s.heads % s.kv_heads != 0)
        fail("heads = " + str(s.heads) + " must be a multiple of kv_heads = " + str(s.kv_heads));
    if (s.head_dim > kMaxHeadDim) fail("head_dim = " + str(s.head_dim) + " exceeds " + str(kMaxHeadDim));
    const long long capacity = (long long)s.max_blocks * s.block_size;
    if (capacity > INT_MAX)
        fail("max_blocks * block_size = " + str(s.max_blocks) + " * " + str(s.block_size) + " exceeds " +
             str(INT_MAX) + " positions");
    if (s.max_kv_len > capacity)
        fail("max_kv_len = " + str(s.max_kv_len) + " exceeds max_blocks * block_size = " + str(capacity));
    if (s.batch > 65535 || s.heads > 65535)
        fail("batch and heads must be <= 65535 (grid limits), got " + str(s.batch) + " and " + str(s.heads));
}

namespace {

/// Keys whose K and V rows a warp of v2 loads before computing with them (as chapter 04's v3
/// and v4).
constexpr int kKeysInFlight = 4;

/// Stores an fp32 value in the cache's type: as is, or rounded to the nearest even bf16.
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace

// ---- v2: chapter 04's v4 through the block table --------------------------------------------

// [paged_v2_kernel]
/// Block (kv head, b, split): chapter 04's v3/v4 kernel (the group's up to kG query heads share
/// every K and V row; each warp keeps one OnlineState per query and loads kKeysInFlight keys
/// before computing with them) over positions [split * chunk, min(len, (split + 1) * chunk)),
/// with one change: a key's rows are found through the block table (PagedRows), and a key
/// whose entry is no block is skipped. chunk is a whole number of blocks, so the keys a warp
/// loads together mostly share a block. With one split the block writes the output; with
/// several, its unnormalized partial state in v4's layout: acc [B, Hq, splits, d], then m and
/// l [B, Hq, splits].
template <typename T, int kG>
__global__ void paged_decode_v2_kernel(const float* __restrict__ q, const T* __restrict__ k_cache,
                                       const T* __restrict__ v_cache, const int* __restrict__ block_table,
                                       const int* __restrict__ kv_len, float* __restrict__ out,
                                       float* __restrict__ partials, int heads, int kv_heads, int d, int block_size,
                                       int num_blocks, int max_blocks, int max_kv_len, int chunk, float scale) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = context_length(kv_len, b, max_kv_len);
    const int begin = int(min((long long)split * chunk, (long long)len));  // no int overflow near the limits
    const int end = min(len - begin, chunk) + begin;
    const PagedRows rows = paged_rows(block_table, b, max_blocks, block_size, num_blocks, kv_heads, d);
    const std::size_t first_q = std::size_t(b) * heads + std::size_t(kvh) * group;  // query heads of the group

    float qr[kG][kLaneDims] = {};  // zeros past the group
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        if (g < group) load_lane_dims(q + (first_q + g) * d, d, qr[g]);
        for (float& x : qr[g]) x *= scale;
    }
    OnlineState st[kG];
    for (int j0 = begin + warp * kKeysInFlight; j0 < end; j0 += kDecodeWarps * kKeysInFlight) {
        float kr[kKeysInFlight][kLaneDims] = {}, vr[kKeysInFlight][kLaneDims] = {};
        bool present[kKeysInFlight];  // the key is in the split and in a block of the cache
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {  // all loads first: more of them in flight
            const int j = j0 + u;
            const int p = j < end ? rows.block(j) : -1;
            present[u] = p >= 0;
            if (!present[u]) continue;
            const std::size_t at = rows.offset(p, kvh, j);
            load_lane_dims(k_cache + at, d, kr[u]);  // read once for the whole group
            load_lane_dims(v_cache + at, d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
            if (!present[u]) continue;  // the same for the whole warp: its shuffles stay converged
#pragma unroll
            for (int g = 0; g < kG; ++g) {
                if (g >= group) break;  // `group` is the same in the whole block
                online_update(st[g], dot_lanes(qr[g], kr[u]), vr[u]);
            }
        }
    }
    merge_warps<kG>(st, group, d, shared, [&](int g, int c, float M, float L, float A) {
        const std::size_t row = first_q + g;  // b * Hq + h
        if (splits == 1) {
            out[row * d + c] = L > 0.f ? A / L : 0.f;
        } else {
            const std::size_t part = row * splits + split;
            partials[part * d + c] = A;
            if (c == 0) {
                const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;  // after all acc
                partials[stats + part] = M;
                partials[stats + std::size_t(gridDim.y) * heads * splits + part] = L;
            }
        }
    });
}
// [paged_v2_kernel]

// ---- varlen: chapter 05's varlen attention through the block table --------------------------

/// Queries whose online softmax one warp keeps (as chapter 05's kernel).
constexpr int kPagedQueriesPerWarp = 4;
/// Queries of one sequence a block serves: they share every K and V tile it loads.
constexpr int kPagedQueriesPerBlock = kDecodeWarps * kPagedQueriesPerWarp;
/// Keys (K and V rows) per shared-memory tile: 2 x 32 x 128 floats = 32 KiB.
constexpr int kPagedKeyTile = 32;

// [paged_varlen_kernel]
/// Block (query tile x, head h, sequence b): chapter 05's varlen kernel (queries x * 16 ...
/// x * 16 + 15 of sequence b, 4 per warp; the keys in tiles of kPagedKeyTile rows loaded into
/// shared memory once for all 16 queries; v2's online update per query, skipping masked keys)
/// with one change: before a tile is loaded, its rows' places in the cache are looked up in the
/// block table (a tile may span several blocks, or part of one); a row whose entry is no block
/// is neither loaded nor attended to.
template <typename T>
__global__ void paged_varlen_kernel(const float* __restrict__ q, const T* __restrict__ k_cache,
                                    const T* __restrict__ v_cache, const int* __restrict__ q_start,
                                    const int* __restrict__ q_len, const int* __restrict__ kv_len,
                                    const int* __restrict__ block_table, float* __restrict__ out, int heads,
                                    int kv_heads, int d, int block_size, int num_blocks, int max_blocks, float scale) {
    using attention::allowed_keys;
    __shared__ float ks[kPagedKeyTile][kMaxHeadDim], vs[kPagedKeyTile][kMaxHeadDim];
    __shared__ long long row_at[kPagedKeyTile];  // the tile's rows in the cache, -1 for no block
    const int h = blockIdx.y, b = blockIdx.z;
    const int len = context_length(kv_len, b, max_blocks * block_size);
    const int n = min(q_len[b], len);                      // the sequence's queries: its last n positions
    const int first = blockIdx.x * kPagedQueriesPerBlock;  // the block's first query
    if (first >= n) return;  // past this sequence's queries: the whole block leaves, no barrier waits for it
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int kvh = h / (heads / kv_heads);
    const PagedRows rows = paged_rows(block_table, b, max_blocks, block_size, num_blocks, kv_heads, d);

    const int i0 = first + warp * kPagedQueriesPerWarp;          // this warp's first query
    const int mine = max(0, min(kPagedQueriesPerWarp, n - i0));  // and how many it has
    float qr[kPagedQueriesPerWarp][kLaneDims];                   // pre-scaled by 1 / sqrt(d)
    int keys[kPagedQueriesPerWarp];                              // keys each query may see (0 for none)
    OnlineState st[kPagedQueriesPerWarp];
#pragma unroll
    for (int g = 0; g < kPagedQueriesPerWarp; ++g) {
        keys[g] = g < mine ? allowed_keys(i0 + g, n, len) : 0;
        const int row = q_start[b] + min(i0 + g, n - 1);  // a query past n loads a valid row it never uses
        load_lane_dims(q + (std::size_t(row) * heads + h) * d, d, qr[g]);
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) qr[g][r] *= scale;
    }
    const int warp_keys = mine > 0 ? keys[mine - 1] : 0;  // a later query sees more keys
    const int block_keys = allowed_keys(min(first + kPagedQueriesPerBlock, n) - 1, n, len);

    for (int j0 = 0; j0 < block_keys; j0 += kPagedKeyTile) {
        const int tile = min(kPagedKeyTile, block_keys - j0);
        for (int r = threadIdx.x; r < tile; r += blockDim.x) {  // 1. where the tile's rows are
            const int p = rows.block(j0 + r);
            row_at[r] = p < 0 ? -1 : (long long)rows.offset(p, kvh, j0 + r);
        }
        __syncthreads();  // the rows' places are known to every thread
        // 2. the whole block loads the tile, consecutive threads reading consecutive elements of
        // a row (a row is contiguous in its block); each element read once for 16 queries
        for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            if (row_at[r] < 0) continue;
            ks[r][c] = to_f32(k_cache[std::size_t(row_at[r]) + c]);
            vs[r][c] = to_f32(v_cache[std::size_t(row_at[r]) + c]);
        }
        __syncthreads();  // the tile is complete before any warp reads it
        for (int r = 0; r < tile && j0 + r < warp_keys; ++r) {  // 3. fold the tile into the queries
            if (row_at[r] < 0) continue;  // no block: the same for the whole warp
            float kr[kLaneDims], vr[kLaneDims];
            load_lane_dims(&ks[r][0], d, kr);
            load_lane_dims(&vs[r][0], d, vr);
#pragma unroll
            for (int g = 0; g < kPagedQueriesPerWarp; ++g) {
                if (j0 + r >= keys[g]) continue;  // masked by the causal rule, in every lane alike
                online_update(st[g], dot_lanes(qr[g], kr), vr);
            }
        }
        __syncthreads();  // every warp is done with the tile (and row_at) before the next overwrites it
    }

    // A warp has seen every key of its queries: no merge across warps. l = 0 only when every
    // key a query may see was in no block (a broken table): it writes zeros.
    for (int g = 0; g < mine; ++g) {
        float* o = out + (std::size_t(q_start[b] + i0 + g) * heads + h) * d;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = st[g].l > 0.f ? st[g].acc[r] / st[g].l : 0.f;
        }
    }
}
// [paged_varlen_kernel]

// ---- the KV append through the block table ---------------------------------------------------

// [paged_append_kernel]
/// Block t, thread c of head h: element c of head h of row t into K and V of the cache at
/// logical position positions[t] of sequence row_seq[t], that is in the block the table names,
/// at the position's offset in it. Consecutive threads handle consecutive elements of a head:
/// the reads and the writes are both contiguous.
template <typename C>
__global__ void paged_append_kernel(const float* __restrict__ k_new, const float* __restrict__ v_new,
                                    C* __restrict__ k_cache, C* __restrict__ v_cache,
                                    const int* __restrict__ block_table, const int* __restrict__ row_seq,
                                    const int* __restrict__ positions, int batch, int kv_heads, int d, int block_size,
                                    int num_blocks, int max_blocks) {
    const int t = blockIdx.x, seq = row_seq[t], pos = positions[t];
    if (seq < 0 || seq >= batch || pos < 0 || pos >= max_blocks * block_size) return;  // outside the table
    const PagedRows rows = paged_rows(block_table, seq, max_blocks, block_size, num_blocks, kv_heads, d);
    const int p = rows.block(pos);
    if (p < 0) return;  // no block allocated for this position: write nothing
    const std::size_t src = std::size_t(t) * kv_heads * d;
    for (int i = threadIdx.x; i < kv_heads * d; i += blockDim.x) {
        const int h = i / d, c = i % d;
        const std::size_t dst = rows.offset(p, h, pos) + c;
        store(k_cache + dst, k_new[src + i]);
        store(v_cache + dst, v_new[src + i]);
    }
}
// [paged_append_kernel]

// ---- launchers ----------------------------------------------------------------------------------

namespace {

float scale_of(const PagedShape& s) { return 1.0f / std::sqrt(float(s.head_dim)); }

/// Blocks of the longest sequence: ceil(max_kv_len / block_size).
int longest_blocks(const PagedShape& s) { return ceil_div(s.max_kv_len, s.block_size); }

/// v2's kernel for a group of up to kG query heads.
template <typename T, int kG>
void launch_v2_for(const float* q, const T* k, const T* v, const int* table, const int* kv_len, float* out,
                   float* partials, int splits, int chunk, const PagedShape& s, cudaStream_t stream) {
    const dim3 grid(unsigned(s.kv_heads), unsigned(s.batch), unsigned(splits));
    paged_decode_v2_kernel<T, kG><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, table, kv_len, out, partials, s.heads, s.kv_heads, s.head_dim, s.block_size, s.num_blocks,
        s.max_blocks, s.max_kv_len, chunk, scale_of(s));
    PD_CHECK_LAUNCH();
}

/// v2: the kernel instantiated for the smallest of 1, 2, 4, 8, 16 query heads that holds the
/// group, each split ceil(blocks / splits) whole blocks; then, with several splits, v4's combine.
template <typename T>
void launch_v2(const float* q, const T* k, const T* v, const int* table, const int* kv_len, float* out,
               float* partials, int splits, const PagedShape& s, cudaStream_t stream) {
    check_paged_shape(s);
    const int group = s.group();
    if (group > kMaxGroup)
        throw std::invalid_argument("paged attention v2: heads / kv_heads = " + std::to_string(group) + " exceeds " +
                                    std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("paged attention v2: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    if (splits > 1 && partials == nullptr)
        throw std::invalid_argument("paged attention v2: partials is null with splits = " + std::to_string(splits));
    const int chunk = ceil_div(longest_blocks(s), splits) * s.block_size;  // positions per split: whole blocks
    if (group <= 1) launch_v2_for<T, 1>(q, k, v, table, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 2) launch_v2_for<T, 2>(q, k, v, table, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 4) launch_v2_for<T, 4>(q, k, v, table, kv_len, out, partials, splits, chunk, s, stream);
    else if (group <= 8) launch_v2_for<T, 8>(q, k, v, table, kv_len, out, partials, splits, chunk, s, stream);
    else launch_v2_for<T, 16>(q, k, v, table, kv_len, out, partials, splits, chunk, s, stream);
    if (splits > 1) {
        decode_combine_kernel<<<dim3(unsigned(s.heads), unsigned(s.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, s.heads, s.head_dim, splits);
        PD_CHECK_LAUNCH();
    }
}

template <typename T>
void launch_varlen(const float* q, const T* k, const T* v, const int* q_start, const int* q_len, const int* kv_len,
                   const int* table, float* out, const PagedShape& s, int tokens, int max_q_len,
                   cudaStream_t stream) {
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
    const dim3 grid(unsigned(ceil_div(max_q_len, kPagedQueriesPerBlock)), unsigned(s.heads), unsigned(s.batch));
    paged_varlen_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, q_start, q_len, kv_len, table, out, s.heads,
                                                                s.kv_heads, s.head_dim, s.block_size, s.num_blocks,
                                                                s.max_blocks, scale_of(s));
    PD_CHECK_LAUNCH();
}

template <typename C>
void launch_append(const float* k_new, const float* v_new, C* k_cache, C* v_cache, const int* table,
                   const int* row_seq, const int* positions, int T, const PagedShape& s, cudaStream_t stream) {
    check_paged_shape(s);
    if (T < 1) throw std::invalid_argument("paged_kv_append_rows: T must be >= 1, got " + std::to_string(T));
    paged_append_kernel<C><<<unsigned(T), 128, 0, stream>>>(k_new, v_new, k_cache, v_cache, table, row_seq, positions,
                                                           s.batch, s.kv_heads, s.head_dim, s.block_size,
                                                           s.num_blocks, s.max_blocks);
    PD_CHECK_LAUNCH();
}

template <typename T>
void dispatch(const std::string& version, const float* q, const T* k, const T* v, const int* table, const int* kv_len,
              float* out, float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream) {
    if (version == "v1") return paged_decode_attention_v1(q, k, v, table, kv_len, out, s, stream);
    if (version == "v2")
        return paged_decode_attention_v2(q, k, v, table, kv_len, out, workspace, paged_splits(s, sm_count), s, stream);
    throw std::invalid_argument("--attention " + version + ": not a paged attention version (v1, v2)");
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
    return ceil_div(blocks, ceil_div(blocks, wanted));
}
// [paged_split_rule]

std::size_t paged_workspace_floats(const std::string& version, const PagedShape& s, int sm_count) {
    check_paged_shape(s);
    if (version == "v2") return std::size_t(s.batch) * s.heads * paged_splits(s, sm_count) * (s.head_dim + 2);
    return 0;
}

void paged_decode_attention_v2(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                               const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                               cudaStream_t stream) {
    launch_v2(q, k_cache, v_cache, block_table, kv_len, out, partials, splits, s, stream);
}
void paged_decode_attention_v2(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                               const PagedShape& s, cudaStream_t stream) {
    launch_v2(q, k_cache, v_cache, block_table, kv_len, out, partials, splits, s, stream);
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

void paged_kv_append_rows(const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream) {
    launch_append(k_new, v_new, k_cache, v_cache, block_table, row_seq, positions, T, s, stream);
}
void paged_kv_append_rows(const float* k_new, const float* v_new, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          const int* block_table, const int* row_seq, const int* positions, int T, const PagedShape& s,
                          cudaStream_t stream) {
    launch_append(k_new, v_new, k_cache, v_cache, block_table, row_seq, positions, T, s, stream);
}

void paged_varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start,
                            const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_varlen(q, k_cache, v_cache, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len, stream);
}
void paged_varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* q_start, const int* q_len, const int* kv_len, const int* block_table, float* out,
                            const PagedShape& s, int tokens, int max_q_len, cudaStream_t stream) {
    launch_varlen(q, k_cache, v_cache, q_start, q_len, kv_len, block_table, out, s, tokens, max_q_len, stream);
}

}  // namespace pd::kernels::model
