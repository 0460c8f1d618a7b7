// Chapter 01: naive attention.
//
// Causal scaled dot-product attention over a whole prompt, computed the straightforward way:
// scores = Q K^T / sqrt(d) into a B x H x Sq x Sk matrix, a masked row softmax, then P V. The
// score matrix is what makes this O(S^2) in time and memory; the program prints its size,
// validates every version against the CPU reference, times each version and each of its
// three kernels (on a GPU), and with --sweep shows the quadratic growth.
//
// Program shape (every chapter): options, device and problem, seeded inputs, CPU reference,
// each version validated then timed, a table, JSON, exit code.
#include "pd/buffer.hpp"
#include "pd/cli.hpp"
#include "pd/common.hpp"
#include "pd/compare.hpp"
#include "pd/device.hpp"
#include "pd/npy.hpp"
#include "pd/report.hpp"
#include "pd/rng.hpp"
#include "pd/roofline.hpp"
#include "pd/timer.hpp"

#include "attention/attention.hpp"
#include "attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using pd::fmt;

namespace att = pd::kernels::attention;

const char* const kChapter = "01_naive_attention";
const bool kSim = pd::backend_name() == std::string("sim");

struct Options {
    pd::CommonOptions common;
#if defined(PD_BACKEND_SIM)
    int batch = 2, heads = 2, seq_len = 96, head_dim = 32;  // seconds on a 2-core CPU
#else
    int batch = 4, heads = 16, seq_len = 2048, head_dim = 64;  // a 1 GiB score matrix
#endif
    int kv_len = 0;  // 0: equal to seq_len
    bool causal = true;
    bool sweep = false;
};

/// Bytes and FLOPs of the three kernels, counted as each must at least move and compute.
struct Cost {
    double bytes = 0, flops = 0;
};

Cost cost_of(const att::Shape& s) {
    const double bh = double(s.batch) * s.heads, sq = s.q_len, sk = s.kv_len, d = s.head_dim;
    double allowed = 0;  // score entries P V uses
    for (int i = 0; i < s.q_len; ++i) allowed += att::allowed_keys(s, i);
    allowed *= bh;
    Cost c;
    // scores: read Q and K, write the matrix; softmax: read and write it; P V: read it and V, write O.
    c.bytes = 4.0 * (bh * sq * d + bh * sk * d + bh * sq * sk)  // scores
              + 4.0 * 2 * bh * sq * sk                          // softmax
              + 4.0 * (bh * sq * sk + bh * sk * d + bh * sq * d);  // P V
    c.flops = 2.0 * bh * sq * sk * d  // every score is computed, masked or not
              + 5.0 * bh * sq * sk     // max, subtract, exp, sum, scale (order of magnitude)
              + 2.0 * allowed * d;     // P V over the allowed keys
    return c;
}

/// What the program compares the kernels' outputs with: the reference for every row, or for
/// a sample of rows (large problems: the double-precision reference would take minutes).
struct Validation {
    std::vector<std::size_t> rows;  // flat row indices (b*H + h)*Sq + i of O that are checked
    std::vector<double> expected;   // [rows.size(), d]
    bool full = false;
};

Validation reference_for(const att::Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, bool force_full) {
    Validation val;
    const double work = double(s.batch) * s.heads * s.q_len * s.kv_len * s.head_dim;
    const std::size_t d = std::size_t(s.head_dim);
    if (force_full || work <= 2e8) {
        val.full = true;
        val.expected = pd::reference::attention(q, k, v, s.batch, s.heads, s.q_len, s.kv_len, s.head_dim, s.causal);
        val.rows.resize(std::size_t(s.batch) * s.heads * s.q_len);
        for (std::size_t r = 0; r < val.rows.size(); ++r) val.rows[r] = r;
        return val;
    }
    // Sample: the first and last head, 64 query rows of each spread over the sequence (first and
    // last included). Row i alone is a problem with one query and allowed_keys(i) keys, no mask.
    const std::size_t heads = std::size_t(s.batch) * s.heads;
    for (std::size_t bh : {std::size_t(0), heads - 1}) {
        for (int n = 0; n < 64; ++n) {
            const int i = s.q_len == 1 ? 0 : int(std::size_t(n) * (s.q_len - 1) / 63);
            const std::size_t row = bh * s.q_len + i;
            if (std::find(val.rows.begin(), val.rows.end(), row) != val.rows.end()) continue;
            const int keys = att::allowed_keys(s, i);
            const std::span<const float> qi(q.data() + row * d, d);
            const std::span<const float> kk(k.data() + bh * s.kv_len * d, std::size_t(keys) * d);
            const std::span<const float> vv(v.data() + bh * s.kv_len * d, std::size_t(keys) * d);
            const std::vector<double> o = pd::reference::attention(qi, kk, vv, 1, 1, 1, keys, s.head_dim, false);
            val.rows.push_back(row);
            val.expected.insert(val.expected.end(), o.begin(), o.end());
        }
    }
    return val;
}

pd::CompareResult check(const Validation& val, const std::vector<float>& out, std::size_t d) {
    std::vector<float> got(val.expected.size());
    for (std::size_t r = 0; r < val.rows.size(); ++r)
        std::copy_n(out.begin() + std::ptrdiff_t(val.rows[r] * d), d, got.begin() + std::ptrdiff_t(r * d));
    pd::CompareResult c = pd::compare<float, double>(got, val.expected, pd::Tolerance::fp32());
    // An unchecked row can still be NaN (never written): every output must be finite.
    for (float x : out)
        if (!std::isfinite(x)) {
            c.passed = false;
            ++c.non_finite;
        }
    return c;
}

/// Time of each of the three kernels of @p version and of the whole, in ms (median).
struct Breakdown {
    double scores = 0, softmax = 0, pv = 0, total = 0;
};

Breakdown time_version(const std::string& version, const float* q, const float* k, const float* v, float* o,
                       float* work, const att::Shape& s, const pd::CommonOptions& c) {
    Breakdown b;
    b.scores = pd::time_device([&] { att::scores(q, k, work, s); }, c.warmup, c.iters).median_ms;
    b.softmax = pd::time_device(
                    [&] {
                        // Softmax is in place: recompute the scores first so every run sees real scores,
                        // and subtract their time.
                        att::scores(q, k, work, s);
                        if (version == "v1") att::softmax_v1(work, s);
                        else if (version == "v2") att::softmax_v2(work, s);
                        else att::softmax_v3(work, s);
                    },
                    c.warmup, c.iters)
                    .median_ms -
                b.scores;
    b.pv = pd::time_device([&] { att::pv(work, v, o, s); }, c.warmup, c.iters).median_ms;
    b.total = pd::time_device([&] { att::naive_attention(version, q, k, v, o, work, s); }, c.warmup, c.iters)
                  .median_ms;
    return b;
}

int run(int argc, char** argv) {
    Options o;
#if defined(PD_BACKEND_SIM)
    o.common.iters = 3;
    o.common.warmup = 1;
#endif
    CLI::App app{"Chapter 01: naive attention. Causal scaled dot-product attention through an explicit B x H x "
                 "Sq x Sk score matrix: scores, masked softmax (v1 shared-memory tree, v2 warp shuffles, v3 CUB), "
                 "then P V.",
                 "ch01_naive_attention"};
    pd::add_common_options(app, o.common, att::versions());
    app.add_option("--batch", o.batch, "Sequences B")->check(CLI::Range(1, 4096))->capture_default_str();
    app.add_option("--heads", o.heads, "Attention heads H")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_option("--seq-len", o.seq_len, "Queries Sq (the prompt tokens)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--kv-len", o.kv_len, "Keys Sk >= Sq (default: equal to --seq-len)")->check(CLI::Range(1, 1 << 20));
    app.add_option("--head-dim", o.head_dim, "Head dimension d")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_flag("--causal,!--no-causal", o.causal, "Causal mask (default) or none");
    app.add_flag("--sweep", o.sweep,
                 kSim ? "Time every version over S = 32 ... 256 (CPU figures on the simulator)"
                      : "Time every version over S = 256 ... 8192 and show the S^2 growth");
    if (auto code = pd::parse_command_line(app, argc, argv)) return *code;

    att::Shape shape{o.batch, o.heads, o.seq_len, o.kv_len > 0 ? o.kv_len : o.seq_len, o.head_dim, o.causal};
    if (shape.q_len > shape.kv_len)
        return pd::bad_input(app, "--seq-len (Sq = " + std::to_string(shape.q_len) + ") must be <= --kv-len (Sk = " +
                                      std::to_string(shape.kv_len) + "): the queries are the last Sq of Sk positions");
    if (long(shape.batch) * shape.heads > 65535)
        return pd::bad_input(app, "--batch x --heads = " + std::to_string(long(shape.batch) * shape.heads) +
                                      " exceeds 65535 (the grid's z limit)");

    std::ostream& out = pd::text_out(o.common);
    const pd::DeviceProbe probe = pd::probe_devices();
    if (probe.count == 0)
        return pd::bad_input(app, "no CUDA device (" + probe.reason + "); run ch01_naive_attention-sim, the same "
                                  "program on the CPU simulator");
    const pd::DeviceInfo dev = pd::query_device(0);
    const std::string dump_dir = pd::prepare_dump_dir(o.common);

    const double score_bytes = double(shape.score_elements()) * sizeof(float);
    const double tensor_bytes = double(2 * shape.q_elements() + 2 * shape.kv_elements()) * sizeof(float);
    std::size_t free_b = 0, total_b = 0;
    PD_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (score_bytes + tensor_bytes > 0.9 * double(free_b))
        return pd::bad_input(app, "the score matrix (" + pd::format_bytes(score_bytes) + ") and Q, K, V, O (" +
                                      pd::format_bytes(tensor_bytes) + ") do not fit in the " +
                                      pd::format_bytes(double(free_b)) +
                                      " of free device memory: lower --seq-len, --batch or --heads");

    out << "Chapter 01: naive attention  [backend " << pd::backend_name() << ", seed " << o.common.seed << "]\n"
        << "device: " << dev.name << (kSim ? " (timings are CPU figures, not GPU performance)" : "") << "\n"
        << "problem: B = " << shape.batch << ", H = " << shape.heads << ", Sq = " << shape.q_len
        << ", Sk = " << shape.kv_len << ", d = " << shape.head_dim << ", " << (shape.causal ? "causal" : "no mask")
        << ", fp32\n"
        << "score matrix: " << shape.batch << " x " << shape.heads << " x " << shape.q_len << " x " << shape.kv_len
        << " floats = " << pd::format_bytes(score_bytes) << " (grows as S^2)\n";

    // ---- inputs and reference ----
    std::vector<float> q(shape.q_elements()), k(shape.kv_elements()), v(shape.kv_elements());
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(o.common.seed, 1));
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(o.common.seed, 2));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(o.common.seed, 3));
    const Validation val = reference_for(shape, q, k, v, !dump_dir.empty());
    out << "reference: CPU, double accumulation, "
        << (val.full ? "every output row" : std::to_string(val.rows.size()) + " sampled rows of the first and last head")
        << "\n\n";
    if (!dump_dir.empty()) {
        const std::vector<std::size_t> qs = {std::size_t(shape.batch), std::size_t(shape.heads),
                                             std::size_t(shape.q_len), std::size_t(shape.head_dim)};
        const std::vector<std::size_t> ks = {std::size_t(shape.batch), std::size_t(shape.heads),
                                             std::size_t(shape.kv_len), std::size_t(shape.head_dim)};
        pd::write_npy<float>(dump_dir + "q.npy", q, qs);
        pd::write_npy<float>(dump_dir + "k.npy", k, ks);
        pd::write_npy<float>(dump_dir + "v.npy", v, ks);
        const std::vector<float> ref(val.expected.begin(), val.expected.end());
        pd::write_npy<float>(dump_dir + "out_reference.npy", ref, qs);
    }

    pd::DeviceBuffer<float> d_q{std::span<const float>(q)}, d_k{std::span<const float>(k)},
        d_v{std::span<const float>(v)}, d_o(shape.q_elements()), d_work(shape.score_elements());

    // Ceilings of this run: the copy bandwidth and the FP32 peak (GPU only).
    std::optional<double> copy_gbps;
    const double peak_flops = pd::fp32_peak_flops(dev);
    if (!kSim && !o.common.check_only) copy_gbps = pd::measure_copy_gbps(std::size_t(1) << 30, 2, 10);

    // ---- every version: validate, then time ----
    const Cost cost = cost_of(shape);
    std::vector<pd::KernelResult> results;
    std::vector<std::pair<std::string, Breakdown>> breakdowns;
    std::optional<double> baseline_ms;
    for (const std::string& version : att::versions()) {
        if (!o.common.selects(version)) continue;
        pd::KernelResult r;
        r.kernel = version;
        d_o.fill_bytes(pd::kPoisonByte);
        d_work.fill_bytes(pd::kPoisonByte);
        att::naive_attention(version, d_q.data(), d_k.data(), d_v.data(), d_o.data(), d_work.data(), shape);
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        const std::vector<float> got = d_o.download();
        const pd::CompareResult cmp = check(val, got, std::size_t(shape.head_dim));
        r.passed = cmp.passed;
        r.max_abs_err = cmp.max_abs_err;
        r.max_rel_err = cmp.max_rel_err;
        if (!cmp.passed)
            std::cerr << pd::describe(cmp, version + " seed=" + std::to_string(o.common.seed) + " B=" +
                                               std::to_string(shape.batch) + " H=" + std::to_string(shape.heads) +
                                               " Sq=" + std::to_string(shape.q_len) + " Sk=" +
                                               std::to_string(shape.kv_len) + " d=" + std::to_string(shape.head_dim));
        if (!dump_dir.empty())
            pd::write_npy<float>(dump_dir + "out_" + version + ".npy", got,
                                 {std::size_t(shape.batch), std::size_t(shape.heads), std::size_t(shape.q_len),
                                  std::size_t(shape.head_dim)});
        if (r.passed && !o.common.check_only) {
            const Breakdown b = time_version(version, d_q.data(), d_k.data(), d_v.data(), d_o.data(), d_work.data(),
                                             shape, o.common);
            breakdowns.emplace_back(version, b);
            r.time_ms = b.total;
            r.gbps = cost.bytes / (b.total * 1e-3) / 1e9;
            r.tflops = cost.flops / (b.total * 1e-3) / 1e12;
            if (copy_gbps && peak_flops > 0)
                r.roofline_fraction =
                    pd::roofline::floor_time_s(cost.flops, cost.bytes, peak_flops, *copy_gbps * 1e9) / (b.total * 1e-3);
            if (version == att::versions().front()) baseline_ms = b.total;  // v1
            if (baseline_ms) r.vs_baseline = *baseline_ms / b.total;
        }
        results.push_back(r);
    }
    out << pd::results_table(results).render();
    out << "bytes counted: Q, K, V, O once, the score matrix written, read and written, read (4 passes); "
        << (copy_gbps ? "'of roofline' uses this run's copy bandwidth (" + fmt("%.0f", *copy_gbps) +
                            " GB/s) and the FP32 peak; "
                      : "")
        << "'vs baseline' is v1's time over the version's.\n";
    if (!breakdowns.empty()) {
        out << "\ntime per kernel (median ms and share of the sum)" << (kSim ? ", CPU figures" : "") << ":\n";
        pd::Table t({"version", "scores", "softmax", "P V", "scores %", "softmax %", "P V %"});
        for (const auto& [name, b] : breakdowns) {
            const double sum = b.scores + b.softmax + b.pv;
            t.add_row({name, pd::format_number(b.scores), pd::format_number(b.softmax), pd::format_number(b.pv),
                       fmt("%.0f", 100 * b.scores / sum), fmt("%.0f", 100 * b.softmax / sum),
                       fmt("%.0f", 100 * b.pv / sum)});
        }
        out << t.render();
    }

    // ---- the sweep: time and score bytes against S ----
    nlohmann::json sweep = nlohmann::json::array();
    bool sweep_passed = true;
    if (o.sweep) {
        out << "\nsweep over S = Sq = Sk (B = " << shape.batch << ", H = " << shape.heads << ", d = " << shape.head_dim
            << "; each point validated against the reference, on sampled rows when large"
            << (kSim ? "; CPU figures" : "") << "):\n";
        pd::Table t({"S", "score bytes", "version", "time ms", "x previous S"});
        const int first = kSim ? 32 : 256, last = kSim ? 256 : 8192;
        std::map<std::string, double> previous;
        for (int S = first; S <= last; S *= 2) {
            att::Shape ss = shape;
            ss.q_len = ss.kv_len = S;
            const double bytes = double(ss.score_elements()) * sizeof(float);
            if (bytes + double(2 * ss.q_elements() + 2 * ss.kv_elements()) * 4 > 0.9 * double(free_b)) {
                out << "S = " << S << ": does not fit in device memory, sweep stops\n";
                break;
            }
            std::vector<float> sq(ss.q_elements()), sk(ss.kv_elements()), sv(ss.kv_elements());
            pd::fill_uniform<float>(sq, -1.f, 1.f, pd::derive_seed(o.common.seed, 10 + S));
            pd::fill_uniform<float>(sk, -1.f, 1.f, pd::derive_seed(o.common.seed, 20 + S));
            pd::fill_uniform<float>(sv, -1.f, 1.f, pd::derive_seed(o.common.seed, 30 + S));
            const Validation sval = reference_for(ss, sq, sk, sv, false);
            pd::DeviceBuffer<float> bq{std::span<const float>(sq)}, bk{std::span<const float>(sk)},
                bv{std::span<const float>(sv)}, bo(ss.q_elements()), bw(ss.score_elements());
            for (const std::string& version : att::versions()) {
                if (!o.common.selects(version)) continue;
                bo.fill_bytes(pd::kPoisonByte);
                att::naive_attention(version, bq.data(), bk.data(), bv.data(), bo.data(), bw.data(), ss);
                PD_CHECK_CUDA(cudaDeviceSynchronize());
                const bool ok = check(sval, bo.download(), std::size_t(ss.head_dim)).passed;
                sweep_passed = sweep_passed && ok;
                double ms = 0;
                if (ok && !o.common.check_only)
                    ms = pd::time_device([&] { att::naive_attention(version, bq.data(), bk.data(), bv.data(),
                                                                    bo.data(), bw.data(), ss); },
                                         o.common.warmup, o.common.iters)
                             .median_ms;
                const std::string growth = previous.count(version) && ms > 0 ? fmt("%.2f", ms / previous[version]) : "-";
                if (ms > 0) previous[version] = ms;
                t.add_row({std::to_string(S), pd::format_bytes(bytes), version,
                           ok ? (ms > 0 ? pd::format_number(ms) : "-") : "FAILED", growth});
                sweep.push_back({{"seq_len", S},
                                 {"score_bytes", bytes},
                                 {"kernel", version},
                                 {"time_ms", ms > 0 ? nlohmann::json(ms) : nlohmann::json(nullptr)},
                                 {"passed", ok}});
            }
        }
        out << t.render() << "doubling S multiplies the score bytes by 4, and the time by about 4 once the GPU is "
                             "full\n";
    }

    bool passed = sweep_passed;
    for (const auto& r : results) passed = passed && r.passed;
    if (!o.common.json.empty()) {
        nlohmann::json problem = {{"batch", shape.batch},         {"heads", shape.heads},
                                  {"seq_len", shape.q_len},       {"kv_len", shape.kv_len},
                                  {"head_dim", shape.head_dim},   {"causal", shape.causal},
                                  {"dtype", "fp32"},              {"seed", o.common.seed},
                                  {"score_bytes", score_bytes},   {"validated_rows", val.full ? "all" : "sampled"},
                                  {"check_only", o.common.check_only}};
        nlohmann::json device = pd::to_json(dev);
        device["measured"] = {{"copy_gbps", copy_gbps ? nlohmann::json(*copy_gbps) : nlohmann::json(nullptr)}};
        nlohmann::json report = pd::make_report(kChapter, pd::backend_name(), device, problem, results);
        nlohmann::json kernels = nlohmann::json::object();
        for (const auto& [name, b] : breakdowns)
            kernels[name] = {{"scores_ms", b.scores}, {"softmax_ms", b.softmax}, {"pv_ms", b.pv}, {"total_ms", b.total}};
        report["breakdown"] = kernels;
        report["sweep"] = sweep;
        report["passed"] = passed;
        pd::write_json(report, o.common.json);
    }
    if (!passed) out << "FAILED: a version did not match the reference\n";
    return passed ? pd::kExitOk : pd::kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) { return pd::guarded_main("ch01_naive_attention", run, argc, argv); }
