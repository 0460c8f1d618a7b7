/// @file cost_model.hpp
/// @brief Chapter 05's roofline executor: predicts how long one serving step takes from the
/// FLOPs and bytes of its batch (chapter 00's roofline, with efficiency factors), so that large
/// models and long traces replay in milliseconds on a CPU, deterministically.
///
/// A step of T tokens (prefill chunks and decode tokens of several requests) costs what
/// pd::step_cost() counts for its forward pass:
///
/// * **dense layers**: 2 FLOPs per matrix weight per token for the T tokens (Wq, Wk, Wv, Wo,
///   gate, up, down; the embedding is a gather, not a product), plus the LM head (2 V D FLOPs)
///   for each item that emits a token; every weight the step uses is read once per step;
/// * **attention**: 4 d FLOPs per (query, key) pair per query head per layer (2 d for Q K^T,
///   2 d for P V); an item of `tokens` queries after `context` cached positions attends, causally,
///   to context + i + 1 keys for query i, so context * tokens + tokens (tokens + 1) / 2 pairs;
/// * **KV cache**: every item reads its context's K and V and writes its new tokens' K and V;
/// * **tensor parallelism** (machine.gpus > 1): 2L + 2 collectives a pass, as chapter 10's model
///   makes them: an all-reduce of the [T, D] activations after the vocabulary-split embedding and
///   two per layer (after the attention output projection and after the FFN's down projection),
///   and an all-gather of the vocabulary-split logits of the rows that emit (rows x V);
///
/// * **launches** (chapter 12, off by default): the pass's kernels, each started after a gap on
///   the GPU and, unless a decode step replays a CUDA graph, launched by the host one by one;
///
/// time = max(compute_s, memory_s) + launch_s + overhead_s + comm_s, with compute at
/// compute_efficiency x the machine's bf16 tensor rate and memory at bandwidth_efficiency x its
/// bandwidth. Not counted: activations other than the all-reduced ones, norms' and RoPE's
/// arithmetic, sampling. The model does not enforce ModelConfig::max_seq (the worked example's
/// 50,000-token prompt is longer than the llama-3-70b preset's 8,192).
#pragma once

#include "pd/model_config.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/types.hpp"
#include "pd/step_cost.hpp"

#include <string>

namespace pd::serving {

/// What the cost model predicts for: the model's shape, the machine, and how close real kernels
/// come to the machine's peaks. Every default names its source; none is chosen to make a target
/// pass. Efficiencies measured on a GPU run (chapter 00's copy ceiling, chapter 02's cuBLAS
/// ratio) replace them where available.
struct CostModelConfig {
    /// The shape (a pd::ModelConfig preset or a custom one). Checked with ModelConfig::check().
    ModelConfig model;
    /// One GPU's rates times the tensor-parallel degree (roofline::machine_from(spec, tp));
    /// machine.gpus is the tensor-parallel degree.
    roofline::Machine machine;
    /// Bytes of one weight (2 = bf16).
    double weight_bytes_per_param = 2;
    /// Bytes of one cached K or V element (2 = bf16).
    double kv_bytes_per_element = 2;
    /// Bytes of one activation element in the tensor-parallel all-reduces (2 = bf16).
    double activation_bytes_per_element = 2;
    /// Fraction of machine.peak_flops_per_s that the step's matrix products reach. Default 0.80:
    /// the Maximum Achievable Matmul FLOPS measured for BF16 on an H100 SXM, 792.1 of 989 TFLOP/s
    /// (80.1%, CUDA 12.1; stas00/ml-engineering, compute/accelerator/README.md, "Maximum
    /// Achievable Matmul FLOPS comparison table"). The best GEMM shape: an optimistic ceiling for
    /// a whole forward pass (attention kernels reach less).
    double compute_efficiency = 0.80;
    /// Fraction of machine.bytes_per_s that the step's weight and cache reads reach. Default
    /// 0.81 = 0.90 x 0.90: the course's target for a memory-bound kernel is 0.90 of a
    /// device-to-device copy (chapter 03's target for decode GEMV at B = 1), and a large copy
    /// reaches about 0.90 of the datasheet bandwidth on HBM GPUs (a lead until chapter 00's
    /// measured copy ratio is recorded for the device).
    double bandwidth_efficiency = 0.81;
    /// Fixed cost per step beyond the roofline and the launches (sampling, host scheduling),
    /// seconds. Default 0: current engines overlap the host's work for step n + 1 with the GPU's
    /// step n (TensorRT-LLM's overlap scheduler, enabled by default; SGLang v0.4's zero-overhead
    /// batch scheduler), and no published per-step figure for such an engine is used here. Set it
    /// from a measured run (real step times minus predicted ones). Kernel launches are charged
    /// apart, by the fields below.
    double step_overhead_s = 0;
    /// Chapter 12: the host's time to launch one kernel, seconds. 0 (the default) charges no
    /// launch; set_launches() sets the chapter's presets.
    double launch_host_s = 0;
    /// Chapter 12: the GPU's idle time before each kernel of a step, seconds (a graph keeps it).
    double kernel_gap_s = 0;
    /// Chapter 12: a decode-only step (every item one token, none of them a prompt) replays a
    /// CUDA graph, one launch on the host; prefill and mixed steps launch every kernel, as the
    /// model runs them.
    bool decode_graphs = false;
    /// Kernels of one forward pass; 0 (the default) counts them as the course's model launches
    /// them, pass_kernels(model).
    int kernels_per_pass = 0;
    /// Whether tensor parallelism (machine.gpus > 1) pays for its all-reduces; false models an
    /// ideal split (chapter 00's machine_from()).
    bool communication = true;
    /// Fixed latency of one collective (all-reduce or all-gather), seconds. Default 10 us:
    /// vLLM's custom all-reduce on 8 x H100, 512 B to 32 KB messages, measured at 9.3 to 11.8 us
    /// without CUDA graphs (sgl-project/sglang pull request 2904, "unit test performance in
    /// H100", its "w/o CUDA graph" column). The figure therefore includes a launch each, while
    /// launches are not charged by default: the default charges a graph-replaying engine's
    /// communication at the measured, launched latency, an upper estimate.
    double allreduce_latency_s = 10e-6;
    /// All-reduce bus bandwidth (nccl-tests "busBw"), bytes/s: an all-reduce of S bytes on n GPUs
    /// moves 2 (n - 1) / n x S at this rate. Default 480 GB/s: the peak NCCL reaches with NVLink
    /// SHARP on 8 x H100 (NVIDIA/nccl-tests issue 212, NCCL maintainer: "a peak busBw of
    /// ~480GB/s (algbw ~275GB/s)"; NVLink 4 line rate 450 GB/s per direction).
    double allreduce_bus_bytes_per_s = 480e9;
    /// Chapter 09: the probability that a draft token is the target's choice, each independently
    /// (the oracle of chapter 09: a step keeps draft token i with probability a^i). Default 0.8,
    /// the oracle's default in ch09_speculative: a setting for the lesson, not a measurement.
    double accept_rate = 0.8;

    /// Throws std::invalid_argument naming the first field out of range ("CostModelConfig.
    /// compute_efficiency must be in (0, 1], got 0"), the model's fields included.
    void check() const;
};

/// Chapter 12's launch presets for CostModelConfig: "none" (launches not charged, the default),
/// "eager" (every kernel launched by the host) and "graph" (decode steps replayed as CUDA graphs).
inline constexpr const char* kLaunchPresets[] = {"none", "eager", "graph"};
/// The host's time per launch of the eager and graph presets: 5 us, chapter 12's --launch-us
/// (4 to 6 us measured on an RTX 5070 Ti with CUDA 13.0, susun-blog.com/blog/pegainfer-3-cuda-graph).
inline constexpr double kLaunchHostSeconds = 5e-6;
/// Sets @p c's launch fields to the preset @p name of kLaunchPresets: the host's kLaunchHostSeconds
/// per launch and the GPU's roofline::kModelLaunchSeconds (2 us) before each kernel for "eager"
/// and "graph", decode_graphs for "graph"; all 0 for "none". A GPU run of chapter 12 measures
/// both figures. Throws std::invalid_argument naming an unknown preset.
void set_launches(CostModelConfig& c, const std::string& name);
/// The preset @p c's launch fields match ("none", "eager", "graph"), or "custom".
std::string launches_name(const CostModelConfig& c);

/// Kernels the course's model launches for one decode pass of @p model with 2-byte weights and at
/// most chapter 03's batch of rows per LM-head launch: 17 per layer (two RMSNorms, the Q, K and V
/// projections, RoPE on Q and on K, the cache append, the attention, its output cast to bf16, the
/// output projection, two residual adds, gate, up, SwiGLU, down) and 3 for the pass (the embedding
/// gather, the final norm, the LM head); a decode attention split over its context adds a combine
/// per layer, not counted. A model test counts them in a captured decode step.
int pass_kernels(const ModelConfig& model);

/// The defaults for @p model on @p tp GPUs of @p gpu (roofline::machine_from(gpu, tp)).
/// @pre tp >= 1 (std::invalid_argument otherwise)
CostModelConfig cost_model_config(const ModelConfig& model, const roofline::GpuSpec& gpu, int tp);

/// Positions of K and V the machine of @p cost holds beside the weights, with 10% of its memory
/// kept for activations (chapters 05 and 11); 0 when the weights leave no room.
long long kv_positions(const CostModelConfig& cost);

/// The roofline executor: Executor::run() returns the predicted time of a step, deterministically.
class CostModel : public Executor {
public:
    /// Checks @p config (CostModelConfig::check(): std::invalid_argument naming the field).
    explicit CostModel(const CostModelConfig& config);

    /// The predicted duration of @p step in seconds: breakdown(step).total_s.
    /// Throws std::invalid_argument for an item with tokens < 1 or context < 0; an empty step
    /// costs 0.
    double run(const Step& step) override;

    /// "cost model: llama-3-70b, 8 x H100-SXM (tp 8), 2-byte weights, compute 0.80 x 7915 TFLOP/s,
    /// memory 0.81 x 26800 GB/s, all-reduce 10 us + 480 GB/s bus, overhead 0 ms per step"; with
    /// launches charged, then ", launches eager: 5 us host, 2 us gap x 1363 kernels".
    std::string describe() const override;

    /// How a step's predicted time is made.
    struct Breakdown {
        double flops = 0;            ///< dense layers, LM head and attention, all GPUs together
        double bytes = 0;            ///< weights read, KV cache read and written, all GPUs together
        double compute_s = 0;        ///< flops / (compute_efficiency x peak FLOP/s)
        double memory_s = 0;         ///< bytes / (bandwidth_efficiency x bytes/s)
        double overhead_s = 0;       ///< step_overhead_s (0 for an empty step)
        int kernels = 0;             ///< kernels of the pass (0 when launches are not charged)
        int launches = 0;            ///< of them, launched by the host (1 for a replayed graph)
        double launch_s = 0;         ///< max(roofline + kernels x gap, launches x host) - roofline
        double comm_s = 0;           ///< the tensor-parallel all-reduces (0 on one GPU)
        double total_s = 0;          ///< max(compute_s, memory_s) + launch_s + overhead_s + comm_s
        double dense_flops = 0;      ///< of flops: the layers' matrices and the LM head
        double attention_flops = 0;  ///< of flops: q . k and p v
        double weight_bytes = 0;     ///< of bytes: the weights read
        double kv_bytes = 0;         ///< of bytes: the cache read and written
    };
    /// The counts and times of @p step (same preconditions as run()).
    Breakdown breakdown(const Step& step) const;

    /// Chapter 09: the draft tokens each item of the last step kept, drawn as the oracle keeps them
    /// (accept_rate, independently, up to the first rejection; Philox draws of the request and
    /// the position, so a replay is deterministic).
    std::vector<int> accepted() const override { return accepted_; }

    /// The configuration in use.
    const CostModelConfig& config() const { return config_; }

private:
    CostModelConfig config_;
    StepCostShape shape_;        ///< the model's costs per token, per emitted token, per attended pair
    std::vector<int> accepted_;  ///< per item of the last step: its draft tokens kept
};

/// Chapter 09's rule for the scheduler (SchedulerConfig::draft_limit): for each batch of B = 0 ...
/// @p max_batch decodes at @p context cached positions, the k <= @p k_max that the cost model
/// predicts is fastest per token, E(a, k) / c_v(B, k) with E = (1 - a^(k+1)) / (1 - a) and c_v =
/// T(B verifies of k + 1 tokens) / T(B decodes); 0 where no k gains over plain decoding.
/// @param cm the cost model (its accept_rate is a)  @param k_max the most draft tokens
/// @param context the decodes' cached positions  @param max_batch the largest batch
/// @return [max_batch + 1] the limits (entry 0 unused)
std::vector<int> speculation_limits(const CostModel& cm, int k_max, int context, int max_batch);

}  // namespace pd::serving
