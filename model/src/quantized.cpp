/// @file quantized.cpp
/// @brief Chapter 08's weights in the model (model.hpp): the linear layers quantized on the device
/// at load, and the projections that read them.
#include "pd/model/model.hpp"

#include "gemm/gemm.hpp"
#include "quant/quant.hpp"

#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace pd::model {

namespace {
using bf16 = __nv_bfloat16;
}  // namespace

// [quantize_weights]
/// Chapter 08: each layer's slice of every linear layer, and the LM head (the embedding when
/// tied), quantized on the device from the bf16 values; the bf16 matrices are then freed (the
/// embedding table stays: its rows are looked up).
void Model::quantize_weights() {
    namespace qt = kernels::quant;
    const qt::Format f = qt::format_named(options_.quant.format);
    const auto quantize = [&](DeviceMatrix& m, int layers, int N, int K, bool keep) {
        m.packed.clear();
        for (int l = 0; l < layers; ++l)
            m.packed.push_back(
                qt::quantize_device(m.b16.data() + std::size_t(l) * N * K, N, {f, K, options_.quant.group, false}));
        if (!keep) m.b16 = DeviceBuffer<bf16>();
    };
    const ModelConfig& c = config_;
    const int L = c.layers, D = c.d_model, F = c.ffn_dim, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
    quantize(wq_, L, q, D, false);
    quantize(wk_, L, kv, D, false);
    quantize(wv_, L, kv, D, false);
    quantize(wo_, L, D, q, false);
    quantize(w_gate_, L, F, D, false);
    quantize(w_up_, L, F, D, false);
    quantize(w_down_, L, D, F, false);
    if (c.tied_embeddings) {  // the head's packed copy beside the embedding table
        lm_head_.b16 = DeviceBuffer<bf16>();
        lm_head_.packed.clear();
        lm_head_.packed.push_back(qt::quantize_device(embed_.b16.data(), c.vocab, {f, D, options_.quant.group, false}));
    } else {
        quantize(lm_head_, 1, c.vocab, D, false);
    }
}
// [quantize_weights]

// [project_packed]
/// Y [T, N] = X [T, K] W^T with W quantized (chapter 08): a decode batch, or any pass of up to 16
/// tokens, runs the quantized GEMV on the packed bytes, 16 tokens at a time; a larger pass
/// dequantizes W to bf16 and runs chapter 02's GEMM on the tensor cores (its time is the math:
/// fewer bytes gain it nothing).
void Model::project_packed(const Plan& plan, const bf16* x, const kernels::quant::DeviceQuantizedMatrix& w, float* y) {
    namespace qt = kernels::quant;
    const int T = plan.tokens, N = w.n, K = w.layout.k;
    if (plan.projections == Plan::Projections::gemv || T <= qt::kMaxQuantBatch) {
        for (int t0 = 0; t0 < T; t0 += qt::kMaxQuantBatch)
            qt::gemv(w, x + std::size_t(t0) * K, y + std::size_t(t0) * N,
                     qt::Shape{std::min(qt::kMaxQuantBatch, T - t0), N, K}, stream_);
    } else {
        qt::dequantize_device(w, dequant_.data(), stream_);
        gemm_bf16(x, dequant_.data(), y, kernels::gemm::Shape{T, N, K});
    }
}
// [project_packed]

}  // namespace pd::model
