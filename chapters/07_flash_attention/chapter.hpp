// Chapter 07: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/model_config.hpp"

#include "attention/flash_attention.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ch07 {

namespace att = pd::kernels::attention;
using bf16 = __nv_bfloat16;
using pd::DType;
using pd::fmt;

/// The versions the suffix sweep runs: the fastest SIMT and tensor-core ones, and split-KV.
inline const std::vector<std::string> kSuffixVersions = {"v3", "v6", "split"};

/// The program's options: the problem's shape and the further studies to run (problem.cu registers them).
struct Options {
#if defined(PD_BACKEND_SIM)
    int batch = 1, heads = 2, kv_heads = 0, seq_len = 96, head_dim = 64, sweep_max = 128;  // seconds on 2 cores
#else
    int batch = 1, heads = 32, kv_heads = 8, seq_len = 8192, head_dim = 128, sweep_max = 32768;  // llama-3-8b's
#endif
    int kv_len = 0;  // 0: equal to seq_len
    bool causal = true, sweep = false, suffix_sweep = false, ttft = false;
    std::string preset = "llama-3-8b";
};

/// One problem: Q, K, V drawn in fp32, and per input type the reference of O and of the
/// logsumexp (bf16: of the unrounded inputs, beside that of the rounded ones, the yardstick of
/// pd::compare_to_lowp_reference()).
struct Problem {
    att::Shape s;
    std::vector<float> q, k, v;
    std::map<DType, pd::Expected> out, lse;
    pd::Expected out_tc;  // bf16 on the tensor cores (v4 to v6): the yardstick rounds P to bf16 too
};

/// What the parts of a run share: the harness, the input types, the SMs split-KV is sized for.
struct Run {
    pd::Bench& bench;
    std::vector<DType> dtypes;
    int sms = 1;

    /// Every selected version (of @p only, when given) on a new problem of shape @p s, for each
    /// input type (studies.cu).
    std::vector<pd::Row> rows(const att::Shape& s, std::uint64_t stream, const nlohmann::json& point,
                              const std::vector<std::string>& only = {});
};

// main.cu
/// What --kernel takes: chapter 01's naive attention (the baseline), flash v1 ... v6, split-KV.
const std::vector<pd::Version>& program_versions();
/// Whether @p v runs on @p s with inputs @p d: tensor cores need d = 64 or 128, split-KV Sq <= 16.
bool runs_on(const pd::Version& v, const att::Shape& s, DType d);
/// Every selected version (of @p only, when given) on @p p with inputs @p d, validated then timed.
std::vector<pd::Row> run_versions(pd::Bench& bench, const Problem& p, DType d, int sms, const nlohmann::json& point,
                                  const std::vector<std::string>& only = {});
/// Device memory of the naive row: the score matrix (fp32) with Q, K, V and O.
double naive_bytes(const att::Shape& s);

// problem.cu
/// The chapter's options, beside the harness's own (--kernel, --dtype, --seed, ...).
void add_options(pd::Bench& bench, Options& o);
/// Throws std::invalid_argument naming the option for a problem the ranges cannot refuse.
void check_problem(const pd::Bench& bench, const Options& o, const att::Shape& shape);
/// Device memory of Q, K, V and O in fp32 (the most a flash row holds).
double flash_bytes(const att::Shape& s);
/// What the run asks of the machine for the problem @p shape and the sweeps' shapes.
pd::Needs problem_needs(const pd::Bench& bench, const att::Shape& shape, const std::vector<att::Shape>& sweep_shapes,
                        const std::vector<att::Shape>& suffix_shapes);
/// The problem of shape @p s: inputs from @p seed's stream @p stream, the references of each of @p dtypes.
Problem make_problem(const att::Shape& s, std::uint64_t seed, std::uint64_t stream, const std::vector<DType>& dtypes,
                     bool all_rows);
/// --dump: Q, K, V and the reference O of each input type.
void dump_inputs(pd::Bench& bench, const Problem& p, const std::vector<DType>& dtypes);

// studies.cu
/// TFLOP/s of cuBLAS's BF16 GEMM at M = N = K = 8192 in this run (GPU, when timing), else none.
std::optional<double> cublas_tflops(pd::Bench& bench);
/// --sweep: time and memory against S = Sq = Sk, then the causal speed-up at the largest S.
void sweep(Run& run, const std::vector<att::Shape>& shapes, nlohmann::json& report);
/// --suffix-sweep: Sq = 1, 2, 4 ... queries over Sk keys, and the Sq where the ridge point is reached.
void suffix_sweep(Run& run, const std::vector<att::Shape>& shapes, nlohmann::json& report);
/// --ttft: model @p c's prefill FLOPs against S, dense layers and attention (the cost model).
nlohmann::json ttft(pd::Bench& bench, const pd::ModelConfig& c);

}  // namespace ch07
