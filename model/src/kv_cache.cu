/// @file kv_cache.cu
/// @brief The model's KV cache (kv_cache.hpp) in its two layouts, each running the kernels of
/// its chapter: slots (chapter 04's append and decode attention for a batch in slot order,
/// chapter 05's row append and varlen attention otherwise) and pages (chapter 06's: the same
/// kernels read through the block tables).
#include "pd/model/kv_cache.hpp"

#include "attention/decode_attention.hpp"
#include "attention/kv_quant.hpp"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "layers/kv_append.hpp"
#include "runtime/runtime.hpp"

#include "quant/quant.hpp"

#include "pd/buffer.hpp"
#include "pd/common.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace at = pd::kernels::attention;
namespace ly = pd::kernels::layers;
namespace rt = pd::kernels::runtime;

namespace {

/// Throws std::invalid_argument "KvCacheShape.<field> = <value> <rule>".
[[noreturn]] void reject(const std::string& field, const std::string& value, const std::string& rule) {
    throw std::invalid_argument("KvCacheShape." + field + " = " + value + " " + rule);
}

/// Floats of partial results the fixed grid (chapter 12) of @p rows sequences may write: one
/// per split of split_rule() at the cache's @p capacity, query head and row, a max, a sum and d
/// outputs each (the bound for any split count the eager rule picks at a shorter context too).
std::size_t fixed_grid_floats(const KvCacheShape& s, int rows, int capacity) {
    return std::size_t(rows) * s.heads * at::split_rule(rows, s.kv_heads, capacity, s.sm_count) * (s.head_dim + 2);
}

bool is_version(const std::vector<Version>& list, const std::string& name) {
    return std::any_of(list.begin(), list.end(), [&](const Version& v) { return v.name == name; });
}

/// A cache of L layers, K and V each [L][layer_elements] of type T; an 8-bit cache (chapter 08)
/// also holds an fp32 scale per row of d elements, K's and V's each [L][layer_elements / d].
template <typename T>
struct Storage {
    DeviceBuffer<T> k, v;
    DeviceBuffer<float> k_scales, v_scales;
    std::size_t layer_elements = 0, layer_rows = 0;
    Storage(int layers, std::size_t per_layer, int d)
        : k(std::size_t(layers) * per_layer),
          v(std::size_t(layers) * per_layer),
          layer_elements(per_layer),
          layer_rows(per_layer / std::size_t(d)) {
        if constexpr (at::kIsKv8<T>) {
            k_scales = DeviceBuffer<float>(std::size_t(layers) * layer_rows);
            v_scales = DeviceBuffer<float>(std::size_t(layers) * layer_rows);
        }
    }
    T* k_of(int layer) { return k.data() + std::size_t(layer) * layer_elements; }
    T* v_of(int layer) { return v.data() + std::size_t(layer) * layer_elements; }
    /// The layer's scales (null for fp32 and bf16, which have none).
    float* k_scales_of(int layer) {
        return k_scales.size() ? k_scales.data() + std::size_t(layer) * layer_rows : nullptr;
    }
    float* v_scales_of(int layer) {
        return v_scales.size() ? v_scales.data() + std::size_t(layer) * layer_rows : nullptr;
    }
    double bytes() const { return 2.0 * double(k.size()) * sizeof(T) + 2.0 * double(k_scales.size()) * sizeof(float); }
};

/// The element type of a cache of type @p d, as the kernels take it.
template <typename T>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>)
        return DType::fp32;
    else if constexpr (std::is_same_v<T, at::Fp8Kv>)
        return DType::fp8;
    else if constexpr (std::is_same_v<T, at::Int8Kv>)
        return DType::int8;
    else
        return DType::bf16;
}

// [slot_cache]
/// Chapter 04's layout: slot b of a layer is [Hkv, S_max, d], the whole layer [slots, Hkv, S_max, d].
template <typename T>
class SlotCache final : public KvCache {
public:
    explicit SlotCache(const KvCacheShape& s)
        : s_(s), layer_{s.slots, s.kv_heads, s.max_seq, s.head_dim}, store_(s.layers, layer_.elements(), s.head_dim) {
        // the workspace of the decode version, for the largest batch it may take (v4's splits
        // grow as the batch shrinks, so every batch size is tried)
        std::size_t floats = 1;
        for (int b = 1; b <= s.slots; ++b)
            floats =
                std::max({floats, at::decode_workspace_floats(s_.attention, decode_shape(b, s.max_seq), s.sm_count),
                          fixed_grid_floats(s, b, s.max_seq)});
        workspace_ = DeviceBuffer<float>(floats);
    }

    void append(int layer, const float* k, const float* v, const BatchView& b) override {
        if constexpr (at::kIsKv8<T>)  // codes and a scale per row (chapter 08)
            rt::kv_append_rows(k, v, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                               store_.v_scales_of(layer), b.row_seq, b.positions, b.tokens, layer_, b.stream);
        else if (b.rows_in_order && b.uniform > 0)  // B sequences of n tokens in slots 0 ... B - 1: lab 04's append
            ly::kv_append(k, v, store_.k_of(layer), store_.v_of(layer), b.context, b.uniform,
                          {b.sequences, s_.kv_heads, s_.max_seq, s_.head_dim}, b.stream);
        else  // each row to its slot and position
            rt::kv_append_rows(k, v, store_.k_of(layer), store_.v_of(layer), b.row_seq, b.positions, b.tokens, layer_,
                               b.stream);
    }
    bool serves_decode(const BatchView& b) const override { return b.rows_in_order; }
    void decode_attention(int layer, const float* q, float* out, const BatchView& b) override {
        if (b.split_plan)  // chapter 12: the fixed grid, v4's rule applied on the device
            rt::fixed_grid_decode_attention(q, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                            store_.v_scales_of(layer), nullptr, b.kv_len, b.split_plan, out,
                                            workspace_.data(), fixed_grid(b.sequences), b.stream);
        else if constexpr (at::kIsKv8<T>)
            at::decode_attention(s_.attention, q, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                 store_.v_scales_of(layer), b.kv_len, out, workspace_.data(),
                                 decode_shape(b.sequences, b.max_kv_len), s_.sm_count, b.stream);
        else
            at::decode_attention(s_.attention, q, store_.k_of(layer), store_.v_of(layer), b.kv_len, out,
                                 workspace_.data(), decode_shape(b.sequences, b.max_kv_len), s_.sm_count, b.stream);
    }
    rt::FixedGridDecode fixed_grid(int rows) const override {
        if (s_.attention != "v4") reject("attention", s_.attention, "has no fixed-grid form for CUDA graphs (v4 has)");
        return {.batch = rows,
                .heads = s_.heads,
                .kv_heads = s_.kv_heads,
                .head_dim = s_.head_dim,
                .slots = s_.slots,
                .max_seq = s_.max_seq,
                .sm_count = s_.sm_count};
    }
    void varlen_attention(int layer, const float* q, float* out, const BatchView& b) override {
        const at::VarlenShape shape{.sequences = b.sequences,
                                    .tokens = b.tokens,
                                    .heads = s_.heads,
                                    .kv_heads = s_.kv_heads,
                                    .head_dim = s_.head_dim,
                                    .slots = s_.slots,
                                    .max_seq = s_.max_seq,
                                    .max_q_len = b.max_q_len};
        if constexpr (at::kIsKv8<T>)
            at::varlen_attention(q, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                 store_.v_scales_of(layer), b.q_start, b.q_len, b.kv_len, b.slot, out, shape, b.stream);
        else
            at::varlen_attention(q, store_.k_of(layer), store_.v_of(layer), b.q_start, b.q_len, b.kv_len, b.slot, out,
                                 shape, b.stream);
    }
    DType dtype() const override { return dtype_of<T>(); }
    double bytes() const override { return store_.bytes(); }
    std::string describe() const override {
        return std::to_string(s_.slots) + " slots of " + std::to_string(s_.max_seq) + " positions";
    }
    std::vector<float> download(bool values, int positions) const override {
        if (positions < 0 || positions > s_.max_seq)
            throw std::invalid_argument("download_cache: positions = " + std::to_string(positions) +
                                        " must be in 0 .. " + std::to_string(s_.max_seq));
        std::vector<float> all;
        if constexpr (at::kIsKv8<T>) {  // each code times its row's scale
            const std::vector<T> codes = (values ? store_.v : store_.k).download();
            const std::vector<float> scales = (values ? store_.v_scales : store_.k_scales).download();
            all.resize(codes.size());
            for (std::size_t i = 0; i < codes.size(); ++i) {
                float code = 0.f;
                if constexpr (std::is_same_v<T, at::Fp8Kv>)
                    code = kernels::quant::fp8_e4m3_decode(codes[i].bits);
                else
                    code = float(codes[i].value);
                all[i] = code * scales[i / std::size_t(s_.head_dim)];
            }
        } else {
            all = to_float_all<T>((values ? store_.v : store_.k).download());
        }
        // keep the first `positions` rows of each [S_max, d] block (one per layer, slot and KV head)
        const std::size_t d = std::size_t(s_.head_dim), block = std::size_t(s_.max_seq) * d,
                          keep = std::size_t(positions) * d;
        std::vector<float> out;
        out.reserve(all.size() / block * keep);
        for (std::size_t at = 0; at < all.size(); at += block)
            out.insert(out.end(), all.begin() + std::ptrdiff_t(at), all.begin() + std::ptrdiff_t(at + keep));
        return out;
    }
    KvBlockSpan block_span(int, int) override { throw std::invalid_argument("block_span: the cache is not paged"); }

private:
    at::DecodeShape decode_shape(int sequences, int max_kv_len) const {
        return {sequences, s_.heads, s_.kv_heads, s_.head_dim, s_.max_seq, std::max(max_kv_len, 1)};
    }
    KvCacheShape s_;
    at::CacheShape layer_;
    Storage<T> store_;
    DeviceBuffer<float> workspace_;
};
// [slot_cache]

// [paged_cache]
/// Chapter 06's layout: a layer is [num_blocks, Hkv, block_size, d], a sequence's positions are
/// wherever its row of the pass's block table says.
template <typename T>
class PagedKvCache final : public KvCache {
public:
    explicit PagedKvCache(const KvCacheShape& s)
        : s_(s),
          max_blocks_(ceil_div(s.max_seq, s.block_size)),
          store_(s.layers, std::size_t(s.num_blocks) * s.kv_heads * std::size_t(s.block_size) * s.head_dim,
                 s.head_dim) {
        std::size_t floats = 1;
        for (int b = 1; b <= s.slots; ++b)
            floats = std::max({floats, at::paged_workspace_floats(s_.paged_attention, pages(b, s.max_seq), s.sm_count),
                               fixed_grid_floats(s, b, max_blocks_ * s.block_size)});
        workspace_ = DeviceBuffer<float>(floats);
    }

    void append(int layer, const float* k, const float* v, const BatchView& b) override {
        if constexpr (at::kIsKv8<T>)
            rt::paged_kv_append_rows(k, v, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                     store_.v_scales_of(layer), b.block_table, b.row_seq, b.positions, b.tokens,
                                     pages(b.sequences, b.max_kv_len), b.stream);
        else
            rt::paged_kv_append_rows(k, v, store_.k_of(layer), store_.v_of(layer), b.block_table, b.row_seq,
                                     b.positions, b.tokens, pages(b.sequences, b.max_kv_len), b.stream);
    }
    bool serves_decode(const BatchView&) const override { return true; }
    void decode_attention(int layer, const float* q, float* out, const BatchView& b) override {
        if (b.split_plan)  // chapter 12: the fixed grid, paged v2's rule applied on the device
            rt::fixed_grid_decode_attention(q, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                            store_.v_scales_of(layer), b.block_table, b.kv_len, b.split_plan, out,
                                            workspace_.data(), fixed_grid(b.sequences), b.stream);
        else if constexpr (at::kIsKv8<T>)
            at::paged_decode_attention(s_.paged_attention, q, store_.k_of(layer), store_.v_of(layer),
                                       store_.k_scales_of(layer), store_.v_scales_of(layer), b.block_table, b.kv_len,
                                       out, workspace_.data(), pages(b.sequences, b.max_kv_len), s_.sm_count, b.stream);
        else
            at::paged_decode_attention(s_.paged_attention, q, store_.k_of(layer), store_.v_of(layer), b.block_table,
                                       b.kv_len, out, workspace_.data(), pages(b.sequences, b.max_kv_len), s_.sm_count,
                                       b.stream);
    }
    rt::FixedGridDecode fixed_grid(int rows) const override {
        if (s_.paged_attention != "v2")
            reject("paged_attention", s_.paged_attention, "has no fixed-grid form for CUDA graphs (v2 has)");
        return {.batch = rows,
                .heads = s_.heads,
                .kv_heads = s_.kv_heads,
                .head_dim = s_.head_dim,
                .block_size = s_.block_size,
                .num_blocks = s_.num_blocks,
                .max_blocks = max_blocks_,
                .sm_count = s_.sm_count};
    }
    void varlen_attention(int layer, const float* q, float* out, const BatchView& b) override {
        if constexpr (at::kIsKv8<T>)
            at::paged_varlen_attention(q, store_.k_of(layer), store_.v_of(layer), store_.k_scales_of(layer),
                                       store_.v_scales_of(layer), b.q_start, b.q_len, b.kv_len, b.block_table, out,
                                       pages(b.sequences, b.max_kv_len), b.tokens, b.max_q_len, b.stream);
        else
            at::paged_varlen_attention(q, store_.k_of(layer), store_.v_of(layer), b.q_start, b.q_len, b.kv_len,
                                       b.block_table, out, pages(b.sequences, b.max_kv_len), b.tokens, b.max_q_len,
                                       b.stream);
    }
    DType dtype() const override { return dtype_of<T>(); }
    double bytes() const override { return store_.bytes(); }
    std::string describe() const override {
        return std::to_string(s_.num_blocks) + " blocks of " + std::to_string(s_.block_size) + " positions";
    }
    std::vector<float> download(bool, int) const override {
        throw std::invalid_argument("download_cache: the cache is paged");
    }
    KvBlockSpan block_span(int layer, int block) override {
        if (layer < 0 || layer >= s_.layers)
            throw std::invalid_argument("block_span: layer = " + std::to_string(layer) + " must be in 0 .. " +
                                        std::to_string(s_.layers - 1));
        if (block < 0 || block >= s_.num_blocks)
            throw std::invalid_argument("block_span: block = " + std::to_string(block) + " must be in 0 .. " +
                                        std::to_string(s_.num_blocks - 1));
        // a block is [Hkv, block_size, d] elements of the layer's [num_blocks, Hkv, block_size, d]
        const std::size_t rows = std::size_t(s_.kv_heads) * std::size_t(s_.block_size),
                          first = std::size_t(block) * rows;
        KvBlockSpan span{.k = store_.k_of(layer) + first * std::size_t(s_.head_dim),
                         .v = store_.v_of(layer) + first * std::size_t(s_.head_dim),
                         .bytes = rows * std::size_t(s_.head_dim) * sizeof(T)};
        if (float* ks = store_.k_scales_of(layer)) {  // 8-bit: a scale per row
            span.k_scales = ks + first;
            span.v_scales = store_.v_scales_of(layer) + first;
            span.scale_bytes = rows * sizeof(float);
        }
        return span;
    }

private:
    at::PagedShape pages(int sequences, int max_kv_len) const {
        return {.batch = sequences,
                .heads = s_.heads,
                .kv_heads = s_.kv_heads,
                .head_dim = s_.head_dim,
                .block_size = s_.block_size,
                .num_blocks = s_.num_blocks,
                .max_blocks = max_blocks_,
                .max_kv_len = std::max(max_kv_len, 1)};
    }
    KvCacheShape s_;
    int max_blocks_;
    Storage<T> store_;
    DeviceBuffer<float> workspace_;
};
// [paged_cache]

template <typename T>
std::unique_ptr<KvCache> make_typed(const KvCacheShape& s) {
    if (s.block_size > 0) return std::make_unique<PagedKvCache<T>>(s);
    return std::make_unique<SlotCache<T>>(s);
}

}  // namespace

std::unique_ptr<KvCache> make_kv_cache(const KvCacheShape& s, DType dtype) {
    const std::pair<const char*, int> sizes[] = {{"layers", s.layers}, {"kv_heads", s.kv_heads},
                                                 {"heads", s.heads},   {"head_dim", s.head_dim},
                                                 {"slots", s.slots},   {"max_seq", s.max_seq}};
    for (const auto& [name, v] : sizes)
        if (v < 1) reject(name, std::to_string(v), "must be >= 1");
    if (s.block_size < 0) reject("block_size", std::to_string(s.block_size), "must be >= 0");
    if (s.block_size > 0 && s.num_blocks < 1) reject("num_blocks", std::to_string(s.num_blocks), "must be >= 1");
    if (s.block_size == 0 && !is_version(at::decode_versions(), s.attention))
        reject("attention", s.attention, "is not one of v1, v2, v3, v4");
    if (s.block_size > 0 && !is_version(at::paged_versions(), s.paged_attention))
        reject("paged_attention", s.paged_attention, "is not one of v1, v2");
    // the kernels' own checks, once, with the cache's largest shapes
    if (s.block_size > 0)
        at::check_paged_shape({.batch = s.slots,
                               .heads = s.heads,
                               .kv_heads = s.kv_heads,
                               .head_dim = s.head_dim,
                               .block_size = s.block_size,
                               .num_blocks = s.num_blocks,
                               .max_blocks = ceil_div(s.max_seq, s.block_size),
                               .max_kv_len = s.max_seq});
    else
        at::check_decode_shape({s.slots, s.heads, s.kv_heads, s.head_dim, s.max_seq, s.max_seq});
    const bool eight_bit = dtype == DType::fp8 || dtype == DType::int8;
    if (eight_bit && s.block_size == 0 && s.attention != "v3" && s.attention != "v4")
        reject("attention", s.attention,
               std::string("does not read an 8-bit cache (") + to_string(dtype) + "): v3 or v4");
    if (eight_bit && s.block_size > 0 && s.paged_attention != "v2")
        reject("paged_attention", s.paged_attention,
               std::string("does not read an 8-bit cache (") + to_string(dtype) + "): v2");
    switch (dtype) {
        case DType::fp32:
            return make_typed<float>(s);
        case DType::bf16:
            return make_typed<__nv_bfloat16>(s);
        case DType::fp8:
            return make_typed<at::Fp8Kv>(s);
        case DType::int8:
            return make_typed<at::Int8Kv>(s);
    }
    throw std::invalid_argument("KvCacheShape: unknown cache type");
}

}  // namespace pd::model
