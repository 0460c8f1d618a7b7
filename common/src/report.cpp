// Results table and JSON report shared by every chapter.
#include "pd/report.hpp"

#include "pd/files.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace pd {

namespace {

nlohmann::json opt(const std::optional<double>& v) {
    if (v && std::isfinite(*v)) return *v;
    return nullptr;
}

bool is_numeric_cell(const std::string& s) {
    if (s.empty()) return false;
    const char c = s[0];
    return (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '+';
}

}  // namespace

nlohmann::json to_json(const KernelResult& r) {
    return {{"kernel", r.kernel},
            {"time_ms", opt(r.time_ms)},
            {"gbps", opt(r.gbps)},
            {"tflops", opt(r.tflops)},
            {"roofline_fraction", opt(r.roofline_fraction)},
            {"vs_baseline", opt(r.vs_baseline)},
            {"max_abs_err", opt(r.max_abs_err)},
            {"max_rel_err", opt(r.max_rel_err)},
            {"passed", r.not_run.empty() ? nlohmann::json(r.passed) : nlohmann::json(nullptr)},
            {"not_run", r.not_run.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.not_run)}};
}

void Table::add_row(std::vector<std::string> cells) {
    if (cells.size() != headers_.size())
        throw std::invalid_argument("Table::add_row: expected " + std::to_string(headers_.size()) + " cells, got " +
                                    std::to_string(cells.size()));
    rows_.push_back(std::move(cells));
}

std::string Table::render() const {
    std::vector<std::size_t> width(headers_.size());
    for (std::size_t c = 0; c < headers_.size(); ++c) {
        width[c] = headers_[c].size();
        for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
    }
    std::ostringstream out;
    auto emit = [&](const std::vector<std::string>& cells, bool header) {
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::size_t pad = width[c] - cells[c].size();
            const bool right = !header && c > 0 && is_numeric_cell(cells[c]);
            if (c > 0) out << "  ";
            if (right)
                out << std::string(pad, ' ') << cells[c];
            else
                out << cells[c] << (c + 1 < cells.size() ? std::string(pad, ' ') : "");
        }
        out << '\n';
    };
    emit(headers_, true);
    std::size_t total = 0;
    for (std::size_t w : width) total += w;
    out << std::string(total + 2 * (width.size() - 1), '-') << '\n';
    for (const auto& row : rows_) emit(row, false);
    return out.str();
}

std::string fmt(const char* format, double v) {
    char buf[128];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

std::string format_number(std::optional<double> v, int digits) {
    if (!v || !std::isfinite(*v)) return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, *v);
    return buf;
}

double percentile(std::vector<double> values, double p) {
    std::sort(values.begin(), values.end());
    return sorted_percentile(values, p);
}

double sorted_percentile(const std::vector<double>& values, double p) {
    if (values.empty()) return 0;
    const double x = std::clamp(p, 0.0, 100.0) / 100.0 * double(values.size() - 1);
    const std::size_t i = std::size_t(x);
    return i + 1 < values.size() ? values[i] + (x - double(i)) * (values[i + 1] - values[i]) : values.back();
}

std::string format_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (std::fabs(bytes) >= 1024 && u < 5) {
        bytes /= 1024;
        ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

std::string format_flops(double flops) {
    const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
    int u = 0;
    while (std::fabs(flops) >= 1000 && u < 6) {
        flops /= 1000;
        ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", flops, units[u]);
    return buf;
}

std::optional<double> Roofs::floor_s(const Cost& cost, Units u) const {
    const std::optional<double> p = peak(u);
    if ((cost.bytes > 0 && !bytes_per_s) || (cost.flops > 0 && !p) || (cost.bytes <= 0 && cost.flops <= 0))
        return std::nullopt;
    const double compute = cost.flops > 0 ? cost.flops / *p : 0,
                 memory = cost.bytes > 0 ? cost.bytes / *bytes_per_s : 0;
    return std::max(compute, memory);
}

std::optional<roofline::Bound> Roofs::bound(const Cost& cost, Units u) const {
    if (!floor_s(cost, u)) return std::nullopt;
    const double compute = cost.flops > 0 ? cost.flops / *peak(u) : 0,
                 memory = cost.bytes > 0 ? cost.bytes / *bytes_per_s : 0;
    return compute >= memory ? roofline::Bound::Compute : roofline::Bound::Memory;  // as roofline::bound_at()
}

std::optional<double> Row::tokens_per_s() const {
    if (tokens <= 0 || !result.time_ms || *result.time_ms <= 0) return std::nullopt;
    return tokens / (*result.time_ms * 1e-3);
}

nlohmann::json to_json(const Row& row, const std::string& baseline_alias) {
    nlohmann::json j = to_json(row.result);
    j["dtype"] = to_string(row.dtype);
    j["units"] = to_string(row.units);
    j["flops"] = row.cost.flops > 0 ? nlohmann::json(row.cost.flops) : nlohmann::json(nullptr);
    j["bytes"] = row.cost.bytes > 0 ? nlohmann::json(row.cost.bytes) : nlohmann::json(nullptr);
    j["arithmetic_intensity"] = row.cost.bytes > 0 ? nlohmann::json(row.cost.intensity()) : nlohmann::json(nullptr);
    j["floor_ms"] = opt(row.floor_ms);
    j["bound"] = row.bound ? nlohmann::json(roofline::to_string(*row.bound)) : nlohmann::json(nullptr);
    j["copy_fraction"] = opt(row.copy_fraction);
    j["tokens_per_s"] = opt(row.tokens_per_s());
    j["baseline"] = row.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.baseline);
    if (!baseline_alias.empty()) j[baseline_alias] = j["vs_baseline"];
    j["profile"] = row.profile;  // null unless `--profile` on the simulator
    for (const auto& [key, value] : row.point.items()) {
        if (j.contains(key))
            throw std::invalid_argument("to_json(Row): point key '" + key + "' would replace a result field");
        j[key] = value;
    }
    return j;
}

namespace {

/// The cell of standard column @p header for @p r, or "" when the header is not a standard one.
std::optional<std::string> standard_cell(const std::string& header, const Row& r) {
    const KernelResult& k = r.result;
    if (header == "kernel") return k.kernel;
    if (header == "dtype") return std::string(to_string(r.dtype));
    if (header == "time ms" || header == "step ms")
        return k.passed || !k.not_run.empty() ? format_number(k.time_ms) : "FAILED";
    if (header == "GB/s") return format_number(k.gbps);
    if (header == "TFLOP/s") return format_number(k.tflops);
    if (header == "FLOP/byte") {
        if (r.cost.bytes <= 0) return "-";
        const double i = r.cost.intensity();
        return fmt(i >= 100 ? "%.0f" : i >= 10 ? "%.1f" : "%.2f", i);
    }
    if (header == "floor ms") return format_number(r.floor_ms);
    if (header == "of roofline") return format_number(k.roofline_fraction, 3);
    if (header == "of copy") return format_number(r.copy_fraction, 3);
    if (header == "bound") return r.bound ? std::string(roofline::to_string(*r.bound)) : "-";
    if (header == "tokens/s") return format_number(r.tokens_per_s());
    if (header == "vs baseline" || header == "vs cuBLAS") return format_number(k.vs_baseline, 3);
    if (header == "max abs err") return format_number(k.max_abs_err, 3);
    if (header == "status")
        return !k.not_run.empty() ? "not run: " + k.not_run : std::string(k.passed ? "ok" : "FAILED");
    return std::nullopt;
}

/// A point value as table text: integers as integers, other numbers with 3 digits, "-" for null.
std::string point_text(const nlohmann::json& v) {
    if (v.is_null()) return "-";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return std::to_string(v.get<long long>());
    if (v.is_number()) return format_number(v.get<double>(), 3);
    return v.dump();
}

}  // namespace

Column::Column(const char* standard_header) : header(standard_header) {
    Row probe;
    if (!standard_cell(header, probe))
        throw std::invalid_argument("Column: '" + header + "' is not a standard column (give a cell function)");
    cell = [h = header](const Row& r) { return *standard_cell(h, r); };
}

Column Column::point(std::string h, std::string key) {
    return Column(std::move(h), [key = std::move(key)](const Row& r) {
        return r.point.contains(key) ? point_text(r.point[key]) : std::string("-");
    });
}

Column Column::element(std::string h, std::string key, std::size_t i) {
    return Column(std::move(h), [key = std::move(key), i](const Row& r) {
        return r.point.contains(key) && i < r.point[key].size() ? point_text(r.point[key][i]) : std::string("-");
    });
}

Column Column::percent(std::string h, std::string key) {
    return Column(std::move(h), [key = std::move(key)](const Row& r) {
        return r.point.contains(key) ? fmt("%.1f%%", 100 * r.point[key].get<double>()) : std::string("-");
    });
}

Column Column::name(std::string h) {
    return Column(std::move(h), [](const Row& r) { return r.result.kernel; });
}

std::string render(const std::vector<Row>& rows, const std::vector<Column>& columns, bool check_only) {
    std::vector<Column> all = columns, shown;
    if (check_only)
        for (const char* h : {"max abs err", "status"})
            if (std::none_of(all.begin(), all.end(), [&](const Column& c) { return c.header == h; }))
                all.emplace_back(h);
    for (const Column& c : all) {
        const bool all_dashes =
            !rows.empty() && std::all_of(rows.begin(), rows.end(), [&](const Row& r) { return c.cell(r) == "-"; });
        if (!check_only || !all_dashes) shown.push_back(c);
    }
    std::vector<std::string> headers;
    for (const Column& c : shown) headers.push_back(c.header);
    Table t(headers);
    for (const Row& r : rows) {
        std::vector<std::string> cells;
        for (const Column& c : shown) cells.push_back(c.cell(r));
        t.add_row(std::move(cells));
    }
    return t.render();
}

nlohmann::json make_report(const std::string& chapter, const std::string& backend, const nlohmann::json& device,
                           const nlohmann::json& problem, const std::vector<Row>& rows,
                           const std::string& baseline_alias) {
    nlohmann::json list = nlohmann::json::array();
    bool all_passed = true;
    for (const Row& r : rows) {
        list.push_back(to_json(r, baseline_alias));
        all_passed = all_passed && (r.result.passed || !r.result.not_run.empty());
    }
    return {{"chapter", chapter}, {"backend", backend}, {"device", device},
            {"problem", problem}, {"results", list},    {"passed", all_passed}};
}

void write_json(const nlohmann::json& j, const std::string& path) {
    const std::string text = j.dump(2) + "\n";
    if (path == "-") {
        std::cout << text << std::flush;
        return;
    }
    write_file_atomically(path, [&](std::ostream& f) { f << text; });
}

}  // namespace pd
