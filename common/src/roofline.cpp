// The roofline model and the prefill/decode calculator (see roofline.hpp for the formulas).
#include "pd/roofline.hpp"

#include "pd/report.hpp"
#include "pd/step_cost.hpp"

#include <CLI/CLI.hpp>

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

const char* to_string(Bound b) {
    return b == Bound::Memory ? "memory-bound" : "compute-bound";
}

const std::vector<GpuSpec>& gpu_presets() {
    // Vendor datasheet figures. Tensor rates are dense: where a datasheet quotes BF16/FP16 "with
    // sparsity" (twice the dense rate), the dense figure NVIDIA publishes is used (989.4 for the
    // H100 and H200, whose datasheets print 1,979 with sparsity).
    // The architecture fields (SMs, boost clock, L2, compute capability, per-SM limits) come from
    // the GPUs' whitepapers (NVIDIA H100 Tensor Core GPU Architecture: 132 SMs in the SXM5 part,
    // 50 MB of L2; NVIDIA A100 Tensor Core GPU Architecture: 108 SMs, 40 MB; NVIDIA Ada GPU
    // Architecture: L4 58 SMs, 48 MB, RTX 4090 128 SMs, 72 MB; NVIDIA Turing GPU Architecture:
    // T4 40 SMs, 4 MB) and the CUDA C++ Programming Guide's table of compute capabilities
    // (threads, blocks, registers and shared memory per SM); each boost clock is the one that
    // gives the datasheet's FP32 rate (SMs x FP32 lanes per SM x 2 x clock).
    static const std::vector<GpuSpec> presets = {
        {"H100-SXM", 3350, 989.4, 66.9, 80,
         "NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (BF16 1,979 TFLOPS with sparsity)", 132, 1.98, 50, 90,
         2048, 32, 65536, 228},
        {"H200", 4800, 989.4, 66.9, 141,
         "NVIDIA H200 Tensor Core GPU datasheet, SXM column (BF16 1,979 TFLOPS with sparsity)", 132, 1.98, 50, 90, 2048,
         32, 65536, 228},
        {"A100-80GB", 2039, 312, 19.5, 80,
         "NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column (BF16 312 TFLOPS dense)", 108, 1.41, 40, 80, 2048, 32,
         65536, 164},
        {"L4", 300, 121, 30.3, 24, "NVIDIA L4 Tensor Core GPU datasheet (BF16 242 TFLOPS with sparsity)", 58, 2.04, 48,
         89, 1536, 24, 65536, 100},
        {"T4", 320, 65, 8.1, 16, "NVIDIA T4 datasheet (no BF16: mixed-precision FP16/FP32 65 TFLOPS is used)", 40, 1.59,
         4, 75, 1024, 16, 65536, 64},
        {"RTX-4090", 1008, 165.2, 82.6, 24,
         "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix: FP16/BF16 tensor with FP32 "
         "accumulate 165.2 TFLOPS dense",
         128, 2.52, 72, 89, 1536, 24, 65536, 100},
    };
    return presets;
}

KernelModel model_kernel(const GpuSpec& gpu, double dram_bytes, double flops, bool tensor, double shared_wavefronts,
                         double launches) {
    KernelModel m;
    m.memory_s = dram_bytes / (kModelBandwidthFraction * gpu.bandwidth_gbps * 1e9);
    m.compute_s = tensor ? flops / (kModelTensorFraction * gpu.tensor_tflops * 1e12)
                         : flops / (kModelSimtFraction * gpu.fp32_tflops * 1e12);
    if (gpu.sm_count > 0 && gpu.boost_ghz > 0) m.shared_s = shared_wavefronts / (gpu.sm_count * gpu.boost_ghz * 1e9);
    m.launch_s = launches * kModelLaunchSeconds;
    const double busy = std::max({m.memory_s, m.compute_s, m.shared_s});
    m.time_s = busy + m.launch_s;
    m.bound = m.launch_s > busy     ? "launch"
              : busy == m.memory_s  ? "memory"
              : busy == m.compute_s ? "compute"
                                    : "shared memory";
    return m;
}

Occupancy occupancy(const GpuSpec& gpu, int threads, int registers, double shared_bytes) {
    Occupancy o;
    if (threads < 1) return o;
    const int warps = (threads + 31) / 32, max_warps = gpu.max_threads_per_sm / 32;
    int blocks = gpu.max_blocks_per_sm;
    o.limit = "blocks";
    const auto limit = [&](int n, const char* what) {
        if (n < blocks) {
            blocks = n;
            o.limit = what;
        }
    };
    limit(max_warps / warps, "threads");
    if (registers > 0) {
        const int per_warp = ((registers * 32 + 255) / 256) * 256;  // allocated per warp, 256 at a time
        limit(gpu.registers_per_sm / (per_warp * warps), "registers");
    }
    if (shared_bytes > 0) {
        const double reserved = gpu.compute_capability >= 80 ? 1024 : 0;
        limit(int(gpu.shared_per_sm_kib * 1024.0 / (shared_bytes + reserved)), "shared memory");
    }
    o.blocks_per_sm = std::max(blocks, 0);
    o.fraction = double(o.blocks_per_sm * warps) / max_warps;
    return o;
}

std::optional<GpuSpec> find_gpu(std::string_view name) {
    for (const GpuSpec& g : gpu_presets())
        if (g.name == name) return g;
    return std::nullopt;
}

std::vector<std::string> gpu_names() {
    std::vector<std::string> names;
    for (const GpuSpec& g : gpu_presets()) names.push_back(g.name);
    return names;
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

Machine machine_from(const GpuSpec& spec, int gpus) {
    if (gpus < 1) throw std::invalid_argument("gpus must be >= 1, got " + std::to_string(gpus));
    Machine m;
    m.name = gpus == 1 ? spec.name : std::to_string(gpus) + " x " + spec.name;
    m.peak_flops_per_s = spec.tensor_tflops * 1e12 * gpus;
    m.fp32_flops_per_s = spec.fp32_tflops * 1e12 * gpus;
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
    if (w.context && !w.model)
        throw std::invalid_argument("context needs a model: the bytes of a cached token come from its shape");
    if (w.context && (*w.context < 1 || *w.context > kMaxContext))
        throw std::invalid_argument("context must be in [1, " + std::to_string(kMaxContext) + "], got " +
                                    std::to_string(*w.context));

    Analysis a;
    a.ridge = ridge_point(machine.peak_flops_per_s, machine.bytes_per_s);
    if (machine.fp32_flops_per_s > 0) a.ridge_fp32 = ridge_point(machine.fp32_flops_per_s, machine.bytes_per_s);
    const double B = double(w.batch), S = double(w.prompt_tokens), P = w.params;
    a.weight_bytes = P * w.bytes_per_param;

    // Dense layers: each token does one multiply-add (2 FLOPs) per weight; a pass over the
    // batch reads every weight once. With a model, its attention and its cache on top.
    StepCostShape shape = parameter_cost_shape(P, w.bytes_per_param);
    a.terms.push_back("dense layers: 2 FLOPs per parameter per token, weights read once per pass");
    if (w.model) {
        const ModelConfig& m = *w.model;
        const StepCostShape exact = step_cost_shape(m, w.bytes_per_param, w.kv_bytes_per_element, w.bytes_per_param);
        shape.attention_flops_per_pair = exact.attention_flops_per_pair;
        shape.kv_bytes_per_position = exact.kv_bytes_per_position;
        a.context = w.context.value_or(w.prompt_tokens);
        a.kv_bytes_per_token = exact.kv_bytes_per_position;
        a.kv_bytes_per_sequence = a.kv_bytes_per_token * double(a.context);
        a.kv_bytes_total = a.kv_bytes_per_sequence * B;
        a.terms.push_back("attention: causal S^2 term in prefill, S_k cached tokens per decode step");
        a.terms.push_back("KV cache: written by prefill (S tokens), read by every decode step (S_k tokens)");
        // Capacity: the weights stay resident, every sequence needs its own cache beside them.
        if (machine.memory_bytes > 0) {
            const double free_bytes = machine.memory_bytes - a.weight_bytes;
            a.max_sequences =
                free_bytes > 0 ? static_cast<long long>(std::floor(free_bytes / a.kv_bytes_per_sequence)) : 0;
        }
    }
    // Prefill: B prompts of S tokens from position 0 (causal attention over the prompt, its cache
    // written once). Decode: one token per sequence after S_k - 1 cached ones (it attends to S_k
    // positions, reading every one of them).
    const StepItem prefill{.tokens = S, .context = 0, .count = B};
    const StepItem decode{.tokens = 1, .context = w.model ? double(a.context) - 1 : 0, .count = B};
    const StepCost pc = step_cost(shape, std::span(&prefill, 1)), dc = step_cost(shape, std::span(&decode, 1));
    const double prefill_flops = pc.flops, prefill_bytes = pc.bytes, decode_flops = dc.flops, decode_bytes = dc.bytes;
    a.prefill = place(prefill_flops, prefill_bytes, machine, a.ridge);
    a.decode = place(decode_flops, decode_bytes, machine, a.ridge);
    a.critical_batch = a.ridge * w.bytes_per_param / 2;  // 2*B/b = ridge
    return a;
}

void add_calculator_options(CLI::App& app, CalculatorOptions& o) {
    std::vector<std::string> gpus = gpu_names(), models = {"none"};
    gpus.push_back("measured");
    for (const ModelConfig& m : model_presets()) models.push_back(m.name);
    auto* params = app.add_option("--params", o.params, "Model parameters P (default 7e9, or the --model's)")
                       ->check(CLI::Range(1e3, 1e14));
    app.add_option("--bytes-per-param", o.bytes_per_param, "Bytes per weight b (2 = bf16, 1 = fp8, 0.5 = int4)")
        ->check(CLI::Range(0.125, 8.0))
        ->capture_default_str();
    app.add_option("--kv-bytes", o.kv_bytes, "Bytes per cached K/V element (default: --bytes-per-param)")
        ->check(CLI::Range(0.125, 8.0));
    app.add_option("--batch", o.batch, "Sequences served together B")
        ->check(CLI::Range(1LL, 1000000LL))
        ->capture_default_str();
    app.add_option("--prompt-tokens", o.prompt_tokens, "Prompt length S in tokens")
        ->check(CLI::Range(1LL, 100000000LL))
        ->capture_default_str();
    app.add_option("--gpu", o.gpu, "GPU preset for the calculator, or 'measured' (this run's ceilings)")
        ->check(CLI::IsMember(gpus))
        ->capture_default_str();
    app.add_option("--gpus", o.gpus, "GPUs with an ideal tensor-parallel split")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    app.add_option("--model", o.model, "Model preset: adds attention FLOPs and the KV cache")
        ->check(CLI::IsMember(models))
        ->excludes(params)
        ->capture_default_str();
    app.add_option("--context", o.context,
                   "Cached tokens S_k each decode step attends to and reads (default: --prompt-tokens); "
                   "needs a --model")
        ->check(CLI::Range(1LL, kMaxContext));
}

void check_calculator_options(const CalculatorOptions& o) {
    if (o.kv_bytes && !find_model(o.model))
        throw std::invalid_argument("--kv-bytes needs a --model: without one the calculator counts no KV cache");
    if (o.context && !find_model(o.model))
        throw std::invalid_argument("--context " + std::to_string(*o.context) +
                                    " needs a --model: the bytes of a cached token come from the model's layers, KV "
                                    "heads and head dimension");
}

Workload workload(const CalculatorOptions& o) {
    check_calculator_options(o);
    const std::optional<ModelConfig> model = find_model(o.model);
    return {.params = o.params ? *o.params : (model ? model->parameter_count() : 7e9),
            .bytes_per_param = o.bytes_per_param,
            .batch = o.batch,
            .prompt_tokens = o.prompt_tokens,
            .model = model,
            .kv_bytes_per_element = o.kv_bytes.value_or(o.bytes_per_param),
            .context = o.context};
}

namespace {

std::string format_time(double s) {
    if (s >= 1) return fmt("%.3g s", s);
    if (s >= 1e-3) return fmt("%.3g ms", s * 1e3);
    return fmt("%.3g us", s * 1e6);
}

}  // namespace

std::string describe(const Workload& w, const Machine& m, const std::string& machine_source, const Analysis& a) {
    std::ostringstream out;
    out << "workload: P = " << fmt("%.3g", w.params) << " parameters x " << fmt("%.3g", w.bytes_per_param)
        << " bytes = " << fmt("%.2f GB", a.weight_bytes / 1e9) << " of weights, batch B = " << w.batch
        << ", prompt S = " << w.prompt_tokens << " tokens";
    if (w.model) out << ", decode context S_k = " << a.context << " tokens, model " << w.model->name;
    out << "\n";
    out << "machine:  " << m.name << ": " << fmt("%.0f GB/s", m.bytes_per_s / 1e9) << ", "
        << fmt("%.1f TFLOP/s", m.peak_flops_per_s / 1e12) << " (" << machine_source << ")\n";
    if (m.gpus > 1) out << "          ideal " << m.gpus << "-way tensor parallelism: rates add up, no communication\n";
    out << "ridge point: " << fmt("%.1f", a.ridge) << " FLOP/byte (peak FLOP/s / bandwidth)";
    if (a.ridge_fp32 > 0)
        out << "; " << fmt("%.1f", a.ridge_fp32) << " for FP32 on the SIMT units ("
            << fmt("%.1f TFLOP/s", m.fp32_flops_per_s / 1e12) << ")";
    out << "\n";
    out << "counted: ";
    for (std::size_t i = 0; i < a.terms.size(); ++i) out << (i ? "; " : "") << a.terms[i];
    out << "\n\n";
    Table t({"phase", "FLOPs", "bytes", "FLOP/byte", "bound", "floor"});
    t.add_row({"prefill", format_flops(a.prefill.flops), fmt("%.3g GB", a.prefill.bytes / 1e9),
               fmt("%.4g", a.prefill.intensity), to_string(a.prefill.bound),
               format_time(a.prefill.floor_s) + " (TTFT)"});
    t.add_row({"decode", format_flops(a.decode.flops), fmt("%.3g GB", a.decode.bytes / 1e9),
               fmt("%.4g", a.decode.intensity), to_string(a.decode.bound),
               format_time(a.decode.floor_s) + " per token (ITL)"});
    out << t.render() << "\n";
    out << "decode reads every weight for " << w.batch
        << " token(s) per step: " << fmt("%.0f", double(w.batch) / a.decode.floor_s)
        << " tokens/s at best; it turns compute-bound only at B >= " << fmt("%.0f", std::ceil(a.critical_batch))
        << " (2*B/b = ridge, weights only)\n";
    if (w.model) {
        out << "KV cache: " << format_bytes(a.kv_bytes_per_token) << " per token (2 x " << w.model->layers
            << " layers x " << w.model->kv_heads << " KV heads x " << w.model->head_dim << " x "
            << fmt("%.3g", w.kv_bytes_per_element) << " bytes); at S_k = " << a.context << " tokens "
            << fmt("%.2f GB", a.kv_bytes_per_sequence / 1e9) << " per sequence, "
            << fmt("%.2f GB", a.kv_bytes_total / 1e9) << " for the batch (B = " << w.batch << ")\n";
        out << "decode reads the batch's KV cache every step: " << fmt("%.2f GB", a.kv_bytes_total / 1e9) << ", "
            << fmt("%.1f%%", 100 * a.kv_bytes_total / a.decode.bytes) << " of the step's "
            << fmt("%.2f GB", a.decode.bytes / 1e9) << "\n";
    }
    if (m.memory_bytes > 0) {
        const double need = a.weight_bytes + a.kv_bytes_total;
        out << "memory: " << fmt("%.1f GB", need / 1e9) << " of weights" << (w.model ? " and KV cache" : "") << " on "
            << fmt("%.0f GB", m.memory_bytes / 1e9)
            << (need <= m.memory_bytes ? "  (fits)\n"
                : w.model ? "  -- does NOT fit: more GPUs, fewer bytes per parameter or a smaller batch or context\n"
                          : "  -- does NOT fit: more GPUs or fewer bytes per parameter\n");
    }
    if (w.model) {
        out << "capacity: ";
        if (!a.max_sequences)
            out << "unknown (the machine's memory is not known)\n";
        else if (a.weight_bytes >= m.memory_bytes)
            out << "0 sequences: the weights alone (" << fmt("%.1f GB", a.weight_bytes / 1e9) << ") do not fit in "
                << fmt("%.0f GB", m.memory_bytes / 1e9) << "\n";
        else
            out << *a.max_sequences << " sequence(s) of " << a.context << " tokens fit beside the weights ("
                << fmt("%.1f GB", (m.memory_bytes - a.weight_bytes) / 1e9) << " free / "
                << fmt("%.2f GB", a.kv_bytes_per_sequence / 1e9) << " per sequence)\n";
    }
    return out.str();
}

nlohmann::json to_json(const Workload& w, const Machine& m, const std::string& source, const Analysis& a) {
    const auto phase = [](const PhaseCost& c) {
        return nlohmann::json{{"flops", c.flops},
                              {"bytes", c.bytes},
                              {"arithmetic_intensity", c.intensity},
                              {"bound", to_string(c.bound)},
                              {"floor_s", c.floor_s}};
    };
    nlohmann::json prefill = phase(a.prefill), decode = phase(a.decode);
    prefill["predicted_ms"] = a.prefill.floor_s * 1e3;
    decode["predicted_ms_per_token"] = a.decode.floor_s * 1e3;
    decode["tokens_per_s"] = double(w.batch) / a.decode.floor_s;
    const auto known = [&](double v) { return w.model ? nlohmann::json(v) : nlohmann::json(nullptr); };
    const nlohmann::json kv_cache = {
        {"context", w.model ? nlohmann::json(a.context) : nlohmann::json(nullptr)},
        {"bytes_per_element", known(w.kv_bytes_per_element)},
        {"bytes_per_token", known(a.kv_bytes_per_token)},
        {"bytes_per_sequence", known(a.kv_bytes_per_sequence)},
        {"bytes_total", known(a.kv_bytes_total)},
        {"decode_share", known(a.kv_bytes_total / a.decode.bytes)},
        {"max_sequences", a.max_sequences ? nlohmann::json(*a.max_sequences) : nlohmann::json(nullptr)}};
    return {
        {"params", w.params},
        {"bytes_per_param", w.bytes_per_param},
        {"batch", w.batch},
        {"prompt_tokens", w.prompt_tokens},
        {"model", w.model ? nlohmann::json(w.model->name) : nlohmann::json(nullptr)},
        {"machine",
         {{"name", m.name},
          {"gpus", m.gpus},
          {"bandwidth_gbps", m.bytes_per_s / 1e9},
          {"peak_tflops", m.peak_flops_per_s / 1e12},
          {"fp32_tflops", m.fp32_flops_per_s > 0 ? nlohmann::json(m.fp32_flops_per_s / 1e12) : nlohmann::json(nullptr)},
          {"memory_gb", m.memory_bytes > 0 ? nlohmann::json(m.memory_bytes / 1e9) : nlohmann::json(nullptr)},
          {"source", source}}},
        {"ridge_point", a.ridge},
        {"ridge_point_fp32", a.ridge_fp32 > 0 ? nlohmann::json(a.ridge_fp32) : nlohmann::json(nullptr)},
        {"critical_decode_batch", a.critical_batch},
        {"weight_bytes", a.weight_bytes},
        {"kv_cache", kv_cache},
        {"terms", a.terms},
        {"prefill", prefill},
        {"decode", decode}};
}

}  // namespace pd::roofline
