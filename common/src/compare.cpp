// Human-readable comparison reports.
#include "pd/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace pd {

CompareResult check(const Expected& e, std::span<const float> out) {
    std::vector<float> got;  // the checked elements, in the order of e.values
    if (e.sampled()) {
        if (e.row_length == 0) throw std::invalid_argument("check: Expected.rows needs row_length");
        got.reserve(e.rows.size() * e.row_length);
        for (std::size_t r : e.rows) {
            if ((r + 1) * e.row_length > out.size())
                throw std::invalid_argument("check: row " + std::to_string(r) + " is past the end of the output");
            got.insert(got.end(), out.begin() + std::ptrdiff_t(r * e.row_length),
                       out.begin() + std::ptrdiff_t((r + 1) * e.row_length));
        }
    } else {
        got.assign(out.begin(), out.end());
    }
    CompareResult c =
        !e.values_lowp.empty()  ? compare_to_lowp_reference<float, double>(got, e.values, e.values_lowp, 2.0)
        : !e.magnitudes.empty() ? compare_sums<float, double>(got, e.values, e.magnitudes, e.sum_length, e.tolerance)
                                : compare<float, double>(got, e.values, e.tolerance);
    if (e.sampled())  // back to indices into the whole output
        for (Mismatch& m : c.first) m.index = e.rows[m.index / e.row_length] * e.row_length + m.index % e.row_length;
    // An unchecked element can still hold the poison: every output must be finite.
    std::size_t unchecked_non_finite = 0;
    for (float v : out) unchecked_non_finite += !std::isfinite(v);
    unchecked_non_finite -= std::min(unchecked_non_finite, c.non_finite);
    if (unchecked_non_finite > 0) {
        c.passed = false;
        c.non_finite += unchecked_non_finite;
        c.rule += "; every output finite";
    }
    return c;
}

std::string describe(const CompareResult& r, std::string_view context, std::span<const std::size_t> shape) {
    std::ostringstream out;
    out << (r.passed ? "ok" : "MISMATCH") << " [" << context << "] " << r.count << " elements; rule: " << r.rule
        << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "  max abs err %.3g, max rel err %.3g, rel L2 err %.3g\n", r.max_abs_err,
                  r.max_rel_err, r.rel_l2_err);
    out << line;
    if (r.non_finite > 0) out << "  " << r.non_finite << " outputs are NaN or inf (never written, or overflow)\n";
    if (r.all_zero_output) out << "  the output is all zeros but the reference is not\n";
    if (r.bad > 0) out << "  " << r.bad << " of " << r.count << " elements fail; first:\n";
    for (const Mismatch& m : r.first) {
        out << "    [";
        if (!shape.empty()) {
            std::vector<std::size_t> coord(shape.size());
            std::size_t rest = m.index;
            for (std::size_t d = shape.size(); d-- > 0;) {
                coord[d] = shape[d] ? rest % shape[d] : 0;
                rest = shape[d] ? rest / shape[d] : 0;
            }
            for (std::size_t d = 0; d < coord.size(); ++d) out << (d ? "," : "") << coord[d];
        } else {
            out << m.index;
        }
        std::snprintf(line, sizeof line, "] out=%.9g ref=%.9g diff=%.3g\n", m.out, m.ref, m.out - m.ref);
        out << line;
    }
    return out.str();
}

}  // namespace pd
