/// @file report.hpp
/// @brief What a chapter reports: the cost and roofs a kernel is judged by, one result row per
/// version, the results table and the JSON object (schema: CONTRIBUTING.md, "Conventions of a chapter program"). Host
/// code, backend-independent; pd/bench.hpp fills the rows.
#pragma once

#include "pd/half.hpp"
#include "pd/registry.hpp"
#include "pd/roofline.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
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
    /// Why the version did not run on this device ("needs compute capability 8.0"), or "" when
    /// it ran. A row that did not run has no verdict: `passed` is null in its JSON, its status
    /// says "not run: <why>", and it changes no exit code.
    std::string not_run;
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
/// The @p p-th percentile of @p values (0 <= p <= 100) with linear interpolation between the
/// closest ranks, as numpy's default and vLLM's serving benchmark compute TTFT and ITL
/// percentiles; 0 for no values.
double percentile(std::vector<double> values, double p);
/// percentile() of @p values already sorted ascending (no copy, no sort: for several
/// percentiles of one large set).
double sorted_percentile(const std::vector<double>& values, double p);

/// Formats a byte count with a binary unit ("1.50 GiB").
std::string format_bytes(double bytes);
/// Formats a FLOP count with a decimal unit ("1.40 TFLOP").
std::string format_flops(double flops);

/// FLOPs a kernel must do and the fewest bytes it must move in one run: the cost formulas of
/// each topic (`Shape::flops()`, `Shape::min_bytes()`) fill it.
struct Cost {
    double flops = 0;  ///< 0 for a kernel judged by its bytes alone (a copy)
    double bytes = 0;  ///< 0 for a kernel judged by its FLOPs alone (an FMA loop)
    /// FLOPs per byte, 0 without bytes.
    double intensity() const { return bytes > 0 ? flops / bytes : 0; }
};

/// The roofs of this run that kernels are placed against: the memory roof, and a compute roof
/// per kind of arithmetic unit (a kernel is judged against the units it runs on).
struct Roofs {
    std::optional<double> bytes_per_s;  ///< copy bandwidth measured in this run (bytes read plus written)
    std::optional<double> fp32_flops;   ///< SIMT FP32 peak: SMs x FP32 lanes x 2 FLOPs x clock
    std::optional<double> bf16_flops;   ///< dense bf16 tensor rate from the datasheet of the device's preset
    std::string bf16_source;            ///< where bf16_flops comes from

    /// The compute roof of units @p u, if known: the FP32 rate for SIMT, the bf16 tensor rate.
    std::optional<double> peak(Units u) const { return u == Units::simt ? fp32_flops : bf16_flops; }
    /// The shortest time the roofline allows, max(flops / peak, bytes / bandwidth), in seconds;
    /// empty when a roof that @p cost needs is unknown.
    std::optional<double> floor_s(const Cost& cost, Units u) const;
    /// Memory-bound or compute-bound: which term of floor_s() is larger (a tie is
    /// compute-bound, as roofline::bound_at()); empty as floor_s().
    std::optional<roofline::Bound> bound(const Cost& cost, Units u) const;
};

/// One row of a chapter's results: a version (or a baseline) on one problem, validated and,
/// when timed, placed on the roofline.
struct Row {
    KernelResult result;                              ///< name, time, rates, errors, verdict
    DType dtype = DType::fp32;                        ///< input type
    Units units = Units::simt;                        ///< the units it computes on: its compute roof
    Cost cost;                                        ///< of one run
    double tokens = 0;                                ///< tokens one run processes (0: not counted), for tokens/s
    std::optional<double> floor_ms;                   ///< the roofline's shortest time
    std::optional<roofline::Bound> bound;             ///< which roof limits it
    std::optional<double> copy_fraction;              ///< GB/s over the measured copy bandwidth
    std::string baseline;                             ///< the row vs_baseline compares with
    nlohmann::json point = nlohmann::json::object();  ///< problem sizes (the sweep point), merged into the JSON
    nlohmann::json profile;  ///< `--profile` on the simulator: pd::profile_json() (null otherwise)

    /// Tokens per second, when tokens are counted and the row was timed.
    std::optional<double> tokens_per_s() const;
};

/// The JSON of a row: the KernelResult fields, dtype, units, flops, bytes, arithmetic_intensity,
/// floor_ms, bound, copy_fraction, tokens_per_s, baseline, profile (null without `--profile`), the point's fields (a
/// point key equal to one of those throws std::invalid_argument), and, when @p baseline_alias is given (e.g.
/// "vs_cublas"), vs_baseline once more under that name.
nlohmann::json to_json(const Row& row, const std::string& baseline_alias = "");

/// A column of a results table: its header and how a row's cell is written. A column made
/// from a header alone is a standard one: "kernel", "dtype", "time ms", "step ms", "GB/s",
/// "TFLOP/s", "FLOP/byte", "floor ms", "of roofline", "of copy", "bound", "tokens/s",
/// "vs baseline", "vs cuBLAS", "max abs err", "status" (any other header throws
/// std::invalid_argument).
struct Column {
    std::string header;                           ///< the header cell
    std::function<std::string(const Row&)> cell;  ///< the text of one row's cell
    /// A standard column. @param standard_header one of the headers listed above
    Column(const char* standard_header);  // NOLINT: implicit, so tables list headers as strings
    /// A custom column. @param h the header  @param c the cell of a row
    Column(std::string h, std::function<std::string(const Row&)> c) : header(std::move(h)), cell(std::move(c)) {}
    /// A column showing the value of @p key in each row's point. @param h the header  @param key the point key
    static Column point(std::string h, std::string key);
    /// A column showing element @p i of the array at @p key of each row's point (a row holds one
    /// array for a series, not a key per element). @param h the header  @param key the array's
    /// key  @param i the element
    static Column element(std::string h, std::string key, std::size_t i);
    /// A column showing the fraction at @p key of each row's point as a percentage ("12.5%").
    /// @param h the header  @param key the point key
    static Column percent(std::string h, std::string key);
    /// A column showing each row's name (KernelResult::kernel). @param h the header
    static Column name(std::string h);
};

/// The table of @p rows with @p columns, rendered. With @p check_only (a --check-only run,
/// where nothing is timed) the check's own columns, "max abs err" and "status", are added where
/// missing, and the columns that are "-" in every row are left out: a sweep validated point by
/// point shows its verdicts, not a grid of dashes.
std::string render(const std::vector<Row>& rows, const std::vector<Column>& columns, bool check_only = false);

/// Builds the chapter's JSON object: chapter, backend (pass pd::backend_name()), device,
/// problem, results (to_json of each row, with @p baseline_alias), passed (true when every row
/// that ran passed; an empty list passes). Extra sections (e.g. "sweep") are added by the caller.
nlohmann::json make_report(const std::string& chapter, const std::string& backend, const nlohmann::json& device,
                           const nlohmann::json& problem, const std::vector<Row>& rows,
                           const std::string& baseline_alias = "");

/// Writes @p j (indented) to @p path, or to stdout when @p path is "-". Throws on I/O error.
void write_json(const nlohmann::json& j, const std::string& path);

}  // namespace pd
