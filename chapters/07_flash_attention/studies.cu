// Chapter 07's further studies: time and memory against S with the causal speed-up (--sweep), a
// suffix's intensity over a long context (--suffix-sweep), a model's prefill FLOPs (--ttft), and
// cuBLAS's BF16 GEMM, the yardstick of the table. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/cublas.hpp"
#include "pd/rng.hpp"
#include "pd/step_cost.hpp"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ch07 {

/// Every selected version (of @p only, when given) on a new problem of shape @p s, for each
/// input type; the problem's inputs come from the seed and @p stream.
std::vector<pd::Row> Run::rows(const att::Shape& s, std::uint64_t stream, const nlohmann::json& point,
                               const std::vector<std::string>& only) {
    const Problem p = make_problem(s, bench.options.seed, stream, dtypes, false);
    std::vector<pd::Row> all;
    for (DType d : dtypes)
        for (pd::Row& r : run_versions(bench, p, d, sms, point, only)) all.push_back(std::move(r));
    return all;
}

/// The ridge point of @p u in FLOP/byte, and its source: this run's roofs on a GPU, else the --gpu preset's.
std::pair<double, std::string> ridge_of(const pd::Bench& bench, pd::Units u) {
    if (const auto peak = bench.roofs.peak(u); peak && bench.roofs.bytes_per_s)
        return {*peak / *bench.roofs.bytes_per_s, "this GPU's peak over the copy bandwidth measured in this run"};
    const pd::roofline::GpuSpec g = *pd::roofline::find_gpu(bench.options.gpu);
    return {(u == pd::Units::simt ? g.fp32_tflops : g.tensor_tflops) * 1e3 / g.bandwidth_gbps,
            "the " + g.name + " preset's datasheet figures (--gpu), not a measurement"};
}

/// TFLOP/s of cuBLAS's BF16 GEMM at M = N = K = 8192 in this run (GPU, when timing): the rate of
/// the tensor cores on a GEMM, which the versions are compared with.
std::optional<double> cublas_tflops(pd::Bench& bench) {
    if (bench.sim() || !bench.timing()) return std::nullopt;
    constexpr int n = 8192;
    std::vector<float> x(std::size_t(n) * n);
    pd::fill_uniform<float>(x, -1.f, 1.f, pd::derive_seed(bench.options.seed, 7));
    const pd::DeviceBuffer<bf16> a(pd::round_all<bf16>(x));
    pd::DeviceBuffer<float> c(x.size());
    const pd::CublasHandle h;
    return 2e-9 * n * n * n / bench.time_ms([&] { pd::cublas_linear(h.get(), a.data(), a.data(), c.data(), n, n, n); });
}

// [ch07_sweep]
/// Time and memory against S = Sq = Sk (@p shapes): flash's memory grows as S d, the naive score
/// matrix's as S^2 until it no longer fits; then the causal speed-up at the largest S, the time
/// without the mask over the causal time. Adds "sweep" and "sweep_no_mask" to @p report.
void sweep(Run& run, const std::vector<att::Shape>& shapes, nlohmann::json& report) {
    pd::Bench& bench = run.bench;
    std::ostream& out = bench.out();
    std::vector<pd::Row> rows, unmasked;
    bool naive_fits = true;
    att::Shape last;  // the largest S that ran
    for (const att::Shape& s : shapes) {
        if (!bench.fits(2 * flash_bytes(s))) break;
        last = s;
        if (std::exchange(naive_fits, bench.fits(naive_bytes(s))) && !naive_fits && bench.selects("naive"))
            out << "S = " << s.q_len << ": the naive score matrix ("
                << pd::format_bytes(4.0 * double(s.score_elements())) << ") no longer fits in device memory\n";
        for (pd::Row& r : run.rows(s, 10 * std::uint64_t(s.q_len), {{"seq_len", s.q_len}}))
            rows.push_back(std::move(r));
    }
    if (rows.empty()) return;
    const auto bytes = [](const pd::Row& r) {  // the simulator's DRAM estimate with --profile, else the formula
        const nlohmann::json b = r.profile.is_null() ? nlohmann::json(nullptr) : r.profile["dram_bytes"];
        return pd::format_bytes(b.is_null() ? r.cost.bytes
                                            : b[b["estimate"].is_number() ? "estimate" : "least"].get<double>());
    };
    out << "\nsweep over S = Sq = Sk (each point validated" << (bench.sim() ? "; CPU figures" : "") << "):\n"
        << pd::render(rows,
                      {pd::Column::point("S", "seq_len"),
                       "kernel",
                       "dtype",
                       {"FLOPs", [](const pd::Row& r) { return pd::format_flops(r.cost.flops); }},
                       {"bytes", bytes},
                       {"memory", [](const pd::Row& r) { return pd::format_bytes(r.point["memory_bytes"]); }},
                       "time ms",
                       "TFLOP/s"},
                      bench.options.check_only)
        << "bytes: " << (bench.options.profile ? "the simulator's DRAM estimate" : "the formula")
        << "; memory: naive's score matrix with Q, K, V, O (S^2); flash's Q, K, V, O, logsumexp (S d)\n";
    if (att::Shape s = last; s.causal) {
        s.causal = false;
        for (pd::Row& r : run.rows(s, 10 * std::uint64_t(s.q_len) + 5, {{"seq_len", s.q_len}, {"causal", false}})) {
            for (const pd::Row& c : rows)
                if (c.point["seq_len"] == s.q_len && c.result.kernel == r.result.kernel && c.dtype == r.dtype &&
                    c.result.time_ms && r.result.time_ms)
                    r.point["speedup"] = *r.result.time_ms / *c.result.time_ms;
            unmasked.push_back(std::move(r));
        }
        out << "\ncausal speed-up at S = " << s.q_len << ": the time without the mask over the causal time:\n"
            << pd::render(unmasked, {"kernel", "dtype", "time ms", pd::Column::point("speedup", "speedup")},
                          bench.options.check_only)
            << "causal attention does half the work: v1 and v2 compute every score and mask it; v3 to v6 skip the "
               "tiles above the diagonal\n";
    }
    report["sweep"] = bench.json(rows);
    report["sweep_no_mask"] = bench.json(unmasked);
}
// [ch07_sweep]

// [ch07_suffix]
/// Sq = 1, 2, 4 ... --seq-len queries over Sk keys (@p shapes: a prompt's last chunk, a few tokens to
/// verify): the FLOPs shrink with Sq but K and V are read whole, so the intensity falls until the
/// kernel is memory-bound; for Sq <= 16 the split-KV form spreads the keys over the SMs. Prints
/// the Sq where the intensity reaches the ridge point; adds "suffix_sweep" and "suffix_crossing".
void suffix_sweep(Run& run, const std::vector<att::Shape>& shapes, nlohmann::json& report) {
    pd::Bench& bench = run.bench;
    std::ostream& out = bench.out();
    std::vector<pd::Row> rows;
    for (const att::Shape& s : shapes)
        for (pd::Row& r : run.rows(s, 100000 + std::uint64_t(s.q_len), {{"q_len", s.q_len}}, kSuffixVersions))
            rows.push_back(std::move(r));
    const att::Shape& full = shapes.back();
    out << "\nsuffix sweep: Sq = 1 ... " << full.q_len << " queries over Sk = " << full.kv_len
        << " keys (split-KV sized for " << run.sms << " SMs"
        << (bench.sim() ? ", the " + bench.options.gpu + " preset" : "") << "):\n"
        << pd::render(rows,
                      {pd::Column::point("Sq", "q_len"), "kernel", "dtype", "FLOP/byte", "time ms", "GB/s", "TFLOP/s",
                       "bound"},
                      bench.options.check_only);
    nlohmann::json crossing = nlohmann::json::object();
    for (DType d : run.dtypes) {  // the first Sq whose intensity reaches the ridge point of the units
        const auto [ridge, source] = ridge_of(bench, d == DType::fp32 ? pd::Units::simt : pd::Units::tensor_cores);
        att::Shape s = full;
        for (s.q_len = 1; s.q_len < s.kv_len && att::flash_flops(s) < ridge * att::flash_min_bytes(s, d);) ++s.q_len;
        const bool reached = att::flash_flops(s) >= ridge * att::flash_min_bytes(s, d);
        out << to_string(d) << ": ridge point " << fmt("%.1f", ridge) << " FLOP/byte (" << source << "); "
            << (reached ? "the intensity reaches it at Sq = " + std::to_string(s.q_len) : "not reached up to Sq = Sk")
            << "\n";
        crossing[to_string(d)] = {{"ridge", ridge},
                                  {"source", source},
                                  {"q_len", reached ? nlohmann::json(s.q_len) : nlohmann::json(nullptr)}};
    }
    report["suffix_sweep"] = bench.json(rows);
    report["suffix_crossing"] = crossing;
}
// [ch07_suffix]

// [ch07_ttft]
/// The prefill of one prompt of S tokens through model @p c, as the cost model counts it (no
/// kernel runs): the dense layers, 2 FLOPs per weight per token, grow linearly in S; attention,
/// 4 d Hq L FLOPs per (query, key) pair and S (S + 1) / 2 causal pairs, quadratically.
nlohmann::json ttft(pd::Bench& bench, const pd::ModelConfig& c) {
    const pd::StepCostShape shape = pd::step_cost_shape(c, 2, 2, 4);  // bf16 weights and cache, fp32 norms
    const auto cost = [&](double S) {
        const pd::StepItem item{.tokens = S};
        return pd::step_cost(shape, std::span<const pd::StepItem>(&item, 1));
    };
    double lo = 1, hi = 2;  // attention's FLOPs pass the dense layers' in (lo, hi]: bisect
    while (cost(hi).attention_flops <= cost(hi).dense_flops) lo = hi, hi *= 2;
    while (hi - lo > 1) {
        const double mid = std::floor((lo + hi) / 2);
        (cost(mid).attention_flops > cost(mid).dense_flops ? hi : lo) = mid;
    }
    const double peak =
        bench.roofs.bf16_flops.value_or(pd::roofline::find_gpu(bench.options.gpu)->tensor_tflops * 1e12);
    pd::Table t({"S", "dense FLOPs", "attention FLOPs", "attention share", "floor ms"});
    nlohmann::json points = nlohmann::json::array();
    for (int S = 1024; S <= 131072; S *= 2) {
        const pd::StepCost sc = cost(S);
        t.add_row({std::to_string(S), pd::format_flops(sc.dense_flops), pd::format_flops(sc.attention_flops),
                   fmt("%.1f%%", 100 * sc.attention_flops / sc.flops), pd::format_number(sc.flops / peak * 1e3)});
        points.push_back({{"seq_len", S}, {"dense_flops", sc.dense_flops}, {"attention_flops", sc.attention_flops}});
    }
    bench.out() << "\nTTFT of one " << c.name << " prompt of S tokens, from the cost model (no kernel runs; bf16): "
                << "the prefill's FLOPs, and their floor at " << fmt("%.0f", peak / 1e12) << " TFLOP/s ("
                << (bench.roofs.bf16_flops ? bench.roofs.bf16_source : "the " + bench.options.gpu + " preset, --gpu")
                << "):\n"
                << t.render() << "attention's FLOPs (quadratic in S) pass the dense layers' (linear) at S = " << hi
                << "\n";
    return {{"preset", c.name}, {"crossing_seq_len", hi}, {"points", points}};
}
// [ch07_ttft]

}  // namespace ch07
