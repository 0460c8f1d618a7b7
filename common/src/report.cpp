// Results table and JSON report shared by every chapter.
#include "pd/report.hpp"

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
            {"passed", r.passed}};
}

void Table::add_row(std::vector<std::string> cells) {
    if (cells.size() != headers_.size())
        throw std::invalid_argument("Table::add_row: expected " + std::to_string(headers_.size()) +
                                    " cells, got " + std::to_string(cells.size()));
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
            if (right) out << std::string(pad, ' ') << cells[c];
            else out << cells[c] << (c + 1 < cells.size() ? std::string(pad, ' ') : "");
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

Table results_table(const std::vector<KernelResult>& results) {
    Table t({"kernel", "time ms", "GB/s", "TFLOP/s", "of roofline", "vs baseline", "max abs err",
             "status"});
    for (const KernelResult& r : results) {
        t.add_row({r.kernel, format_number(r.time_ms), format_number(r.gbps), format_number(r.tflops),
                   format_number(r.roofline_fraction, 3), format_number(r.vs_baseline, 3),
                   format_number(r.max_abs_err, 3), r.passed ? "ok" : "FAILED"});
    }
    return t;
}

nlohmann::json make_report(const std::string& chapter, const std::string& backend,
                           const nlohmann::json& device, const nlohmann::json& problem,
                           const std::vector<KernelResult>& results) {
    nlohmann::json list = nlohmann::json::array();
    bool all_passed = true;
    for (const KernelResult& r : results) {
        list.push_back(to_json(r));
        all_passed = all_passed && r.passed;
    }
    return {{"chapter", chapter}, {"backend", backend}, {"device", device},
            {"problem", problem}, {"results", list},     {"passed", all_passed}};
}

void write_json(const nlohmann::json& j, const std::string& path) {
    const std::string text = j.dump(2) + "\n";
    if (path == "-") {
        std::cout << text << std::flush;
        return;
    }
    std::ofstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path + " for writing");
    f << text;
    if (!f) throw std::runtime_error("error writing " + path);
}

}  // namespace pd
