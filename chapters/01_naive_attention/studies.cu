// Chapter 01's further studies: where a version's time goes (each of its three kernels alone),
// and the sweep over S that shows the score matrix's quadratic growth. The lesson is main.cu.
#include "chapter.hpp"

#include <map>
#include <optional>
#include <string>

namespace ch01 {

using pd::fmt;

/// Where the time goes: each kernel of a version on its own (the softmax is in place, so it is
/// timed after recomputing the scores, whose time is subtracted), printed and returned as JSON.
nlohmann::json time_per_kernel(pd::Bench& bench, Problem& p, const std::vector<pd::Row>& rows) {
    nlohmann::json breakdown = nlohmann::json::object();
    pd::Table t({"version", "scores", "softmax", "P V", "scores %", "softmax %", "P V %"});
    for (const pd::Row& r : rows) {
        if (!r.result.time_ms) continue;
        const std::string& v = r.result.kernel;
        const double scores = bench.time_ms([&] { att::scores(p.dq.data(), p.dk.data(), p.work.data(), p.s); });
        const double softmax = bench.time_ms([&] {
            att::scores(p.dq.data(), p.dk.data(), p.work.data(), p.s);
            att::softmax(v, p.work.data(), p.s);
        }) - scores;
        const double pv = bench.time_ms([&] { att::pv(p.work.data(), p.dv.data(), p.out.data(), p.s); });
        const double sum = scores + softmax + pv;
        t.add_row({v, pd::format_number(scores), pd::format_number(softmax), pd::format_number(pv),
                   fmt("%.0f", 100 * scores / sum), fmt("%.0f", 100 * softmax / sum), fmt("%.0f", 100 * pv / sum)});
        breakdown[v] = {{"scores_ms", scores}, {"softmax_ms", softmax}, {"pv_ms", pv}, {"total_ms", *r.result.time_ms}};
    }
    if (!breakdown.empty())
        bench.out() << "\ntime per kernel (median ms and share of the sum)" << (bench.sim() ? ", CPU figures" : "")
                    << ":\n"
                    << t.render();
    return breakdown;
}

// [ch01_sweep]
/// --sweep: time and score bytes against S = Sq = Sk at @p shape's B, H and d (each point
/// validated); doubling S multiplies the score matrix by 4.
std::vector<pd::Row> sweep_versions(pd::Bench& bench, const att::Shape& shape) {
    std::ostream& out = bench.out();
    std::vector<pd::Row> sweep;
    out << "\nsweep over S = Sq = Sk (B = " << shape.batch << ", H = " << shape.heads << ", d = " << shape.head_dim
        << "; each point validated against the reference, on sampled rows when large"
        << (bench.sim() ? "; CPU figures" : "") << "):\n";
    std::map<std::string, double> previous;  // each version's time at the previous S
    for (int S = bench.sim() ? 32 : 256; S <= (bench.sim() ? 256 : 8192); S *= 2) {
        att::Shape s = shape;
        s.q_len = s.kv_len = S;
        if (!bench.fits(problem_bytes(s))) {
            out << "S = " << S << ": does not fit in device memory, sweep stops\n";
            break;
        }
        Problem sp = make_problem(s, bench.options.seed, 10 * std::uint64_t(S), false);
        for (pd::Row& r : run_versions(bench, sp, {{"seq_len", S}, {"score_bytes", score_bytes(s)}})) {
            const std::optional<double>& ms = r.result.time_ms;
            r.point["vs_previous_s"] =
                ms && previous.count(r.result.kernel) ? nlohmann::json(*ms / previous[r.result.kernel]) : nullptr;
            if (ms) previous[r.result.kernel] = *ms;
            sweep.push_back(std::move(r));
        }
    }
    out << pd::render(sweep,
                      {pd::Column::point("S", "seq_len"),
                       {"score bytes", [](const pd::Row& r) { return pd::format_bytes(r.point["score_bytes"]); }},
                       "kernel",
                       "time ms",
                       pd::Column::point("x previous S", "vs_previous_s")},
                      bench.options.check_only)
        << "doubling S multiplies the score bytes by 4, and the time by about 4 once the GPU is full\n";
    return sweep;
}
// [ch01_sweep]

}  // namespace ch01
