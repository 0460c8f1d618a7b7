#include "pd/serving/workload_options.hpp"

#include "pd/serving/workload.hpp"

#include <cstdio>
#include <string>

namespace pd::serving {

void add_workload_options(CLI::App& app, WorkloadOptions& o,
                          const std::vector<std::pair<std::string, std::string>>& scenarios) {
    std::vector<std::string> names;
    std::string help;
    for (const auto& [name, what] : scenarios) {
        names.push_back(name);
        help += (help.empty() ? "" : ", or ") + name + " (" + what + ")";
    }
    app.add_option("--scenario", o.scenario, help)->check(CLI::IsMember(names))->capture_default_str();
    app.add_option("--trace", o.trace, "CSV trace: arrival seconds, prompt tokens, output tokens (instead of --scenario)");
    app.add_option("--requests", o.requests, "Requests of the generated workload")->check(CLI::Range(1, 1000000))->capture_default_str();
    app.add_option("--rate", o.rate, "Requests per second")->check(CLI::Range(1e-6, 1e6))->capture_default_str();
    app.add_option("--burstiness", o.burstiness, "Gamma shape of the gaps (1 = Poisson, < 1 burstier)")
        ->check(CLI::Range(1e-3, 1e3))->capture_default_str();
    app.add_option("--prompt-len", o.prompt_len, "Mean prompt tokens")->check(CLI::Range(1.0, 1e7))->capture_default_str();
    app.add_option("--output-len", o.output_len, "Mean output tokens")->check(CLI::Range(1.0, 1e6))->capture_default_str();
    app.add_option("--prompt-dist", o.prompt_dist, "fixed, uniform (+-50%) or lognormal (sigma 1)")
        ->check(CLI::IsMember({"fixed", "uniform", "lognormal"}))->capture_default_str();
    app.add_option("--output-dist", o.output_dist, "fixed, uniform (+-50%) or lognormal (sigma 1)")
        ->check(CLI::IsMember({"fixed", "uniform", "lognormal"}))->capture_default_str();
}

namespace {

LengthSpec spec_of(const std::string& dist, double mean, int max_len) {
    // uniform: +-50% of the mean; lognormal: sigma 1 of the log (a long tail, as chat outputs have)
    const LengthDist d = dist == "uniform" ? LengthDist::uniform : dist == "lognormal" ? LengthDist::lognormal : LengthDist::fixed;
    return LengthSpec{.dist = d, .mean = mean, .spread = d == LengthDist::lognormal ? 1.0 : mean / 2, .max = max_len};
}

}  // namespace

std::vector<Request> make_workload(const WorkloadOptions& o, double rate, std::uint64_t seed, int vocab) {
    if (!o.trace.empty()) return read_trace(o.trace);
    if (o.scenario == "long-prompt") return long_prompt_scenario();
    WorkloadSpec w{.requests = o.requests, .rate = rate, .burstiness = o.burstiness, .seed = seed};
    w.prompt = spec_of(o.prompt_dist, o.prompt_len, o.max_len);
    w.output = spec_of(o.output_dist, o.output_len, o.max_len);
    if (o.scenario == "shared-prefix") return shared_prefix_scenario(w, o.system_tokens, o.question_tokens, vocab);
    return poisson_workload(w);
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

}  // namespace pd::serving
