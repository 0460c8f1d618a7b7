/// @file model.cu
/// @brief Chapter 04's model (model.hpp): its construction (the weights, the cache, the buffers
/// of the largest pass, chapter 10's other ranks), synthetic weights drawn on the device, the
/// weights loaded and downloaded (and chapter 10's shards of them), and what a pass costs. The
/// forward pass is forward.cpp's; a pass's plan and batch, and chapter 04's batches, batch.cpp's;
/// chapter 08's quantized weights quantized.cpp's; chapter 10's ranks ranks.cpp's.
#include "pd/model/model.hpp"

#include "pd/model/rank_group.hpp"

#include "attention/attention.hpp"
#include "attention/decode_attention.hpp"
#include "gemv/gemv.hpp"
#include "layers/layers.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"
#include "pd/step_cost.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace at = pd::kernels::attention;
namespace ly = pd::kernels::layers;

namespace {

using bf16 = __nv_bfloat16;

// ---- synthetic weights ----------------------------------------------------------------------

/// SplitMix64: a counter-based generator, so element i of a tensor is a function of (seed, i)
/// only and every thread draws its own element without shared state.
PD_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ void store_value(float* p, float x) {
    *p = x;
}
__device__ __forceinline__ void store_value(bf16* p, float x) {
    *p = __float2bfloat16_rn(x);
}

/// Chapter 10: the part of a tensor that one rank holds, the same n x k block of every layer's
/// N x K matrix, from row row0 and column col0 (the whole tensor: n = N, k = K).
struct Slice {
    std::size_t n = 1, k = 1, N = 1, K = 1, row0 = 0, col0 = 0;
    /// Element i of the part as an element of the whole tensor.
    PD_HOST_DEVICE std::size_t whole(std::size_t i) const {
        const std::size_t layer = i / (n * k), rest = i % (n * k);
        return layer * N * K + (row0 + rest / k) * K + col0 + rest % k;
    }
};
/// A whole tensor of @p n elements.
Slice whole_tensor(std::size_t n) {
    return {1, n, 1, n, 0, 0};
}

/// out[i] = uniform in [lo, hi) from 24 random bits of mix64(seed ^ j), j the index of element i
/// in the whole tensor (so each rank draws its part of the same weights), a grid-stride loop.
template <typename T>
__global__ void fill_uniform_kernel(T* __restrict__ out, std::size_t n, std::uint64_t seed, float lo, float hi,
                                    Slice part) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const float u = float(mix64(seed ^ (part.whole(i) * 0xD1B54A32D192ED03ull)) >> 40) * 0x1.0p-24f;
        store_value(out + i, lo + (hi - lo) * u);
    }
}

template <typename T>
void fill_uniform_device(DeviceBuffer<T>& buf, std::uint64_t seed, float bound, float center, const Slice& part) {
    if (buf.size() == 0) return;
    const unsigned blocks = unsigned(std::min<std::size_t>(ceil_div(buf.size(), std::size_t(256)), 4096));
    fill_uniform_kernel<T><<<blocks, 256>>>(buf.data(), buf.size(), seed, center - bound, center + bound, part);
    PD_CHECK_LAUNCH();
}
template <typename T>
void fill_uniform_device(DeviceBuffer<T>& buf, std::uint64_t seed, float bound, float center = 0.f) {
    fill_uniform_device(buf, seed, bound, center, whole_tensor(buf.size()));
}

/// A matrix of @p n elements in the model's weight type.
DeviceMatrix make_matrix(DType d, std::size_t n) {
    DeviceMatrix m;
    if (d == DType::fp32)
        m.f32 = DeviceBuffer<float>(n);
    else
        m.b16 = DeviceBuffer<bf16>(n);
    return m;
}

void fill_matrix(DeviceMatrix& m, std::uint64_t seed, float bound, const Slice& part) {
    if (m.f32.size() > 0)
        fill_uniform_device(m.f32, seed, bound, 0.f, part);
    else
        fill_uniform_device(m.b16, seed, bound, 0.f, part);
}

/// The parts of rank @p rank of @p tp of the model's matrices (shard_config()).
struct RankSlices {
    Slice embed, wq, wkv, wo, gate_up, down, head;
    RankSlices(const ModelConfig& c, int tp, int rank) {
        using S = std::size_t;
        const ModelConfig p = shard_config(c, tp);
        const S D = S(c.d_model), d = S(c.head_dim), q = S(c.heads) * d, kv = S(c.kv_heads) * d;
        const S ql = S(p.heads) * d, kvl = S(p.kv_heads) * d, F = S(c.ffn_dim), Fl = S(p.ffn_dim);
        const S V = S(c.vocab), Vl = S(p.vocab), r = S(rank);
        embed = head = {Vl, D, V, D, r * Vl, 0};  // rows: the vocabulary
        wq = {ql, D, q, D, r * ql, 0};            // rows: the outputs (column-parallel)
        wkv = {kvl, D, kv, D, S(first_kv_head(c, tp, rank)) * d, 0};
        gate_up = {Fl, D, F, D, r * Fl, 0};
        wo = {D, ql, D, q, 0, r * ql};  // columns: the inputs (row-parallel)
        down = {D, Fl, D, F, 0, r * Fl};
    }
};

/// The elements of @p part of the [layers x N x K] host tensor @p whole.
std::vector<float> take(const std::vector<float>& whole, const Slice& part, int layers) {
    std::vector<float> out(std::size_t(layers) * part.n * part.k);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = whole[part.whole(i)];
    return out;
}

void upload_matrix(DeviceMatrix& m, const std::vector<float>& host) {
    if (m.f32.size() > 0)
        m.f32.upload(host);
    else
        m.b16.upload(round_all<bf16>(host));
}

std::vector<float> download_matrix(const DeviceMatrix& m) {
    if (m.f32.size() > 0) return m.f32.download();
    if (m.b16.size() > 0) return to_float_all<bf16>(m.b16.download());
    std::vector<float> all;  // quantized: each layer's dequantized values (what the GEMV computes with)
    for (const kernels::quant::DeviceQuantizedMatrix& q : m.packed) {
        const std::vector<float> layer = kernels::quant::dequantize(kernels::quant::download(q));
        all.insert(all.end(), layer.begin(), layer.end());
    }
    return all;
}

/// Throws std::invalid_argument "ModelOptions.<field> = <value> <rule>".
[[noreturn]] void reject(const std::string& field, const std::string& value, const std::string& rule) {
    throw std::invalid_argument("ModelOptions." + field + " = " + value + " " + rule);
}

}  // namespace

// ---- chapter 10: the parts of the ranks ------------------------------------------------------

double split_fp32_tolerance(const ModelConfig& c) {
    const double K = std::max({c.d_model, c.ffn_dim, c.heads * c.head_dim}), P = 2.0 * c.layers + 1;
    return 8 * std::ldexp(1.0, -24) * std::sqrt(K) * std::sqrt(P);
}

double max_rel_diff(std::span<const float> a, std::span<const float> b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
        worst = std::max(worst,
                         std::isfinite(a[i]) ? std::fabs(double(a[i]) - b[i]) / (1 + std::fabs(double(b[i]))) : 1e30);
    return worst;
}

ModelConfig shard_config(const ModelConfig& c, int tp) {
    if (tp < 1) reject("parallel.ranks", std::to_string(tp), "must be >= 1");
    const auto divides = [&](int n, const char* what) {
        if (n % tp != 0)
            reject("parallel.ranks", std::to_string(tp),
                   std::string("must divide the model's ") + what + " = " + std::to_string(n) + " (" + c.name + ")");
    };
    divides(c.heads, "query heads");
    divides(c.ffn_dim, "ffn_dim");
    divides(c.vocab, "vocab");
    if (c.kv_heads % tp != 0 && tp % c.kv_heads != 0)
        reject("parallel.ranks", std::to_string(tp),
               "must divide the model's kv_heads = " + std::to_string(c.kv_heads) +
                   " or be a multiple of them (each KV head then replicated on parallel.ranks / kv_heads ranks)");
    ModelConfig p = c;
    p.heads = c.heads / tp;
    p.kv_heads = std::max(1, c.kv_heads / tp);
    p.ffn_dim = c.ffn_dim / tp;
    p.vocab = c.vocab / tp;
    return p;
}

int first_kv_head(const ModelConfig& c, int tp, int rank) {
    // kv_heads >= tp: rank r holds heads r kv/tp ...; tp > kv_heads: tp/kv ranks share each head
    return int((long long)rank * c.kv_heads / tp);
}

ModelWeights shard_weights(const ModelWeights& w, const ModelConfig& c, int tp, int rank) {
    w.check(c, "weights for " + c.name);
    if (rank < 0 || rank >= tp)
        throw std::invalid_argument("shard_weights: rank = " + std::to_string(rank) + " must be in 0 .. " +
                                    std::to_string(tp - 1));
    const RankSlices s(c, tp, rank);
    const int L = c.layers;
    ModelWeights p;
    p.embed = take(w.embed, s.embed, 1);
    p.wq = take(w.wq, s.wq, L);
    p.wk = take(w.wk, s.wkv, L);
    p.wv = take(w.wv, s.wkv, L);
    p.wo = take(w.wo, s.wo, L);
    p.w_gate = take(w.w_gate, s.gate_up, L);
    p.w_up = take(w.w_up, s.gate_up, L);
    p.w_down = take(w.w_down, s.down, L);
    p.lm_head = c.tied_embeddings ? p.embed : take(w.lm_head, s.head, 1);
    p.attn_norm = w.attn_norm;
    p.ffn_norm = w.ffn_norm;
    p.final_norm = w.final_norm;
    return p;
}

// ---- construction and weights ---------------------------------------------------------------

void Model::check_options(const ModelConfig& config, const ModelOptions& o) {
    config.check("model " + config.name);
    if (o.batch < 1 || o.batch > kernels::gemv::kMaxBatch)
        reject("batch", std::to_string(o.batch), "must be in 1 .. " + std::to_string(kernels::gemv::kMaxBatch));
    if (o.max_seq < 0 || o.max_seq > config.max_seq)
        reject("max_seq", std::to_string(o.max_seq),
               "must be in 0 .. the model's max_seq = " + std::to_string(config.max_seq));
    if (config.head_dim > at::kMaxHeadDim)
        throw std::invalid_argument("head_dim = " + std::to_string(config.head_dim) + " exceeds the decode kernels' " +
                                    std::to_string(at::kMaxHeadDim));
    if (o.cache.block_size < 0) reject("cache.block_size", std::to_string(o.cache.block_size), "must be >= 0");
    if (o.cache.num_blocks < 0) reject("cache.num_blocks", std::to_string(o.cache.num_blocks), "must be >= 0");
    if (o.max_step_tokens < 0) reject("max_step_tokens", std::to_string(o.max_step_tokens), "must be >= 0");
    if (o.max_logit_rows < 0) reject("max_logit_rows", std::to_string(o.max_logit_rows), "must be >= 0");
    if (o.weights != DType::fp32 && o.weights != DType::bf16)
        reject("weights", to_string(o.weights), "must be fp32 or bf16 (8-bit weights: ModelOptions.quant.format)");
    if ((o.cache.kv == DType::fp8 || o.cache.kv == DType::int8) && o.kernels.prefill_attention == "naive")
        reject("kernels.prefill_attention", o.kernels.prefill_attention,
               "reads the fresh K and V, not an 8-bit cache (ModelOptions.cache.kv = " +
                   std::string(to_string(o.cache.kv)) + "): flash");
    // the decode kernels that read an 8-bit cache: v3 and v4 on slots, v2 on pages
    if ((o.cache.kv == DType::fp8 || o.cache.kv == DType::int8) && o.cache.block_size == 0 &&
        o.kernels.attention != "v3" && o.kernels.attention != "v4")
        reject("kernels.attention", o.kernels.attention,
               "does not read an 8-bit cache (ModelOptions.cache.kv = " + std::string(to_string(o.cache.kv)) +
                   "): v3 or v4");
    if ((o.cache.kv == DType::fp8 || o.cache.kv == DType::int8) && o.cache.block_size > 0 &&
        o.kernels.paged_attention != "v2")
        reject("kernels.paged_attention", o.kernels.paged_attention,
               "does not read an 8-bit cache (ModelOptions.cache.kv = " + std::string(to_string(o.cache.kv)) + "): v2");
    if (o.quant.format != "none" && o.quant.format != "int8" && o.quant.format != "int4" && o.quant.format != "fp8")
        reject("quant.format", o.quant.format, "must be none, int8, int4 or fp8");
    if (o.quant.format != "none" && o.weights != DType::bf16)
        reject("quant.format", o.quant.format,
               "needs ModelOptions.weights = bf16 (the matrices are quantized from bf16)");
    if (o.quant.format == "int4")
        kernels::quant::check_layout({kernels::quant::Format::int4, config.d_model, o.quant.group});
    if (o.kernels.prefill_attention != "flash" && o.kernels.prefill_attention != "naive")
        reject("kernels.prefill_attention", o.kernels.prefill_attention, "must be flash or naive");
    if (o.graphs && o.parallel.ranks > 1)  // chapter 12: the collectives are not captured
        reject("graphs", "true",
               "is not taken across ranks (ModelOptions.parallel.ranks = " + std::to_string(o.parallel.ranks) +
                   "): a split model runs eagerly");
    if (o.graphs && o.cache.block_size == 0 && o.kernels.attention != "v4")
        reject("kernels.attention", o.kernels.attention,
               "has no fixed-grid form for the decode graphs (ModelOptions.graphs): v4");
    if (o.graphs && o.cache.block_size > 0 && o.kernels.paged_attention != "v2")
        reject("kernels.paged_attention", o.kernels.paged_attention,
               "has no fixed-grid form for the decode graphs (ModelOptions.graphs): v2");
    // chapter 10: the split, and the devices and collectives it needs
    shard_config(config, o.parallel.ranks);
    if (o.parallel.ranks > 1) {
        if (o.quant.format != "none")
            reject("quant.format", o.quant.format,
                   "is not split across ranks (ModelOptions.parallel.ranks = " + std::to_string(o.parallel.ranks) +
                       "): none");
        if (!o.parallel.collectives) reject("parallel.collectives", "null", "is required when parallel.ranks > 1");
        if (o.parallel.collectives->size() != o.parallel.ranks)
            reject("parallel.collectives", std::to_string(o.parallel.collectives->size()) + " ranks",
                   "must join parallel.ranks = " + std::to_string(o.parallel.ranks) + " ranks");
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
        if (o.parallel.ranks > devices)
            reject("parallel.ranks", std::to_string(o.parallel.ranks),
                   "exceeds the " + std::to_string(devices) +
                       " devices present (one rank per device; the simulator has PD_SIM_DEVICES of them)");
    }
    if (o.parallel.rank < 0 || o.parallel.rank >= o.parallel.ranks)
        reject("parallel.rank", std::to_string(o.parallel.rank), "must be in 0 .. parallel.ranks - 1");
}

Model::Model(const ModelConfig& config, const ModelOptions& options)
    : full_(config), config_(shard_config(config, options.parallel.ranks)), options_(options) {
    check_options(full_, options_);
    PD_CHECK_CUDA(cudaGetDevice(&device_));
    bf16_tensor_cores_ = has_bf16_tensor_cores();  // below sm_80 (a T4) the bf16 GEMMs stay on the SIMT units
    const ModelOptions& o = options_;
    max_seq_ = o.max_seq > 0 ? o.max_seq : config_.max_seq;
    max_step_tokens_ = o.max_step_tokens > 0 ? o.max_step_tokens : o.batch * max_seq_;
    max_logit_rows_ = o.max_logit_rows > 0 ? o.max_logit_rows : o.batch;

    allocate_weights();
    allocate_cache();
    allocate_activations();
    if (o.graphs) init_graphs();  // chapter 12
    if (o.parallel.ranks > 1 && o.parallel.rank == 0) build_ranks();
}

void Model::allocate_weights() {
    const ModelOptions& o = options_;
    using S = std::size_t;
    const S V = S(config_.vocab), D = S(config_.d_model), L = S(config_.layers), F = S(config_.ffn_dim);
    const S q = S(config_.heads) * config_.head_dim, kv = S(config_.kv_heads) * config_.head_dim;
    const DType w = o.weights;
    embed_ = make_matrix(w, V * D);
    wq_ = make_matrix(w, L * q * D);
    wk_ = make_matrix(w, L * kv * D);
    wv_ = make_matrix(w, L * kv * D);
    wo_ = make_matrix(w, L * D * q);
    w_gate_ = make_matrix(w, L * F * D);
    w_up_ = make_matrix(w, L * F * D);
    w_down_ = make_matrix(w, L * D * F);
    if (!config_.tied_embeddings) lm_head_ = make_matrix(w, V * D);
    attn_norm_ = DeviceBuffer<float>(L * D);
    ffn_norm_ = DeviceBuffer<float>(L * D);
    final_norm_ = DeviceBuffer<float>(D);
}

void Model::allocate_cache() {  // slots of max_seq positions, or pages read through the passes' block tables
    const ModelOptions& o = options_;
    if (o.cache.block_size > 0) {
        max_blocks_ = ceil_div(max_seq_, o.cache.block_size);
        if (options_.cache.num_blocks <= 0) options_.cache.num_blocks = o.batch * max_blocks_;
    }
    try {
        cache_ = make_kv_cache({.layers = config_.layers,
                                .kv_heads = config_.kv_heads,
                                .heads = config_.heads,
                                .head_dim = config_.head_dim,
                                .slots = o.batch,
                                .max_seq = max_seq_,
                                .block_size = o.cache.block_size,
                                .num_blocks = options_.cache.num_blocks,
                                .attention = o.kernels.attention,
                                .paged_attention = o.kernels.paged_attention,
                                .sm_count = std::max(o.kernels.sm_count, 1)},
                               o.cache.kv);
    } catch (const std::invalid_argument& e) {  // the cache's fields are the model's options
        std::string m = e.what();
        for (const char* field :
             {"kernels.attention", "kernels.paged_attention", "cache.block_size", "cache.num_blocks"}) {
            const std::string to = std::string("ModelOptions.") + field,
                              from = "KvCacheShape." + to.substr(to.find('.', sizeof("ModelOptions")) + 1);
            for (std::size_t at = m.find(from); at != std::string::npos; at = m.find(from, at))
                m.replace(at, from.size(), to);
        }
        throw std::invalid_argument(m);
    }
}

void Model::allocate_activations() {
    const ModelOptions& o = options_;
    using S = std::size_t;
    const S V = S(config_.vocab), D = S(config_.d_model), F = S(config_.ffn_dim);
    const S q = S(config_.heads) * config_.head_dim, kv = S(config_.kv_heads) * config_.head_dim;
    const DType w = o.weights;
    // the batch of a pass: its metadata, and the scan's scratch (no pass allocates)
    const S B = S(o.batch), T = S(max_step_tokens_);
    meta_host_.assign(3 * B, 0);
    meta_ = DeviceBuffer<int>(3 * B);
    q_start_ = DeviceBuffer<int>(B);
    kv_len_ = DeviceBuffer<int>(B);
    tokens_ = DeviceBuffer<int>(T);
    positions_ = DeviceBuffer<int>(T);
    row_seq_ = DeviceBuffer<int>(T);
    if (o.cache.block_size > 0) {
        table_host_.assign(B * S(max_blocks_), -1);
        block_table_ = DeviceBuffer<int>(B * S(max_blocks_));
    }
    scratch_ = DeviceBuffer<char>(ly::kPackBatchScratchBytes);

    // the activations, for the largest pass: T rows. Only chapter 01's attention (naive) needs
    // head-major copies and its scores for S prompts of P tokens (S P <= T, P <= max_seq):
    // S Hq P^2 <= Hq T min(T, max_seq), the one buffer that grows with the square of a prompt.
    for (DeviceBuffer<float>* b : {&x_, &h_, &y_}) *b = DeviceBuffer<float>(T * D);
    for (DeviceBuffer<float>* b : {&q_, &o_}) *b = DeviceBuffer<float>(T * q);
    for (DeviceBuffer<float>* b : {&k_, &v_}) *b = DeviceBuffer<float>(T * kv);
    if (o.kernels.prefill_attention == "naive") {
        for (DeviceBuffer<float>* b : {&qh_, &oh_}) *b = DeviceBuffer<float>(T * q);
        for (DeviceBuffer<float>* b : {&kh_, &vh_}) *b = DeviceBuffer<float>(T * kv);
        scores_ = DeviceBuffer<float>(S(config_.heads) * T * std::min(T, S(max_seq_)));
    }
    for (DeviceBuffer<float>* b : {&gate_, &up_, &act_}) *b = DeviceBuffer<float>(T * F);
    if (o.quant.format != "none") dequant_ = DeviceBuffer<bf16>(std::max({q * D, kv * D, F * D}));
    if (w == DType::bf16) {
        h16_ = DeviceBuffer<bf16>(T * D);
        o16_ = DeviceBuffer<bf16>(T * q);
        act16_ = DeviceBuffer<bf16>(T * F);
    }
    const S R = S(max_logit_rows_);
    x_last_ = DeviceBuffer<float>(R * D);
    const S V_all = S(full_.vocab), tp = S(o.parallel.ranks);  // the logits are the whole vocabulary's
    logits_ = DeviceBuffer<float>(R * V_all);
    probs_ = DeviceBuffer<float>(R * V_all);
    if (tp > 1) {  // this rank's logits, then every rank's as the all-gather leaves them
        local_logits_ = DeviceBuffer<float>(R * V);
        gathered_ = DeviceBuffer<float>(R * V_all);
    }
    logit_rows_ = DeviceBuffer<int>(R);
    draw_ = DeviceBuffer<int>(2 * R);
}

Model::~Model() {
    if (!group_) return;
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)  // each rank frees its memory on its thread
        group_->post(i, [k = group_->ranks[i].get()] { k->model.reset(); });
    for (std::size_t i = 0; i < group_->ranks.size(); ++i) group_->wait(i);
}
Model::Model(Model&& other) noexcept = default;
Model& Model::operator=(Model&& other) noexcept = default;

void Model::init_synthetic(std::uint64_t seed) {
    on_every_rank([seed](Model& m) { m.init_local(seed); });
}

void Model::init_local(std::uint64_t seed) {
    // the whole model's fan-ins: every rank draws its part of the same weights
    const double D = full_.d_model, F = full_.ffn_dim, q = double(full_.heads) * full_.head_dim;
    const double residual = std::sqrt(2.0 * full_.layers);  // two residual branches per layer
    const RankSlices part(full_, options_.parallel.ranks, options_.parallel.rank);
    // uniform(-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) keeps a projection's output at
    // the variance of its input.
    const auto bound = [](double fan_in) { return float(std::sqrt(3.0 / fan_in)); };
    std::uint64_t stream = 0;
    const auto next = [&] { return mix64(seed + 0x100 * ++stream); };
    fill_matrix(embed_, next(), float(std::sqrt(3.0)), part.embed);
    fill_matrix(wq_, next(), bound(D), part.wq);
    fill_matrix(wk_, next(), bound(D), part.wkv);
    fill_matrix(wv_, next(), bound(D), part.wkv);
    fill_matrix(wo_, next(), float(bound(q) / residual), part.wo);
    fill_matrix(w_gate_, next(), bound(D), part.gate_up);
    fill_matrix(w_up_, next(), bound(D), part.gate_up);
    fill_matrix(w_down_, next(), float(bound(F) / residual), part.down);
    if (!config_.tied_embeddings) fill_matrix(lm_head_, next(), bound(D), part.head);
    fill_uniform_device(attn_norm_, next(), 0.1f, 1.f);
    fill_uniform_device(ffn_norm_, next(), 0.1f, 1.f);
    fill_uniform_device(final_norm_, next(), 0.1f, 1.f);
    if (options_.quant.format != "none") quantize_weights();
    PD_CHECK_CUDA(cudaDeviceSynchronize());
}

void Model::load(const ModelWeights& w) {
    if (options_.parallel.ranks == 1) return load_local(w);
    w.check(full_, "weights for " + full_.name);
    on_every_rank([&w](Model& m) {
        m.load_local(shard_weights(w, m.full_, m.options_.parallel.ranks, m.options_.parallel.rank));
    });
}

void Model::load_local(const ModelWeights& w) {
    w.check(config_, "weights for " + config_.name);
    if (options_.quant.format != "none") {  // quantized before: the bf16 matrices again, to quantize these
        const std::size_t L = std::size_t(config_.layers), D = std::size_t(config_.d_model),
                          F = std::size_t(config_.ffn_dim), q = std::size_t(config_.heads) * config_.head_dim,
                          kv = std::size_t(config_.kv_heads) * config_.head_dim;
        for (auto [m, n] : {std::pair{&wq_, L * q * D},
                            {&wk_, L * kv * D},
                            {&wv_, L * kv * D},
                            {&wo_, L * D * q},
                            {&w_gate_, L * F * D},
                            {&w_up_, L * F * D},
                            {&w_down_, L * D * F}})
            if (m->b16.size() == 0) m->b16 = DeviceBuffer<bf16>(n);
        if (!config_.tied_embeddings && lm_head_.b16.size() == 0)
            lm_head_.b16 = DeviceBuffer<bf16>(std::size_t(config_.vocab) * D);
    }
    upload_matrix(embed_, w.embed);
    upload_matrix(wq_, w.wq);
    upload_matrix(wk_, w.wk);
    upload_matrix(wv_, w.wv);
    upload_matrix(wo_, w.wo);
    upload_matrix(w_gate_, w.w_gate);
    upload_matrix(w_up_, w.w_up);
    upload_matrix(w_down_, w.w_down);
    if (!config_.tied_embeddings) upload_matrix(lm_head_, w.lm_head);
    attn_norm_.upload(w.attn_norm);
    ffn_norm_.upload(w.ffn_norm);
    final_norm_.upload(w.final_norm);
    if (options_.quant.format != "none") quantize_weights();
}

ModelWeights Model::download_weights() const {
    ModelWeights w;
    w.embed = download_matrix(embed_);
    w.wq = download_matrix(wq_);
    w.wk = download_matrix(wk_);
    w.wv = download_matrix(wv_);
    w.wo = download_matrix(wo_);
    w.w_gate = download_matrix(w_gate_);
    w.w_up = download_matrix(w_up_);
    w.w_down = download_matrix(w_down_);
    w.lm_head = config_.tied_embeddings && lm_head_.packed.empty() ? w.embed : download_matrix(lm_head_);
    w.attn_norm = attn_norm_.download();
    w.ffn_norm = ffn_norm_.download();
    w.final_norm = final_norm_.download();
    return w;
}

std::vector<float> Model::download_cache(bool values, int positions) const {
    return cache_->download(values, positions);
}

// ---- counts ---------------------------------------------------------------------------------

double Model::weight_bytes() const {
    const double norms = (2.0 * config_.layers + 1) * config_.d_model * 4;  // in fp32
    const double matrices = config_.parameter_count() - double(config_.layers) * 2 * config_.d_model - config_.d_model;
    if (options_.quant.format == "none") return matrices * size_of(options_.weights) + norms;
    double packed = 0;  // quantized: the packed matrices, and the embedding table in bf16
    for (const DeviceMatrix* m : {&wq_, &wk_, &wv_, &wo_, &w_gate_, &w_up_, &w_down_, &lm_head_})
        for (const kernels::quant::DeviceQuantizedMatrix& q : m->packed) packed += double(q.bytes);
    return packed + 2.0 * config_.vocab * config_.d_model + norms;
}

double Model::kv_bytes_per_token() const {
    return config_.kv_bytes_per_token(kv_element_bytes(options_.cache.kv, config_.head_dim));
}

// [model_cost]
Cost Model::cost(std::span<const StepSequence> sequences) const {
    std::vector<StepItem> items;
    for (const StepSequence& s : sequences)
        items.push_back({.tokens = double(s.tokens), .context = double(s.context), .logits = double(s.logits)});
    // chapter 01's attention computes every score of its square; the other kernels the causal ones
    const AttentionCount count =
        plan(sequences).attention == Plan::Attention::prefill ? AttentionCount::all_scores : AttentionCount::causal;
    // the bytes per weight of the matrices a pass reads (quantized: as packed, scales included)
    const double weight_bytes = options_.quant.format == "none"
                                    ? double(size_of(options_.weights))
                                    : kernels::quant::Layout{kernels::quant::format_named(options_.quant.format),
                                                             config_.d_model, options_.quant.group}
                                          .bytes_per_weight(config_.d_model);
    const StepCost c = step_cost(
        step_cost_shape(config_, weight_bytes, kv_element_bytes(options_.cache.kv, config_.head_dim), 4), items, count);
    return {c.flops, c.bytes};
}
// [model_cost]

Cost Model::cost(int context, int tokens) const {
    std::vector<StepSequence> rows(static_cast<std::size_t>(options_.batch));
    for (int b = 0; b < options_.batch; ++b) rows[std::size_t(b)] = {.slot = b, .context = context, .tokens = tokens};
    return cost(rows);
}

double Model::device_bytes(const ModelConfig& whole, const ModelOptions& o) {
    const ModelConfig c = shard_config(whole, o.parallel.ranks);  // each rank's part
    const double S = o.max_seq > 0 ? o.max_seq : c.max_seq, B = o.batch;
    const double T = o.max_step_tokens > 0 ? o.max_step_tokens : B * S;
    // quantized: the bf16 matrices, and their packed copies made from them (1 byte per weight at
    // most), then the matrix a pass's GEMM dequantizes into
    const double w = c.parameter_count() * (size_of(o.weights) + (o.quant.format != "none" ? 1.04 : 0.0)) +
                     (o.quant.format != "none" ? 2.0 * c.ffn_dim * c.d_model : 0.0);
    const double positions =
        o.cache.block_size > 0 && o.cache.num_blocks > 0 ? double(o.cache.num_blocks) * o.cache.block_size : B * S;
    const double cache = c.kv_bytes_per_token(kv_element_bytes(o.cache.kv, c.head_dim)) * positions;
    const double q = double(c.heads) * c.head_dim, kv = double(c.kv_heads) * c.head_dim;
    // activations (fp32): x h y; q o; k v; gate up act; with chapter 01's attention also qh oh,
    // kh vh and its scores
    const bool naive = o.kernels.prefill_attention == "naive";
    const double act = 4.0 * T * (3 * c.d_model + (naive ? 4 : 2) * (q + kv) + 3 * double(c.ffn_dim)) +
                       (naive ? 4.0 * c.heads * T * std::min(T, S) : 0.0);
    const double R = o.max_logit_rows > 0 ? o.max_logit_rows : B;
    // logits and probs of the whole vocabulary (split: also this rank's and the gathered ones)
    return w + cache + act + (o.parallel.ranks > 1 ? 4.0 : 2.0) * 4.0 * R * whole.vocab;
}

}  // namespace pd::model
