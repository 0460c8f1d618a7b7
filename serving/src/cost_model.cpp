// The roofline cost model of a serving step (see cost_model.hpp for the formulas and sources).
#include "pd/serving/cost_model.hpp"

#include "pd/philox.hpp"
#include "pd/serving/speculative.hpp"

#include "pd/report.hpp"

#include <vector>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

[[noreturn]] void reject(const std::string& field, const std::string& why, double value) {
    throw std::invalid_argument("CostModelConfig." + field + " must be " + why + ", got " + fmt("%g", value));
}

void require_positive(double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v)) reject(field, "a positive finite number", v);
}

void require_fraction(double v, const char* field) {
    if (!(v > 0 && v <= 1)) reject(field, "in (0, 1]", v);
}

void require_non_negative(double v, const char* field) {
    if (!(v >= 0) || !std::isfinite(v)) reject(field, "a finite number >= 0", v);
}

}  // namespace

void CostModelConfig::check() const {
    model.check("CostModelConfig.model");
    if (machine.gpus < 1) reject("machine.gpus", ">= 1", machine.gpus);
    require_positive(machine.peak_flops_per_s, "machine.peak_flops_per_s");
    require_positive(machine.bytes_per_s, "machine.bytes_per_s");
    require_positive(weight_bytes_per_param, "weight_bytes_per_param");
    require_positive(kv_bytes_per_element, "kv_bytes_per_element");
    require_positive(activation_bytes_per_element, "activation_bytes_per_element");
    require_fraction(compute_efficiency, "compute_efficiency");
    require_fraction(bandwidth_efficiency, "bandwidth_efficiency");
    require_non_negative(step_overhead_s, "step_overhead_s");
    require_non_negative(launch_host_s, "launch_host_s");
    require_non_negative(kernel_gap_s, "kernel_gap_s");
    if (kernels_per_pass < 0) reject("kernels_per_pass", ">= 0 (0: pass_kernels(model))", kernels_per_pass);
    require_non_negative(allreduce_latency_s, "allreduce_latency_s");
    require_positive(allreduce_bus_bytes_per_s, "allreduce_bus_bytes_per_s");
    if (!(accept_rate >= 0 && accept_rate <= 1))
        throw std::invalid_argument("CostModelConfig.accept_rate must be in [0, 1], got " + fmt("%g", accept_rate));
}

void set_launches(CostModelConfig& c, const std::string& name) {
    const bool charged = name == "eager" || name == "graph";
    if (!charged && name != "none")
        throw std::invalid_argument("launch preset must be none, eager or graph, got '" + name + "'");
    c.launch_host_s = charged ? kLaunchHostSeconds : 0;
    c.kernel_gap_s = charged ? roofline::kModelLaunchSeconds : 0;
    c.decode_graphs = name == "graph";
}

std::string launches_name(const CostModelConfig& c) {
    for (const char* name : kLaunchPresets) {
        CostModelConfig preset = c;
        set_launches(preset, name);
        if (preset.launch_host_s == c.launch_host_s && preset.kernel_gap_s == c.kernel_gap_s &&
            preset.decode_graphs == c.decode_graphs)
            return name;
    }
    return "custom";
}

int pass_kernels(const ModelConfig& model) {
    return 17 * model.layers + 3;
}

CostModelConfig cost_model_config(const ModelConfig& model, const roofline::GpuSpec& gpu, int tp) {
    CostModelConfig c;
    c.model = model;
    c.machine = roofline::machine_from(gpu, tp);
    return c;
}

long long kv_positions(const CostModelConfig& cost) {
    const double per_token = cost.model.kv_bytes_per_token(cost.kv_bytes_per_element);
    const double weights = cost.model.parameter_count() * cost.weight_bytes_per_param;
    const double free_bytes = 0.9 * cost.machine.memory_bytes - weights;  // 10% kept for activations
    return free_bytes < per_token ? 0 : static_cast<long long>(free_bytes / per_token);
}

CostModel::CostModel(const CostModelConfig& config) : config_(config) {
    config_.check();
    // norms at the weights' width: every weight is counted at weight_bytes_per_param
    shape_ = step_cost_shape(config_.model, config_.weight_bytes_per_param, config_.kv_bytes_per_element,
                             config_.weight_bytes_per_param);
}

CostModel::Breakdown CostModel::breakdown(const Step& step) const {
    Breakdown b;
    if (step.empty()) return b;
    std::vector<StepItem> items;
    for (const BatchItem& item : step.items) {
        if (item.tokens < 1)
            throw std::invalid_argument("step item of request " + std::to_string(item.request) +
                                        ": tokens must be >= 1, got " + std::to_string(item.tokens));
        if (item.context < 0)
            throw std::invalid_argument("step item of request " + std::to_string(item.request) +
                                        ": context must be >= 0, got " + std::to_string(item.context));
        items.push_back({.tokens = double(item.tokens),
                         .context = double(item.context),
                         .emits = item.emits,
                         .logits = double(item.logits)});
    }
    // the FLOPs and bytes of the step's forward pass (pd/step_cost.hpp: the same counts as the
    // model and the calculator)
    const StepCost cost = step_cost(shape_, items);
    b.flops = cost.flops;
    b.bytes = cost.bytes;
    b.dense_flops = cost.dense_flops;
    b.attention_flops = cost.attention_flops;
    b.weight_bytes = cost.weight_bytes;
    b.kv_bytes = cost.kv_bytes;
    const ModelConfig& m = config_.model;
    double tokens = 0;
    for (const StepItem& i : items) tokens += i.tokens;

    const roofline::Machine& mc = config_.machine;
    b.compute_s = b.flops / (config_.compute_efficiency * mc.peak_flops_per_s);
    b.memory_s = b.bytes / (config_.bandwidth_efficiency * mc.bytes_per_s);
    b.overhead_s = config_.step_overhead_s;
    if (mc.gpus > 1 && config_.communication) {
        // Megatron-style tensor parallelism, 2L + 2 collectives a pass: an all-reduce of the
        // [T, D] activations after the vocabulary-split embedding, after every layer's attention
        // output projection and after its FFN's down projection (2L + 1), and an all-gather of
        // the vocabulary-split logits of the rows that emit.
        const double n = mc.gpus, bytes = config_.activation_bytes_per_element;
        double emitting = 0;
        for (const StepItem& i : items) emitting += i.emits ? i.logits : 0;
        // nccl-tests' bus bandwidth: an all-reduce of S bytes moves 2 (n - 1) / n S per GPU,
        // an all-gather of S bytes (the whole result) (n - 1) / n S
        const double message = tokens * m.d_model * bytes;
        const double allreduce =
            config_.allreduce_latency_s + 2 * (n - 1) / n * message / config_.allreduce_bus_bytes_per_s;
        const double gathered = emitting * m.vocab * bytes;
        const double allgather =
            config_.allreduce_latency_s + (n - 1) / n * gathered / config_.allreduce_bus_bytes_per_s;
        b.comm_s = (2.0 * m.layers + 1) * allreduce + (emitting > 0 ? allgather : 0);
    }
    if (config_.launch_host_s > 0 || config_.kernel_gap_s > 0) {
        // chapter 12: the GPU starts each kernel after a gap; the host launches them one by one,
        // or replays a decode step's graph with one launch; the step takes the longer of the two
        bool decode = true;
        for (const StepItem& i : items) decode = decode && i.tokens == 1 && i.context > 0;
        b.kernels = config_.kernels_per_pass > 0 ? config_.kernels_per_pass : pass_kernels(m);
        b.launches = config_.decode_graphs && decode ? 1 : b.kernels;
        const double roof = std::max(b.compute_s, b.memory_s);
        b.launch_s = std::max(roof + b.kernels * config_.kernel_gap_s, b.launches * config_.launch_host_s) - roof;
    }
    b.total_s = std::max(b.compute_s, b.memory_s) + b.launch_s + b.overhead_s + b.comm_s;
    return b;
}

double CostModel::run(const Step& step) {
    accepted_.assign(step.items.size(), 0);
    for (std::size_t i = 0; i < step.items.size(); ++i) {  // the oracle: keep while each draw falls under a
        const BatchItem& item = step.items[i];
        while (accepted_[i] < item.draft &&
               philox_uniform(0, std::uint64_t(item.request), std::uint64_t(item.context + accepted_[i])) <
                   config_.accept_rate)
            ++accepted_[i];
    }
    return breakdown(step).total_s;
}

// [speculation_limits]
std::vector<int> speculation_limits(const CostModel& cm, int k_max, int context, int max_batch) {
    const double a = cm.config().accept_rate;
    std::vector<int> limits(static_cast<std::size_t>(max_batch) + 1, 0);
    for (int B = 1; B <= max_batch; ++B) {
        const auto time = [&](int tokens) {
            Step step;
            for (int b = 0; b < B; ++b)
                step.items.push_back({.request = b, .tokens = tokens, .context = context, .logits = tokens});
            return cm.breakdown(step).total_s;
        };
        const double decode = time(1);
        double best = 1.0;  // plain decoding: one token per step
        for (int k = 1; k <= k_max; ++k) {
            const double gain = expected_tokens_per_step(a, k) / (time(k + 1) / decode);
            if (gain > best) best = gain, limits[static_cast<std::size_t>(B)] = k;
        }
    }
    return limits;
}
// [speculation_limits]

std::string CostModel::describe() const {
    const CostModelConfig& c = config_;
    const roofline::Machine& mc = c.machine;
    std::string s = "cost model: " + c.model.name + ", " + mc.name + " (tp " + std::to_string(mc.gpus) + "), " +
                    fmt("%g", c.weight_bytes_per_param) + "-byte weights, compute " +
                    fmt("%.2f", c.compute_efficiency) + " x " + fmt("%.0f TFLOP/s", mc.peak_flops_per_s / 1e12) +
                    ", memory " + fmt("%.2f", c.bandwidth_efficiency) + " x " + fmt("%.0f GB/s", mc.bytes_per_s / 1e9);
    if (mc.gpus > 1)
        s += c.communication ? ", all-reduce " + fmt("%.3g us", c.allreduce_latency_s * 1e6) + " + " +
                                   fmt("%.0f GB/s bus", c.allreduce_bus_bytes_per_s / 1e9)
                             : std::string(", ideal tensor parallelism (no communication)");
    s += ", overhead " + fmt("%.3g ms", c.step_overhead_s * 1e3) + " per step";
    if (c.launch_host_s > 0 || c.kernel_gap_s > 0)
        s += ", launches " + launches_name(c) + ": " + fmt("%.3g us", c.launch_host_s * 1e6) + " host, " +
             fmt("%.3g us", c.kernel_gap_s * 1e6) + " gap x " +
             std::to_string(c.kernels_per_pass > 0 ? c.kernels_per_pass : pass_kernels(c.model)) + " kernels" +
             (c.decode_graphs ? " (decode steps replayed)" : "");
    return s;
}

}  // namespace pd::serving
