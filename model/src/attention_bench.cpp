/// @file attention_bench.cpp
/// @brief The decode attention benchmark of chapters 04 and 06 (attention_bench.hpp).
#include "pd/model/attention_bench.hpp"

#include "attention/paged_layout.hpp"
#include "attention_reference.hpp"

#include "pd/common.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace pd::model {

namespace at = pd::kernels::attention;

/// The inputs of one type on the device, and the reference computed from them.
struct DecodeAttentionBench::Inputs {
    DType dtype;
    Expected expected;
    DeviceBuffer<float> k32, v32, kp32, vp32;
    DeviceBuffer<__nv_bfloat16> k16, v16, kp16, vp16;
};

DecodeAttentionBench::~DecodeAttentionBench() = default;

DecodeAttentionBench::DecodeAttentionBench(Bench& bench, const ModelConfig& c, int batch, int context, int block_size)
    : bench_(bench), config_(c) {
    if (batch < 1 || context < 1 || block_size < 0)
        throw std::invalid_argument("decode attention benchmark: batch = " + std::to_string(batch) +
                                    ", context = " + std::to_string(context) +
                                    " and block_size = " + std::to_string(block_size) + " must be >= 1, >= 1 and >= 0");
    const int B = batch;
    contiguous_ = {B, c.heads, c.kv_heads, c.head_dim, context, context};
    at::check_decode_shape(contiguous_);
    for (int b = 0; b < B; ++b) lens_.push_back(std::max(1, context - 3 * b));  // ragged: the last sequence shortest
    const std::uint64_t seed = bench.options.seed;
    q_.resize(std::size_t(B) * c.heads * c.head_dim);
    k_.resize(contiguous_.cache().elements());
    v_.resize(contiguous_.cache().elements());
    fill_uniform<float>(q_, -1.f, 1.f, derive_seed(seed, 41));
    fill_uniform<float>(k_, -1.f, 1.f, derive_seed(seed, 42));
    fill_uniform<float>(v_, -1.f, 1.f, derive_seed(seed, 43));
    dq_ = DeviceBuffer<float>(std::span<const float>(q_));
    out_ = DeviceBuffer<float>(q_.size());
    dlen_ = DeviceBuffer<int>(std::span<const int>(lens_));
    paged_.block_size = block_size;  // 0: no paged copy
    if (block_size > 0) {
        paged_ = {.batch = B,
                  .heads = c.heads,
                  .kv_heads = c.kv_heads,
                  .head_dim = c.head_dim,
                  .block_size = block_size,
                  .num_blocks = 0,
                  .max_blocks = ceil_div(context, block_size),
                  .max_kv_len = context};
        for (int len : lens_) paged_.num_blocks += ceil_div(len, block_size);
        table_ = at::shuffled_block_table(lens_, block_size, paged_.num_blocks, paged_.max_blocks, seed);
        dtable_ = DeviceBuffer<int>(std::span<const int>(table_));
    }
}

std::string DecodeAttentionBench::describe() const {
    const at::DecodeShape& s = contiguous_;
    return "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.heads) + " Hkv=" + std::to_string(s.kv_heads) +
           " d=" + std::to_string(s.head_dim) + " context=" + std::to_string(s.max_seq) + " (ragged)" +
           (paged_.block_size > 0 ? " block_size=" + std::to_string(paged_.block_size) : "");
}

std::string DecodeAttentionBench::shape_line() const {
    const at::DecodeShape& s = contiguous_;
    std::string line = "B = " + std::to_string(s.batch) + ", Hq = " + std::to_string(s.heads) +
                       ", Hkv = " + std::to_string(s.kv_heads) + ", d = " + std::to_string(s.head_dim);
    if (s.batch == 1) return line + ", context " + std::to_string(lens_[0]);
    return line + ", contexts " + std::to_string(lens_.front()) + " down to " + std::to_string(lens_.back()) +
           " (ragged)";
}

long long DecodeAttentionBench::table_entries() const {
    long long entries = 0;
    if (paged_.block_size > 0)
        for (int l : lens_) entries += (l + paged_.block_size - 1) / paged_.block_size;
    return entries;
}

double DecodeAttentionBench::device_bytes() const {
    return 2.0 * (paged_.block_size > 0 ? 2 : 1) * double(k_.size()) * sizeof(float);
}

DecodeAttentionBench::Inputs& DecodeAttentionBench::inputs(DType d) {
    if (inputs_ && inputs_->dtype == d) return *inputs_;
    inputs_.reset();  // one type's buffers at a time
    const at::DecodeShape& s = contiguous_;
    const std::vector<float> kr = rounded_to(d, k_), vr = rounded_to(d, v_);
    inputs_ = std::make_unique<Inputs>();
    Inputs& in = *inputs_;
    in.dtype = d;
    in.expected = {
        .values = reference::decode_attention(q_, kr, vr, lens_, s.batch, s.heads, s.kv_heads, s.head_dim, s.max_seq),
        .row_length = std::size_t(s.head_dim),
        .dims = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.head_dim)}};
    for (std::size_t i = 0; i < in.expected.values.size() / std::size_t(s.head_dim); ++i) in.expected.rows.push_back(i);
    // the same values in blocks; NaN where no position lands (the tails of the last blocks)
    const auto scattered = [&](const std::vector<float>& x) {
        return at::scatter_to_blocks(x, lens_, table_, s.kv_heads, s.head_dim, s.max_seq, paged_.block_size,
                                     paged_.max_blocks, paged_.num_blocks, 0, std::numeric_limits<float>::quiet_NaN());
    };
    const bool paged = paged_.block_size > 0;
    if (d == DType::fp32) {
        in.k32 = DeviceBuffer<float>(std::span<const float>(kr));
        in.v32 = DeviceBuffer<float>(std::span<const float>(vr));
        if (paged) in.kp32 = DeviceBuffer<float>(std::span<const float>(scattered(kr)));
        if (paged) in.vp32 = DeviceBuffer<float>(std::span<const float>(scattered(vr)));
    } else {
        in.k16 = DeviceBuffer<__nv_bfloat16>(round_all<__nv_bfloat16>(kr));
        in.v16 = DeviceBuffer<__nv_bfloat16>(round_all<__nv_bfloat16>(vr));
        if (paged) in.kp16 = DeviceBuffer<__nv_bfloat16>(round_all<__nv_bfloat16>(scattered(kr)));
        if (paged) in.vp16 = DeviceBuffer<__nv_bfloat16>(round_all<__nv_bfloat16>(scattered(vr)));
    }
    return in;
}

Kernel DecodeAttentionBench::complete(Kernel k, DType d) const {
    const ModelConfig& c = config_;
    double kv_read = 0, scores = 0;
    for (int l : lens_) {
        kv_read += 2.0 * c.kv_heads * double(l) * c.head_dim;  // K and V elements a step reads, once per sequence
        scores += double(c.heads) * l;
    }
    k.dtype = d;
    k.cost = {4.0 * scores * c.head_dim,                            // q . k and p v: 2 d FLOPs each per score
              kv_read * size_of(d) + 4.0 * 2 * double(q_.size())};  // K, V, then Q in, O out
    k.context = describe();
    if (!k.dump.empty()) k.dump_shape = {std::size_t(contiguous_.batch), std::size_t(c.heads), std::size_t(c.head_dim)};
    return k;
}

// [decode_attention_bench]
Row DecodeAttentionBench::measure_contiguous(const std::string& version, DType d, Kernel k) {
    Inputs& in = inputs(d);
    const int sm = bench_.device().sm_count;
    DeviceBuffer<float> workspace(std::max<std::size_t>(1, at::decode_workspace_floats(version, contiguous_, sm)));
    const Launch launch = [&] {
        if (d == DType::fp32)
            at::decode_attention(version, dq_.data(), in.k32.data(), in.v32.data(), dlen_.data(), out_.data(),
                                 workspace.data(), contiguous_, sm);
        else
            at::decode_attention(version, dq_.data(), in.k16.data(), in.v16.data(), dlen_.data(), out_.data(),
                                 workspace.data(), contiguous_, sm);
    };
    return bench_.measure(complete(std::move(k), d), launch, out_, in.expected);
}

Row DecodeAttentionBench::measure_paged(const std::string& version, DType d, Kernel k) {
    if (paged_.block_size < 1)
        throw std::invalid_argument("decode attention benchmark: no paged copy (block_size = 0)");
    Inputs& in = inputs(d);
    const int sm = bench_.device().sm_count;
    DeviceBuffer<float> workspace(std::max<std::size_t>(1, at::paged_workspace_floats(version, paged_, sm)));
    const Launch launch = [&] {
        if (d == DType::fp32)
            at::paged_decode_attention(version, dq_.data(), in.kp32.data(), in.vp32.data(), dtable_.data(),
                                       dlen_.data(), out_.data(), workspace.data(), paged_, sm);
        else
            at::paged_decode_attention(version, dq_.data(), in.kp16.data(), in.vp16.data(), dtable_.data(),
                                       dlen_.data(), out_.data(), workspace.data(), paged_, sm);
    };
    return bench_.measure(complete(std::move(k), d), launch, out_, in.expected);
}
// [decode_attention_bench]

}  // namespace pd::model
