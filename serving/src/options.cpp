// The serving options chapters 05 and 06 share (options.hpp): the one serving file that knows flags.
#include "pd/serving/options.hpp"

#include "pd/cli.hpp"
#include "pd/files.hpp"
#include "pd/model_config.hpp"
#include "pd/report.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/workload.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

/// The names of @p choices, and "a (what), b (what) or c (what)" for the help text.
std::pair<std::vector<std::string>, std::string> names_and_help(const Choices& choices) {
    std::vector<std::string> names;
    std::string help;
    for (std::size_t i = 0; i < choices.size(); ++i) {
        const auto& [name, what] = choices[i];
        names.push_back(name);
        help += (i == 0                    ? ""
                 : i + 1 == choices.size() ? " or "
                                           : ", ") +
                name + (what.empty() ? "" : " (" + what + ")");
    }
    return {names, help};
}

}  // namespace

void add_serving_options(CLI::App& app, ServingOptions& o, const Choices& policies, const Choices& scenarios) {
    const std::vector<std::string> gpus = roofline::gpu_names();
    const auto [policy_names, policy_help] = names_and_help(policies);
    const auto [scenario_names, scenario_help] = names_and_help(scenarios);
    app.add_option("--policy", o.policy, policy_help)->check(CLI::IsMember(policy_names))->capture_default_str();
    app.add_option("--executor", o.executor,
                   "model: chapter 04's model runs each step (GPU or simulator, timed); cost: the roofline cost model "
                   "of chapter 05 predicts each step")
        ->check(CLI::IsMember({"model", "cost"}))
        ->capture_default_str();
    app.add_option("--kv-dtype", o.kv_dtype,
                   "Type of the model executor's KV cache (fp8 and int8: codes and a scale per row, chapter 08)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
        ->capture_default_str();
    app.add_option("--preset", o.preset, "Model shape")->check(CLI::IsMember(model_names()))->capture_default_str();
    app.add_option("--gpu", o.gpu, "GPU preset of the cost model")->check(CLI::IsMember(gpus))->capture_default_str();
    app.add_option("--tp", o.tp, "Tensor-parallel GPUs")->check(CLI::Range(1, 64))->capture_default_str();
    app.add_option("--launches", o.launches,
                   "Kernel launches in the cost model (chapter 12): none (not charged), eager (5 us of host per "
                   "launch, 2 us on the GPU before each kernel) or graph (decode steps replayed: one launch each)")
        ->check(CLI::IsMember(std::vector<std::string>(std::begin(kLaunchPresets), std::end(kLaunchPresets))))
        ->capture_default_str();
    WorkloadOptions& w = o.w;
    app.add_option("--scenario", w.scenario, scenario_help)
        ->check(CLI::IsMember(scenario_names))
        ->capture_default_str();
    app.add_option("--trace", w.trace,
                   "CSV trace: arrival seconds, prompt tokens, output tokens (instead of --scenario)")
        ->check(input_file());
    app.add_option("--requests", w.requests, "Requests of the generated workload")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    app.add_option("--rate", w.rate, "Requests per second")->check(CLI::Range(1e-6, 1e6))->capture_default_str();
    app.add_option("--burstiness", w.burstiness, "Gamma shape of the gaps (1 = Poisson, < 1 burstier)")
        ->check(CLI::Range(1e-3, 1e3))
        ->capture_default_str();
    app.add_option("--prompt-len", w.prompt_len, "Mean prompt tokens")
        ->check(CLI::Range(1.0, 1e7))
        ->capture_default_str();
    app.add_option("--output-len", w.output_len, "Mean output tokens")
        ->check(CLI::Range(1.0, 1e6))
        ->capture_default_str();
    app.add_option("--prompt-dist", w.prompt_dist, "fixed, uniform (+-50%) or lognormal (sigma 1)")
        ->check(CLI::IsMember({"fixed", "uniform", "lognormal"}))
        ->capture_default_str();
    app.add_option("--output-dist", w.output_dist, "fixed, uniform (+-50%) or lognormal (sigma 1)")
        ->check(CLI::IsMember({"fixed", "uniform", "lognormal"}))
        ->capture_default_str();
    app.add_option("--token-budget", o.token_budget, "Tokens per step (chunked; continuous's prefill steps)")
        ->check(CLI::Range(1, 1 << 24))
        ->capture_default_str();
    app.add_option("--max-seqs", o.max_seqs, "Requests running at once (cache slots)")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    app.add_option("--timeline", o.timeline, "Write every step and every token time as JSON to FILE")
        ->type_name("FILE")
        ->group(kOutputGroup)
        ->check([](const std::string& path) -> std::string {
            return path == "-" ? "the timeline goes to a file, not to stdout ('-'): name a file" : "";
        });
}

bool given(const CLI::App& app, const std::string& name) {
    return app.get_option(name)->count() > 0;
}

// [model_defaults]
void apply_model_defaults(const CLI::App& app, ServingOptions& o, const ModelExecutorDefaults& d) {
    if (!given(app, "--preset")) o.preset = "tiny";
    if (!given(app, "--requests")) o.w.requests = d.requests;
    if (!given(app, "--rate")) o.w.rate = d.rate;
    if (!given(app, "--prompt-len")) o.w.prompt_len = d.prompt_len;
    if (!given(app, "--output-len")) o.w.output_len = d.output_len;
    if (!given(app, "--output-dist") && !d.output_dist.empty()) o.w.output_dist = d.output_dist;
    if (!given(app, "--max-seqs")) o.max_seqs = d.max_seqs;
    if (!given(app, "--token-budget")) o.token_budget = d.token_budget;
}
// [model_defaults]

FlagNames serving_flag_names() {
    return {{"SchedulerConfig.token_budget", "--token-budget"},
            {"SchedulerConfig.max_seqs", "--max-seqs"},
            {"SchedulerConfig.kv_capacity", "--kv-capacity"},
            {"SchedulerConfig.block_size", "--block-size"},
            {"SchedulerConfig.prefix_caching", "--prefix-cache"},
            {"SchedulerConfig.policy", "--policy"},
            {"PagedCache.block_size", "--block-size"},
            {"ModelOptions.batch", "--max-seqs"},  // the model executor: a cache slot per running request
            {"ModelOptions.cache.block_size", "--block-size"},
            {"ModelOptions.max_step_tokens", "--token-budget"},
            {"Request.prompt_tokens", "--prompt-len"},
            {"Request.output_tokens", "--output-len"}};
}

namespace {

LengthSpec spec_of(const std::string& dist, double mean, int max_len) {
    // uniform: +-50% of the mean; lognormal: sigma 1 of the log (a long tail, as chat outputs have)
    const LengthDist d = dist == "uniform"     ? LengthDist::uniform
                         : dist == "lognormal" ? LengthDist::lognormal
                                               : LengthDist::fixed;
    return LengthSpec{.dist = d, .mean = mean, .spread = d == LengthDist::lognormal ? 1.0 : mean / 2, .max = max_len};
}

}  // namespace

WorkloadSpec workload_spec(const WorkloadOptions& o, double rate, std::uint64_t seed) {
    WorkloadSpec w{.requests = o.requests, .rate = rate, .burstiness = o.burstiness, .seed = seed};
    w.prompt = spec_of(o.prompt_dist, o.prompt_len, o.max_len);
    w.output = spec_of(o.output_dist, o.output_len, o.max_len);
    return w;
}

std::vector<Request> make_workload(const WorkloadOptions& o, double rate, std::uint64_t seed, int vocab) {
    if (!o.trace.empty()) return read_trace(o.trace);
    if (o.scenario == "long-prompt") return long_prompt_scenario();
    const WorkloadSpec w = workload_spec(o, rate, seed);
    if (o.scenario == "shared-prefix") return shared_prefix_scenario(w, o.system_tokens, o.question_tokens, vocab);
    return poisson_workload(w);
}

void check_budgets(const std::vector<Request>& requests, int runs, double sim_params) {
    double items = 0, tokens = 0;
    for (const Request& r : requests) {
        items += r.output_tokens + r.prompt_tokens / 256.0;
        tokens += double(r.prompt_tokens) + r.output_tokens;
    }
    const std::string what = std::to_string(runs) + (runs == 1 ? " replay" : " replays") + " of " +
                             std::to_string(requests.size()) + " requests";
    const std::string advice = "lower --requests, --prompt-len or --output-len (or shorten the --trace)";
    require_within(kHostMemoryBudget, runs * (400.0 * double(requests.size()) + 64.0 * items),
                   "the timelines of " + what, advice);
    if (sim_params > 0)
        require_within(kSimWorkBudget, runs * tokens * 2 * sim_params, "the model's steps for " + what, advice);
}

void check_executor_types(const ServingOptions& o, const std::string& weight_quant) {
    if (o.on_model()) {
        if (o.launches != "none")
            throw std::invalid_argument("--launches " + o.launches +
                                        " needs --executor cost: the model executor measures its launches");
        return;
    }
    const std::string why = " needs --executor model: the cost model counts bf16 weights and a bf16 cache";
    if (weight_quant != "none") throw std::invalid_argument("--dtype " + weight_quant + why);
    if (o.kv_dtype == "fp8" || o.kv_dtype == "int8") throw std::invalid_argument("--kv-dtype " + o.kv_dtype + why);
}

CostModelConfig cost_model_config(const ServingOptions& o) {
    CostModelConfig c = cost_model_config(*find_model(o.preset), *roofline::find_gpu(o.gpu), o.tp);
    set_launches(c, o.launches);
    return c;
}

void check_kv_memory(const ServingOptions& o, const ModelConfig& model, const CostModelConfig& cost, double kv_bytes) {
    const double beside_weights = cost.machine.memory_bytes - model.parameter_count() * cost.weight_bytes_per_param;
    if (kv_bytes > beside_weights)
        throw std::invalid_argument("--kv-memory " + format_bytes(kv_bytes) + " is more than the " +
                                    format_bytes(std::max(beside_weights, 0.0)) + " that " + std::to_string(o.tp) +
                                    " x " + o.gpu + " hold beside " + o.preset +
                                    "'s weights: lower --kv-memory, or raise --tp");
}

std::string describe(const WorkloadOptions& o) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.4g per second", o.rate);
    if (!o.trace.empty()) return "trace " + o.trace;
    if (o.scenario == "long-prompt") return "long-prompt scenario";
    if (o.scenario == "shared-prefix")
        return "shared-prefix scenario (" + std::to_string(o.system_tokens) + "-token system prompt + " +
               std::to_string(o.question_tokens) + " each), " + rate;
    return std::string("poisson, ") + rate;
}

void write_timelines(const ServingOptions& o, const std::string& executor, const nlohmann::json& timelines,
                     std::ostream& out, const std::string& what) {
    if (o.timeline.empty()) return;
    const std::string text =
        nlohmann::json{{"executor", executor}, {"token_budget", o.token_budget}, {"timelines", timelines}}.dump(1) +
        "\n";
    write_file_atomically(o.timeline, [&](std::ostream& f) { f << text; });
    out << "timeline of every " << what << " written to " << o.timeline << "\n";
}

nlohmann::json problem_json(const ServingOptions& o, std::size_t requests) {
    return {
        {"preset", o.preset},     {"gpu", o.gpu},           {"tp", o.tp},
        {"launches", o.launches}, {"executor", o.executor}, {"scenario", o.w.trace.empty() ? o.w.scenario : "trace"},
        {"requests", requests},   {"rate", o.w.rate},       {"token_budget", o.token_budget},
        {"max_seqs", o.max_seqs}};
}

std::string step_times_note(bool on_model, bool simulator) {
    if (!on_model) return "Times come from the cost model's steps, not from this machine's clock";
    return std::string("Times are the model's steps, timed on ") +
           (simulator ? "the simulator (CPU figures)" : "the GPU");
}

}  // namespace pd::serving
