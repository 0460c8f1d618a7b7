/// @file model.cu
/// @brief The chapter 04 model: synthetic weights on the device, prefill (one pass over the
/// prompt, writing the cache) and decode (one token per sequence against the cache), built
/// from the kernels of chapters 01 to 04.
#include "model/model.hpp"

#include "attention/attention.hpp"
#include "gemm/gemm.hpp"
#include "gemv/gemv.hpp"
#include "model/decode_attention.hpp"
#include "model/layers.hpp"
#include "model/paged_attention.hpp"
#include "model/varlen_attention.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::kernels::model {

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

__device__ __forceinline__ void store_value(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_value(bf16* p, float x) { *p = __float2bfloat16_rn(x); }

/// out[i] = uniform in [lo, hi) from 24 random bits of mix64(seed ^ i), a grid-stride loop.
template <typename T>
__global__ void fill_uniform_kernel(T* __restrict__ out, std::size_t n, std::uint64_t seed, float lo, float hi) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
        const float u = float(mix64(seed ^ (i * 0xD1B54A32D192ED03ull)) >> 40) * 0x1.0p-24f;
        store_value(out + i, lo + (hi - lo) * u);
    }
}

template <typename T>
void fill_uniform_device(DeviceBuffer<T>& buf, std::uint64_t seed, float bound, float center = 0.f) {
    if (buf.size() == 0) return;
    const unsigned blocks = unsigned(std::min<std::size_t>(ceil_div(buf.size(), std::size_t(256)), 4096));
    fill_uniform_kernel<T><<<blocks, 256>>>(buf.data(), buf.size(), seed, center - bound, center + bound);
    PD_CHECK_LAUNCH();
}

/// A matrix of @p n elements in the model's weight type.
DeviceMatrix make_matrix(DType d, std::size_t n) {
    DeviceMatrix m;
    if (d == DType::fp32) m.f32 = DeviceBuffer<float>(n);
    else m.b16 = DeviceBuffer<bf16>(n);
    return m;
}

void fill_matrix(DeviceMatrix& m, std::uint64_t seed, float bound) {
    if (m.f32.size() > 0) fill_uniform_device(m.f32, seed, bound);
    else fill_uniform_device(m.b16, seed, bound);
}

void upload_matrix(DeviceMatrix& m, const std::vector<float>& host) {
    if (m.f32.size() > 0) m.f32.upload(host);
    else m.b16.upload(round_all<bf16>(host));
}

std::vector<float> download_matrix(const DeviceMatrix& m) {
    if (m.f32.size() > 0) return m.f32.download();
    return to_float_all<bf16>(m.b16.download());
}

/// The weights of type W of matrix @p m, from element @p offset (one layer's slice).
template <typename W>
const W* ptr(const DeviceMatrix& m, std::size_t offset = 0) {
    if constexpr (std::is_same_v<W, float>) return m.f32.data() + offset;
    else return m.b16.data() + offset;
}

// ---- the projections ------------------------------------------------------------------------

/// Prefill's Y [T, N] = X [T, K] W [N, K]^T: chapter 02's GEMM (v6 in fp32, v7 on tensor cores in bf16).
void project_prefill(const float* x, const float* w, float* y, int T, int N, int K) {
    gemm::gemm("v6", x, w, y, gemm::Shape{T, N, K});
}
void project_prefill(const bf16* x, const bf16* w, float* y, int T, int N, int K) {
    gemm::gemm("v7", x, w, y, gemm::Shape{T, N, K});
}
/// Decode's Y [B, N] = X [B, K] W [N, K]^T: chapter 03's GEMV (v3 for one token, v5 batched).
template <typename W>
void project_decode(const W* x, const W* w, float* y, int B, int N, int K) {
    gemv::gemv(B == 1 ? "v3" : "v5", w, x, y, gemv::Shape{B, N, K});
}

}  // namespace

// ---- construction and weights ---------------------------------------------------------------

Model::Model(const ModelConfig& config, const ModelOptions& options) : config_(config), options_(options) {
    config_.check("model " + config_.name);
    if (options_.batch < 1 || options_.batch > gemv::kMaxBatch)
        throw std::invalid_argument("--batch = " + std::to_string(options_.batch) + " must be in 1 .. " +
                                    std::to_string(gemv::kMaxBatch));
    max_seq_ = options_.max_seq > 0 ? options_.max_seq : config_.max_seq;
    if (max_seq_ > config_.max_seq)
        throw std::invalid_argument("max_seq = " + std::to_string(max_seq_) + " exceeds the model's " +
                                    std::to_string(config_.max_seq));
    if (config_.head_dim > kMaxHeadDim)
        throw std::invalid_argument("head_dim = " + std::to_string(config_.head_dim) + " exceeds the decode kernels' " +
                                    std::to_string(kMaxHeadDim));
    bool known = false;
    for (const Version& v : decode_versions()) known |= v.name == options_.attention;
    if (!known) throw std::invalid_argument("--attention " + options_.attention + ": not one of v1, v2, v3, v4");

    using S = std::size_t;
    const S V = S(config_.vocab), D = S(config_.d_model), L = S(config_.layers), F = S(config_.ffn_dim);
    const S q = S(config_.heads) * config_.head_dim, kv = S(config_.kv_heads) * config_.head_dim;
    const DType w = options_.weights;
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

    S cache = L * S(options_.batch) * config_.kv_heads * S(max_seq_) * config_.head_dim;
    if (options_.block_size > 0) {  // paged: [L][num_blocks][Hkv][block_size][d]
        max_blocks_ = int(ceil_div(max_seq_, options_.block_size));
        if (options_.num_blocks <= 0) options_.num_blocks = options_.batch * max_blocks_;
        cache = L * S(options_.num_blocks) * config_.kv_heads * S(options_.block_size) * config_.head_dim;
        block_table_ = DeviceBuffer<int>(S(options_.batch) * S(max_blocks_));
    } else if (options_.block_size < 0) {
        throw std::invalid_argument("--block-size = " + std::to_string(options_.block_size) + " must be >= 0");
    }
    if (options_.kv == DType::fp32) {
        k_cache32_ = DeviceBuffer<float>(cache);
        v_cache32_ = DeviceBuffer<float>(cache);
    } else {
        k_cache16_ = DeviceBuffer<bf16>(cache);
        v_cache16_ = DeviceBuffer<bf16>(cache);
    }
    const int B = options_.batch;
    start_ = DeviceBuffer<int>(S(B));
    kv_len_ = DeviceBuffer<int>(S(B));
    step_meta_ = DeviceBuffer<int>(3 * S(B));
    q_start_ = DeviceBuffer<int>(S(B));
    logits_ = DeviceBuffer<float>(S(B) * V);
    x_last_ = DeviceBuffer<float>(S(B) * D);
    const DecodeShape ds{B, config_.heads, config_.kv_heads, config_.head_dim, max_seq_, max_seq_};
    attn_workspace_ = DeviceBuffer<float>(std::max<S>(1, decode_workspace_floats(options_.attention, ds, options_.sm_count)));
}

void Model::init_synthetic(std::uint64_t seed) {
    const double D = config_.d_model, F = config_.ffn_dim, q = double(config_.heads) * config_.head_dim;
    const double residual = std::sqrt(2.0 * config_.layers);  // two residual branches per layer
    // uniform(-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) keeps a projection's output at
    // the variance of its input.
    const auto bound = [](double fan_in) { return float(std::sqrt(3.0 / fan_in)); };
    std::uint64_t stream = 0;
    const auto next = [&] { return mix64(seed + 0x100 * ++stream); };
    fill_matrix(embed_, next(), float(std::sqrt(3.0)));
    fill_matrix(wq_, next(), bound(D));
    fill_matrix(wk_, next(), bound(D));
    fill_matrix(wv_, next(), bound(D));
    fill_matrix(wo_, next(), float(bound(q) / residual));
    fill_matrix(w_gate_, next(), bound(D));
    fill_matrix(w_up_, next(), bound(D));
    fill_matrix(w_down_, next(), float(bound(F) / residual));
    if (!config_.tied_embeddings) fill_matrix(lm_head_, next(), bound(D));
    fill_uniform_device(attn_norm_, next(), 0.1f, 1.f);
    fill_uniform_device(ffn_norm_, next(), 0.1f, 1.f);
    fill_uniform_device(final_norm_, next(), 0.1f, 1.f);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
}

void Model::load(const ModelWeights& w) {
    w.check(config_, "weights for " + config_.name);
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
    w.lm_head = config_.tied_embeddings ? w.embed : download_matrix(lm_head_);
    w.attn_norm = attn_norm_.download();
    w.ffn_norm = ffn_norm_.download();
    w.final_norm = final_norm_.download();
    return w;
}

std::vector<float> Model::download_cache(bool values, int positions) const {
    if (options_.block_size > 0) throw std::invalid_argument("download_cache: the cache is paged");
    if (positions < 0 || positions > max_seq_)
        throw std::invalid_argument("download_cache: positions = " + std::to_string(positions) + " must be in 0 .. " +
                                    std::to_string(max_seq_));
    const std::vector<float> all = options_.kv == DType::fp32 ? (values ? v_cache32_ : k_cache32_).download()
                                                              : to_float_all<bf16>((values ? v_cache16_ : k_cache16_).download());
    // keep the first `positions` rows of each [S_max, d] block (one per layer, sequence and KV head)
    const std::size_t d = std::size_t(config_.head_dim), block = std::size_t(max_seq_) * d, keep = std::size_t(positions) * d;
    std::vector<float> out;
    out.reserve(all.size() / block * keep);
    for (std::size_t at = 0; at < all.size(); at += block) out.insert(out.end(), all.begin() + at, all.begin() + at + keep);
    return out;
}

// ---- counts ---------------------------------------------------------------------------------

double Model::weight_bytes() const {
    const double matrices = config_.parameter_count() - double(config_.layers) * 2 * config_.d_model - config_.d_model;
    return matrices * size_of(options_.weights) + (2.0 * config_.layers + 1) * config_.d_model * 4;  // norms in fp32
}

double Model::kv_bytes_per_token() const { return config_.kv_bytes_per_token(size_of(options_.kv)); }

namespace {

/// Weight bytes a pass over @p tokens tokens reads: every weight once, except the embedding
/// table, of which only the tokens' rows are gathered (unless it is also the LM head).
double weights_read(const Model& m, double tokens) {
    const ModelConfig& c = m.config();
    const double row = double(c.d_model) * size_of(m.options().weights);
    const double table = double(c.vocab) * row;
    return m.weight_bytes() - (c.tied_embeddings ? 0 : table - std::min(table, tokens * row));
}

}  // namespace

double Model::decode_step_bytes(int context) const {
    return weights_read(*this, options_.batch) + kv_bytes_per_token() * options_.batch * context;
}

double Model::prefill_bytes(int P) const {
    return weights_read(*this, double(options_.batch) * P) + kv_bytes_per_token() * options_.batch * P;
}

double Model::decode_step_flops(int context) const {
    const double B = options_.batch;
    const double dense = config_.parameter_count() - double(config_.vocab) * config_.d_model *
                                                         (config_.tied_embeddings ? 0 : 1);  // embedding: a gather
    const double attention = 4.0 * config_.layers * config_.heads * double(config_.head_dim) * context;
    return B * (2.0 * dense + attention);
}

double Model::prefill_flops(int P) const {
    const double B = options_.batch, L = config_.layers, H = config_.heads, d = config_.head_dim;
    const double V = config_.vocab, D = config_.d_model;
    const double per_token = config_.parameter_count() - V * D * (config_.tied_embeddings ? 1 : 2) - D;  // the blocks
    // dense layers for every token; chapter 01's attention computes all P^2 scores (2 d each) and
    // P V over the allowed half; the LM head for the last token of each sequence
    return B * (2.0 * per_token * P + L * H * (2.0 * d * P * P + 2.0 * d * P * (P + 1) / 2) + 2.0 * V * D);
}

double Model::device_bytes(const ModelConfig& c, const ModelOptions& o, int max_prefill) {
    const double S = o.max_seq > 0 ? o.max_seq : c.max_seq, B = o.batch, T = B * max_prefill;
    const double w = c.parameter_count() * size_of(o.weights);
    const double cache = c.kv_bytes_per_token(size_of(o.kv)) * B * S;
    const double q = double(c.heads) * c.head_dim, kv = double(c.kv_heads) * c.head_dim;
    // prefill activations (fp32): x h y o oh; q qh; k v kh vh; gate up act; the scores of chapter 01
    const double act = 4.0 * T * (5 * c.d_model + 2 * q + 4 * kv + 3 * double(c.ffn_dim)) +
                       4.0 * B * c.heads * double(max_prefill) * max_prefill;
    return w + cache + act + 4.0 * B * c.vocab;
}

// ---- prefill ----------------------------------------------------------------------------------

void Model::check_tokens(std::span<const int> tokens) const {
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= config_.vocab)
            throw std::invalid_argument("token " + std::to_string(i) + " = " + std::to_string(tokens[i]) +
                                        " is outside the vocabulary [0, " + std::to_string(config_.vocab) + ")");
}

void Model::ensure_activations(int tokens, int P) {
    using S = std::size_t;
    const S T = S(tokens), D = S(config_.d_model), F = S(config_.ffn_dim);
    const S q = S(config_.heads) * config_.head_dim, kv = S(config_.kv_heads) * config_.head_dim;
    if (tokens > act_tokens_) {
        act_tokens_ = tokens;
        tokens_ = DeviceBuffer<int>(T);
        positions_ = DeviceBuffer<int>(T);
        token_slot_ = DeviceBuffer<int>(T);
        for (DeviceBuffer<float>* b : {&x_, &h_, &y_}) *b = DeviceBuffer<float>(T * D);
        for (DeviceBuffer<float>* b : {&q_, &o_, &qh_, &oh_}) *b = DeviceBuffer<float>(T * q);
        for (DeviceBuffer<float>* b : {&k_, &v_, &kh_, &vh_}) *b = DeviceBuffer<float>(T * kv);
        for (DeviceBuffer<float>* b : {&gate_, &up_, &act_}) *b = DeviceBuffer<float>(T * F);
        if (options_.weights == DType::bf16) {
            h16_ = DeviceBuffer<bf16>(T * D);
            o16_ = DeviceBuffer<bf16>(T * q);
            act16_ = DeviceBuffer<bf16>(T * F);
        }
    }
    const S scores = S(options_.batch) * config_.heads * S(P) * S(P);
    if (scores > scores_.size()) scores_ = DeviceBuffer<float>(scores);
}

void Model::prefill(std::span<const int> tokens, int P) {
    const int B = options_.batch;
    if (options_.block_size > 0) throw std::invalid_argument("prefill: a paged cache runs step() only");
    if (P < 1 || P > max_seq_)
        throw std::invalid_argument("prompt length " + std::to_string(P) + " must be in 1 .. max_seq = " +
                                    std::to_string(max_seq_));
    if (tokens.size() != std::size_t(B) * P)
        throw std::invalid_argument("prefill: " + std::to_string(tokens.size()) + " tokens, expected B * P = " +
                                    std::to_string(std::size_t(B) * P));
    check_tokens(tokens);
    ensure_activations(B * P, P);
    std::vector<int> positions(tokens.size());
    for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = int(i % std::size_t(P));
    PD_CHECK_CUDA(cudaMemcpy(tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpy(positions_.data(), positions.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemset(start_.data(), 0, start_.bytes()));  // every sequence starts at position 0
    if (options_.weights == DType::fp32) forward_prefill<float>(P);
    else forward_prefill<bf16>(P);
    length_ = P;
}

// [prefill_forward]
template <typename W>
void Model::forward_prefill(int P) {
    const ModelConfig& c = config_;
    const int B = options_.batch, T = B * P, D = c.d_model, F = c.ffn_dim, d = c.head_dim;
    const int Hq = c.heads, Hkv = c.kv_heads, q_dim = Hq * d, kv_dim = Hkv * d;
    const CacheShape cache{B, Hkv, max_seq_, d};
    const attention::Shape att{.batch = B, .heads = Hq, .q_len = P, .kv_len = P, .head_dim = d, .causal = true, .kv_heads = Hkv};
    constexpr bool lowp = std::is_same_v<W, bf16>;
    W* h = nullptr;  // the input of the projections: h_ (fp32) or h16_ (bf16)
    if constexpr (lowp) h = h16_.data(); else h = h_.data();

    if constexpr (lowp) embedding(tokens_.data(), embed_.b16.data(), x_.data(), T, D, c.vocab);
    else embedding(tokens_.data(), embed_.f32.data(), x_.data(), T, D, c.vocab);
    for (int l = 0; l < c.layers; ++l) {
        const std::size_t Ld = std::size_t(l) * D;
        // attention: norm, Q K V projections (GEMM over all T tokens), RoPE, cache append
        rmsnorm(x_.data(), attn_norm_.data() + Ld, h, T, D, float(c.norm_eps));
        project_prefill(h, ptr<W>(wq_, Ld * q_dim), q_.data(), T, q_dim, D);
        project_prefill(h, ptr<W>(wk_, Ld * kv_dim), k_.data(), T, kv_dim, D);
        project_prefill(h, ptr<W>(wv_, Ld * kv_dim), v_.data(), T, kv_dim, D);
        rope(q_.data(), positions_.data(), T, Hq, d, c.rope_theta);
        rope(k_.data(), positions_.data(), T, Hkv, d, c.rope_theta);
        const std::size_t layer_cache = std::size_t(l) * cache.elements();
        if (options_.kv == DType::fp32)
            kv_append(k_.data(), v_.data(), k_cache32_.data() + layer_cache, v_cache32_.data() + layer_cache,
                      start_.data(), P, cache);
        else
            kv_append(k_.data(), v_.data(), k_cache16_.data() + layer_cache, v_cache16_.data() + layer_cache,
                      start_.data(), P, cache);
        // causal attention over the prompt with chapter 01's kernels (head-major), on the fresh
        // fp32 K and V; later steps read them back from the cache
        tokens_to_heads(q_.data(), qh_.data(), B, P, Hq, d);
        tokens_to_heads(k_.data(), kh_.data(), B, P, Hkv, d);
        tokens_to_heads(v_.data(), vh_.data(), B, P, Hkv, d);
        attention::naive_attention("v2", qh_.data(), kh_.data(), vh_.data(), oh_.data(), scores_.data(), att);
        heads_to_tokens(oh_.data(), o_.data(), B, P, Hq, d);
        if constexpr (lowp) {
            to_bf16(o_.data(), o16_.data(), std::size_t(T) * q_dim);
            project_prefill(o16_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), T, D, q_dim);
        } else {
            project_prefill(o_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), T, D, q_dim);
        }
        add(x_.data(), y_.data(), std::size_t(T) * D);
        // feed-forward: norm, gate and up (GEMM), SwiGLU, down (GEMM), residual
        rmsnorm(x_.data(), ffn_norm_.data() + Ld, h, T, D, float(c.norm_eps));
        project_prefill(h, ptr<W>(w_gate_, Ld * F), gate_.data(), T, F, D);
        project_prefill(h, ptr<W>(w_up_, Ld * F), up_.data(), T, F, D);
        W* a = nullptr;
        if constexpr (lowp) a = act16_.data(); else a = act_.data();
        swiglu(gate_.data(), up_.data(), a, std::size_t(T) * F);
        project_prefill(a, ptr<W>(w_down_, Ld * F), y_.data(), T, D, F);
        add(x_.data(), y_.data(), std::size_t(T) * D);
    }
    // the logits of each sequence's last token: gather rows P - 1, 2P - 1, ... of x
    for (int b = 0; b < B; ++b)
        PD_CHECK_CUDA(cudaMemcpyAsync(x_last_.data() + std::size_t(b) * D, x_.data() + (std::size_t(b) * P + P - 1) * D,
                                      std::size_t(D) * sizeof(float), cudaMemcpyDeviceToDevice));
    final_logits(x_last_.data(), B);
}
// [prefill_forward]

// ---- decode -----------------------------------------------------------------------------------

void Model::decode(std::span<const int> tokens) {
    if (tokens.size() != std::size_t(options_.batch))
        throw std::invalid_argument("decode: " + std::to_string(tokens.size()) + " tokens, expected B = " +
                                    std::to_string(options_.batch));
    check_tokens(tokens);
    ensure_activations(options_.batch, 1);
    PD_CHECK_CUDA(cudaMemcpy(tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    decode(tokens_.data());
}

void Model::decode(const int* tokens_device) {
    if (options_.block_size > 0) throw std::invalid_argument("decode: a paged cache runs step() only");
    if (length_ < 1) throw std::invalid_argument("decode before prefill: the cache is empty");
    if (length_ >= max_seq_)
        throw std::invalid_argument("decode at position " + std::to_string(length_) + ": the cache holds max_seq = " +
                                    std::to_string(max_seq_) + " positions");
    ensure_activations(options_.batch, 1);
    const int B = options_.batch;
    // this step's position (start) and context (kv_len = position + 1) of every sequence; the
    // host arrays are members, so they outlive the asynchronous copies
    start_host_.assign(std::size_t(B), length_);
    kv_len_host_.assign(std::size_t(B), length_ + 1);
    PD_CHECK_CUDA(cudaMemcpyAsync(start_.data(), start_host_.data(), start_.bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpyAsync(kv_len_.data(), kv_len_host_.data(), kv_len_.bytes(), cudaMemcpyHostToDevice));
    if (tokens_device != tokens_.data())
        PD_CHECK_CUDA(cudaMemcpyAsync(tokens_.data(), tokens_device, std::size_t(B) * sizeof(int),
                                      cudaMemcpyDeviceToDevice));
    if (options_.weights == DType::fp32) forward_decode<float>();
    else forward_decode<bf16>();
    ++length_;
}

// [decode_forward]
template <typename W>
void Model::forward_decode() {
    const ModelConfig& c = config_;
    const int B = options_.batch, D = c.d_model, F = c.ffn_dim, d = c.head_dim;
    const int Hq = c.heads, Hkv = c.kv_heads, q_dim = Hq * d, kv_dim = Hkv * d;
    const CacheShape cache{B, Hkv, max_seq_, d};
    const DecodeShape att{B, Hq, Hkv, d, max_seq_, length_ + 1};
    constexpr bool lowp = std::is_same_v<W, bf16>;
    W* h = nullptr;
    if constexpr (lowp) h = h16_.data(); else h = h_.data();

    if constexpr (lowp) embedding(tokens_.data(), embed_.b16.data(), x_.data(), B, D, c.vocab);
    else embedding(tokens_.data(), embed_.f32.data(), x_.data(), B, D, c.vocab);
    for (int l = 0; l < c.layers; ++l) {
        const std::size_t Ld = std::size_t(l) * D;
        // attention: norm, Q K V (GEMV: every weight read once for the B tokens), RoPE at each
        // sequence's position, append the new K and V, attend to the whole cache
        rmsnorm(x_.data(), attn_norm_.data() + Ld, h, B, D, float(c.norm_eps));
        project_decode(h, ptr<W>(wq_, Ld * q_dim), q_.data(), B, q_dim, D);
        project_decode(h, ptr<W>(wk_, Ld * kv_dim), k_.data(), B, kv_dim, D);
        project_decode(h, ptr<W>(wv_, Ld * kv_dim), v_.data(), B, kv_dim, D);
        rope(q_.data(), start_.data(), B, Hq, d, c.rope_theta);
        rope(k_.data(), start_.data(), B, Hkv, d, c.rope_theta);
        const std::size_t layer_cache = std::size_t(l) * cache.elements();
        if (options_.kv == DType::fp32) {
            float* kc = k_cache32_.data() + layer_cache;
            float* vc = v_cache32_.data() + layer_cache;
            kv_append(k_.data(), v_.data(), kc, vc, start_.data(), 1, cache);
            decode_attention(options_.attention, q_.data(), kc, vc, kv_len_.data(), o_.data(), attn_workspace_.data(),
                             att, options_.sm_count);
        } else {
            bf16* kc = k_cache16_.data() + layer_cache;
            bf16* vc = v_cache16_.data() + layer_cache;
            kv_append(k_.data(), v_.data(), kc, vc, start_.data(), 1, cache);
            decode_attention(options_.attention, q_.data(), kc, vc, kv_len_.data(), o_.data(), attn_workspace_.data(),
                             att, options_.sm_count);
        }
        if constexpr (lowp) {
            to_bf16(o_.data(), o16_.data(), std::size_t(B) * q_dim);
            project_decode(o16_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), B, D, q_dim);
        } else {
            project_decode(o_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), B, D, q_dim);
        }
        add(x_.data(), y_.data(), std::size_t(B) * D);
        // feed-forward
        rmsnorm(x_.data(), ffn_norm_.data() + Ld, h, B, D, float(c.norm_eps));
        project_decode(h, ptr<W>(w_gate_, Ld * F), gate_.data(), B, F, D);
        project_decode(h, ptr<W>(w_up_, Ld * F), up_.data(), B, F, D);
        W* a = nullptr;
        if constexpr (lowp) a = act16_.data(); else a = act_.data();
        swiglu(gate_.data(), up_.data(), a, std::size_t(B) * F);
        project_decode(a, ptr<W>(w_down_, Ld * F), y_.data(), B, D, F);
        add(x_.data(), y_.data(), std::size_t(B) * D);
    }
    final_logits(x_.data(), B);
}
// [decode_forward]

/// logits [rows, V] = RMSNorm(x_last) * final_norm  lm_head^T (the embedding when tied), by GEMV.
void Model::final_logits(const float* x_last, int rows) {
    const ModelConfig& c = config_;
    const int B = rows, D = c.d_model;
    const DeviceMatrix& head = c.tied_embeddings ? embed_ : lm_head_;
    if (options_.weights == DType::fp32) {
        rmsnorm(x_last, final_norm_.data(), h_.data(), B, D, float(c.norm_eps));
        project_decode(h_.data(), head.f32.data(), logits_.data(), B, c.vocab, D);
    } else {
        rmsnorm(x_last, final_norm_.data(), h16_.data(), B, D, float(c.norm_eps));
        project_decode(h16_.data(), head.b16.data(), logits_.data(), B, c.vocab, D);
    }
}

// ---- a mixed step (chapter 05) ----------------------------------------------------------------

void Model::step(std::span<const int> tokens, std::span<const StepSequence> sequences) {
    const int S = int(sequences.size()), B = options_.batch;
    if (S < 1 || S > B)
        throw std::invalid_argument("step: " + std::to_string(S) + " sequences, must be in 1 .. batch = " +
                                    std::to_string(B));
    std::vector<int> meta(3 * std::size_t(B), 0);  // q_len [B], context [B], slot [B]
    std::vector<bool> taken(std::size_t(B), false);
    long long T = 0;
    int max_q_len = 0;
    for (int s = 0; s < S; ++s) {
        const StepSequence& q = sequences[std::size_t(s)];
        const std::string who = "step: sequence " + std::to_string(s) + ": ";
        if (q.slot < 0 || q.slot >= B)
            throw std::invalid_argument(who + "slot = " + std::to_string(q.slot) + " must be in 0 .. " + std::to_string(B - 1));
        if (taken[std::size_t(q.slot)]) throw std::invalid_argument(who + "slot " + std::to_string(q.slot) + " is used twice");
        taken[std::size_t(q.slot)] = true;
        if (q.tokens < 1 || q.context < 0 || q.context + q.tokens > max_seq_)
            throw std::invalid_argument(who + "context " + std::to_string(q.context) + " + tokens " +
                                        std::to_string(q.tokens) + " must fit in max_seq = " + std::to_string(max_seq_) +
                                        " with tokens >= 1 and context >= 0");
        if (options_.block_size > 0) {  // its block table, row s of the step's
            const long long need = ceil_div<long long>(q.context + q.tokens, options_.block_size);
            if (static_cast<long long>(q.blocks.size()) < need)
                throw std::invalid_argument(who + std::to_string(q.blocks.size()) + " blocks for " +
                                            std::to_string(q.context + q.tokens) + " positions of " +
                                            std::to_string(options_.block_size));
            if (s == 0) block_table_host_.assign(std::size_t(B) * std::size_t(max_blocks_), -1);
            for (std::size_t i = 0; i < std::size_t(need); ++i) {
                if (q.blocks[i] < 0 || q.blocks[i] >= options_.num_blocks)
                    throw std::invalid_argument(who + "block " + std::to_string(q.blocks[i]) + " is not one of the cache's " +
                                                std::to_string(options_.num_blocks));
                block_table_host_[std::size_t(s) * std::size_t(max_blocks_) + i] = q.blocks[i];
            }
        }
        meta[std::size_t(s)] = q.tokens;
        meta[std::size_t(B + s)] = q.context;
        meta[std::size_t(2 * B + s)] = options_.block_size > 0 ? s : q.slot;  // paged: row s of the tables
        T += q.tokens;
        max_q_len = std::max(max_q_len, q.tokens);
    }
    if (T != static_cast<long long>(tokens.size()))
        throw std::invalid_argument("step: " + std::to_string(tokens.size()) + " tokens, the sequences bring " +
                                    std::to_string(T));
    check_tokens(tokens);
    ensure_activations(int(T), 1);
    PD_CHECK_CUDA(cudaMemcpy(tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpy(step_meta_.data(), meta.data(), meta.size() * sizeof(int), cudaMemcpyHostToDevice));
    if (options_.block_size > 0)
        PD_CHECK_CUDA(cudaMemcpy(block_table_.data(), block_table_host_.data(), block_table_host_.size() * sizeof(int),
                                 cudaMemcpyHostToDevice));
    // the offsets of the packed rows (a scan of q_len), each sequence's context after the step,
    // and each row's position and slot
    const int* q_len = step_meta_.data();
    pack_batch(q_len, step_meta_.data() + B, step_meta_.data() + 2 * B, q_start_.data(), kv_len_.data(),
               positions_.data(), token_slot_.data(), S);
    if (options_.weights == DType::fp32) forward_step<float>(int(T), S, max_q_len);
    else forward_step<bf16>(int(T), S, max_q_len);
}

// [step_forward]
template <typename W>
void Model::forward_step(int T, int S, int max_q_len) {
    const ModelConfig& c = config_;
    const int B = options_.batch, D = c.d_model, F = c.ffn_dim, d = c.head_dim;
    const int Hq = c.heads, Hkv = c.kv_heads, q_dim = Hq * d, kv_dim = Hkv * d;
    const CacheShape cache{B, Hkv, max_seq_, d};
    const VarlenShape att{.sequences = S, .tokens = T, .heads = Hq, .kv_heads = Hkv, .head_dim = d,
                          .slots = B, .max_seq = max_seq_, .max_q_len = max_q_len};
    const int* q_len = step_meta_.data();
    const int* slot = step_meta_.data() + 2 * B;
    const bool paged = options_.block_size > 0;
    const PagedShape pages{.batch = S, .heads = Hq, .kv_heads = Hkv, .head_dim = d, .block_size = options_.block_size,
                           .num_blocks = options_.num_blocks, .max_blocks = max_blocks_, .max_kv_len = max_seq_};
    const std::size_t layer_elements = paged ? std::size_t(options_.num_blocks) * Hkv * options_.block_size * d
                                             : cache.elements();
    constexpr bool lowp = std::is_same_v<W, bf16>;
    W* h = nullptr;
    if constexpr (lowp) h = h16_.data(); else h = h_.data();

    if constexpr (lowp) embedding(tokens_.data(), embed_.b16.data(), x_.data(), T, D, c.vocab);
    else embedding(tokens_.data(), embed_.f32.data(), x_.data(), T, D, c.vocab);
    for (int l = 0; l < c.layers; ++l) {
        const std::size_t Ld = std::size_t(l) * D;
        // attention: the projections once over all T rows (every weight read once for the
        // whole batch), RoPE at each row's position, K and V into each sequence's slot, then
        // each sequence's queries against its slot
        rmsnorm(x_.data(), attn_norm_.data() + Ld, h, T, D, float(c.norm_eps));
        project_prefill(h, ptr<W>(wq_, Ld * q_dim), q_.data(), T, q_dim, D);
        project_prefill(h, ptr<W>(wk_, Ld * kv_dim), k_.data(), T, kv_dim, D);
        project_prefill(h, ptr<W>(wv_, Ld * kv_dim), v_.data(), T, kv_dim, D);
        rope(q_.data(), positions_.data(), T, Hq, d, c.rope_theta);
        rope(k_.data(), positions_.data(), T, Hkv, d, c.rope_theta);
        const std::size_t layer_cache = std::size_t(l) * layer_elements;
        const auto attend = [&](auto* kc, auto* vc) {
            if (paged) {  // chapter 06: through the step's block tables (token_slot_ holds each row's sequence)
                paged_kv_append_rows(k_.data(), v_.data(), kc, vc, block_table_.data(), token_slot_.data(),
                                     positions_.data(), T, pages);
                paged_varlen_attention(q_.data(), kc, vc, q_start_.data(), q_len, kv_len_.data(), block_table_.data(),
                                       o_.data(), pages, T, max_q_len);
            } else {
                kv_append_rows(k_.data(), v_.data(), kc, vc, token_slot_.data(), positions_.data(), T, cache);
                varlen_attention(q_.data(), kc, vc, q_start_.data(), q_len, kv_len_.data(), slot, o_.data(), att);
            }
        };
        if (options_.kv == DType::fp32) attend(k_cache32_.data() + layer_cache, v_cache32_.data() + layer_cache);
        else attend(k_cache16_.data() + layer_cache, v_cache16_.data() + layer_cache);
        if constexpr (lowp) {
            to_bf16(o_.data(), o16_.data(), std::size_t(T) * q_dim);
            project_prefill(o16_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), T, D, q_dim);
        } else {
            project_prefill(o_.data(), ptr<W>(wo_, Ld * q_dim), y_.data(), T, D, q_dim);
        }
        add(x_.data(), y_.data(), std::size_t(T) * D);
        // feed-forward, once over all T rows
        rmsnorm(x_.data(), ffn_norm_.data() + Ld, h, T, D, float(c.norm_eps));
        project_prefill(h, ptr<W>(w_gate_, Ld * F), gate_.data(), T, F, D);
        project_prefill(h, ptr<W>(w_up_, Ld * F), up_.data(), T, F, D);
        W* a = nullptr;
        if constexpr (lowp) a = act16_.data(); else a = act_.data();
        swiglu(gate_.data(), up_.data(), a, std::size_t(T) * F);
        project_prefill(a, ptr<W>(w_down_, Ld * F), y_.data(), T, D, F);
        add(x_.data(), y_.data(), std::size_t(T) * D);
    }
    // the logits of each sequence's last row
    gather_last_rows(x_.data(), q_start_.data(), q_len, x_last_.data(), S, D);
    final_logits(x_last_.data(), S);
}
// [step_forward]

void Model::rewind(int length) {
    if (length < 1 || length > length_)
        throw std::invalid_argument("rewind to " + std::to_string(length) + ": must be in 1 .. " + std::to_string(length_));
    length_ = length;
}

void Model::argmax(int* out_device) const {
    model::argmax(logits_.data(), out_device, options_.batch, config_.vocab);
}

}  // namespace pd::kernels::model
