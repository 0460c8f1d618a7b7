/// @file cli.hpp
/// @brief The options every chapter program shares (CLI11), and one way to parse them:
/// bad input prints one line naming the option and exits with code 2.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace pd {

/// Exit codes of every chapter program.
enum ExitCode : int {
    kExitOk = 0,        ///< every version ran and passed
    kExitMismatch = 1,  ///< a result did not match its reference
    kExitBadInput = 2,  ///< bad arguments or an unsupported problem
};

/// Values of the shared options. A chapter sets backend-appropriate defaults before calling
/// add_common_options (the defaults are shown by `--help`).
struct CommonOptions {
    std::string kernel = "all";  ///< `--kernel NAME|all`
    std::uint64_t seed = 42;     ///< `--seed`
    int iters = 20;              ///< `--iters`: timed runs (the median is reported)
    int warmup = 3;              ///< `--warmup`: untimed runs first
    bool check_only = false;     ///< `--check-only`: validate, do not time
    std::string json;            ///< `--json FILE`, "-" for stdout
    std::string dump;            ///< `--dump DIR`: inputs and outputs as .npy
    bool profile = false;        ///< `--profile`: the simulator's counters and a modelled time per version
    std::string gpu = "H200";    ///< `--gpu` (the profile's model; chapters with their own `--gpu` use theirs)

    /// True when `--kernel` selects @p name (or is "all").
    bool selects(const std::string& name) const { return kernel == "all" || kernel == name; }
};

/// Registers `--kernel` (checked against @p kernel_names plus "all"), `--seed`, `--iters`,
/// `--warmup`, `--check-only`, `--profile`, `--json` and `--dump` on @p app.
void add_common_options(CLI::App& app, CommonOptions& options, const std::vector<std::string>& kernel_names);

/// Parses the command line and checks the output options together (check_output_options()).
/// Returns std::nullopt when the program should continue, or the exit code to return now: 0
/// after `--help`, kExitBadInput after an error, whose one-line message (naming the option)
/// has been printed to stderr as "<program>: error: ...".
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

/// Prints "<program>: error: <message>" to stderr and returns kExitBadInput, for problems
/// found after parsing (for example, a problem too large for device memory).
int bad_input(const CLI::App& app, const std::string& message);

/// The budgets a run's inputs are checked against before the work starts, so that an accepted
/// option never makes a program take all the machine's memory or run for hours. Each comes
/// from an environment variable, read when it is needed, for a user who wants a larger run:
///
/// | budget | variable | default |
/// | :----- | :------- | :------ |
/// | host memory a run plans to hold (timelines, caches' books) | `PD_HOST_MEMORY_GIB` | 4 GiB |
/// | work a run asks of the simulator (the model's FLOPs; a kernel's, pd::sim_launch_work()) | `PD_SIM_WORK_GFLOP` |
/// 100 GFLOP (minutes on 2 cores) |
/// | work a run asks of the serving cost model (request-steps: each request once per step it is in,
/// summed over every replay; pd::serving::replay_work()) | `PD_COST_MODEL_WORK` | 2e9 request-steps (about two
/// minutes on 2 cores) |
struct Budget {
    const char* variable;   ///< the environment variable that raises it
    double default_value;   ///< in the variable's unit
    double unit;            ///< bytes or FLOPs per unit of the variable
    const char* unit_name;  ///< "GiB", "GFLOP"
    const char* what;       ///< "host memory", "simulator work"
};
/// The host memory a run plans to hold: `PD_HOST_MEMORY_GIB`, 4 GiB by default.
inline constexpr Budget kHostMemoryBudget{"PD_HOST_MEMORY_GIB", 4, double(1ull << 30), "GiB", "host memory"};
/// The arithmetic a run asks of the simulator: `PD_SIM_WORK_GFLOP`, 100 GFLOP by default.
inline constexpr Budget kSimWorkBudget{"PD_SIM_WORK_GFLOP", 100, 1e9, "GFLOP", "simulator work"};
/// The replays a run asks of the serving cost model: `PD_COST_MODEL_WORK`, in billions of
/// request-steps, 2 by default.
inline constexpr Budget kCostModelBudget{"PD_COST_MODEL_WORK", 2, 1e9, "billion request-steps", "cost-model work"};

/// The budget's value (bytes or FLOPs): its variable when set, else its default.
/// @throws std::invalid_argument naming the variable when it is set but not a positive number
double budget_limit(const Budget& budget);

/// Throws std::invalid_argument when @p amount (bytes or FLOPs) passes @p budget: "<what>
/// would take about <amount> of <budget>, more than its <limit> (<variable> raises it):
/// <advice>". The programs turn it into exit code 2.
void require_within(const Budget& budget, double amount, const std::string& what, const std::string& advice);

/// The stream for human-readable output: stdout, or stderr when the JSON goes to stdout
/// (`--json -`), so that stdout stays valid JSON.
std::ostream& text_out(const CommonOptions& options);

/// The flag a program's user typed for each field a library names in its errors: libraries
/// say `SchedulerConfig.token_budget = 0 must be >= 1`, the program says `--token-budget = 0
/// must be >= 1`. Pairs of (field, flag), longest match first when one field is a prefix of another.
using FlagNames = std::vector<std::pair<std::string, std::string>>;

/// @p message with every field of @p names replaced by its flag.
/// @param message a library's error  @param names the program's fields and flags
std::string with_flags(std::string message, const FlagNames& names);

/// Runs a chapter's `run(argc, argv)` and turns an escaping exception into an exit code:
/// std::invalid_argument (bad input found after parsing, or an unsupported problem found by a
/// launcher) prints "<program>: error: ..." (the fields of @p names replaced by their flags)
/// and gives kExitBadInput; any other exception (a CUDA error, an I/O failure) prints
/// "<program>: ..." and gives kExitMismatch. The program's name is the file name of argv[0].
int guarded_main(int (*run)(int, char**), int argc, char** argv, const FlagNames& names = {});

}  // namespace pd
