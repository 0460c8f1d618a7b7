/// @file report.hpp
/// @brief The results table every chapter prints and the JSON object it writes
/// (schema: DESIGN.md section 4).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace pd {

/// One row of a chapter's results: a kernel version (or a ceiling) that was validated and,
/// on a GPU, timed. Fields that do not apply stay empty and become null in JSON.
struct KernelResult {
    /// Kernel (or ceiling) name, as accepted by `--kernel`.
    std::string kernel;
    std::optional<double> time_ms;            ///< median time of one run
    std::optional<double> gbps;               ///< bytes moved / time, 1e9 bytes per second
    std::optional<double> tflops;             ///< FLOPs / time, 1e12 per second
    std::optional<double> roofline_fraction;  ///< floor time / measured time
    std::optional<double> vs_baseline;        ///< baseline time / this time (>1: faster)
    /// Largest |out - ref| of the validation.
    std::optional<double> max_abs_err;
    /// Largest |out - ref| / |ref| of the validation.
    std::optional<double> max_rel_err;
    /// True when the output matched its reference.
    bool passed = false;
};

/// The JSON of one result row (missing values as null).
nlohmann::json to_json(const KernelResult& r);

/// A plain-text table with right-aligned numeric columns, printed after a run.
class Table {
public:
    /// A table with these column @p headers and no rows.
    explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    /// Adds a row; it must have as many cells as there are headers.
    void add_row(std::vector<std::string> cells);
    /// Renders the table with a header rule; each line ends in a newline.
    std::string render() const;

private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

/// Formats one number with a printf format (e.g. "%.1f", "%.0f GB/s"), for the text chapters
/// print around their tables. @param format a printf format with one double conversion
/// @param v the number
std::string fmt(const char* format, double v);

/// Formats a number with @p digits significant digits, or "-" when empty.
std::string format_number(std::optional<double> v, int digits = 4);
/// Formats a byte count with a binary unit ("1.50 GiB").
std::string format_bytes(double bytes);
/// Formats a FLOP count with a decimal unit ("1.40 TFLOP").
std::string format_flops(double flops);

/// The standard results table: kernel, time, GB/s, TFLOP/s, roofline fraction, vs baseline,
/// max abs error, status.
Table results_table(const std::vector<KernelResult>& results);

/// Builds the chapter's JSON object: chapter, backend (pass pd::backend_name()), device,
/// problem, results, passed (true when every result passed; an empty list passes). Extra
/// sections (e.g. "analysis") are added by the caller.
nlohmann::json make_report(const std::string& chapter, const std::string& backend,
                           const nlohmann::json& device,
                           const nlohmann::json& problem, const std::vector<KernelResult>& results);

/// Writes @p j (indented) to @p path, or to stdout when @p path is "-". Throws on I/O error.
void write_json(const nlohmann::json& j, const std::string& path);

}  // namespace pd
