/// @file forward.cpp
/// @brief Chapter 04's model (model.hpp): the one forward pass over any batch, built from the
/// kernels of chapters 01 to 06 (and chapter 10's all-reduces), and its projections.
#include "pd/model/model.hpp"

#include "attention/attention.hpp"
#include "attention/decode_attention.hpp"
#include "gemm/gemm.hpp"
#include "gemv/gemv.hpp"
#include "layers/layers.hpp"
#include "layers/sampling.hpp"
#include "runtime/runtime.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace at = pd::kernels::attention;
namespace ly = pd::kernels::layers;

namespace {

using bf16 = __nv_bfloat16;

/// The weights of type W of matrix @p m, from element @p offset (one layer's slice).
template <typename W>
const W* ptr(const DeviceMatrix& m, std::size_t offset = 0) {
    if constexpr (std::is_same_v<W, float>)
        return m.f32.data() + offset;
    else
        return m.b16.data() + offset;
}

}  // namespace

// ---- the forward pass -----------------------------------------------------------------------

void Model::forward(std::span<const int> tokens, std::span<const StepSequence> sequences) {
    check(tokens, sequences);
    if (tokens.empty()) throw std::invalid_argument("forward: no tokens");
    on_every_rank([&](Model& m) { m.forward_local(tokens, sequences); });
    // length(): where decode() goes on, after a pass that left every slot's sequence at one length
    bool uniform = int(sequences.size()) == options_.batch;
    for (const StepSequence& s : sequences)
        uniform = uniform && s.context + s.tokens == sequences[0].context + sequences[0].tokens;
    length_ = uniform ? sequences[0].context + sequences[0].tokens : 0;
}

void Model::forward_local(std::span<const int> tokens, std::span<const StepSequence> sequences) {
    communication_ = {};
    graph_stats_.last_bucket = 0;
    const Plan p = plan(sequences);
    if (replay_ && p.attention == Plan::Attention::decode)  // chapter 12: the bucket's graph
        return graph_pass(tokens, nullptr, sequences);
    upload_batch(tokens, sequences);
    if (options_.weights == DType::fp32)
        forward_pass<float>(p);
    else
        forward_pass<bf16>(p);
}

/// Y [T, N] = X [T, K] W [N, K]^T for the pass's T rows: chapter 03's GEMV for a decode batch
/// (v3 for one row, v5 batched), chapter 02's GEMM otherwise (v6 in fp32, v7 on the tensor
/// cores in bf16; below sm_80, bf16 takes the runtime's SIMT form of v6, gemm_bf16()).
template <typename W>
void Model::project(const Plan& plan, const W* x, const DeviceMatrix& w, std::size_t offset, float* y, int N, int K) {
    const int T = plan.tokens;
    if constexpr (std::is_same_v<W, bf16>)
        if (!w.packed.empty()) return project_packed(plan, x, w.packed[offset / (std::size_t(N) * K)], y);
    if (plan.projections == Plan::Projections::gemv)
        kernels::gemv::gemv(T == 1 ? "v3" : "v5", ptr<W>(w, offset), x, y, kernels::gemv::Shape{T, N, K}, stream_);
    else if constexpr (std::is_same_v<W, float>)
        kernels::gemm::gemm("v6", x, ptr<W>(w, offset), y, kernels::gemm::Shape{T, N, K}, stream_);
    else
        gemm_bf16(x, ptr<W>(w, offset), y, kernels::gemm::Shape{T, N, K});
}

/// A bf16 GEMM: chapter 02's v7 on the tensor cores, or on a GPU without bf16 tensor cores
/// (compute capability below 8.0) the runtime's gemm_simt_bf16 (v6 on bf16 inputs).
void Model::gemm_bf16(const bf16* x, const bf16* w, float* y, const kernels::gemm::Shape& s) const {
    if (bf16_tensor_cores_)
        kernels::gemm::gemm("v7", x, w, y, s, stream_);
    else
        kernels::runtime::gemm_simt_bf16(x, w, y, s, stream_);
}

// [forward_pass]
template <typename W>
void Model::forward_pass(const Plan& plan) {
    const ModelConfig& c = config_;
    const int T = plan.tokens, S = plan.sequences, D = c.d_model, F = c.ffn_dim, d = c.head_dim;
    const int Hq = c.heads, Hkv = c.kv_heads, q_dim = Hq * d, kv_dim = Hkv * d;
    const float eps = float(c.norm_eps);
    constexpr bool lowp = std::is_same_v<W, bf16>;
    W* h = nullptr;  // the input of the projections: h_ (fp32) or h16_ (bf16)
    W* a = nullptr;  // the FFN's activation: act_ or act16_
    if constexpr (lowp)
        h = h16_.data(), a = act16_.data();
    else
        h = h_.data(), a = act_.data();

    if (options_.parallel.ranks == 1) {
        ly::embedding(tokens_.data(), ptr<W>(embed_), x_.data(), T, D, c.vocab, stream_);
    } else {  // chapter 10: this rank's rows of the vocabulary, zeros for the others', summed over the ranks
        ly::embedding_shard(tokens_.data(), ptr<W>(embed_), x_.data(), T, D, options_.parallel.rank * c.vocab, c.vocab,
                            stream_);
        all_reduce(x_.data(), std::size_t(T) * D);
    }
    for (int l = 0; l < c.layers; ++l) {
        const std::size_t Ld = std::size_t(l) * D;
        // attention: norm, Q K V, RoPE at each row's position, K and V into the cache
        ly::rmsnorm(x_.data(), attn_norm_.data() + Ld, h, T, D, eps, stream_);
        project(plan, h, wq_, Ld * q_dim, q_.data(), q_dim, D);
        project(plan, h, wk_, Ld * kv_dim, k_.data(), kv_dim, D);
        project(plan, h, wv_, Ld * kv_dim, v_.data(), kv_dim, D);
        ly::rope(q_.data(), positions_.data(), T, Hq, d, c.rope_theta, stream_);
        ly::rope(k_.data(), positions_.data(), T, Hkv, d, c.rope_theta, stream_);
        cache_->append(l, k_.data(), v_.data(), batch_);
        if (plan.attention == Plan::Attention::prefill) {
            // prompts from position 0: chapter 01's attention (head-major) on the fresh K and V,
            // as the cache holds them (a bf16 cache rounds them) and later passes read them back
            const int P = T / S;
            ly::tokens_to_heads(q_.data(), qh_.data(), S, P, Hq, d, stream_);
            ly::tokens_to_heads(k_.data(), kh_.data(), S, P, Hkv, d, stream_);
            ly::tokens_to_heads(v_.data(), vh_.data(), S, P, Hkv, d, stream_);
            if (cache_->dtype() == DType::bf16) {
                ly::round_to_bf16(kh_.data(), std::size_t(T) * kv_dim, stream_);
                ly::round_to_bf16(vh_.data(), std::size_t(T) * kv_dim, stream_);
            }
            at::naive_attention(
                "v2", qh_.data(), kh_.data(), vh_.data(), oh_.data(), scores_.data(),
                {.batch = S, .heads = Hq, .q_len = P, .kv_len = P, .head_dim = d, .causal = true, .kv_heads = Hkv},
                stream_);
            ly::heads_to_tokens(oh_.data(), o_.data(), S, P, Hq, d, stream_);
        } else if (plan.attention == Plan::Attention::decode) {
            cache_->decode_attention(l, q_.data(), o_.data(), batch_);  // one query per sequence
        } else {
            cache_->varlen_attention(l, q_.data(), o_.data(), batch_);  // any batch: flash attention v3
        }
        if constexpr (lowp) {
            ly::to_bf16(o_.data(), o16_.data(), std::size_t(T) * q_dim, stream_);
            project(plan, o16_.data(), wo_, Ld * q_dim, y_.data(), D, q_dim);
        } else {
            project(plan, o_.data(), wo_, Ld * q_dim, y_.data(), D, q_dim);
        }
        all_reduce(y_.data(), std::size_t(T) * D);  // chapter 10: each rank's heads' share of Wo's output
        ly::add(x_.data(), y_.data(), std::size_t(T) * D, stream_);
        // feed-forward: norm, gate and up, SwiGLU, down, residual
        ly::rmsnorm(x_.data(), ffn_norm_.data() + Ld, h, T, D, eps, stream_);
        project(plan, h, w_gate_, Ld * F, gate_.data(), F, D);
        project(plan, h, w_up_, Ld * F, up_.data(), F, D);
        ly::swiglu(gate_.data(), up_.data(), a, std::size_t(T) * F, stream_);
        project(plan, a, w_down_, Ld * F, y_.data(), D, F);
        all_reduce(y_.data(), std::size_t(T) * D);  // chapter 10: each rank's share of the FFN's columns
        ly::add(x_.data(), y_.data(), std::size_t(T) * D, stream_);
    }
    // the logits of each sequence's last row (a decode batch: every row), or of the rows listed
    if (!logit_rows_host_.empty()) {
        const int R = int(logit_rows_host_.size());
        ly::embedding(logit_rows_.data(), x_.data(), x_last_.data(), R, D, T, stream_);  // a gather of rows of x
        final_logits(x_last_.data(), R);
    } else if (T == S) {
        final_logits(x_.data(), S);
    } else {
        ly::gather_last_rows(x_.data(), batch_.q_start, batch_.q_len, x_last_.data(), S, D, stream_);
        final_logits(x_last_.data(), S);
    }
}
// [forward_pass]
// (instantiated here for both weight types: batch.cpp's decode() runs them too)
template void Model::forward_pass<float>(const Plan& plan);
template void Model::forward_pass<bf16>(const Plan& plan);

/// logits [rows, V] = RMSNorm(x_last) * final_norm  lm_head^T (the embedding when tied), by GEMV,
/// at most chapter 03's batch of rows per launch (a verify pass brings k + 1 rows per sequence).
void Model::final_logits(const float* x_last, int rows) {
    const ModelConfig& c = config_;
    const int D = c.d_model, V = c.vocab;
    const DeviceMatrix& head = c.tied_embeddings ? embed_ : lm_head_;
    // split across ranks (chapter 10): this rank's rows of the vocabulary, then every rank's
    const int tp = options_.parallel.ranks;
    float* logits = tp > 1 ? local_logits_.data() : logits_.data();
    if (options_.weights == DType::fp32)
        ly::rmsnorm(x_last, final_norm_.data(), h_.data(), rows, D, float(c.norm_eps), stream_);
    else
        ly::rmsnorm(x_last, final_norm_.data(), h16_.data(), rows, D, float(c.norm_eps), stream_);
    for (int r0 = 0; r0 < rows; r0 += kernels::gemv::kMaxBatch) {
        const int n = std::min(kernels::gemv::kMaxBatch, rows - r0);
        const std::size_t in = std::size_t(r0) * D, out = std::size_t(r0) * V;
        const char* version = n == 1 ? "v3" : "v5";
        if (options_.weights == DType::fp32)
            kernels::gemv::gemv(version, head.f32.data(), h_.data() + in, logits + out, kernels::gemv::Shape{n, V, D},
                                stream_);
        else if (!lm_head_.packed.empty())  // quantized (tied or not): the GEMV on the packed head
            project_packed(Plan{.projections = Plan::Projections::gemv, .tokens = n}, h16_.data() + in,
                           lm_head_.packed.front(), logits + out);
        else
            kernels::gemv::gemv(version, head.b16.data(), h16_.data() + in, logits + out, kernels::gemv::Shape{n, V, D},
                                stream_);
    }
    if (tp > 1) {
        options_.parallel.collectives->all_gather(options_.parallel.rank, local_logits_.data(), gathered_.data(),
                                                  std::size_t(rows) * V);
        ++communication_.calls;
        communication_.bytes += double(rows) * V * sizeof(float);
        ly::interleave_shards(gathered_.data(), logits_.data(), tp, rows, V);
    }
    rows_ = rows;
}

}  // namespace pd::model
