/// @file paged_decode.cu
/// @brief The runtime's decode attention over a paged cache of any element type: what the model
/// runs for a decode batch of a paged cache in 8 bits. It combines
///  - chapter 04's decode attention v4 (kernels/attention/ch04_v4_split.cu): the kernel body, a
///    block per KV head and its query group, split over the context, and the combine;
///  - chapter 06's paged v2 (kernels/attention/ch06_v2_paged.cu): the rows found through the block
///    table (cache_rows.cuh's PagedRows), splits of whole blocks;
///  - chapter 08's 8-bit cache (kernels/attention/ch08_kv8_decode.cu): fp8 or int8 codes
///    multiplied by their row's scale as they are loaded.
/// On each step's own problem it computes that step's bits (tests/kernels/test_runtime.cpp): chapter
/// 06's v2 on an fp32 or bf16 paged cache, chapter 08's on an 8-bit cache of one KV head laid out
/// as blocks. attention::paged_decode_attention_v2() on an 8-bit cache is this kernel, and
/// attention::paged_decode_attention() dispatches to it by name ("v2").
#include "attention/cache_rows.cuh"
#include "attention/kv_quant.cuh"
#include "attention/online_softmax.cuh"
#include "attention/paged_attention.hpp"
#include "runtime/runtime.hpp"

#include "pd/cuda_check.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Keys whose K and V rows a warp loads before computing with them (as chapter 04's v3 and v4).
constexpr int kRuntimeKeysInFlight = 4;

// [runtime_decode_kernel]
/// Block (kv head, b, split): chapter 04's v4 block (the group's query heads over positions
/// [split * chunk, min(len, (split + 1) * chunk)) of one KV head, 4 keys in flight per warp, the
/// warps' states merged), reading each position's rows where @p rows says they are (chapter 04's
/// slot or chapter 06's blocks; a key with no row is skipped) and T the cache's element: fp32,
/// bf16, or chapter 08's 8-bit code, whose row is multiplied by its scale from @p k_scales /
/// @p v_scales as it is loaded (null for fp32 and bf16). The context is kv_len[b], clamped to
/// @p limit. With one split the block writes the output; with several its partial state,
/// unnormalized, to @p partials: acc [B, Hq, splits, d], then m and l [B, Hq, splits]. Chapter
/// 12's fixed grid: with @p plan (device, [splits, chunk], fixed_grid_decode_plan()) the grid's
/// third dimension is the most splits the bucket may take, and the step's own split count and
/// chunk are read from @p plan (the blocks past it return at once); without, they are gridDim.z
/// and @p chunk.
template <typename T, int kG, typename Rows>
__global__ void runtime_decode_kernel(const float* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                      const float* __restrict__ k_scales, const float* __restrict__ v_scales, Rows rows,
                                      const int* __restrict__ kv_len, float* __restrict__ out,
                                      float* __restrict__ partials, int heads, int kv_heads, int d, int limit,
                                      int chunk, float scale, const int* __restrict__ plan) {
    __shared__ WarpStates<kG> shared;
    const int kvh = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
    int splits = int(gridDim.z);
    if (plan != nullptr) {  // chapter 12: the step's splits, chosen on the device
        splits = plan[0], chunk = plan[1];
        if (split >= splits) return;  // the whole block: no barrier is left waiting
    }
    const int warp = threadIdx.x / kWarpSize;
    const int group = heads / kv_heads;
    const int len = context_length(kv_len, b, limit);
    const int begin = int(min((long long)split * chunk, (long long)len));  // no int overflow near the limits
    const int end = min(len - begin, chunk) + begin;
    const auto head = rows.of(b, kvh);  // where this sequence's positions of KV head kvh live
    const std::size_t first_q = std::size_t(b) * heads + std::size_t(kvh) * group;  // query heads of the group

    float qr[kG][kLaneDims] = {};  // zeros past the group
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        if (g < group) load_lane_dims(q + (first_q + g) * d, d, qr[g]);
        for (float& x : qr[g]) x *= scale;
    }
    OnlineState st[kG];
    // Each warp takes kRuntimeKeysInFlight consecutive keys at a time and loads all their K and V rows
    // before using any: a decode step is a stream of loads, and more of them in flight per warp
    // is what keeps the memory busy (one row per warp at a time leaves it waiting on latency).
    for (int j0 = begin + warp * kRuntimeKeysInFlight; j0 < end; j0 += kDecodeWarps * kRuntimeKeysInFlight) {
        float kr[kRuntimeKeysInFlight][kLaneDims] = {}, vr[kRuntimeKeysInFlight][kLaneDims] = {};
        long long at[kRuntimeKeysInFlight];  // each key's row in the cache, -1 past the split or with no row
#pragma unroll
        for (int u = 0; u < kRuntimeKeysInFlight; ++u) {
            at[u] = j0 + u < end ? head.row(j0 + u) : -1;
            if (at[u] < 0) continue;
            load_lane_dims(k, k_scales, at[u], d, kr[u]);  // K and V rows: read once for the whole group
            load_lane_dims(v, v_scales, at[u], d, vr[u]);
        }
#pragma unroll
        for (int u = 0; u < kRuntimeKeysInFlight; ++u) {
            if (at[u] < 0) continue;  // the same for the whole warp: its shuffles stay converged
#pragma unroll
            for (int g = 0; g < kG; ++g) {
                if (g >= group) break;                                 // `group` is the same in the whole block
                online_update(st[g], dot_lanes(qr[g], kr[u]), vr[u]);  // the online softmax of v2, per query
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
// [runtime_decode_kernel]

/// The second kernel, block (h, b), as chapter 04's v4's: the splits' states merge as the warps' did inside a block:
/// M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. A split past the end of
/// a shorter sequence saw no key (m = -inf) and weighs 0. With @p plan (chapter 12's fixed grid)
/// the splits are plan[0], and with one split there is nothing to combine (the blocks wrote the
/// output).
__global__ void runtime_combine_kernel(const float* __restrict__ partials, float* __restrict__ out, int heads, int d,
                                       int splits, const int* __restrict__ plan) {
    if (plan != nullptr) {
        splits = plan[0];
        if (splits == 1) return;
    }
    const std::size_t row = std::size_t(blockIdx.y) * heads + blockIdx.x;
    const std::size_t stats = std::size_t(gridDim.y) * heads * splits * d;
    const float* m = partials + stats + row * splits;
    const float* l = m + std::size_t(gridDim.y) * heads * splits;
    const float* acc = partials + row * splits * d;
    float M = -INFINITY;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, m[s]);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float L = 0.f, A = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float w = m[s] == -INFINITY ? 0.f : expf(m[s] - M);
            L = fmaf(l[s], w, L);
            A = fmaf(acc[std::size_t(s) * d + c], w, A);
        }
        out[row * d + c] = L > 0.f ? A / L : 0.f;
    }
}

namespace {

/// The sizes every launch of the kernel needs.
struct GqaLaunch {
    int batch, heads, kv_heads, head_dim;
    int limit;                  ///< the longest context a sequence may have (kv_len is clamped to it)
    int chunk;                  ///< positions per split
    int splits;                 ///< blocks per (sequence, KV head); with plan, the most the step may take
    const int* plan = nullptr;  ///< chapter 12: the step's [splits, chunk] on the device, or null
};

/// The kernel for a group of up to kG query heads.
template <typename T, int kG, typename Rows>
void launch_gqa_for(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                    const Rows& rows, const int* kv_len, float* out, float* partials, const GqaLaunch& g,
                    cudaStream_t stream) {
    const dim3 grid(unsigned(g.kv_heads), unsigned(g.batch), unsigned(g.splits));
    runtime_decode_kernel<T, kG, Rows><<<grid, kDecodeThreads, 0, stream>>>(
        q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g.heads, g.kv_heads, g.head_dim, g.limit, g.chunk,
        1.0f / std::sqrt(float(g.head_dim)), g.plan);
    PD_CHECK_LAUNCH();
}

/// The kernel instantiated for the smallest of 1, 2, 4, 8, 16 query
/// heads that holds the group; then, with several splits, the combine.
template <typename T, typename Rows>
void launch_gqa(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales, const Rows& rows,
                const int* kv_len, float* out, float* partials, const GqaLaunch& g, cudaStream_t stream) {
    const int group = g.heads / g.kv_heads;
    if (group <= 1)
        launch_gqa_for<T, 1>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 2)
        launch_gqa_for<T, 2>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 4)
        launch_gqa_for<T, 4>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else if (group <= 8)
        launch_gqa_for<T, 8>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    else
        launch_gqa_for<T, 16>(q, k, v, k_scales, v_scales, rows, kv_len, out, partials, g, stream);
    if (g.splits > 1) {
        runtime_combine_kernel<<<dim3(unsigned(g.heads), unsigned(g.batch)), kDecodeThreads, 0, stream>>>(
            partials, out, g.heads, g.head_dim, g.splits, g.plan);
        PD_CHECK_LAUNCH();
    }
}

/// Through the block table, each split a run of whole blocks, ceil(blocks / splits) of them
/// (chunks never share a block), as chapter 06's v2.
template <typename T>
void launch_paged(const float* q, const T* k, const T* v, const float* k_scales, const float* v_scales,
                  const int* table, const int* kv_len, float* out, float* partials, int splits, const PagedShape& s,
                  cudaStream_t stream) {
    check_paged_shape(s);
    check_kv_scales<T>(k_scales, v_scales, "paged attention v2");
    if (s.group() > kMaxGroup)
        throw std::invalid_argument("paged attention v2: heads / kv_heads = " + std::to_string(s.group()) +
                                    " exceeds " + std::to_string(kMaxGroup));
    if (splits < 1 || splits > kMaxSplits)
        throw std::invalid_argument("paged attention v2: splits = " + std::to_string(splits) + " must be in 1 .. " +
                                    std::to_string(kMaxSplits));
    if (splits > 1 && partials == nullptr)
        throw std::invalid_argument("paged attention v2: partials is null with splits = " + std::to_string(splits));
    const PagedRows rows = paged_rows(table, s);
    const int chunk = ceil_div(ceil_div(s.max_kv_len, s.block_size), splits) * s.block_size;
    launch_gqa(q, k, v, k_scales, v_scales, rows, kv_len, out, partials,
               {s.batch, s.heads, s.kv_heads, s.head_dim, s.max_kv_len, chunk, splits}, stream);
}

}  // namespace

void paged_decode_attention_v2(const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials, splits, s, stream);
}
void paged_decode_attention_v2(const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache, const float* k_scales,
                               const float* v_scales, const int* block_table, const int* kv_len, float* out,
                               float* partials, int splits, const PagedShape& s, cudaStream_t stream) {
    launch_paged(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials, splits, s, stream);
}

namespace {

/// Chapter 08's 8-bit cache: v2 reads it (lab 06's v1 takes fp32 and bf16 only).
template <typename T>
void dispatch_kv8(const std::string& version, const float* q, const T* k, const T* v, const float* k_scales,
                  const float* v_scales, const int* table, const int* kv_len, float* out, float* workspace,
                  const PagedShape& s, int sm_count, cudaStream_t stream) {
    if (version == "v2")
        return paged_decode_attention_v2(q, k, v, k_scales, v_scales, table, kv_len, out, workspace,
                                         paged_splits(s, sm_count), s, stream);
    throw std::invalid_argument("paged attention: version = " + version + " does not read an 8-bit cache (v2 does)");
}

}  // namespace

void paged_decode_attention(const std::string& version, const float* q, const Fp8Kv* k_cache, const Fp8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, workspace, s, sm_count,
                 stream);
}
void paged_decode_attention(const std::string& version, const float* q, const Int8Kv* k_cache, const Int8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* workspace, const PagedShape& s, int sm_count, cudaStream_t stream) {
    dispatch_kv8(version, q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, workspace, s, sm_count,
                 stream);
}

}  // namespace pd::kernels::attention

namespace pd::kernels::runtime {

void paged_decode_attention(const float* q, const float* k_cache, const float* v_cache, const int* block_table,
                            const int* kv_len, float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream) {
    attention::launch_paged(q, k_cache, v_cache, nullptr, nullptr, block_table, kv_len, out, partials, splits, s,
                            stream);
}
void paged_decode_attention(const float* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* block_table, const int* kv_len, float* out, float* partials, int splits,
                            const attention::PagedShape& s, cudaStream_t stream) {
    attention::launch_paged(q, k_cache, v_cache, nullptr, nullptr, block_table, kv_len, out, partials, splits, s,
                            stream);
}
void paged_decode_attention(const float* q, const attention::Fp8Kv* k_cache, const attention::Fp8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream) {
    attention::paged_decode_attention_v2(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials,
                                         splits, s, stream);
}
void paged_decode_attention(const float* q, const attention::Int8Kv* k_cache, const attention::Int8Kv* v_cache,
                            const float* k_scales, const float* v_scales, const int* block_table, const int* kv_len,
                            float* out, float* partials, int splits, const attention::PagedShape& s,
                            cudaStream_t stream) {
    attention::paged_decode_attention_v2(q, k_cache, v_cache, k_scales, v_scales, block_table, kv_len, out, partials,
                                         splits, s, stream);
}

}  // namespace pd::kernels::runtime

namespace pd::kernels::attention {

// ---- chapter 12: the fixed grid -------------------------------------------------------------

namespace {

/// Throws std::invalid_argument naming the first size of @p s out of range.
void check_fixed_grid(const runtime::FixedGridDecode& s) {
    const std::pair<const char*, int> sizes[] = {
        {"batch", s.batch}, {"heads", s.heads},     {"kv_heads", s.kv_heads},     {"head_dim", s.head_dim},
        {"slots", s.slots}, {"max_seq", s.max_seq}, {"num_blocks", s.num_blocks}, {"max_blocks", s.max_blocks}};
    for (const auto& [name, v] : sizes)
        if (v < 1)
            throw std::invalid_argument(std::string("fixed-grid decode attention: ") + name + " = " +
                                        std::to_string(v) + " must be >= 1");
    if (s.block_size < 0)
        throw std::invalid_argument("fixed-grid decode attention: block_size = " + std::to_string(s.block_size) +
                                    " must be >= 0");
    if (s.heads % s.kv_heads != 0 || s.heads / s.kv_heads > kMaxGroup)
        throw std::invalid_argument("fixed-grid decode attention: heads / kv_heads = " + std::to_string(s.heads) +
                                    " / " + std::to_string(s.kv_heads) + " must be a whole group of at most " +
                                    std::to_string(kMaxGroup));
    if (s.head_dim > kMaxHeadDim || s.head_dim % 2 != 0)
        throw std::invalid_argument("fixed-grid decode attention: head_dim = " + std::to_string(s.head_dim) +
                                    " must be even and at most " + std::to_string(kMaxHeadDim));
    if (s.block_size == 0 && s.batch > s.slots)
        throw std::invalid_argument("fixed-grid decode attention: batch = " + std::to_string(s.batch) +
                                    " exceeds slots = " + std::to_string(s.slots));
}

/// plan = [splits, chunk] of the step whose lengths are kv_len [batch]: the longest (clamped to
/// the capacity, at least 1), then the eager launchers' rule (decode_splits() on slots, chunk
/// ceil(longest / splits); paged_splits() on pages, chunk whole blocks).
__global__ void fixed_grid_plan_kernel(const int* __restrict__ kv_len, int* __restrict__ plan, int batch, int kv_heads,
                                       int capacity, int block_size, int sm_count) {
    int longest = 1;
    for (int b = 0; b < batch; ++b) longest = max(longest, min(max(kv_len[b], 0), capacity));
    const int wanted = split_rule(batch, kv_heads, longest, sm_count);
    if (block_size == 0) {
        plan[0] = wanted;
        plan[1] = ceil_div(longest, wanted);
    } else {
        const int blocks = ceil_div(longest, block_size);
        const int splits = whole_block_splits(blocks, wanted);
        plan[0] = splits;
        plan[1] = ceil_div(blocks, splits) * block_size;
    }
}

}  // namespace

}  // namespace pd::kernels::attention

namespace pd::kernels::runtime {

int fixed_grid_splits(const FixedGridDecode& s) {
    attention::check_fixed_grid(s);
    return attention::split_rule(s.batch, s.kv_heads, s.capacity(), s.sm_count);
}

void fixed_grid_decode_plan(const int* kv_len, int* plan, const FixedGridDecode& s, cudaStream_t stream) {
    attention::check_fixed_grid(s);
    attention::fixed_grid_plan_kernel<<<1, 1, 0, stream>>>(kv_len, plan, s.batch, s.kv_heads, s.capacity(),
                                                           s.block_size, s.sm_count);
    PD_CHECK_LAUNCH();
}

template <typename T>
void fixed_grid_decode_attention(const float* q, const T* k_cache, const T* v_cache, const float* k_scales,
                                 const float* v_scales, const int* block_table, const int* kv_len, const int* plan,
                                 float* out, float* partials, const FixedGridDecode& s, cudaStream_t stream) {
    const int splits = fixed_grid_splits(s);
    attention::check_kv_scales<T>(k_scales, v_scales, "fixed-grid decode attention");
    if (splits > 1 && partials == nullptr)
        throw std::invalid_argument("fixed-grid decode attention: partials is null with " + std::to_string(splits) +
                                    " splits");
    if (s.block_size > 0 && block_table == nullptr)
        throw std::invalid_argument("fixed-grid decode attention: pages without a block table");
    // (chunk: read from the plan on the device)
    const attention::GqaLaunch g{s.batch, s.heads, s.kv_heads, s.head_dim, s.capacity(), 1, splits, plan};
    if (s.block_size > 0)
        attention::launch_gqa(q, k_cache, v_cache, k_scales, v_scales,
                              attention::PagedRows{block_table, s.batch, s.max_blocks, s.block_size, s.num_blocks,
                                                   s.kv_heads, s.head_dim},
                              kv_len, out, partials, g, stream);
    else
        attention::launch_gqa(q, k_cache, v_cache, k_scales, v_scales,
                              attention::SlotRows{nullptr, s.slots, s.kv_heads, s.max_seq, s.head_dim}, kv_len, out,
                              partials, g, stream);
}

/// fixed_grid_decode_attention() on an fp32 cache.
template void fixed_grid_decode_attention<float>(const float*, const float*, const float*, const float*, const float*,
                                                 const int*, const int*, const int*, float*, float*,
                                                 const FixedGridDecode&, cudaStream_t);
/// fixed_grid_decode_attention() on a bf16 cache.
template void fixed_grid_decode_attention<__nv_bfloat16>(const float*, const __nv_bfloat16*, const __nv_bfloat16*,
                                                         const float*, const float*, const int*, const int*, const int*,
                                                         float*, float*, const FixedGridDecode&, cudaStream_t);
/// fixed_grid_decode_attention() on an fp8 cache.
template void fixed_grid_decode_attention<attention::Fp8Kv>(const float*, const attention::Fp8Kv*,
                                                            const attention::Fp8Kv*, const float*, const float*,
                                                            const int*, const int*, const int*, float*, float*,
                                                            const FixedGridDecode&, cudaStream_t);
/// fixed_grid_decode_attention() on an int8 cache.
template void fixed_grid_decode_attention<attention::Int8Kv>(const float*, const attention::Int8Kv*,
                                                             const attention::Int8Kv*, const float*, const float*,
                                                             const int*, const int*, const int*, float*, float*,
                                                             const FixedGridDecode&, cudaStream_t);

}  // namespace pd::kernels::runtime
