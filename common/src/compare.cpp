// Human-readable comparison reports.
#include "pd/compare.hpp"

#include <cstdio>
#include <sstream>

namespace pd {

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
