/// @file roofline.hpp
/// @brief The roofline model: arithmetic intensity, ridge point, floor time, fraction of the
/// roofline; GPU and model presets; and the prefill/decode calculator of chapter 00.
///
/// Units: FLOPs and bytes as plain counts, times in seconds, rates in FLOP/s and bytes/s.
/// Helpers convert to the GB/s and TFLOP/s that tables print.
#pragma once

#include "pd/model_config.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace pd::roofline {

/// FLOPs per byte moved. @pre bytes > 0
double arithmetic_intensity(double flops, double bytes);

/// The intensity at which a kernel stops being memory-bound: peak FLOP/s over peak bytes/s.
/// @pre both > 0
double ridge_point(double peak_flops_per_s, double bytes_per_s);

/// Highest FLOP/s the roofline allows at @p intensity: min(peak, intensity * bandwidth).
double attainable_flops_per_s(double intensity, double peak_flops_per_s, double bytes_per_s);

/// The shortest time a kernel can take: max(flops / peak, bytes / bandwidth), in seconds.
double floor_time_s(double flops, double bytes, double peak_flops_per_s, double bytes_per_s);

/// How close a measured time is to the floor: floor / measured, in (0, 1] for honest runs.
/// @pre measured_s > 0
double roofline_fraction(double floor_s, double measured_s);

/// Which roof limits a kernel.
enum class Bound { Memory, Compute };
/// Memory-bound when @p intensity is below @p ridge, compute-bound otherwise.
Bound bound_at(double intensity, double ridge);
/// "memory-bound" or "compute-bound".
const char* to_string(Bound b);

/// Published figures of one GPU: the leads a chapter compares its measurements with.
struct GpuSpec {
    /// Preset name, as accepted by `--gpu`.
    std::string name;
    double bandwidth_gbps;  ///< peak memory bandwidth, 1e9 bytes/s
    double tensor_tflops;   ///< dense (no sparsity) BF16 tensor-core rate, FP32 accumulate
    double fp32_tflops;     ///< FP32 non-tensor rate
    double memory_gb;       ///< device memory, 1e9 bytes
    std::string source;     ///< where the figures come from
    // The architecture, for the simulator profiler's model of a kernel's time and occupancy:
    // NVIDIA's CUDA C++ Programming Guide (compute capability table) and the GPU's whitepaper.
    int sm_count = 0;               ///< streaming multiprocessors
    double boost_ghz = 0;           ///< the boost clock of the FP32 rate: fp32 = SMs x FP32 lanes x 2 x clock
    double l2_mb = 0;               ///< L2 cache, MiB
    int compute_capability = 0;     ///< as __CUDA_ARCH__ / 10 spells it: 90, 80, 89, 75
    int max_threads_per_sm = 2048;  ///< resident threads per SM
    int max_blocks_per_sm = 32;     ///< resident blocks per SM
    int registers_per_sm = 65536;   ///< 32-bit registers per SM
    int shared_per_sm_kib = 228;    ///< shared memory per SM (the largest carve-out), KiB
};

/// What the simulator profiler's model predicts for one kernel's launches on a GPU: each
/// resource's time at its achievable rate, and the largest of them. Always a model: it is
/// printed as one and compared with a measured time when a GPU run exists.
struct KernelModel {
    double memory_s = 0;   ///< DRAM bytes / (kModelBandwidthFraction x bandwidth)
    double compute_s = 0;  ///< FLOPs / (the fraction x the peak of the units it computes on)
    double shared_s = 0;   ///< shared-memory wavefronts / (one wavefront per SM per clock)
    double launch_s = 0;   ///< launches x kModelLaunchSeconds
    double time_s = 0;     ///< max(memory, compute, shared) + launch
    std::string bound;     ///< "memory", "compute", "shared memory" or "launch": the largest term
};
/// The fraction of the datasheet bandwidth the model's memory term assumes: 0.90, the course's
/// lead for a large device-to-device copy on an HBM GPU (serving/cost_model.hpp uses the same
/// lead) until chapter 00's measured copy ratio is recorded for the device.
inline constexpr double kModelBandwidthFraction = 0.90;
/// The fraction of the tensor-core peak: 0.80, the Maximum Achievable Matmul FLOPS measured for
/// BF16 on an H100 SXM, 792.1 of 989 TFLOP/s (stas00/ml-engineering, compute/accelerator/README.md;
/// the cost model's compute_efficiency).
inline constexpr double kModelTensorFraction = 0.80;
/// The fraction of the FP32 SIMT peak: 0.90, a lead (chapter 00's FMA-chain kernel measures it).
inline constexpr double kModelSimtFraction = 0.90;
/// A launch's fixed cost in the model: 2 us, a lead for back-to-back launches in one stream
/// (replace it with a measured one; scripts/gpu-check compares the model with the GPU).
inline constexpr double kModelLaunchSeconds = 2e-6;
/// The model of @p launches launches moving @p dram_bytes, computing @p flops (on the tensor
/// cores when @p tensor, else the FP32 SIMT units) and serving @p shared_wavefronts
/// shared-memory wavefronts on @p gpu. @param gpu the preset  @param dram_bytes DRAM traffic
/// @param flops arithmetic  @param tensor tensor cores  @param shared_wavefronts shared memory
/// @param launches kernel launches
KernelModel model_kernel(const GpuSpec& gpu, double dram_bytes, double flops, bool tensor, double shared_wavefronts,
                         double launches);

/// The theoretical occupancy of a kernel on one SM: how many of its blocks fit, the resident
/// warps over the SM's maximum, and what limits it.
struct Occupancy {
    int blocks_per_sm = 0;  ///< resident blocks
    double fraction = 0;    ///< resident warps / the SM's maximum warps
    std::string limit;      ///< "registers", "shared memory", "threads" or "blocks"
};
/// The occupancy of blocks of @p threads threads using @p registers registers per thread and
/// @p shared_bytes of shared memory per block (static and dynamic) on @p gpu: registers are
/// allocated per warp in units of 256, shared memory per block with 1 KiB reserved (sm_80 and
/// later), as the CUDA Occupancy Calculator counts them.
/// @param gpu the preset  @param threads per block  @param registers per thread  @param shared_bytes per block
Occupancy occupancy(const GpuSpec& gpu, int threads, int registers, double shared_bytes);

/// The GPU presets: H100-SXM, H200, A100-80GB, L4, T4, RTX-4090.
const std::vector<GpuSpec>& gpu_presets();
/// The preset named @p name (exact, case-sensitive), if any.
std::optional<GpuSpec> find_gpu(std::string_view name);
/// The preset names, in order, for `--gpu`.
std::vector<std::string> gpu_names();

/// The preset for the device the runtime names @p device_name ("NVIDIA H200" gives H200,
/// "NVIDIA A100-SXM4-80GB" gives A100-80GB), if one matches: the part of the preset name before
/// its first '-' (the number after "RTX-") must appear in @p device_name as a whole word. A
/// PCIe card never matches an SXM preset. A lead for a kernel's compute roof, not a measurement.
std::optional<GpuSpec> find_gpu_for_device(std::string_view device_name);

/// The model shapes (pd::ModelConfig, in model_config.hpp): one list for the calculator and
/// chapter 04's model.
using pd::find_model;
using pd::model_presets;
using pd::ModelConfig;

/// The hardware a prediction is made for: one GPU's rates times an ideal N-way split.
struct Machine {
    /// The GPU's name, prefixed by "N x " for several GPUs.
    std::string name;
    double peak_flops_per_s = 0;  ///< the dense bf16 tensor rate, all GPUs together
    double fp32_flops_per_s = 0;  ///< the FP32 rate of the SIMT units, all GPUs together (0 when unknown)
    double bytes_per_s = 0;       ///< all GPUs together
    /// Number of GPUs.
    int gpus = 1;
    double memory_bytes = 0;  ///< all GPUs together (0 when unknown)
};
/// @p gpus copies of @p spec with perfect tensor parallelism (no communication cost).
Machine machine_from(const GpuSpec& spec, int gpus);

/// What is served: P parameters of b bytes, B sequences of S prompt tokens, each decode step
/// attending to S_k cached tokens.
struct Workload {
    double params = 0;                 ///< P
    double bytes_per_param = 0;        ///< b
    long long batch = 0;               ///< B
    long long prompt_tokens = 0;       ///< S
    std::optional<ModelConfig> model;  ///< adds attention FLOPs and KV-cache bytes
    double kv_bytes_per_element = 0;   ///< bytes of one cached K or V element
    /// S_k: the cached tokens of each sequence that a decode step attends to and reads
    /// (unset: S). Needs a model.
    std::optional<long long> context;
};

/// The longest decode context the calculator takes: 2^24 tokens.
inline constexpr long long kMaxContext = 1LL << 24;

/// The calculator's command-line options (chapter 00): what is served and on which GPU.
struct CalculatorOptions {
    std::optional<double> params;      ///< `--params` P (default 7e9, or the model's)
    double bytes_per_param = 2;        ///< `--bytes-per-param` b
    std::optional<double> kv_bytes;    ///< `--kv-bytes` (default: b)
    long long batch = 1;               ///< `--batch` B
    long long prompt_tokens = 2048;    ///< `--prompt-tokens` S
    std::string gpu = "H200";          ///< `--gpu`: a preset, or "measured" (this run's ceilings)
    int gpus = 1;                      ///< `--gpus`: an ideal tensor-parallel split
    std::string model = "none";        ///< `--model`: a preset adds attention and the KV cache
    std::optional<long long> context;  ///< `--context` S_k (default: S); needs a `--model`
};

/// Registers the calculator's options on @p app, each with its range (bad values exit 2).
void add_calculator_options(CLI::App& app, CalculatorOptions& o);

/// Rejects what the options' ranges cannot express: `--context` without a `--model` (the size
/// of a cached token comes from the model's shape). Throws std::invalid_argument naming the
/// option, which a chapter program reports with exit code 2.
void check_calculator_options(const CalculatorOptions& o);

/// The workload that @p o describes. Calls check_calculator_options() first.
Workload workload(const CalculatorOptions& o);

/// FLOPs, bytes and their consequences for one phase.
struct PhaseCost {
    /// Floating-point operations of the phase.
    double flops = 0;
    /// Bytes the phase moves to and from device memory.
    double bytes = 0;
    /// flops / bytes, in FLOP/byte.
    double intensity = 0;
    /// Memory-bound below the ridge point, compute-bound at or above it.
    Bound bound = Bound::Memory;
    /// max(flops / peak FLOP/s, bytes / bandwidth), in seconds.
    double floor_s = 0;
};

/// The calculator's answer for a workload on a machine.
struct Analysis {
    PhaseCost prefill;                 ///< the whole prompt of every sequence: sets TTFT
    PhaseCost decode;                  ///< one new token for every sequence: sets ITL
    double ridge = 0;                  ///< FLOP/byte: the tensor-core peak over the bandwidth
    double ridge_fp32 = 0;             ///< FLOP/byte of the SIMT units' FP32 peak (0 when unknown)
    long long context = 0;             ///< S_k, cached tokens per sequence in a decode step (0 without a model)
    double kv_bytes_per_token = 0;     ///< 2 * layers * kv_heads * head_dim * b_kv (0 without a model)
    double kv_bytes_per_sequence = 0;  ///< one sequence's cache at the context: per token * S_k
    double kv_bytes_total = 0;         ///< cache of B sequences of S_k tokens: what a decode step reads
    double weight_bytes = 0;           ///< P * b
    double critical_batch = 0;         ///< B at which weights-only decode reaches the ridge
    /// Sequences of S_k tokens whose caches fit in the machine's memory beside the weights:
    /// floor((memory - weights) / bytes per sequence), 0 when the weights alone do not fit.
    /// Empty without a model, or when the machine's memory is unknown.
    std::optional<long long> max_sequences;
    std::vector<std::string> terms;  ///< what the counts include
};

/// Counts prefill and one decode step, and places them on @p machine's roofline.
///
/// Dense layers: 2 FLOPs per parameter per token and every weight read once per pass, so
/// prefill intensity is 2*B*S/b and decode intensity 2*B/b. With a model, prefill adds
/// causal attention (2*layers*B*H*d*S*(S+1) FLOPs: S(S+1)/2 query-key pairs of 4d FLOPs per head) and the KV-cache
/// write of B*S tokens, and decode adds attention over S_k cached tokens (4*layers*B*H*d*S_k FLOPs) and reading the
/// cache of B*S_k tokens; the analysis also counts how many sequences of S_k tokens fit in
/// the machine's memory.
/// Throws std::invalid_argument naming the parameter when a value is out of range.
Analysis analyze(const Workload& w, const Machine& machine);

/// The calculator's answer as text: the workload and the machine (with @p machine_source), the
/// ridge point, a table of the two phases (FLOPs, bytes, intensity, bound, floor time), what a
/// decode step's batch buys, and with a model the KV cache (per token, per sequence, for the
/// batch, its share of a decode step's bytes), whether it all fits in memory and how many
/// sequences would.
std::string describe(const Workload& w, const Machine& machine, const std::string& machine_source, const Analysis& a);

/// The calculator's answer as JSON (chapter 00's "analysis" section): the workload, the machine,
/// the ridge point, the weight bytes, the KV cache (`kv_cache`: `context`, `bytes_per_token`,
/// `bytes_per_sequence`, `bytes_total`, `decode_share`, `max_sequences`; null values without a
/// model), and per phase its counts, bound and floor.
nlohmann::json to_json(const Workload& w, const Machine& machine, const std::string& machine_source, const Analysis& a);

}  // namespace pd::roofline
