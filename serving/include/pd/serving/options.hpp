/// @file options.hpp
/// @brief The serving options chapters 05 and 06 share, written once: the workload (`--scenario`,
/// `--trace`, `--requests`, `--rate`, `--burstiness`, the lengths), the executor and the model
/// it runs, the scheduler's limits, the timeline file. The one serving file that knows the
/// command-line flags: the rest of the engine names its fields in its errors
/// (`SchedulerConfig.token_budget = 0 must be >= 1`), and serving_flag_names() gives the flag
/// each of them is set by.
#pragma once

#include "pd/cli.hpp"
#include "pd/model_config.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/types.hpp"
#include "pd/serving/workload.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace pd::serving {

/// What `--scenario`, `--trace` and the workload options say.
struct WorkloadOptions {
    std::string scenario = "poisson";   ///< poisson, long-prompt or shared-prefix (those the program offers)
    std::string trace;                  ///< `--trace FILE` (instead of the scenario)
    int requests = 200;                 ///< requests of the poisson and shared-prefix workloads
    double rate = 4;                    ///< requests per second
    double burstiness = 1;              ///< gamma shape of the gaps (1 = Poisson)
    double prompt_len = 1000;           ///< mean prompt tokens
    double output_len = 200;            ///< mean output tokens
    std::string prompt_dist = "fixed";  ///< fixed, uniform (+-50%) or lognormal (sigma 1)
    std::string output_dist = "fixed";  ///< as prompt_dist
    int system_tokens = 1000;           ///< shared-prefix: the shared system prompt
    int question_tokens = 100;          ///< shared-prefix: each request's own part
    int max_len = 1 << 20;              ///< lengths drawn above it are clamped to it (a model's max_seq)
};

/// Everything chapters 05 and 06 take from the command line in common. A chapter sets its
/// defaults before add_serving_options() (`--help` shows them).
struct ServingOptions {
    std::string executor = "cost";      ///< `--executor`: model (the model runs each step) or cost (the cost model)
    std::string policy = "chunked";     ///< `--policy` (chapter 05 also takes "all")
    std::string preset = "llama-3-8b";  ///< `--preset`: the model's shape
    std::string gpu = "H100-SXM";       ///< `--gpu`: the cost model's machine
    int tp = 1;                         ///< `--tp`: tensor-parallel GPUs of the cost model
    std::string launches = "none";      ///< `--launches`: the cost model's launch preset (chapter 12)
    std::string kv_dtype = "fp32";      ///< `--kv-dtype`: the model executor's cache
    int token_budget = 512;             ///< `--token-budget`: tokens per step
    int max_seqs = 64;                  ///< `--max-seqs`: requests running at once
    std::string timeline;               ///< `--timeline FILE`
    WorkloadOptions w;                  ///< the workload

    /// True for `--executor model`.
    bool on_model() const { return executor == "model"; }
};

/// The names `--scenario` (or `--policy`) takes, each described: (name, help).
using Choices = std::vector<std::pair<std::string, std::string>>;

/// Adds the shared options to @p app, writing into @p o, with the defaults already in @p o.
/// @param app the program's options  @param o where they go
/// @param policies the values `--policy` takes, described  @param scenarios those `--scenario` takes
void add_serving_options(CLI::App& app, ServingOptions& o, const Choices& policies, const Choices& scenarios);

/// What the model executor runs by default: on the simulator every thread of every kernel runs
/// on the CPU, so a chapter sizes its workload for seconds on the tiny model.
struct ModelExecutorDefaults {
    int requests = 16;             ///< `--requests`
    double rate = 40;              ///< `--rate`
    double prompt_len = 16;        ///< `--prompt-len`
    double output_len = 12;        ///< `--output-len`
    std::string output_dist = "";  ///< `--output-dist` ("" keeps the chapter's)
    int max_seqs = 16;             ///< `--max-seqs`
    int token_budget = 64;         ///< `--token-budget`
};

/// Applies @p d, and the tiny preset, to the options the command line did not give (options
/// given on the command line keep their values).
/// @param app the parsed command line  @param o the options  @param d the defaults
void apply_model_defaults(const CLI::App& app, ServingOptions& o, const ModelExecutorDefaults& d);

/// True when the command line gave @p name. @param app the parsed command line  @param name "--rate"
bool given(const CLI::App& app, const std::string& name);

/// The fields the serving engine and the model executor name in their errors, with the flags of
/// these options that set them (SchedulerConfig.token_budget: `--token-budget`; ModelOptions.batch:
/// `--max-seqs`, a slot per running request; ...), for pd::guarded_main().
FlagNames serving_flag_names();

/// The synthetic workload @p o describes (its lengths and their distributions) at @p rate
/// requests per second: what make_workload() draws for the poisson scenario.
/// @param o the options  @param rate requests per second  @param seed the program's seed
WorkloadSpec workload_spec(const WorkloadOptions& o, double rate, std::uint64_t seed);

/// The workload @p o describes at @p rate requests per second (poisson and shared-prefix
/// scenarios) or from its trace (the long-prompt scenario's defaults are the caller's).
/// @param o the options  @param rate requests per second  @param seed the program's seed
/// @param vocab token ids of the shared-prefix prompts are below it
/// @throws std::invalid_argument naming the option for a trace it cannot read or lengths out of range
std::vector<Request> make_workload(const WorkloadOptions& o, double rate, std::uint64_t seed, int vocab);

/// Checks a run of @p runs replays of @p requests against the budgets (pd::require_within())
/// before it starts: the host memory of the timelines (400 bytes per request and 64 per output
/// token or prefill chunk, per replay: measured, 17 to 54 bytes per token on chapters 05 and
/// 06's defaults and a 100,000-line trace), and, when @p sim_params
/// is not 0 (the model executor on the simulator, a model of that many parameters), the
/// simulator work of its steps (2 FLOPs per parameter per token, prompt and output).
/// @throws std::invalid_argument naming the budget and the options that set the run's size
void check_budgets(const std::vector<Request>& requests, int runs, double sim_params = 0);

/// Refuses what only the model executor runs: quantized weights (`--dtype int8`, `int4`, `fp8`)
/// and an 8-bit cache (`--kv-dtype fp8`, `int8`) with `--executor cost`, whose cost model counts
/// bf16 weights and a bf16 cache. @param o the serving options  @param weight_quant the weights'
/// format of `--dtype` (pd::Bench::weight_quant(): "none" for fp32 and bf16)
/// @throws std::invalid_argument naming the options
void check_executor_types(const ServingOptions& o, const std::string& weight_quant);

/// The cost model of `--preset` on `--tp` x `--gpu`, with `--launches`' preset (set_launches()).
CostModelConfig cost_model_config(const ServingOptions& o);

/// Refuses a KV cache of @p kv_bytes larger than the cost model's machine (`--tp` x `--gpu`)
/// holds beside the model's weights: what chapter 06 allocates the cache's books for.
/// @throws std::invalid_argument naming --kv-memory, the memory left and the options that set it
void check_kv_memory(const ServingOptions& o, const ModelConfig& model, const CostModelConfig& cost, double kv_bytes);

/// "trace FILE", "long-prompt scenario", "poisson, 4 per second", or "shared-prefix scenario
/// (1000-token system prompt + 100 each), 4 per second": the workload line of a report.
/// @param o the options
std::string describe(const WorkloadOptions& o);

/// Writes `--timeline`'s file, {"executor", "token_budget", "timelines": [...]} (one timeline
/// per policy or cache setup, as to_json() writes them), and says so on @p out; nothing without
/// `--timeline`.
/// @param o the options (their timeline path and token budget)  @param executor the executor's description
/// @param timelines the JSON array of timelines  @param out the report  @param what "policy" or "setup"
/// @throws std::invalid_argument naming `--timeline` when the file cannot be written
void write_timelines(const ServingOptions& o, const std::string& executor, const nlohmann::json& timelines,
                     std::ostream& out, const std::string& what);

/// The report's problem keys chapters 05 and 06 share: preset, gpu, tp, executor, scenario
/// ("trace" with `--trace`), requests, rate, token_budget and max_seqs.
/// @param o the options  @param requests requests of the workload
nlohmann::json problem_json(const ServingOptions& o, std::size_t requests);

/// The table's note on where step times come from: "Times are the model's steps, timed on the
/// GPU" (or the simulator) or "Times come from the cost model's steps, not from this machine's
/// clock" (no final period). @param on_model the model executor runs the steps
/// @param simulator the program runs on the simulator (pd::Bench::sim())
std::string step_times_note(bool on_model, bool simulator);

}  // namespace pd::serving
