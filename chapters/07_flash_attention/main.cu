// Chapter 07: flash attention.
//
// Chapter 01's attention without its score matrix: Q, K and V pass through shared memory in
// tiles and each query keeps a running maximum, sum and output (the online softmax), so the bytes
// grow as S d instead of S^2 while the FLOPs stay the same. The program validates chapter 01's
// naive attention (the baseline), flash attention v1 ... v6 and the split-KV form against the CPU
// reference (O and the logsumexp), times them (on a GPU beside a cuBLAS BF16 GEMM), and shows time
// and memory against S (--sweep), the intensity of a suffix over a long context (--suffix-sweep),
// and a whole model's prefill FLOPs split into dense layers and attention (--ttft, a cost model).
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "pd/bench.hpp"
#include "pd/cublas.hpp"
#include "pd/rng.hpp"
#include "pd/step_cost.hpp"

#include "attention/decode_attention.hpp"  // kMaxHeadDim
#include "attention/flash_attention.hpp"
#include "attention_reference.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace att = pd::kernels::attention;
using bf16 = __nv_bfloat16;
using pd::DType;
using pd::fmt;

struct Options {
#if defined(PD_BACKEND_SIM)
    int batch = 1, heads = 2, kv_heads = 0, seq_len = 96, head_dim = 64, sweep_max = 128;  // seconds on 2 cores
#else
    int batch = 1, heads = 32, kv_heads = 8, seq_len = 8192, head_dim = 128, sweep_max = 32768;  // llama-3-8b's
#endif
    int kv_len = 0;  // 0: equal to seq_len
    bool causal = true, sweep = false, suffix_sweep = false, ttft = false;
    std::string preset = "llama-3-8b";
};

/// What --kernel takes: chapter 01's naive attention (the baseline), flash v1 ... v6, split-KV.
const std::vector<pd::Version>& program_versions() {
    static const std::vector<pd::Version> list = [] {
        std::vector<pd::Version> l = att::flash_versions();
        l.insert(l.begin(), {"naive", {DType::fp32, DType::bf16}, pd::Units::simt, "chapter 01's v2 (fp32 inside)"});
        l.push_back({"split", {DType::fp32, DType::bf16}, pd::Units::simt, "split-KV: v3 over key ranges (Sq <= 16)"});
        return l;
    }();
    return list;
}
/// The versions the suffix sweep runs: the fastest SIMT and tensor-core ones, and split-KV.
const std::vector<std::string> kSuffixVersions = {"v3", "v6", "split"};

/// Whether @p v runs on @p s with inputs @p d: tensor cores need d = 64 or 128, split-KV Sq <= 16.
bool runs_on(const pd::Version& v, const att::Shape& s, DType d) {
    if (!v.takes(d)) return false;
    if (v.units == pd::Units::tensor_cores) return s.head_dim == 64 || s.head_dim == 128;
    return v.name != "split" || s.q_len <= att::kFlashSplitMaxQueries;
}

/// Device memory of the naive row: the score matrix (fp32) with Q, K, V and O.
double naive_bytes(const att::Shape& s) {
    return 4.0 * (double(s.score_elements()) + 2.0 * double(s.q_elements() + s.kv_elements()));
}

/// Causal block skipping as the kernels do it, in (query, key) scores per head and sequence: v1
/// and v2 score the whole square in 16-query blocks of 32-key tiles; in v3 each warp's 4 queries
/// stop after the tile of their last allowed key; v4 to v6's 64-query blocks stop after the
/// 64-key tile of their last query's last key (their square: whole 64 x 64 tiles).
struct ScoresScored {
    double simt_square = 0, v3 = 0, mma_square = 0, mma = 0;
};
ScoresScored scores_scored(const att::Shape& s) {
    const auto ceil_to = [](int n, int m) { return double((n + m - 1) / m) * m; };
    const auto keys = [&](int i) { return att::allowed_keys(i, s.q_len, s.kv_len, true); };  // query i's
    ScoresScored c;
    c.simt_square = ceil_to(s.q_len, att::kFlashSimtQueries) * ceil_to(s.kv_len, att::kFlashSimtKeys);
    constexpr int kWarpQueries = 4;  // kFlashSimtQueries over the block's 4 warps
    for (int i0 = 0; i0 < s.q_len; i0 += kWarpQueries)
        c.v3 += kWarpQueries * ceil_to(keys(std::min(i0 + kWarpQueries, s.q_len) - 1), att::kFlashSimtKeys);
    c.mma_square = ceil_to(s.q_len, att::kFlashMmaQueries) * ceil_to(s.kv_len, att::kFlashMmaKeys);
    for (int q0 = 0; q0 < s.q_len; q0 += att::kFlashMmaQueries)
        c.mma += att::kFlashMmaQueries *
                 ceil_to(keys(std::min(q0 + att::kFlashMmaQueries, s.q_len) - 1), att::kFlashMmaKeys);
    return c;
}

/// One problem: Q, K, V drawn in fp32, and per input type the reference of O and of the
/// logsumexp (bf16: of the unrounded inputs, beside that of the rounded ones, the yardstick of
/// pd::compare_to_lowp_reference()).
struct Problem {
    att::Shape s;
    std::vector<float> q, k, v;
    std::map<DType, pd::Expected> out, lse;
    pd::Expected out_tc;  // bf16 on the tensor cores (v4 to v6): the yardstick rounds P to bf16 too
};

/// Seeded inputs (uniform in [-1, 1)) and the references of every row, or for a large problem
/// (a double-precision reference of minutes) of 64 query rows of the first and the last head.
Problem make_problem(const att::Shape& s, std::uint64_t seed, std::uint64_t stream, const std::vector<DType>& dtypes,
                     bool all_rows) {
    Problem p{s, std::vector<float>(s.q_elements()), std::vector<float>(s.kv_elements()),
              std::vector<float>(s.kv_elements())};
    pd::fill_uniform<float>(p.q, -1.f, 1.f, pd::derive_seed(seed, stream + 1));
    pd::fill_uniform<float>(p.k, -1.f, 1.f, pd::derive_seed(seed, stream + 2));
    pd::fill_uniform<float>(p.v, -1.f, 1.f, pd::derive_seed(seed, stream + 3));
    const std::size_t d = std::size_t(s.head_dim);
    const std::vector<std::size_t> rows = pd::reference::attention_check_rows(
        std::size_t(s.batch) * s.heads, s.q_len, all_rows || double(s.score_elements()) * s.head_dim <= 2e8);
    const std::vector<std::size_t> dims = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len)};
    const auto reference = [&](std::span<const float> q, std::span<const float> k, std::span<const float> v,
                               std::vector<double>& o, std::vector<double>& lse, bool bf16_probabilities = false) {
        pd::reference::attention_gqa_rows(q, k, v, s.batch, s.heads, s.kv_head_count(), s.q_len, s.kv_len, s.head_dim,
                                          s.causal, rows, o, lse, bf16_probabilities);
    };
    pd::Expected o{.rows = rows, .row_length = d, .dims = {dims[0], dims[1], dims[2], d}};
    pd::Expected l{.rows = rows, .row_length = 1, .dims = dims};
    reference(p.q, p.k, p.v, o.values, l.values);
    for (DType t : dtypes) {
        p.out[t] = o, p.lse[t] = l;
        if (t != DType::bf16) continue;
        const std::vector<float> q16 = pd::rounded_to(t, p.q), k16 = pd::rounded_to(t, p.k),
                                 v16 = pd::rounded_to(t, p.v);
        reference(q16, k16, v16, p.out[t].values_lowp, p.lse[t].values_lowp);
        std::vector<double> unused;
        p.out_tc = o;
        reference(q16, k16, v16, p.out_tc.values_lowp, unused, true);
    }
    return p;
}

/// O by its rule, then the logsumexp by the same rule: a flash row passes when both do. In bf16
/// on the tensor cores, O's yardstick also rounds P to bf16, as those versions do (Problem::out_tc).
pd::CompareResult check_with_lse(const Problem& p, DType d, const pd::Version& v, std::span<const float> out,
                                 pd::DeviceBuffer<float>& lse) {
    const pd::CompareResult r =
        pd::check(d == DType::bf16 && v.units == pd::Units::tensor_cores ? p.out_tc : p.out.at(d), out);
    if (!r.passed) return r;
    pd::CompareResult rl = pd::check(p.lse.at(d), lse.download());
    rl.rule = "the logsumexp [B, H, Sq]: " + rl.rule;
    return rl.passed ? r : rl;
}

template <typename T>
pd::Launch flash_launch(const std::string& name, const T* q, const T* k, const T* v, float* out, float* lse,
                        float* work, const att::Shape& s, int sms) {
    if (name == "split") return [=] { att::flash_attention_split_kv(q, k, v, out, lse, work, s, sms); };
    return [=] { att::flash_attention(name, q, k, v, out, lse, s); };
}

// [ch07_versions]
/// The versions (of @p only, when given) that --kernel selects and that run on @p p's shape with
/// inputs @p d, each validated (O, and a flash version's logsumexp) then timed; the naive row is
/// the baseline, left out where its score matrix does not fit in device memory.
std::vector<pd::Row> run_versions(pd::Bench& bench, const Problem& p, DType d, int sms, const nlohmann::json& point,
                                  const std::vector<std::string>& only = {}) {
    const att::Shape& s = p.s;
    const auto upload = [&](const std::vector<float>& x) { return pd::DeviceBuffer<float>(pd::rounded_to(d, x)); };
    const auto upload16 = [](const std::vector<float>& x) { return pd::DeviceBuffer<bf16>(pd::round_all<bf16>(x)); };
    // bf16: q, k, v hold the rounded values widened to fp32 (the naive row's), q16, k16, v16 the same in bf16
    pd::DeviceBuffer<float> q = upload(p.q), k = upload(p.k), v = upload(p.v), out(s.q_elements()),
                            lse(s.q_elements() / s.head_dim), work;
    pd::DeviceBuffer<bf16> q16, k16, v16;
    if (d == DType::bf16) q16 = upload16(p.q), k16 = upload16(p.k), v16 = upload16(p.v);
    pd::Kernel kn{.dtype = d, .point = point, .dump_shape = p.out.at(d).dims};
    kn.context = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads) +
                 " Hkv=" + std::to_string(s.kv_head_count()) + " Sq=" + std::to_string(s.q_len) +
                 " Sk=" + std::to_string(s.kv_len) + " d=" + std::to_string(s.head_dim) +
                 (s.causal ? " causal" : " no mask");
    std::vector<pd::Row> rows;
    std::optional<pd::Row> naive;
    for (const pd::Version& ver : program_versions()) {
        const bool is_naive = ver.name == "naive";
        if (!bench.selects(ver) || !runs_on(ver, s, d) || (is_naive && !bench.fits(naive_bytes(s))) ||
            (!only.empty() && std::find(only.begin(), only.end(), ver.name) == only.end()))
            continue;
        kn.name = ver.name, kn.units = ver.units, kn.baseline = naive ? &*naive : nullptr;
        kn.dump = "out_" + ver.name + (d == DType::bf16 ? "_bf16" : "");
        kn.cost =
            is_naive ? pd::Cost{s.flops(), s.min_bytes()} : pd::Cost{att::flash_flops(s), att::flash_min_bytes(s, d)};
        work = pd::DeviceBuffer<float>(std::max<std::size_t>(1, is_naive ? s.score_elements()
                                                                : ver.name == "split"
                                                                    ? att::flash_split_workspace_floats(s, sms)
                                                                    : 0));
        pd::Launch launch = [&] {
            att::naive_attention("v2", q.data(), k.data(), v.data(), out.data(), work.data(), s);
        };
        if (!is_naive && d == DType::fp32)
            launch = flash_launch(ver.name, q.data(), k.data(), v.data(), out.data(), lse.data(), work.data(), s, sms);
        else if (!is_naive)
            launch =
                flash_launch(ver.name, q16.data(), k16.data(), v16.data(), out.data(), lse.data(), work.data(), s, sms);
        lse.fill_bytes(pd::kPoisonByte);
        rows.push_back(is_naive ? bench.measure(kn, launch, out, p.out.at(d))
                                : bench.measure(
                                      kn, launch, out,
                                      [&](std::span<const float> got) { return check_with_lse(p, d, ver, got, lse); },
                                      kn.dump_shape));
        if (is_naive && rows.back().result.time_ms) naive = rows.back();
        rows.back().point["memory_bytes"] = is_naive ? naive_bytes(s) : att::flash_min_bytes(s, d);
    }
    return rows;
}
// [ch07_versions]

/// Device memory of Q, K, V and O in fp32 (the most a flash row holds).
double flash_bytes(const att::Shape& s) {
    return 4.0 * double(2 * s.q_elements() + 2 * s.kv_elements());
}

/// What the parts of a run share: the harness, the input types, the SMs split-KV is sized for.
struct Run {
    pd::Bench& bench;
    std::vector<DType> dtypes;
    int sms = 1;

    /// Every selected version (of @p only, when given) on a new problem of shape @p s, for each
    /// input type; the problem's inputs come from the seed and @p stream.
    std::vector<pd::Row> rows(const att::Shape& s, std::uint64_t stream, const nlohmann::json& point,
                              const std::vector<std::string>& only = {}) {
        const Problem p = make_problem(s, bench.options.seed, stream, dtypes, false);
        std::vector<pd::Row> all;
        for (DType d : dtypes)
            for (pd::Row& r : run_versions(bench, p, d, sms, point, only)) all.push_back(std::move(r));
        return all;
    }
};

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

/// The chapter's options, beside the harness's own (--kernel, --dtype, --seed, ...).
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--batch", o.batch, "Sequences B", CLI::Range(1, 4096));
    bench.option("--heads", o.heads, "Query heads H", CLI::Range(1, 1024));
    bench.option("--kv-heads", o.kv_heads, "KV heads Hkv, a divisor of H (0: equal to H)", CLI::Range(0, 1024));
    bench.option("--seq-len", o.seq_len, "Queries Sq (the prompt tokens)", CLI::Range(1, 524280));
    bench.app.add_option("--kv-len", o.kv_len, "Keys Sk >= Sq (default: --seq-len)")->check(CLI::Range(1, 1 << 20));
    bench.option("--head-dim", o.head_dim, "Head dimension d (tensor cores: 64 or 128)",
                 CLI::Range(1, att::kMaxHeadDim));
    bench.app.add_flag("--causal,!--no-causal", o.causal, "Causal mask (default) or none");
    bench.add_dtype_option();
    bench.app.add_flag("--sweep", o.sweep, "Also run S = Sq = Sk over powers of two up to --sweep-max");
    bench.option("--sweep-max", o.sweep_max, "Largest S of --sweep", CLI::Range(32, 1 << 17));
    bench.app.add_flag("--suffix-sweep", o.suffix_sweep,
                       "Also run Sq = 1, 2, 4 ... --seq-len queries over --kv-len keys");
    bench.app.add_flag("--ttft", o.ttft, "Also print a model's prefill FLOPs against S (the cost model)");
    bench.option("--preset", o.preset, "Model of --ttft", CLI::IsMember(pd::model_names()));
}

/// Throws std::invalid_argument naming the option for a problem the ranges cannot refuse.
void check_problem(const pd::Bench& bench, const Options& o, const att::Shape& shape) {
    const auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
    if (shape.q_len > shape.kv_len)
        bad("--seq-len (Sq = " + std::to_string(shape.q_len) + ") must be <= --kv-len (Sk = " +
            std::to_string(shape.kv_len) + "): the queries are the last Sq of Sk positions");
    if (shape.heads % shape.kv_head_count() != 0)
        bad("--kv-heads = " + std::to_string(o.kv_heads) + " must divide --heads = " + std::to_string(o.heads));
    if (long(shape.batch) * shape.heads > 65535)
        bad("--batch x --heads = " + std::to_string(long(shape.batch) * shape.heads) + " exceeds 65535");
    for (const pd::Version& v : program_versions())  // a version asked for by name that cannot run here
        if (v.name == bench.options.kernel && !runs_on(v, shape, v.dtypes.back()))
            bad(v.name == "split" ? "--kernel split takes at most 16 queries (--seq-len)"
                                  : "--kernel " + v.name + " runs on the tensor cores with --head-dim 64 or 128");
    att::check_flash_shape(shape);
}

/// What the run asks of the machine: Q, K, V and O on the device; on the host Q, K and V of the
/// largest problem in fp32 three times (drawn, as the kernels read them, in bf16); and the launches,
/// inputs and references of the problem and of the sweeps' (@p sweep_shapes, @p suffix_shapes).
pd::Needs problem_needs(const pd::Bench& bench, const att::Shape& shape, const std::vector<att::Shape>& sweep_shapes,
                        const std::vector<att::Shape>& suffix_shapes) {
    const att::Shape& largest =
        sweep_shapes.empty() || sweep_shapes.back().q_len < shape.q_len ? shape : sweep_shapes.back();
    pd::Needs needs{"the versions at B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
                        ", Sq = " + std::to_string(shape.q_len) + ", Sk = " + std::to_string(shape.kv_len) +
                        ", d = " + std::to_string(shape.head_dim),
                    "lower --seq-len, --kv-len, --sweep-max, --batch or --heads, or choose one --kernel"};
    needs.device("Q, K, V and O", flash_bytes(shape))
        .host("Q, K and V on the host", 12.0 * double(largest.q_elements() + 2 * largest.kv_elements()));
    const auto add_work = [&](const att::Shape& s, bool suffix, int times) {
        needs.elements(3.0 * times * double(s.q_elements() + s.kv_elements()))
            .work(times *
                  (3.0 * std::min(att::flash_flops(s), 4e8) + bench.versions_work([&](const pd::Version& v, DType d) {
                      if (!runs_on(v, s, d) ||
                          (suffix && std::count(kSuffixVersions.begin(), kSuffixVersions.end(), v.name) == 0))
                          return 0.0;
                      return v.name == "naive" ? att::sim_work("v2", s) : att::flash_sim_work(v.name, s);
                  })));
    };
    add_work(shape, false, 1);
    for (const att::Shape& s : sweep_shapes) add_work(s, false, s.causal && &s == &sweep_shapes.back() ? 2 : 1);
    for (const att::Shape& s : suffix_shapes) add_work(s, true, 1);
    return needs;
}

// [ch07_cost]
/// The problem's counts: the FLOPs are the naive version's useful ones, 4 d per allowed score, but
/// no term of the bytes grows with Sq x Sk: Q, K and V are read once, O and the logsumexp written once.
void print_cost(std::ostream& out, const att::Shape& shape, const std::vector<DType>& dtypes) {
    out << "problem: B = " << shape.batch << ", H = " << shape.heads << " (KV heads " << shape.kv_head_count()
        << "), Sq = " << shape.q_len << ", Sk = " << shape.kv_len << ", d = " << shape.head_dim << ", "
        << (shape.causal ? "causal" : "no mask") << "\nflash: 4 d x " << fmt("%.0f", shape.allowed_scores())
        << " allowed scores = " << pd::format_flops(att::flash_flops(shape))
        << "; Q, K, V read once, O and lse written:";
    for (DType d : dtypes)
        out << " " << pd::format_bytes(att::flash_min_bytes(shape, d)) << " in " << to_string(d) << " ("
            << fmt("%.1f", att::flash_flops(shape) / att::flash_min_bytes(shape, d)) << " FLOP/byte)";
    out << "\nnaive (chapter 01): a score matrix of " << pd::format_bytes(4.0 * double(shape.score_elements()))
        << " crossed 4 times: " << pd::format_bytes(shape.min_bytes()) << " ("
        << fmt("%.1f", shape.flops() / shape.min_bytes()) << " FLOP/byte)\n";
    if (shape.causal) {
        const ScoresScored c = scores_scored(shape);
        out << "causal skipping, scores per head: v1 and v2 " << fmt("%.0f", c.simt_square) << " (the square, 16 x 32 "
            << "tiles), v3 " << fmt("%.0f", c.v3) << " (" << fmt("%.1f", 100 * (1 - c.v3 / c.simt_square))
            << "% skipped); v4 to v6 " << fmt("%.0f", c.mma) << " of " << fmt("%.0f", c.mma_square)
            << " (64 x 64 tiles, " << fmt("%.1f", 100 * (1 - c.mma / c.mma_square)) << "% skipped)\n";
    }
}
// [ch07_cost]

/// --dump: Q, K, V and the reference O of each input type (measure() dumps each version's O).
void dump_inputs(pd::Bench& bench, const Problem& p, const std::vector<DType>& dtypes) {
    if (!bench.dumping()) return;
    for (DType d : dtypes) {
        const std::string sfx = d == DType::bf16 ? "_bf16" : "";
        const std::vector<std::size_t> qs = p.out.at(d).dims,
                                       kvs = {qs[0], std::size_t(p.s.kv_head_count()), std::size_t(p.s.kv_len), qs[3]};
        bench.dump<float>("q" + sfx, pd::rounded_to(d, p.q), qs);
        bench.dump<float>("k" + sfx, pd::rounded_to(d, p.k), kvs);
        bench.dump<float>("v" + sfx, pd::rounded_to(d, p.v), kvs);
        const std::vector<double>& ref = d == DType::bf16 ? p.out.at(d).values_lowp : p.out.at(d).values;
        bench.dump<float>("out_reference" + sfx, std::vector<float>(ref.begin(), ref.end()), qs);
    }
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"07_flash_attention", "flash attention",
                    "Chapter 07: flash attention. Attention through tiles of Q, K and V with the online softmax, no "
                    "score matrix in memory: v1 SIMT tiles, v2 split-Q, v3 causal block skipping, v4 mma.sync, v5 "
                    "ldmatrix and swizzle, v6 cp.async, and the split-KV form, against chapter 01's naive attention.",
                    program_versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const att::Shape shape{o.batch,    o.heads,  o.seq_len, o.kv_len > 0 ? o.kv_len : o.seq_len,
                           o.head_dim, o.causal, o.kv_heads};
    check_problem(bench, o, shape);
    std::vector<att::Shape> sweep_shapes, suffix_shapes;  // S = Sq = Sk; Sq = 1, 2, 4 ... over Sk
    for (int S = bench.sim() ? 32 : 512; o.sweep && S <= o.sweep_max; S *= 2)
        sweep_shapes.push_back({shape.batch, shape.heads, S, S, shape.head_dim, shape.causal, shape.kv_heads});
    for (int q = 1; o.suffix_sweep && q < 2 * shape.q_len; q *= 2)
        suffix_shapes.push_back({shape.batch, shape.heads, std::min(q, shape.q_len), shape.kv_len, shape.head_dim,
                                 shape.causal, shape.kv_heads});

    std::ostream& out = bench.out();
    const pd::DeviceInfo& dev = bench.device();
    bench.require(problem_needs(bench, shape, sweep_shapes, suffix_shapes));
    bench.measure_roofs();
    // split-KV is sized for this GPU's SMs, on the simulator for the --gpu preset's
    Run run{bench, bench.dtypes(),
            bench.sim() ? pd::roofline::find_gpu(bench.options.gpu)->sm_count : std::max(dev.sm_count, 1)};

    print_cost(out, shape, run.dtypes);
    const std::optional<double> cublas = cublas_tflops(bench);
    if (cublas) out << "cuBLAS BF16 GEMM, M = N = K = 8192: " << fmt("%.1f", *cublas) << " TFLOP/s in this run\n";

    // ---- inputs, references, and every version: validated, then timed ----
    const Problem p = make_problem(shape, bench.options.seed, 0, run.dtypes, bench.dumping());
    const std::size_t checked = p.out.begin()->second.rows.size();
    const bool all_rows = checked == std::size_t(shape.batch) * shape.heads * shape.q_len;
    out << "reference: CPU, double accumulation, O and logsumexp of " << (all_rows ? "every" : std::to_string(checked))
        << " row" << (all_rows ? "" : "s sampled") << "; bf16 within 2x the error of rounding the inputs (the "
        << "reference of the bf16 inputs against that of the fp32 ones; for v4 to v6, whose P V products take P in "
        << "bf16, of rounding the inputs and P)\n\n";
    dump_inputs(bench, p, run.dtypes);
    std::vector<pd::Row> rows;
    for (DType d : run.dtypes)
        for (pd::Row& r : run_versions(bench, p, d, run.sms, nlohmann::json::object())) {
            if (r.result.tflops && bench.roofs.bf16_flops)
                r.point["of_bf16_peak"] = *r.result.tflops * 1e12 / *bench.roofs.bf16_flops;
            if (r.result.tflops && cublas) r.point["of_cublas"] = *r.result.tflops / *cublas;
            rows.push_back(std::move(r));
        }
    if (bench.selects("naive") && !bench.fits(naive_bytes(shape)))
        out << "naive: " << pd::format_bytes(naive_bytes(shape)) << " do not fit in device memory: no baseline\n";
    out << pd::render(rows, {"kernel", "dtype", "time ms", "TFLOP/s", "of roofline",
                             pd::Column::percent("of BF16 peak", "of_bf16_peak"),
                             pd::Column::percent("of cuBLAS", "of_cublas"), "vs baseline", "max abs err", "status"})
        << "'of roofline': the floor time (peak of the units it runs on, copy bandwidth) over the time; 'of BF16 peak' "
           "and 'of cuBLAS': TFLOP/s over the tensor peak and over cuBLAS's GEMM; 'vs baseline': naive's time over "
           "the version's"
        << (bench.sim() ? " (no roofs and no cuBLAS on the simulator)" : "") << ".\n";

    nlohmann::json report = bench.report({{"batch", shape.batch},
                                          {"heads", shape.heads},
                                          {"kv_heads", shape.kv_head_count()},
                                          {"seq_len", shape.q_len},
                                          {"kv_len", shape.kv_len},
                                          {"head_dim", shape.head_dim},
                                          {"causal", shape.causal},
                                          {"dtype", run.dtypes.size() == 2 ? "all" : to_string(run.dtypes[0])},
                                          {"validated_rows", all_rows ? "all" : "sampled"}},
                                         rows);
    report["cublas_bf16_gemm_tflops"] = cublas ? nlohmann::json(*cublas) : nlohmann::json(nullptr);
    report["sweep"] = report["sweep_no_mask"] = report["suffix_sweep"] = nlohmann::json::array();
    report["suffix_crossing"] = report["ttft"] = nullptr;
    if (!sweep_shapes.empty()) sweep(run, sweep_shapes, report);
    if (!suffix_shapes.empty()) suffix_sweep(run, suffix_shapes, report);
    if (o.ttft) report["ttft"] = ttft(bench, *pd::find_model(o.preset));
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(
        run, argc, argv,
        {{"flash attention: head_dim", "--head-dim"}, {"q_len (Sq)", "--seq-len"}, {"kv_len (Sk)", "--kv-len"}});
}
