/// @file varlen_attention.cu
/// @brief Varlen attention over the KV cache (chapter 05): chapter 04's v2 (the online softmax,
/// lanes holding a head's dimensions) for many queries of a sequence at once, with the causal
/// mask of chapter 01, and K and V tiles in shared memory shared by a block's queries.
#include "model/decode_common.cuh"
#include "model/varlen_attention.hpp"

#include "attention/attention.hpp"
#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::model {

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
/// owns 4 of them) attend to its cache slot. The block walks the keys in tiles of kKeyTile
/// rows, loaded once into shared memory for all 16 queries; each warp folds every key one of
/// its queries may see into that query's OnlineState (v2's update), skipping masked keys.
template <typename T>
__global__ void varlen_attention_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        const int* __restrict__ q_start, const int* __restrict__ q_len,
                                        const int* __restrict__ kv_len, const int* __restrict__ slot,
                                        float* __restrict__ out, int heads, int kv_heads, int d, int slots, int max_seq,
                                        float scale) {
    using attention::allowed_keys;
    __shared__ float ks[kKeyTile][kMaxHeadDim], vs[kKeyTile][kMaxHeadDim];
    const int h = blockIdx.y, b = blockIdx.z;
    const int len = context_length(kv_len, b, max_seq);
    const int n = min(q_len[b], len);                 // the sequence's queries: its last n positions
    const int first = blockIdx.x * kQueriesPerBlock;  // the block's first query
    // Blocks past this sequence's queries (the grid is sized for the longest) leave whole, so
    // no barrier below waits for them.
    if (first >= n || slot[b] < 0 || slot[b] >= slots) return;
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const std::size_t kv_head = std::size_t(slot[b]) * kv_heads + h / (heads / kv_heads);
    const T* kh = k + kv_head * max_seq * d;  // K[slot][kv_head]: max_seq rows of d
    const T* vh = v + kv_head * max_seq * d;

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
        // The whole block loads the tile, consecutive threads reading consecutive elements of a
        // row (coalesced); each K and V element is read from memory once for 16 queries.
        for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
            const int r = e / d, c = e % d;
            ks[r][c] = to_f32(kh[std::size_t(j0 + r) * d + c]);
            vs[r][c] = to_f32(vh[std::size_t(j0 + r) * d + c]);
        }
        __syncthreads();  // the tile is complete before any warp reads it
        for (int r = 0; r < tile && j0 + r < warp_keys; ++r) {
            float kr[kLaneDims], vr[kLaneDims];
            load_lane_dims(&ks[r][0], d, kr);
            load_lane_dims(&vs[r][0], d, vr);
#pragma unroll
            for (int g = 0; g < kQueriesPerWarp; ++g) {
                // Masked by the causal rule: the same in every lane, so the shuffles stay converged.
                if (j0 + r >= keys[g]) continue;
                const float s = dot_lanes(qr[g], kr);
                const float m_new = fmaxf(st[g].m, s);  // v2's online softmax update
                const float correction = expf(st[g].m - m_new);
                const float p = expf(s - m_new);
                st[g].l = st[g].l * correction + p;
#pragma unroll
                for (int r2 = 0; r2 < kLaneDims; ++r2) st[g].acc[r2] = fmaf(st[g].acc[r2], correction, p * vr[r2]);
                st[g].m = m_new;
            }
        }
        __syncthreads();  // every warp is done with the tile before the next one overwrites it
    }

    // A warp has seen every key of its queries, so there is no merge across warps. Each query
    // saw at least its own key, so l >= 1 (and a NaN read from the cache stays visible).
    for (int g = 0; g < mine; ++g) {
        float* o = out + (std::size_t(q_start[b] + i0 + g) * heads + h) * d;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = st[g].acc[r] / st[g].l;
        }
    }
}
// [varlen_attention_kernel]

namespace {

/// Checks the shape and launches: grid (query tiles of the longest sequence, Hq, S), 128 threads.
template <typename T>
void launch_varlen(const float* q, const T* k, const T* v, const int* q_start, const int* q_len, const int* kv_len,
                   const int* slot, float* out, const VarlenShape& s, cudaStream_t stream) {
    check_varlen_shape(s);
    const dim3 grid(unsigned(ceil_div(s.max_q_len, kQueriesPerBlock)), unsigned(s.heads), unsigned(s.sequences));
    varlen_attention_kernel<T><<<grid, kDecodeThreads, 0, stream>>>(q, k, v, q_start, q_len, kv_len, slot, out, s.heads,
                                                                    s.kv_heads, s.head_dim, s.slots, s.max_seq,
                                                                    1.0f / std::sqrt(float(s.head_dim)));
    PD_CHECK_LAUNCH();
}

}  // namespace

void varlen_attention(const float* q, const float* k_cache, const float* v_cache, const int* q_start, const int* q_len,
                      const int* kv_len, const int* slot, float* out, const VarlenShape& s, cudaStream_t stream) {
    launch_varlen(q, k_cache, v_cache, q_start, q_len, kv_len, slot, out, s, stream);
}

void varlen_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* q_start,
                      const int* q_len, const int* kv_len, const int* slot, float* out, const VarlenShape& s,
                      cudaStream_t stream) {
    launch_varlen(q, k_cache, v_cache, q_start, q_len, kv_len, slot, out, s, stream);
}

}  // namespace pd::kernels::model
