// Chapter 09: what the lesson (main.cu), its problem (problem.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"
#include "pd/llama2c.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/serving/cost_model.hpp"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ch09 {

namespace md = pd::model;
namespace sv = pd::serving;
using pd::DType;

struct Options {
#if defined(PD_BACKEND_SIM)
    std::string preset = "tiny";  // seconds on a CPU
    md::PromptSpec p{.batch = 2, .length = 16, .gen = 16};
#else
    std::string preset = "llama-3-8b";  // the GPU benchmark: a verify pass at a 4k context
    md::PromptSpec p{.batch = 1, .length = 4096, .gen = 64};
#endif
    std::vector<int> ks = {1, 2, 4, 8};
    double accept_rate = 0.8;
    int draft_layers = 1;
    std::string gpu = "H200";
    std::string cost_preset = "llama-3-8b";  // the cost model's model: the lesson is about a real one
    int cost_context = 1024;
    bool sweep = false, engine = false;
    std::string checkpoint, draft_checkpoint, tokenizer;  // llama2.c files instead of --preset
    pd::kernels::layers::SamplingParams sampling;
};

/// The target's shape and files: a preset with synthetic weights, or a llama2.c checkpoint (and
/// its draft: the target's first layers, or a smaller checkpoint of the same vocabulary).
struct Target {
    pd::ModelConfig config;
    std::optional<pd::llama2c::Checkpoint> ckpt, draft_ckpt;
    std::optional<pd::llama2c::Tokenizer> tok;
};

/// What every proposer's row needs: the problem, the baseline's tokens and the cost model.
struct Problem {
    const Options& o;
    const Target& t;
    std::span<const int> prompt;
    int P, G;
    const sv::CostModel& cm;
    double decode_s;  // the cost model's decode step at --cost-context
};

// main.cu
/// The cost model's time of one pass on the GPU preset: B sequences of @p tokens after @p context.
double modelled_s(const sv::CostModel& cm, int B, int tokens, int context);
/// c_v = T(k + 1 tokens) / T(1 token) on the model @p m, B sequences at context P (null when not timing).
std::optional<double> measured_cv(pd::Bench& bench, md::Model& m, int B, int P, int k);

// problem.cu
/// Registers the program's options, with their ranges, on @p bench.
void add_options(pd::Bench& bench, Options& o);
/// Reads the files the options name, after the rules between those options (exit code 2).
Target read_target(const Options& o);
/// The rules between the proposers and the problem (exit code 2). @return whether the draft model runs.
bool check_problem(const pd::Bench& bench, const Options& o, const Target& t, int P, int G, int k_max);
/// The draft model of @p target (built with @p mo): the draft checkpoint, or the target's first --draft-layers.
md::Model make_draft(const Options& o, const Target& t, md::Model& target, const md::ModelOptions& mo);

// studies.cu
/// Leviathan's formula alone at a = --accept-rate, for two costs of a draft step, printed and returned.
std::vector<pd::Row> formula_section(std::ostream& out, const Options& o);
/// --sweep-batch: the oracle's speed-up against the batch, modelled and measured, printed and returned.
std::vector<pd::Row> sweep_section(pd::Bench& bench, const Problem& pb, DType weights);
/// --engine: chapter 05's engine plain, always drafting and under the rule, printed and returned.
std::vector<pd::Row> engine_section(pd::Bench& bench, const Options& o, const pd::ModelConfig& config, DType weights);

}  // namespace ch09
