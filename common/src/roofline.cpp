// The roofline model and the prefill/decode calculator (see roofline.hpp for the formulas).
#include "pd/roofline.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace pd::roofline {

namespace {

void require_positive(double v, const char* name) {
    if (!(v > 0) || !std::isfinite(v)) {
        std::ostringstream msg;
        msg << name << " must be a positive finite number, got " << v;
        throw std::invalid_argument(msg.str());
    }
}

}  // namespace

double arithmetic_intensity(double flops, double bytes) {
    require_positive(bytes, "bytes");
    if (flops < 0) throw std::invalid_argument("flops must be >= 0");
    return flops / bytes;
}

double ridge_point(double peak_flops_per_s, double bytes_per_s) {
    require_positive(peak_flops_per_s, "peak FLOP/s");
    require_positive(bytes_per_s, "bandwidth");
    return peak_flops_per_s / bytes_per_s;
}

double attainable_flops_per_s(double intensity, double peak_flops_per_s, double bytes_per_s) {
    return std::min(peak_flops_per_s, intensity * bytes_per_s);
}

double floor_time_s(double flops, double bytes, double peak_flops_per_s, double bytes_per_s) {
    require_positive(peak_flops_per_s, "peak FLOP/s");
    require_positive(bytes_per_s, "bandwidth");
    return std::max(flops / peak_flops_per_s, bytes / bytes_per_s);
}

double roofline_fraction(double floor_s, double measured_s) {
    require_positive(measured_s, "measured time");
    return floor_s / measured_s;
}

Bound bound_at(double intensity, double ridge) {
    return intensity < ridge ? Bound::Memory : Bound::Compute;
}

const char* to_string(Bound b) { return b == Bound::Memory ? "memory-bound" : "compute-bound"; }

const std::vector<GpuSpec>& gpu_presets() {
    // Vendor datasheet figures. Tensor rates are dense: datasheets quote BF16/FP16 "with
    // sparsity", twice the dense rate, and those are halved here.
    static const std::vector<GpuSpec> presets = {
        {"H100-SXM", 3350, 989.4, 66.9, 80,
         "NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (BF16 1,979 TFLOPS with sparsity)"},
        {"H200", 4800, 989.4, 66.9, 141,
         "NVIDIA H200 Tensor Core GPU datasheet, SXM column (BF16 1,979 TFLOPS with sparsity)"},
        {"A100-80GB", 2039, 312, 19.5, 80,
         "NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column (BF16 312 TFLOPS dense)"},
        {"L4", 300, 121, 30.3, 24,
         "NVIDIA L4 Tensor Core GPU datasheet (BF16 242 TFLOPS with sparsity)"},
        {"T4", 320, 65, 8.1, 16,
         "NVIDIA T4 datasheet (no BF16: mixed-precision FP16/FP32 65 TFLOPS is used)"},
        {"RTX-4090", 1008, 165.2, 82.6, 24,
         "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix: FP16/BF16 tensor with FP32 "
         "accumulate 165.2 TFLOPS dense"},
    };
    return presets;
}

std::optional<GpuSpec> find_gpu(std::string_view name) {
    for (const GpuSpec& g : gpu_presets())
        if (g.name == name) return g;
    return std::nullopt;
}

std::optional<GpuSpec> find_gpu_for_device(std::string_view device_name) {
    const auto word_at = [&](std::size_t pos, std::size_t len) {
        const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
        return (pos == 0 || !is_word(device_name[pos - 1])) &&
               (pos + len == device_name.size() || !is_word(device_name[pos + len]));
    };
    for (const GpuSpec& g : gpu_presets()) {
        std::string_view key(g.name);
        key = key.substr(0, key.find('-'));
        if (key == "RTX") key = std::string_view(g.name).substr(4);
        if (g.name.find("SXM") != std::string::npos && device_name.find("PCIe") != std::string_view::npos) continue;
        for (std::size_t pos = device_name.find(key); pos != std::string_view::npos;
             pos = device_name.find(key, pos + 1))
            if (word_at(pos, key.size())) return g;
    }
    return std::nullopt;
}

double ModelConfig::parameter_count() const {
    const double h = hidden, q = double(heads) * head_dim, kv = double(kv_heads) * head_dim;
    const double attention = h * q + 2 * h * kv + q * h;  // Wq, Wk, Wv, Wo
    const double mlp = 3 * h * ffn;                       // gate, up, down
    const double norms = 2 * h;                           // two RMSNorm weight vectors
    const double embeddings = double(vocab) * h * (tied_embeddings ? 1 : 2);
    return layers * (attention + mlp + norms) + embeddings + h;  // + final norm
}

double ModelConfig::kv_bytes_per_token(double bytes_per_element) const {
    return 2.0 * layers * kv_heads * head_dim * bytes_per_element;
}

const std::vector<ModelConfig>& model_presets() {
    // Shapes from each model's published config.json (hidden_size, num_hidden_layers,
    // num_attention_heads, num_key_value_heads, intermediate_size, vocab_size).
    static const std::vector<ModelConfig> presets = {
        {"llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, false, "Meta Llama 3 8B config.json"},
        {"llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, false, "Meta Llama 3 70B config.json"},
        {"llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, false, "Meta Llama 2 7B config.json"},
    };
    return presets;
}

std::optional<ModelConfig> find_model(std::string_view name) {
    for (const ModelConfig& m : model_presets())
        if (m.name == name) return m;
    return std::nullopt;
}

Machine machine_from(const GpuSpec& spec, int gpus) {
    if (gpus < 1) throw std::invalid_argument("gpus must be >= 1, got " + std::to_string(gpus));
    Machine m;
    m.name = gpus == 1 ? spec.name : std::to_string(gpus) + " x " + spec.name;
    m.peak_flops_per_s = spec.tensor_tflops * 1e12 * gpus;
    m.bytes_per_s = spec.bandwidth_gbps * 1e9 * gpus;
    m.memory_bytes = spec.memory_gb * 1e9 * gpus;
    m.gpus = gpus;
    return m;
}

namespace {

PhaseCost place(double flops, double bytes, const Machine& m, double ridge) {
    PhaseCost c;
    c.flops = flops;
    c.bytes = bytes;
    c.intensity = arithmetic_intensity(flops, bytes);
    c.bound = bound_at(c.intensity, ridge);
    c.floor_s = floor_time_s(flops, bytes, m.peak_flops_per_s, m.bytes_per_s);
    return c;
}

}  // namespace

Analysis analyze(const Workload& w, const Machine& machine) {
    require_positive(w.params, "params");
    require_positive(w.bytes_per_param, "bytes_per_param");
    if (w.batch < 1) throw std::invalid_argument("batch must be >= 1, got " + std::to_string(w.batch));
    if (w.prompt_tokens < 1)
        throw std::invalid_argument("prompt_tokens must be >= 1, got " + std::to_string(w.prompt_tokens));
    if (w.model) require_positive(w.kv_bytes_per_element, "kv_bytes_per_element");

    Analysis a;
    a.ridge = ridge_point(machine.peak_flops_per_s, machine.bytes_per_s);
    const double B = double(w.batch), S = double(w.prompt_tokens), P = w.params;
    a.weight_bytes = P * w.bytes_per_param;

    // Dense layers: each token does one multiply-add (2 FLOPs) per weight; a pass over the
    // batch reads every weight once.
    double prefill_flops = 2 * P * B * S, prefill_bytes = a.weight_bytes;
    double decode_flops = 2 * P * B, decode_bytes = a.weight_bytes;
    a.terms.push_back("dense layers: 2 FLOPs per parameter per token, weights read once per pass");

    if (w.model) {
        const ModelConfig& m = *w.model;
        const double L = m.layers, H = m.heads, d = m.head_dim;
        a.kv_bytes_per_token = m.kv_bytes_per_token(w.kv_bytes_per_element);
        a.kv_bytes_total = a.kv_bytes_per_token * B * S;
        // Causal attention over the prompt: Q K^T and P V each cost 2*S*S*d per head, and the
        // causal mask keeps about half of the S x S scores.
        prefill_flops += 2 * L * B * H * d * S * S;
        prefill_bytes += a.kv_bytes_total;  // the cache is written once
        // One decode step attends to S cached tokens: 4*S*d per head, reading the whole cache.
        decode_flops += 4 * L * B * H * d * S;
        decode_bytes += a.kv_bytes_total;
        a.terms.push_back("attention: causal S^2 term in prefill, S cached tokens per decode step");
        a.terms.push_back("KV cache: written by prefill, read by every decode step");
    }
    a.prefill = place(prefill_flops, prefill_bytes, machine, a.ridge);
    a.decode = place(decode_flops, decode_bytes, machine, a.ridge);
    a.critical_batch = a.ridge * w.bytes_per_param / 2;  // 2*B/b = ridge
    return a;
}

}  // namespace pd::roofline
