// Chapter 04's further studies: the sweep over the context, a decode step's time cached and
// recomputed at each context C. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include <algorithm>
#include <cstdint>

namespace ch04 {

// [ch04_sweep]
/// One decode step against the context C: with the cache it reads the weights and C positions
/// of K and V; recomputing runs the whole prefix of C tokens again. Each point is checked (the
/// same logits both ways) before it is timed.
void sweep_context(pd::Bench& bench, const Options& o, md::Model& model, std::vector<pd::Row>& sweep, bool& passed) {
    const DType d = model.options().weights;
    const double tolerance = d == DType::bf16 || o.kv_dtype != "fp32" ? 5e-2 : 1e-3;
    for (int C = 8; C <= std::min(o.sweep_max, model.max_seq()); C *= 2) {
        std::vector<int> seq(std::size_t(o.p.batch) * C);
        pd::Rng rng(pd::derive_seed(bench.options.seed, 100 + std::uint64_t(C)));
        for (int& t : seq) t = rng.integer(0, model.config().vocab - 1);
        const md::StepAtContext s = md::step_at_context(bench, model, seq, C, tolerance);
        passed = passed && s.agree;
        const pd::Cost cached = model.cost(C - 1, 1), recomputed = model.cost(0, C);  // one step at context C
        const nlohmann::json speedup =
            s.cached_ms && s.recomputed_ms ? nlohmann::json(*s.recomputed_ms / *s.cached_ms) : nlohmann::json(nullptr);
        const nlohmann::json point{{"context", C},
                                   {"flops_ratio", recomputed.flops / cached.flops},
                                   {"bytes_ratio", recomputed.bytes / cached.bytes},
                                   {"max_logit_diff", s.max_logit_diff},
                                   {"speedup", speedup}};
        const double B = o.p.batch;
        sweep.push_back(bench.timed_row({.name = "cache", .dtype = d, .cost = cached, .tokens = B, .point = point},
                                        s.cached_ms, s.agree));
        sweep.push_back(
            bench.timed_row({.name = "recompute", .dtype = d, .cost = recomputed, .tokens = B, .point = point},
                            s.recomputed_ms, s.agree));
    }
}
// [ch04_sweep]

/// --sweep-context's table: a decode step at each context C, cached and recomputed.
void print_sweep(pd::Bench& bench, const std::vector<pd::Row>& sweep) {
    bench.out()
        << "\nsweep: one decode step at context C, cached vs recomputed (each point checked: the same logits):\n"
        << pd::render(sweep,
                      {pd::Column::point("C", "context"), "kernel", "dtype", "step ms",
                       pd::Column::point("speedup", "speedup"), pd::Column::point("FLOPs x", "flops_ratio"),
                       pd::Column::point("bytes x", "bytes_ratio"), "of copy"},
                      bench.options.check_only)
        << "'speedup' is recompute's step time over the cached step's; 'FLOPs x' and 'bytes x' are the ratios of "
           "their counts: recompute grows with C, the cached step only by the KV it reads.\n";
}

}  // namespace ch04
