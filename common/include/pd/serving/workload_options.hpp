/// @file workload_options.hpp
/// @brief The workload options that chapters 05 and 06 share (`--scenario`, `--trace`,
/// `--requests`, `--rate`, `--burstiness`, the length options) and the workload they describe.
#pragma once

#include "pd/serving/types.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace pd::serving {

/// What `--scenario`, `--trace` and the workload options say.
struct WorkloadOptions {
    std::string scenario = "poisson";  ///< poisson, long-prompt or shared-prefix (those the program offers)
    std::string trace;                 ///< `--trace FILE` (instead of the scenario)
    int requests = 200;                ///< requests of the poisson and shared-prefix workloads
    double rate = 4;                   ///< requests per second
    double burstiness = 1;             ///< gamma shape of the gaps (1 = Poisson)
    double prompt_len = 1000;          ///< mean prompt tokens
    double output_len = 200;           ///< mean output tokens
    std::string prompt_dist = "fixed";  ///< fixed, uniform (+-50%) or lognormal (sigma 1)
    std::string output_dist = "fixed";  ///< as prompt_dist
    int system_tokens = 1000;          ///< shared-prefix: the shared system prompt
    int question_tokens = 100;         ///< shared-prefix: each request's own part
    int max_len = 1 << 20;             ///< lengths drawn above it are clamped to it (a model's max_seq)
};

/// Adds the workload options to @p app, writing into @p o.
/// @param app the program's options  @param o where they go
/// @param scenarios the values `--scenario` accepts, each described (name, help)
void add_workload_options(CLI::App& app, WorkloadOptions& o,
                          const std::vector<std::pair<std::string, std::string>>& scenarios);

/// The workload @p o describes at @p rate requests per second (poisson and shared-prefix
/// scenarios) or from its trace (the long-prompt scenario's defaults are the caller's).
/// @param o the options  @param rate requests per second  @param seed the program's seed
/// @param vocab token ids of the shared-prefix prompts are below it
/// @throws std::invalid_argument naming the option for a trace it cannot read or lengths out of range
std::vector<Request> make_workload(const WorkloadOptions& o, double rate, std::uint64_t seed, int vocab);

/// "trace FILE", "long-prompt scenario", "poisson, 4 per second", or "shared-prefix scenario
/// (1000-token system prompt + 100 each), 4 per second": the workload line of a report.
/// @param o the options
std::string describe(const WorkloadOptions& o);

}  // namespace pd::serving
