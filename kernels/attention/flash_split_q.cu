/// @file flash_split_q.cu
/// @brief Chapter 07's SIMT flash attention after v1, and every form built on its body:
///  - v2 = v1 with split-Q: each of the block's 4 warps owns 4 of its 16 queries and sees every
///    key of a tile (its lanes one key each for the scores, 4 dimensions each for P V), so no
///    warp's state has to be merged with another's at the end and no score needs a shuffle (v1
///    splits each tile's keys among the warps, its lanes the dimensions, and merges O at the end);
///  - v3 = v2 + causal block skipping: the block stops at its last query's last allowed key, and
///    a warp at its own last query's, so the tiles above the diagonal are never loaded or computed;
///  - the split-KV form (few queries over a long context): v3's body over a range of the keys per
///    block, then a kernel that combines the ranges with their logsumexp;
///  - chapter 05's varlen and chapter 06's paged attention of a mixed batch: v3's body reading its
///    queries through PackedQueries and its keys through SlotRows or PagedRows (cache_rows.cuh).
/// Also the checks and the dispatch of flash_attention.hpp.
#include "attention/flash_attention.hpp"

#include "attention/cache_rows.cuh"
#include "attention/kv_quant.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pd::kernels::attention {

void check_flash_shape(const Shape& s, bool tensor_cores) {
    check_shape(s);
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("flash attention: " + msg); };
    if (s.head_dim > kMaxHeadDim)
        fail("head_dim = " + std::to_string(s.head_dim) + " exceeds " + std::to_string(kMaxHeadDim));
    if (tensor_cores && s.head_dim != 64 && s.head_dim != 128)
        fail("head_dim = " + std::to_string(s.head_dim) + " must be 64 or 128 on the tensor cores");
}

/// Queries whose state one warp keeps in v2 and v3.
constexpr int kFlashQueriesPerWarp = kFlashSimtQueries / kDecodeWarps;

// [flash_split_q_kernel]
/// Block (query tile x of 16 and split, head h, sequence b): queries 16 x ... 16 x + 15 of
/// sequence b attend to their allowed keys among keys [split * split_keys, (split + 1) *
/// split_keys), wherever @p rows says they live. The block copies its queries (scaled by
/// 1 / sqrt(d)) into shared memory once, then walks the range in tiles of 32 keys: it looks up
/// where the tile's rows are and loads them into shared memory once for its 16 queries.
///
/// The work split (v1's, in lab 07, is warps on keys and lanes on dimensions): warp w owns
/// queries 4 w ... 4 w + 3 and sees every key of a tile; lane j computes the score of key j of
/// the tile for each of them (a dot product over d, no shuffle), the warp takes the tile's
/// maximum (one reduction), and each lane folds the tile into its 4 dimensions of O from the
/// probabilities the lanes left in shared memory. A warp's states are whole, so nothing is
/// merged at the end. kSkip (v3) stops the block at its last allowed key and each warp at its
/// own; without it (v2) every tile is loaded and every score computed, the masked ones then set
/// to -inf. Each query's O = acc / l and logsumexp m + log(l) go to row split * split_stride +
/// its row (split_stride 0 without a split). TKV is the cache's element: fp32, bf16, or an
/// 8-bit code (chapter 08) whose row is multiplied by its scale from @p k_scales / @p v_scales
/// as the tile is loaded (unused, null, for fp32 and bf16).
template <bool kSkip, typename TQ, typename TKV, typename Queries, typename Rows>
__global__ void __launch_bounds__(kDecodeThreads)
    flash_split_q_kernel(const TQ* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v,
                         const float* __restrict__ k_scales, const float* __restrict__ v_scales, Queries queries,
                         Rows rows, float* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int d,
                         bool causal, float scale, int splits, int split_keys, std::size_t split_stride) {
    __shared__ float qs[kFlashSimtQueries][kMaxHeadDim];  // the block's queries, pre-scaled
    // K padded by one float: lane j reads row j at column c, bank (j + c) % 32, all different
    __shared__ float ks[kFlashSimtKeys][kMaxHeadDim + 1], vs[kFlashSimtKeys][kMaxHeadDim];
    __shared__ float ps[kDecodeWarps][kFlashQueriesPerWarp][kFlashSimtKeys];  // each warp's p of the tile
    __shared__ long long row_at[kFlashSimtKeys];                              // the tile's rows, -1 for none
    constexpr int kScales = kIsKv8<TKV> ? kFlashSimtKeys : 1;  // an 8-bit cache's row scales (none for fp32, bf16)
    __shared__ float k_scale_at[kScales], v_scale_at[kScales];
    const int h = blockIdx.y, b = blockIdx.z;
    const int split = blockIdx.x % splits, first = blockIdx.x / splits * kFlashSimtQueries;
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
        keys[g] = g < mine ? allowed_keys(i0 + g, n, len, causal) : 0;
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) acc[g][r] = 0.f;
    }
    const int begin = split * split_keys;
    const int end = splits == 1 ? len : min(len, begin + split_keys);
    // [flash_block_skipping]
    // v3: the block's last query sees the most keys, and a warp's last query the most of the
    // warp's; no tile after them is loaded (block) or computed (warp).
    const int block_end = kSkip ? min(end, allowed_keys(min(first + kFlashSimtQueries, n) - 1, n, len, causal)) : end;
    const int warp_end = kSkip ? min(end, mine > 0 ? keys[mine - 1] : 0) : end;
    // [flash_block_skipping]

    for (int j0 = begin; j0 < block_end; j0 += kFlashSimtKeys) {
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
        __syncthreads();                  // the tile is complete before any warp reads it
        if (j0 < warp_end && mine > 0) {  // the same for the whole warp
            // [flash_tile_update]
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
            // [flash_tile_update]
        }
        __syncthreads();  // every warp is done with the tile (and row_at, ps) before the next overwrites it
    }

    // A warp has seen every key of its queries: no merge across warps, only the lanes' parts of
    // l to add. A query that saw no key (l = 0: a split past its last allowed key, or a broken
    // block table) writes zeros and a logsumexp of -inf, which weighs nothing when splits are
    // combined.
#pragma unroll
    for (int g = 0; g < kFlashQueriesPerWarp; ++g) {
        if (g >= mine) break;
        const float L = warp_reduce_sum(l[g]);
        const std::size_t row = split * split_stride + queries.row(b, h, i0 + g);
        float* o = out + row * d;
        const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
        for (int r = 0; r < kLaneDims; ++r) {
            const int c = lane + r * kWarpSize;
            if (c < d) o[c] = acc[g][r] * inv;
        }
        if (lse && lane == 0) lse[row] = L > 0.f ? m[g] + logf(L) : -INFINITY;
    }
}
// [flash_split_q_kernel]

// [flash_combine_kernel]
/// Block r: row r's output from its @p splits partial outputs, each normalized over its own
/// keys with logsumexp lse_i: with M = max_i lse_i, O = sum_i e^(lse_i - M) O_i / sum_i
/// e^(lse_i - M) and lse = M + log sum_i e^(lse_i - M) (a split whose keys the row may not see
/// has lse_i = -inf and weighs 0).
__global__ void flash_combine_kernel(const float* __restrict__ part_out, const float* __restrict__ part_lse,
                                     float* __restrict__ out, float* __restrict__ lse, int splits, std::size_t rows,
                                     int d) {
    const std::size_t r = blockIdx.x;
    float M = -INFINITY;
    for (int i = 0; i < splits; ++i) M = fmaxf(M, part_lse[i * rows + r]);
    float L = 0.f;
    for (int i = 0; i < splits; ++i) L += M == -INFINITY ? 0.f : expf(part_lse[i * rows + r] - M);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float A = 0.f;
        for (int i = 0; i < splits; ++i) {
            const float w = M == -INFINITY ? 0.f : expf(part_lse[i * rows + r] - M);
            A = fmaf(w, part_out[(i * rows + r) * d + c], A);
        }
        out[r * d + c] = L > 0.f ? A / L : 0.f;
    }
    if (lse && threadIdx.x == 0) lse[r] = L > 0.f ? M + logf(L) : -INFINITY;
}
// [flash_combine_kernel]

namespace {

/// Launches v2 (kSkip false) or v3 on @p rows: grid (query tiles of the longest sequence x
/// splits, H, sequences), 128 threads.
/// @p k_scales and @p v_scales: an 8-bit cache's row scales (null for fp32 and bf16).
template <bool kSkip, typename TQ, typename TKV, typename Queries, typename Rows>
void launch_split_q(const TQ* q, const TKV* k, const TKV* v, const Queries& queries, const Rows& rows, float* out,
                    float* lse, int sequences, int heads, int kv_heads, int head_dim, int max_q_len, bool causal,
                    int splits, int split_keys, std::size_t split_stride, cudaStream_t stream,
                    const float* k_scales = nullptr, const float* v_scales = nullptr) {
    const dim3 grid(unsigned(ceil_div(max_q_len, kFlashSimtQueries) * splits), unsigned(heads), unsigned(sequences));
    flash_split_q_kernel<kSkip, TQ, TKV, Queries, Rows><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, k_scales, v_scales, queries, rows, out, lse, heads, kv_heads, head_dim, causal,
        1.0f / std::sqrt(float(head_dim)), splits, split_keys, split_stride);
    PD_CHECK_LAUNCH();
}

/// The dense problem of chapter 07 (Q [B, H, Sq, d], K and V [B, Hkv, Sk, d]) as queries and rows.
DenseQueries dense_queries(const Shape& s) {
    return {.heads = s.heads, .q_len = s.q_len, .kv_len = s.kv_len};
}
SlotRows dense_rows(const Shape& s) {
    return {.slot = nullptr, .slots = s.batch, .kv_heads = s.kv_head_count(), .max_seq = s.kv_len, .d = s.head_dim};
}

template <typename T>
void dense(const std::string& version, const T* q, const T* k, const T* v, float* out, float* lse, const Shape& s,
           cudaStream_t stream) {
    constexpr DType dtype = std::is_same_v<T, float> ? DType::fp32 : DType::bf16;
    const Version& ver = find_version(flash_versions(), version, dtype, "flash attention");
    check_flash_shape(s, ver.units == Units::tensor_cores);
    const int B = s.batch, H = s.heads, Hkv = s.kv_head_count(), d = s.head_dim;
    if (ver.name == "v1")
        flash_attention_v1(q, k, v, out, lse, s, stream);
    else if (ver.name == "v2")
        launch_split_q<false>(q, k, v, dense_queries(s), dense_rows(s), out, lse, B, H, Hkv, d, s.q_len, s.causal, 1,
                              INT_MAX, 0, stream);
    else if (ver.name == "v3")
        launch_split_q<true>(q, k, v, dense_queries(s), dense_rows(s), out, lse, B, H, Hkv, d, s.q_len, s.causal, 1,
                             INT_MAX, 0, stream);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        flash_attention_mma(ver.name[1] - '0', q, k, v, out, lse, s, stream);  // v4, v5, v6
}

/// The keys per split of the split-KV form: the context over flash_splits() blocks, whole tiles.
int split_keys_of(const Shape& s, int splits) {
    return ceil_div(ceil_div(s.kv_len, splits), kFlashSimtKeys) * kFlashSimtKeys;
}

template <typename T>
void split_kv(const T* q, const T* k, const T* v, float* out, float* lse, float* workspace, const Shape& s,
              int sm_count, cudaStream_t stream) {
    check_flash_shape(s);
    if (s.q_len > kFlashSplitMaxQueries)
        throw std::invalid_argument("flash attention split-KV: q_len = " + std::to_string(s.q_len) + " exceeds " +
                                    std::to_string(kFlashSplitMaxQueries) + " (use a version of flash_versions())");
    if (sm_count < 1) throw std::invalid_argument("flash attention split-KV: sm_count must be >= 1");
    const int want = flash_splits(s, sm_count), keys = split_keys_of(s, want), splits = ceil_div(s.kv_len, keys);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;
    if (splits == 1) {
        launch_split_q<true>(q, k, v, dense_queries(s), dense_rows(s), out, lse, s.batch, s.heads, s.kv_head_count(),
                             s.head_dim, s.q_len, s.causal, 1, INT_MAX, 0, stream);
        return;
    }
    if (!workspace) throw std::invalid_argument("flash attention split-KV: workspace is null");
    float* part_out = workspace;
    float* part_lse = workspace + std::size_t(splits) * rows * s.head_dim;
    launch_split_q<true>(q, k, v, dense_queries(s), dense_rows(s), part_out, part_lse, s.batch, s.heads,
                         s.kv_head_count(), s.head_dim, s.q_len, s.causal, splits, keys, rows, stream);
    flash_combine_kernel<<<unsigned(rows), kDecodeThreads, 0, stream>>>(part_out, part_lse, out, lse, splits, rows,
                                                                        s.head_dim);
    PD_CHECK_LAUNCH();
}

}  // namespace

void flash_attention(const std::string& version, const float* q, const float* k, const float* v, float* out, float* lse,
                     const Shape& s, cudaStream_t stream) {
    dense(version, q, k, v, out, lse, s, stream);
}
void flash_attention(const std::string& version, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                     float* out, float* lse, const Shape& s, cudaStream_t stream) {
    dense(version, q, k, v, out, lse, s, stream);
}

int flash_splits(const Shape& s, int sm_count) {
    const long long blocks = (long long)(s.batch) * s.heads * ceil_div(s.q_len, kFlashSimtQueries);
    const long long want = ceil_div(2LL * std::max(sm_count, 1), blocks);  // two blocks per SM
    return int(std::clamp<long long>(std::min<long long>(want, s.kv_len / 64), 1, kFlashMaxSplits));
}

std::size_t flash_split_workspace_floats(const Shape& s, int sm_count) {
    const int splits = flash_splits(s, sm_count);
    if (splits == 1) return 0;
    const int actual = ceil_div(s.kv_len, split_keys_of(s, splits));
    return std::size_t(actual) * s.batch * s.heads * s.q_len * (s.head_dim + 1);
}

void flash_attention_split_kv(const float* q, const float* k, const float* v, float* out, float* lse, float* workspace,
                              const Shape& s, int sm_count, cudaStream_t stream) {
    split_kv(q, k, v, out, lse, workspace, s, sm_count, stream);
}
void flash_attention_split_kv(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out,
                              float* lse, float* workspace, const Shape& s, int sm_count, cudaStream_t stream) {
    split_kv(q, k, v, out, lse, workspace, s, sm_count, stream);
}

double flash_sim_work(const std::string& version, const Shape& s) {
    const double bh = double(s.batch) * s.heads, d = s.head_dim;
    const bool mma = version == "v4" || version == "v5" || version == "v6";
    const int br = mma ? kFlashMmaQueries : kFlashSimtQueries;
    const double tiles = ceil_div(s.q_len, br), rows = tiles * br;
    // the scores computed: every one of the square in v1 and v2, up to each tile's diagonal after
    const bool skip = version != "v1" && version != "v2";
    double scores = rows * s.kv_len;
    if (skip && s.causal) {
        scores = 0;
        for (int t = 0; t < int(tiles); ++t)
            scores += double(br) *
                      std::min(s.kv_len, allowed_keys(std::min((t + 1) * br, s.q_len) - 1, s.q_len, s.kv_len, true));
    }
    scores *= bh;
    if (mma)  // 4 d FLOPs per score on the tensor cores, the softmax on the SIMT units
        return sim_launch_work(bh * tiles * kDecodeThreads, 8.0 * scores, 4.0 * d * scores, scores / 8.0);
    // SIMT: v1 reduces every score over a warp (5 shuffles); v2 and v3 one maximum (5 shuffles) and
    // a __syncwarp per query and 32-key tile
    const double collectives = version == "v1" ? 5.0 * scores : 6.0 * scores / kFlashSimtKeys;
    return sim_launch_work(bh * tiles * kDecodeThreads, 4.0 * d * scores, 0, collectives);
}

// ---- chapter 05 and 06: the attention of a mixed batch, v3's body over the cache ------------

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
    launch_split_q<true>(q, k, v, queries, rows, out, nullptr, s.sequences, s.heads, s.kv_heads, s.head_dim,
                         s.max_q_len, true, 1, INT_MAX, 0, stream, k_scales, v_scales);
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
    launch_split_q<true>(q, k, v, queries, rows, out, nullptr, s.batch, s.heads, s.kv_heads, s.head_dim, max_q_len,
                         true, 1, INT_MAX, 0, stream, k_scales, v_scales);
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
