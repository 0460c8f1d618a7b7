// Shared command-line options and the parse-or-exit-2 convention.
#include "pd/cli.hpp"

#include "pd/files.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <system_error>

namespace pd {

void add_common_options(CLI::App& app, CommonOptions& o, const std::vector<std::string>& kernel_names) {
    std::vector<std::string> choices = kernel_names;
    choices.push_back("all");
    app.add_option("--kernel", o.kernel, "Kernel version to run, or all")
        ->check(CLI::IsMember(choices))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of every random input (0 to 2^64 - 1)")
        ->check([](const std::string& text) -> std::string {
            std::uint64_t v = 0;  // all of it, in range: CLI11 alone would clamp 2^64 and more to 2^64 - 1
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (text.empty() || ec != std::errc() || end != text.data() + text.size())
                return "a whole number from 0 to 18446744073709551615 expected, got '" + text + "'";
            return {};
        })
        ->capture_default_str();
    app.add_option("--iters", o.iters, "Timed runs per kernel (the median is reported)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    app.add_option("--warmup", o.warmup, "Untimed runs before timing")
        ->check(CLI::Range(0, 10000))
        ->capture_default_str();
    app.add_flag("--check-only", o.check_only, "Validate every kernel against the reference; do not time");
    app.add_flag("--profile", o.profile,
                 "On the simulator: count each version's memory requests, sectors, shared-memory wavefronts and "
                 "warp operations, and model its time on --gpu (docs/simulator.md, \"The profiler\")");
    app.add_option("--json", o.json, "Write the results as JSON to FILE ('-' for stdout)")
        ->type_name("FILE")
        ->group(kOutputGroup);  // checked with the other outputs: check_output_options()
    app.add_option(
           "--dump", o.dump,
           "Write inputs and outputs as .npy files into DIR (new, empty, or an earlier dump, which is replaced)")
        ->type_name("DIR")
        ->group(kOutputGroup)
        ->check([](const std::string& dir) -> std::string {
            if (std::filesystem::exists(dir) && !std::filesystem::is_directory(dir))
                return dir + " exists and is not a directory";
            return {};
        });
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return kExitOk;
    } catch (const CLI::CallForAllHelp&) {
        std::cout << app.help("", CLI::AppFormatMode::All);
        return kExitOk;
    } catch (const CLI::ParseError& e) {
        std::cerr << app.get_name() << ": error: " << e.what() << "\n"
                  << "Run with --help for the options and their ranges.\n";
        return kExitBadInput;
    }
    // CLI11 turns an empty value into 0 for a number option, and a set of allowed numbers
    // (CLI::IsMember) lets it through: `--group ''` would reach a division by zero. Refuse it.
    for (const CLI::Option* o : app.get_options()) {
        const std::string type = o->get_type_name();
        if (!type.starts_with("INT") && !type.starts_with("UINT") && !type.starts_with("FLOAT")) continue;
        for (const std::string& value : o->results())
            if (value.find_first_not_of(" \t") == std::string::npos) {
                std::cerr << app.get_name() << ": error: " << o->get_name() << " '" << value
                          << "': a number expected (--help lists the option's range)\n";
                return kExitBadInput;
            }
    }
    // NaN passes every CLI::Range (each comparison with it is false): refuse it for every
    // number option here, before a program could carry it into a formula.
    for (const CLI::Option* o : app.get_options()) {
        if (!o->get_type_name().starts_with("FLOAT")) continue;  // "FLOAT", or "FLOAT:<its range>"
        for (const std::string& value : o->results()) {
            const double v = std::strtod(value.c_str(), nullptr);
            if (std::isnan(v)) {
                std::cerr << app.get_name() << ": error: " << o->get_name() << " " << value
                          << ": not a number; give a value in the option's range (--help lists them)\n";
                return kExitBadInput;
            }
        }
    }
    // The output options together, before any work: a run must not fail at its end because
    // two outputs name one file or a file option names a directory.
    if (const std::string problem = check_output_options(app); !problem.empty()) {
        std::cerr << app.get_name() << ": error: " << problem << "\n";
        return kExitBadInput;
    }
    return std::nullopt;
}

double budget_limit(const Budget& budget) {
    const char* text = std::getenv(budget.variable);
    if (text == nullptr || *text == '\0') return budget.default_value * budget.unit;
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(v > 0) || !std::isfinite(v))
        throw std::invalid_argument(std::string(budget.variable) + "=" + text + ": a positive number of " +
                                    budget.unit_name + " expected");
    return v * budget.unit;
}

void require_within(const Budget& budget, double amount, const std::string& what, const std::string& advice) {
    const double limit = budget_limit(budget);
    if (amount <= limit) return;
    char text[160];
    std::snprintf(text, sizeof text, "%.3g %s of %s, more than its %.3g %s", amount / budget.unit, budget.unit_name,
                  budget.what, limit / budget.unit, budget.unit_name);
    throw std::invalid_argument(what + " would take about " + text + " (" + budget.variable + " raises it): " + advice);
}

int bad_input(const CLI::App& app, const std::string& message) {
    std::cerr << app.get_name() << ": error: " << message << "\n";
    return kExitBadInput;
}

std::string with_flags(std::string message, const FlagNames& names) {
    for (const auto& [field, flag] : names)
        for (std::size_t at = message.find(field); at != std::string::npos; at = message.find(field, at + flag.size()))
            message.replace(at, field.size(), flag);
    return message;
}

int guarded_main(int (*run)(int, char**), int argc, char** argv, const FlagNames& names) {
    const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "program";
    try {
        return run(argc, argv);
    } catch (const std::invalid_argument& e) {
        std::cerr << program << ": error: " << with_flags(e.what(), names) << "\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << program << ": " << e.what() << "\n";
        return kExitMismatch;
    }
}

std::ostream& text_out(const CommonOptions& options) {
    return options.json == "-" ? std::cerr : std::cout;
}

}  // namespace pd
