// Chapter 03's further studies: the sweep over the batch B that shows B tokens costing about as
// much as one until the batch reaches the ridge point. The lesson is main.cu.
#include "chapter.hpp"

#include <map>
#include <optional>
#include <string>

namespace ch03 {

// [ch03_sweep]
/// --sweep-batch: step time against B. While reading the weights dominates, B tokens cost about
/// as much as one. Every point validated, then timed; 'x B=1' is the step time over the same
/// kernel's at B = 1.
std::vector<pd::Row> sweep_batch(pd::Bench& bench, const Options& o, const gv::Shape& shape,
                                 const std::vector<DType>& dtypes, const pd::CublasHandle* cublas) {
    std::ostream& out = bench.out();
    std::vector<pd::Row> sweep;
    out << "\nsweep over B = 1, 2, 4 ... " << gv::kMaxBatch << " (N = " << shape.n << ", K = " << shape.k << ", "
        << o.layers << " matrices; each point validated" << (bench.sim() ? "; CPU figures" : "") << "):\n";
    for (DType d : dtypes) {
        Problem p{.s = shape, .layers = o.layers, .d = d};
        set_weights(p, bench.options.seed);
        std::map<std::string, double> at_one;  // step time at B = 1, per kernel
        for (int B = 1; B <= gv::kMaxBatch; B *= 2) {
            set_tokens(p, B, bench.options.seed);
            for (pd::Row& r : run_versions(bench, p, cublas)) {
                const std::optional<double>& ms = r.result.time_ms;
                if (ms && B == 1) at_one[r.result.kernel] = *ms;
                r.point["step_vs_batch1"] =
                    ms && at_one.count(r.result.kernel) ? nlohmann::json(*ms / at_one[r.result.kernel]) : nullptr;
                sweep.push_back(std::move(r));
            }
        }
    }
    out << pd::render(sweep,
                      {pd::Column::point("B", "batch"), "dtype", "FLOP/byte", "kernel", "step ms",
                       pd::Column::point("x B=1", "step_vs_batch1"), "tokens/s", "of copy"},
                      bench.options.check_only)
        << "'x B=1' is the step time over the same kernel's at B = 1: while the weights dominate the bytes, B "
           "tokens cost about as much as one (v5 and v6 read each weight once for all B; v1-v4 once per token)\n";
    return sweep;
}
// [ch03_sweep]

}  // namespace ch03
