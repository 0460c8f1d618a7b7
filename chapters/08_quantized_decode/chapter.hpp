// Chapter 08: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/cublas.hpp"
#include "pd/model_config.hpp"

#include "gemv/gemv.hpp"
#include "quant/quant.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ch08 {

namespace gv = pd::kernels::gemv;
namespace qt = pd::kernels::quant;
using bf16 = __nv_bfloat16;
using qt::Format;

/// The chapter's options (add_options() in problem.cu).
struct Options {
#if defined(PD_BACKEND_SIM)
    int n = 256, k = 2048, layers = 2;  // seconds on a CPU; K is two of the 1,024-column chunks
    std::string model = "tiny";
    int context = 24, gen = 8;
#else
    int n = 14336, k = 4096, layers = 8;  // llama-3-8b's up projection; int4: 8 x 29 MB = 4 x an H200's L2
    std::string model = "llama-3-8b";
    int context = 4096, gen = 256;
#endif
    int batch = 1, group = qt::kDefaultGroup;
    bool zero_point = false, sweep = false, bytes_only = false;
    std::string checkpoint, kv_dtype = "bf16";
};

/// One decode step over the stack: W [L, N, K] in each format (the even matrices from one draw,
/// the odd ones from another: the first and the last differ, so a kernel reading the wrong
/// matrix fails), X [B, K] bf16, Y [L, B, N], and the references of the first and last matrix.
struct Problem {
    gv::Shape s;
    int layers = 1;
    std::vector<float> w[2], x;
    pd::DeviceBuffer<bf16> w16, x16;
    std::map<Format, std::vector<qt::DeviceQuantizedMatrix>> packed;
    std::map<Format, std::vector<qt::QuantizedMatrix>> host;  // both draws, for the references
    pd::DeviceBuffer<float> y;
};

// main.cu
/// cuBLAS bf16 (when given), the bf16 baseline and every selected format on @p p, validated then timed.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas);

// problem.cu
/// The chapter's options, beside the harness's own (--kernel, --seed, ...).
void add_options(pd::Bench& bench, Options& o);
/// The rules between the options and the model @p config (exit code 2).
void check_problem(const Options& o, const pd::ModelConfig& config);
/// What the formats on the stack, then the model's decode step, ask of the machine, required before either runs.
void require_problem(pd::Bench& bench, const Options& o, const pd::ModelConfig& config);
/// Quantizes the two weight draws into every selected format and uploads the stack.
void set_weights(pd::Bench& bench, Problem& p, const Options& o);
/// Draws X for @p batch tokens and uploads it.
void set_tokens(Problem& p, int batch, std::uint64_t seed);

// studies.cu
/// What the model's decode step and generation ask of the machine, required before they run.
void require_model(pd::Bench& bench, const Options& o, const pd::ModelConfig& config);
/// The whole model's decode step and accuracy per format, printed; returns the report's "model" section.
nlohmann::json model_section(pd::Bench& bench, const Options& o, const pd::ModelConfig& config,
                             const pd::ModelWeights* weights, const pd::Column& vs_bf16);
/// --sweep-batch: every version at B = 1, 2, 4, 8, 16, printed with @p vs_bf16.
std::vector<pd::Row> sweep_section(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas,
                                   const pd::Column& vs_bf16);

}  // namespace ch08
