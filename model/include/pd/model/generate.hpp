/// @file generate.hpp
/// @brief The token loop (a pass of the model, then a token chosen for each row of logits), and
/// generation on chapter 04's model in it, two ways: with the KV cache (prefill once,
/// then one token per step) and by recomputation (every step runs the whole sequence so far
/// again), and the checks chapter 04 makes of them: the two agree, and the cached one matches
/// the CPU reference model. Includable from plain C++.
#pragma once

#include "pd/bench.hpp"
#include "pd/compare.hpp"
#include "pd/llama2c.hpp"
#include "pd/model/model.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pd::model {

/// What chapter 04 generates from: B prompts of P seeded random token ids, or the tokenizer's
/// encoding of one text for every sequence, then G tokens each.
struct PromptSpec {
    int batch = 1;     ///< B, sequences generated together
    int length = 16;   ///< P of the random prompts
    int gen = 8;       ///< G, tokens to generate per sequence
    std::string text;  ///< a prompt text (encoded with the tokenizer) instead of random ids
};

/// The prompts [B, P] of @p s for the model @p c, and their length in @p P. A text that cannot
/// fit the model's max_seq with `gen` is refused before it is encoded (a long text is work for
/// nothing): each token covers at most the tokenizer's longest piece.
/// @param s what to generate  @param c the model's shape  @param tok the tokenizer (null: random ids)
/// @param seed the program's seed  @param P the prompt's tokens
/// @throws std::invalid_argument naming PromptSpec's fields when the prompt and the generation pass max_seq
std::vector<int> make_prompts(const PromptSpec& s, const ModelConfig& c, const llama2c::Tokenizer* tok,
                              std::uint64_t seed, int& P);

/// The arithmetic chapter 04's run asks of the model, in FLOPs (2 per parameter per token through
/// it): the cached generation (P + G - 1 tokens per sequence), the recomputed one (the whole
/// sequence at every step), and the context sweep's points (C + 1 tokens at C = 8, 16, ... up to
/// @p sweep_max; 0: no sweep). What pd::kSimWorkBudget is checked against on the simulator.
/// @param c the model's shape  @param s the prompts and the generation  @param P prompt tokens
/// @param cached with the cache  @param recomputed by recomputation  @param sweep_max the sweep's last context
double generation_flops(const ModelConfig& c, const PromptSpec& s, int P, bool cached, bool recomputed, int sweep_max);

/// Everything one way of generating produced: step i's logits [B, V] chose tokens[i] [B];
/// ms[0] is the prefill (TTFT), ms[i] the step that produced token i (CUDA events; CPU time on
/// the simulator).
struct Generation {
    std::vector<int> tokens;    ///< [G, B]
    std::vector<float> logits;  ///< [G, B, V]
    std::vector<double> ms;     ///< [G]
    /// How each token was chosen: greedy (the argmax), or drawn with chapter 09's rules, the token
    /// of sequence b at position p from Philox draw (seed, b, p), so both ways draw alike.
    kernels::layers::SamplingParams sampling;
};

/// One pass of the token loop: the new tokens of its sequences, packed one sequence after the
/// other, and for each row of logits the pass produces, the Philox stream and position its token
/// is drawn from when sampling (the draws of chapter 09's rules: (seed, stream, position)).
struct Pass {
    std::vector<int> tokens;              ///< every sequence's new tokens, packed
    std::vector<StepSequence> sequences;  ///< who brings them, after how many cached positions
    std::vector<int> streams;             ///< the Philox stream of each row of logits
    std::vector<int> positions;           ///< the position each row of logits predicts
    /// Adds a sequence, asking for the logits after its last @p rows tokens, drawn from stream
    /// @p stream at the positions they predict.
    /// @param slot its cache slot (paged: its row in the pass)  @param context positions it has cached
    /// @param new_tokens what it brings  @param stream its Philox stream  @param rows rows of logits, 1 ... its tokens
    /// @param blocks its block table (paged cache; it must outlive the pass)
    void add(int slot, int context, std::span<const int> new_tokens, int stream, int rows = 1,
             std::span<const int> blocks = {});
    /// B sequences in slots 0 ... B - 1, sequence b bringing row b of @p tokens after @p context
    /// cached positions; one row of logits each, drawn from stream b.
    /// @param tokens [B, n]  @param B sequences  @param context positions each has cached
    /// @param tables the sequences' block tables (paged cache), or null
    static Pass batch(std::span<const int> tokens, int B, int context,
                      const std::vector<std::vector<int>>* tables = nullptr);
};

/// The tokens the rows of logits of @p m's last pass (@p p) chose, on the host: each row's argmax
/// (greedy @p sampling), or drawn by the sampling rules from the rows' streams and positions.
/// @param m the model, after the pass  @param p the pass  @param sampling greedy, or the rules
/// @param out a device buffer of at least p's rows
std::vector<int> choose(Model& m, const Pass& p, const kernels::layers::SamplingParams& sampling,
                        DeviceBuffer<int>& out);

/// The token loop every generation on the model runs: while @p next gives a pass, run it
/// (Model::forward()), choose a token for each of its rows of logits (choose()), and hand them to
/// @p take with the pass's time in ms (CUDA events; CPU time on the simulator). Each generation
/// adds only what it feeds and what it keeps: generate_cached() feeds the prompt, then the last
/// tokens; generate_recompute() the whole sequence every time; teacher_forced_agreement() the
/// original's tokens; chapter 09's generate_speculative() each sequence's last token and a
/// proposal, keeping what the target accepts. (Chapter 05's ModelExecutor runs one such pass per
/// step of run_engine(), which is then the loop.)
/// @param m the model  @param sampling how tokens are chosen (greedy: the argmax)
/// @param next fills the next pass; false: the generation is over
/// @param take receives the tokens chosen, one per row of logits, and the pass's time
void token_loop(Model& m, const kernels::layers::SamplingParams& sampling, const std::function<bool(Pass&)>& next,
                const std::function<void(std::span<const int> chosen, double ms)>& take);

/// With the cache: prefill the prompt [B, P] once, then each of the G - 1 steps feeds the last
/// token only. @param m the model (batch B)  @param prompt [B, P]  @param P prompt tokens  @param G tokens to generate
/// @param sampling greedy (the default), or temperature, top-k and top-p (chapter 09)
Generation generate_cached(Model& m, const std::vector<int>& prompt, int P, int G,
                           const kernels::layers::SamplingParams& sampling = {});
/// Without a cache: every step runs the whole sequence so far (prompt + generated) through the
/// model again, as a prefill, and keeps only the last position's logits.
/// @param m the model (batch B)  @param prompt [B, P]  @param P prompt tokens  @param G tokens to generate
/// @param sampling greedy (the default), or temperature, top-k and top-p (chapter 09)
Generation generate_recompute(Model& m, const std::vector<int>& prompt, int P, int G,
                              const kernels::layers::SamplingParams& sampling = {});

/// Cache vs recompute. fp32: the same tokens at every step. bf16 (rounding differs between the
/// GEMM and GEMV paths): the same tokens up to a first divergence, where each side's token is
/// among the other side's top 5 (sampled: among the tokens the other side's rules keep). Returns a one-line verdict; @p
/// passed and @p max_logit_diff are set.
/// @param a one generation  @param b the other  @param B sequences  @param V vocabulary
/// @param d the rule (fp32 or bf16)  @param passed the verdict  @param max_logit_diff the largest |a - b| of a logit
std::string compare_generations(const Generation& a, const Generation& b, int B, int V, DType d, bool& passed,
                                double& max_logit_diff);

/// The device model against the CPU reference model (double) on the cached generation @p g:
/// the prefill's logits and every decode step's. fp32: |out - ref| <= 1e-3 + 1e-3 |ref|; bf16:
/// ||out - ref|| / ||ref|| <= 2e-2 per step.
/// @param c the model's shape  @param w its weights (as the device holds them)  @param prompt [B, P]
/// @param g the cached generation  @param B sequences  @param P prompt tokens  @param d the rule
/// @param kv the device's cache: an 8-bit one (fp8, int8) has the reference round each K and V
/// row as the cache stores it (kv_rounding()), and is judged by the bf16 rule
CompareResult check_reference(const ModelConfig& c, const ModelWeights& w, const std::vector<int>& prompt,
                              const Generation& g, int B, int P, DType d, DType kv = DType::fp32);

/// What an 8-bit cache (@p kv = fp8 or int8) does to a K or V row, for the reference model: the
/// row's scale max |x| / 448 (fp8) or / 127 (int8) in fp32, each value through its code and back
/// (chapter 08's formats, kv_quant.hpp), as the appends write it. Empty for fp32 and bf16.
/// @param kv the cache's type
std::function<void(std::span<double>)> kv_rounding(DType kv);

/// Chapter 04's checks of a generation: cache against recompute (compare_generations(), when
/// both ran) and, for models of up to 1e8 parameters, the cached one against the CPU reference
/// model (check_reference(); larger models are skipped, saying so). Prints one line per check to
/// @p out and returns them as JSON (dtype, agree, max_logit_diff, reference_max_abs_err,
/// reference_passed); @p passed falls when one fails.
/// @param m the model  @param prompt [B, P]  @param P prompt tokens  @param cached a generation or null
/// @param recomputed a generation or null  @param rule fp32 or bf16  @param out the text
/// @param passed the verdict so far
nlohmann::json check_generations(const Model& m, const std::vector<int>& prompt, int P, const Generation* cached,
                                 const Generation* recomputed, DType rule, std::ostream& out, bool& passed);

// [agreement]
/// Chapter 08's measures of a quantized model against its bf16 original (llama.cpp's measures of
/// a quantization), teacher-forced: the quantized model is fed the tokens the original chose
/// (its greedy generation), so that one disagreement does not change every later context. Each
/// step's next-token distributions (softmax of the logits) are compared per sequence: whether
/// their argmax agrees, and the KL divergence KL(p_original || p_quantized).
struct Agreement {
    int tokens = 0;      ///< next-token distributions compared: B x G
    double top1 = 0;     ///< the share whose argmax agrees
    double mean_kl = 0;  ///< the mean KL divergence, in nats
    double max_kl = 0;   ///< the largest
};
/// Runs @p quantized on @p prompt [B, P] and then on the tokens of @p original (generate_cached()
/// of the bf16 model on the same prompt), comparing its logits with the original's at each of
/// the G steps. The cache of @p quantized then holds P + G - 1 positions.
/// @param original the bf16 model's generation  @param quantized the model compared (batch B)
/// @param prompt [B, P]  @param P prompt tokens
Agreement teacher_forced_agreement(const Generation& original, Model& quantized, const std::vector<int>& prompt, int P);
// [agreement]

/// One decode step at context C both ways, on tokens [B, C] (sequence-major): with the cache (a
/// prefill of each sequence's first C - 1 tokens, then one decode step of its last) and
/// recomputed (a prefill of all C tokens).
struct StepAtContext {
    double max_logit_diff = 0;            ///< the largest |cached - recomputed| of a logit
    double max_logit = 0;                 ///< the largest |recomputed| logit
    bool agree = false;                   ///< max_logit_diff <= tolerance * max(1, max_logit)
    std::optional<double> cached_ms;      ///< the cached step's time, when timed
    std::optional<double> recomputed_ms;  ///< the recomputed step's time, when timed
};
/// Runs the step both ways and compares their logits; if they agree and the harness times
/// (`--check-only` off), times each (Bench::time_ms; the cached step rewinds the cache to
/// C - 1 before every run). @param bench the harness  @param m the model (batch B, max_seq >= C)
/// @param tokens [B, C]  @param C the context  @param tolerance relative to the largest logit
StepAtContext step_at_context(Bench& bench, Model& m, const std::vector<int>& tokens, int C, double tolerance);

/// A generation's times as JSON: ttft_ms (its prefill), itl_median_ms and itl_p99_ms (its decode
/// steps; null with none), tokens_per_s (B G tokens over the whole run), step_ms (every step).
/// @param g the generation  @param B sequences
nlohmann::json timing_json(const Generation& g, int B);
/// "TTFT 1.2 ms, ITL median 0.5 ms (p99 0.6 ms), 3000 tokens/s". @param g the generation  @param B sequences
std::string describe_timing(const Generation& g, int B);

/// `--dump` of the cache of @p m after a generation: k_cache and v_cache [L, B, Hkv, positions,
/// d] (`_bf16` after the names with bf16 weights). @param bench the harness  @param m the model
/// @param positions the positions of each sequence to write
void dump_cache(const Bench& bench, const Model& m, int positions);
/// `--dump` of what a generation starts from: config.json (pd::to_json()) and prompt [B, P] (int32).
/// @param bench the harness  @param c the model's shape  @param prompt [B, P]  @param B sequences  @param P prompt
/// tokens
void dump_inputs(const Bench& bench, const ModelConfig& c, const std::vector<int>& prompt, int B, int P);
/// `--dump` of a generation: tokens [B, G] (of @p cached, else @p recomputed), logits_cache and
/// logits_recompute [G, B, V], and every weight tensor (`_bf16` after the names with bf16
/// weights). @param bench the harness  @param m the model  @param cached a generation or null
/// @param recomputed a generation or null
void dump_generation(const Bench& bench, const Model& m, const Generation* cached, const Generation* recomputed);

}  // namespace pd::model
