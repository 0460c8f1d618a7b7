// Chapter 02: batched prefill GEMM.
//
// Prefill applies every linear layer to all prompt tokens at once: Y [T, N] = X [T, K] W^T
// with W [N, K]. The program validates eight versions (v1 naive ... v6 vectorized in fp32,
// v7 WMMA and v8 mma.sync in bf16) against the CPU reference, times them next to cuBLAS at the
// same shape, and places each on the roofline: with --sweep-tokens it shows the arithmetic
// intensity growing with T until the GEMM turns from memory-bound to compute-bound.
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
#if !defined(PD_BACKEND_SIM)
#include "pd/cublas.hpp"
#endif

#include "gemm/gemm.hpp"
#include "linear_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using pd::fmt;

namespace gm = pd::kernels::gemm;
using bf16 = __nv_bfloat16;

const char* const kChapter = "02_prefill_gemm";
const bool kSim = pd::backend_name() == std::string("sim");

struct Options {
    pd::CommonOptions common;
#if defined(PD_BACKEND_SIM)
    int tokens = 96, n = 160, k = 112;  // not multiples of the tiles; seconds on a 2-core CPU
#else
    int tokens = 4096, n = 4096, k = 4096;  // 4096^3: the cuBLAS comparison of the chapter page
#endif
    std::string dtype = "all";
    bool sweep = false;
};

/// The roofs a kernel is judged against: the measured copy bandwidth and a compute peak per
/// input type (fp32 from the clock and SM count, bf16 from the datasheet preset of the device).
struct Roofs {
    std::optional<double> bytes_per_s;
    std::optional<double> fp32_flops, bf16_flops;
    std::string bf16_source;

    std::optional<double> peak(gm::DType d) const { return d == gm::DType::fp32 ? fp32_flops : bf16_flops; }
};

int input_bytes(gm::DType d) { return d == gm::DType::fp32 ? 4 : 2; }

/// Host inputs: fp32 values uniform in [-1, 1), and their bf16 roundings (the bf16 kernels' inputs).
struct Inputs {
    std::vector<float> x, w;
    std::vector<bf16> xb, wb;
};

/// What the outputs are compared with: the reference for every row of Y, or for a sample of
/// rows (large problems: the double-precision reference of 4096^3 would take minutes).
struct Validation {
    std::vector<std::size_t> rows;
    std::map<gm::DType, std::vector<double>> expected;  // [rows.size(), N] per input type
    bool full = false;
};

/// Rows checked for a large T: the first and last, those at the edges of 64- and 128-row tiles,
/// and evenly spread ones, at most about 40.
std::vector<std::size_t> sample_rows(int tokens) {
    std::vector<std::size_t> rows;
    const std::size_t t = std::size_t(tokens);
    for (std::size_t edge : {std::size_t(63), std::size_t(64), std::size_t(127), std::size_t(128)})
        if (edge < t) rows.push_back(edge);
    for (int i = 0; i < 32; ++i) rows.push_back(t == 1 ? 0 : std::size_t(i) * (t - 1) / 31);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

Validation reference_for(const gm::Shape& s, const Inputs& in, const std::vector<gm::DType>& dtypes,
                         bool force_full) {
    Validation val;
    val.full = force_full || double(s.tokens) * s.n * s.k <= 2e8;
    if (val.full) {
        val.rows.resize(std::size_t(s.tokens));
        for (std::size_t r = 0; r < val.rows.size(); ++r) val.rows[r] = r;
    } else {
        val.rows = sample_rows(s.tokens);
    }
    for (gm::DType d : dtypes)
        val.expected[d] = d == gm::DType::fp32
                              ? pd::reference::linear_rows(in.x, in.w, s.tokens, s.n, s.k, val.rows)
                              : pd::reference::linear_rows(std::span<const bf16>(in.xb), std::span<const bf16>(in.wb),
                                                           s.tokens, s.n, s.k, val.rows);
    return val;
}

/// fp32 tolerance for both input types: the bf16 reference uses the rounded inputs, so only
/// the kernel's fp32 accumulation differs from it.
pd::CompareResult check(const Validation& val, gm::DType d, const std::vector<float>& y, int n) {
    const std::size_t nn = std::size_t(n);
    std::vector<float> got(val.rows.size() * nn);
    for (std::size_t r = 0; r < val.rows.size(); ++r)
        std::copy_n(y.begin() + std::ptrdiff_t(val.rows[r] * nn), nn, got.begin() + std::ptrdiff_t(r * nn));
    pd::CompareResult c = pd::compare<float, double>(got, val.expected.at(d), pd::Tolerance::fp32());
    for (float v : y)  // an unchecked row can still hold the poison: every output must be finite
        if (!std::isfinite(v)) {
            c.passed = false;
            ++c.non_finite;
        }
    return c;
}

/// Device copies of one problem's inputs, and the output.
struct DeviceProblem {
    pd::DeviceBuffer<float> x, w, y;
    pd::DeviceBuffer<bf16> xb, wb;
};

DeviceProblem upload(const gm::Shape& s, const Inputs& in) {
    DeviceProblem p;
    if (!in.x.empty()) {
        p.x = pd::DeviceBuffer<float>(std::span<const float>(in.x));
        p.w = pd::DeviceBuffer<float>(std::span<const float>(in.w));
    }
    if (!in.xb.empty()) {
        p.xb = pd::DeviceBuffer<bf16>(std::span<const bf16>(in.xb));
        p.wb = pd::DeviceBuffer<bf16>(std::span<const bf16>(in.wb));
    }
    p.y = pd::DeviceBuffer<float>(s.y_elements());
    return p;
}

/// One row of the results: a version or cuBLAS, with its place on the roofline.
struct Row {
    pd::KernelResult r;
    gm::DType dtype = gm::DType::fp32;
    double intensity = 0;               // FLOP per minimal byte
    std::optional<double> floor_ms;     // the roofline's shortest time
    std::vector<float> y;               // the output, for --dump
};

std::string context(const std::string& name, const gm::Shape& s, std::uint64_t seed) {
    return name + " seed=" + std::to_string(seed) + " T=" + std::to_string(s.tokens) + " N=" + std::to_string(s.n) +
           " K=" + std::to_string(s.k);
}

/// Validates @p launch (which writes Y into p.y) against @p val, then times it.
Row measure(const std::string& name, gm::DType d, const std::function<void()>& launch, DeviceProblem& p,
            const gm::Shape& s, const Validation& val, const Roofs& roofs, const pd::CommonOptions& c) {
    Row row;
    row.r.kernel = name;
    row.dtype = d;
    const double flops = s.flops(), bytes = s.min_bytes(input_bytes(d));
    row.intensity = pd::roofline::arithmetic_intensity(flops, bytes);
    p.y.fill_bytes(pd::kPoisonByte);
    launch();
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    row.y = p.y.download();
    const pd::CompareResult cmp = check(val, d, row.y, s.n);
    row.r.passed = cmp.passed;
    row.r.max_abs_err = cmp.max_abs_err;
    row.r.max_rel_err = cmp.max_rel_err;
    if (!cmp.passed) {
        const std::size_t dims[] = {val.rows.size(), std::size_t(s.n)};
        std::cerr << pd::describe(cmp, context(name, s, c.seed) + (val.full ? "" : " (sampled rows)"), dims);
    }
    const std::optional<double> peak = roofs.peak(d);
    if (peak && roofs.bytes_per_s)
        row.floor_ms = 1e3 * pd::roofline::floor_time_s(flops, bytes, *peak, *roofs.bytes_per_s);
    if (row.r.passed && !c.check_only) {
        const double ms = pd::time_device(launch, c.warmup, c.iters).median_ms;
        row.r.time_ms = ms;
        row.r.gbps = bytes / (ms * 1e-3) / 1e9;
        row.r.tflops = flops / (ms * 1e-3) / 1e12;
        if (row.floor_ms) row.r.roofline_fraction = *row.floor_ms / ms;
    }
    return row;
}

/// Runs cuBLAS (on the cuda backend, when timing) and every selected version of @p dtypes on
/// one problem; fills vs_baseline with cuBLAS's time over the version's.
std::vector<Row> run_all(const gm::Shape& s, const std::vector<gm::DType>& dtypes, DeviceProblem& p,
                         const Validation& val, const Roofs& roofs, const pd::CommonOptions& c, void* cublas) {
    std::vector<Row> rows;
    for (gm::DType d : dtypes) {
        std::optional<double> cublas_ms;
#if !defined(PD_BACKEND_SIM)
        if (cublas != nullptr) {
            auto* h = static_cast<pd::CublasHandle*>(cublas);
            const std::function<void()> launch =
                d == gm::DType::fp32
                    ? std::function<void()>([&] { pd::cublas_linear(h->get(), p.x.data(), p.w.data(), p.y.data(),
                                                                    s.tokens, s.n, s.k); })
                    : std::function<void()>([&] { pd::cublas_linear(h->get(), p.xb.data(), p.wb.data(),
                                                                    p.y.data(), s.tokens, s.n, s.k); });
            rows.push_back(measure(d == gm::DType::fp32 ? "cublas_sgemm" : "cublas_bf16", d, launch, p, s, val,
                                   roofs, c));
            if (rows.back().r.passed) cublas_ms = rows.back().r.time_ms;
        }
#else
        (void)cublas;
#endif
        for (const gm::Version& v : gm::versions()) {
            if (v.dtype != d || !c.selects(v.name)) continue;
            const std::function<void()> launch =
                d == gm::DType::fp32
                    ? std::function<void()>([&] { gm::gemm(v.name, p.x.data(), p.w.data(), p.y.data(), s); })
                    : std::function<void()>([&] { gm::gemm(v.name, p.xb.data(), p.wb.data(), p.y.data(), s); });
            Row row = measure(v.name, d, launch, p, s, val, roofs, c);
            if (cublas_ms && row.r.time_ms) row.r.vs_baseline = *cublas_ms / *row.r.time_ms;
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

std::string opt(const std::optional<double>& v, int digits = 4) { return pd::format_number(v, digits); }

nlohmann::json row_json(const Row& row, const gm::Shape& s) {
    nlohmann::json j = pd::to_json(row.r);
    j["dtype"] = gm::to_string(row.dtype);
    j["tokens"] = s.tokens;
    j["flops"] = s.flops();
    j["bytes"] = s.min_bytes(input_bytes(row.dtype));
    j["arithmetic_intensity"] = row.intensity;
    j["floor_ms"] = row.floor_ms ? nlohmann::json(*row.floor_ms) : nlohmann::json(nullptr);
    j["vs_cublas"] = j["vs_baseline"];
    return j;
}

int run(int argc, char** argv) {
    Options o;
#if defined(PD_BACKEND_SIM)
    o.common.iters = 3;
    o.common.warmup = 1;
#endif
    std::vector<std::string> names;
    for (const gm::Version& v : gm::versions()) names.push_back(v.name);
    CLI::App app{"Chapter 02: batched prefill GEMM. Y [T, N] = X [T, K] W [N, K]^T in eight steps (v1 naive, v2 "
                 "coalesced, v3 shared-memory tiles, v4 and v5 register blocking, v6 128-bit loads in fp32; v7 WMMA "
                 "and v8 mma.sync tensor cores in bf16), against cuBLAS at the same shape.",
                 "ch02_prefill_gemm"};
    pd::add_common_options(app, o.common, names);
    app.add_option("--tokens", o.tokens, "Rows T of X and Y: batch x prompt tokens")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--n", o.n, "Output features N (rows of W)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app.add_option("--k", o.k, "Input features K (the reduction)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app.add_option("--dtype", o.dtype, "Input type: fp32 (v1-v6), bf16 (v7, v8) or all")
        ->check(CLI::IsMember({"fp32", "bf16", "all"}))
        ->capture_default_str();
    app.add_flag("--sweep-tokens", o.sweep,
                 kSim ? "Also run T = 1, 2, 4 ... 256 at this N and K (CPU figures on the simulator)"
                      : "Also run T = 1, 2, 4 ... 8192 at this N and K: intensity and TFLOP/s against T");
    if (auto code = pd::parse_command_line(app, argc, argv)) return *code;

    std::vector<gm::DType> dtypes;
    if (o.dtype != "bf16") dtypes.push_back(gm::DType::fp32);
    if (o.dtype != "fp32") dtypes.push_back(gm::DType::bf16);
    for (const gm::Version& v : gm::versions()) {  // --kernel vN: only its input type runs
        if (o.common.kernel != v.name) continue;
        if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end())
            return pd::bad_input(app, "--kernel " + v.name + " takes " + gm::to_string(v.dtype) +
                                          " inputs, but --dtype is " + o.dtype);
        dtypes = {v.dtype};
    }
    const gm::Shape shape{o.tokens, o.n, o.k};
    for (auto [what, elements] : {std::pair{"--tokens x --k", shape.x_elements()},
                                  std::pair{"--n x --k", shape.w_elements()},
                                  std::pair{"--tokens x --n", shape.y_elements()}})
        if (elements > std::size_t(2147483647))
            return pd::bad_input(app, std::string(what) + " = " + std::to_string(elements) +
                                          " elements exceeds 2^31 - 1 (the kernels' 32-bit offsets)");

    std::ostream& out = pd::text_out(o.common);
    const pd::DeviceProbe probe = pd::probe_devices();
    if (probe.count == 0)
        return pd::bad_input(app, "no CUDA device (" + probe.reason + "); run ch02_prefill_gemm-sim, the same "
                                  "program on the CPU simulator");
    const pd::DeviceInfo dev = pd::query_device(0);
    const std::string dump_dir = pd::prepare_dump_dir(o.common);
    const bool need_fp32 = std::count(dtypes.begin(), dtypes.end(), gm::DType::fp32) > 0;
    const bool need_bf16 = std::count(dtypes.begin(), dtypes.end(), gm::DType::bf16) > 0;

    // Memory: the inputs of each type and Y; the sweep's largest problem when it runs.
    const auto problem_bytes = [&](const gm::Shape& s) {
        return (need_fp32 ? 4.0 : 0.0) * double(s.x_elements() + s.w_elements()) +
               (need_bf16 ? 2.0 : 0.0) * double(s.x_elements() + s.w_elements()) + 4.0 * double(s.y_elements());
    };
    std::size_t free_b = 0, total_b = 0;
    PD_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (problem_bytes(shape) > 0.9 * double(free_b))
        return pd::bad_input(app, "X, W and Y (" + pd::format_bytes(problem_bytes(shape)) + ") do not fit in the " +
                                      pd::format_bytes(double(free_b)) +
                                      " of free device memory: lower --tokens, --n or --k");

    // ---- the roofs of this run ----
    Roofs roofs;
    if (!kSim) {
        if (!o.common.check_only) roofs.bytes_per_s = 1e9 * pd::measure_copy_gbps(std::size_t(1) << 30, 2, 10);
        if (const double p = pd::fp32_peak_flops(dev); p > 0) roofs.fp32_flops = p;
        if (const auto g = pd::roofline::find_gpu_for_device(dev.name)) {
            roofs.bf16_flops = g->tensor_tflops * 1e12;
            roofs.bf16_source = "datasheet of preset " + g->name;
        }
    }

    out << "Chapter 02: batched prefill GEMM  [backend " << pd::backend_name() << ", seed " << o.common.seed
        << "]\n"
        << "device: " << dev.name << (kSim ? " (timings are CPU figures, not GPU performance)" : "") << "\n"
        << "problem: Y [T, N] = X [T, K] W [N, K]^T with T = " << shape.tokens << ", N = " << shape.n
        << ", K = " << shape.k << ": 2TNK = " << pd::format_flops(shape.flops()) << "\n";
    for (gm::DType d : dtypes) {
        const double bytes = shape.min_bytes(input_bytes(d));
        out << "  " << gm::to_string(d) << " inputs (fp32 Y): minimal bytes " << pd::format_bytes(bytes)
            << ", arithmetic intensity " << fmt("%.1f", shape.flops() / bytes) << " FLOP/byte";
        if (roofs.peak(d) && roofs.bytes_per_s)
            out << "; ridge point " << fmt("%.1f", *roofs.peak(d) / *roofs.bytes_per_s) << " ("
                << pd::roofline::to_string(
                       pd::roofline::bound_at(shape.flops() / bytes, *roofs.peak(d) / *roofs.bytes_per_s))
                << ")";
        out << "\n";
    }
    if (roofs.bytes_per_s)
        out << "roofs: copy bandwidth " << fmt("%.0f", *roofs.bytes_per_s / 1e9) << " GB/s (measured); fp32 "
            << (roofs.fp32_flops ? fmt("%.1f", *roofs.fp32_flops / 1e12) + " TFLOP/s (SMs x FP32 lanes x clock)"
                                 : std::string("unknown"))
            << "; bf16 "
            << (roofs.bf16_flops ? fmt("%.0f", *roofs.bf16_flops / 1e12) + " TFLOP/s (" + roofs.bf16_source + ")"
                                 : std::string("unknown (no preset for this device)"))
            << "\n";

    // ---- inputs and reference ----
    Inputs in;
    in.x.resize(shape.x_elements());
    in.w.resize(shape.w_elements());
    pd::fill_uniform<float>(in.x, -1.f, 1.f, pd::derive_seed(o.common.seed, 1));
    pd::fill_uniform<float>(in.w, -1.f, 1.f, pd::derive_seed(o.common.seed, 2));
    if (need_bf16) {
        in.xb = pd::round_all<bf16>(in.x);
        in.wb = pd::round_all<bf16>(in.w);
    }
    const Validation val = reference_for(shape, in, dtypes, !dump_dir.empty());
    out << "reference: CPU, double accumulation, "
        << (val.full ? "every row of Y" : std::to_string(val.rows.size()) + " sampled rows of Y (all must be finite)")
        << "; bf16 versions against the reference of the rounded inputs\n\n";
    if (!need_fp32) {  // bf16 only: the fp32 copies are not needed on the device
        in.x.clear();
        in.w.clear();
    }
    DeviceProblem p = upload(shape, in);

#if !defined(PD_BACKEND_SIM)
    std::optional<pd::CublasHandle> cublas;
    if (!o.common.check_only) cublas.emplace();
    void* cublas_ptr = cublas ? &*cublas : nullptr;
#else
    void* cublas_ptr = nullptr;
#endif

    // ---- every version: validate, then time ----
    const std::vector<Row> rows = run_all(shape, dtypes, p, val, roofs, o.common, cublas_ptr);
    pd::Table t({"kernel", "dtype", "time ms", "TFLOP/s", "FLOP/byte", "floor ms", "of roofline", "vs cuBLAS",
                 "max abs err", "status"});
    for (const Row& row : rows)
        t.add_row({row.r.kernel, gm::to_string(row.dtype), opt(row.r.time_ms), opt(row.r.tflops),
                   fmt("%.1f", row.intensity), opt(row.floor_ms), opt(row.r.roofline_fraction, 3),
                   opt(row.r.vs_baseline, 3), pd::format_number(row.r.max_abs_err, 2),
                   row.r.passed ? "ok" : "FAILED"});
    out << t.render();
    out << "floor = max(2TNK / peak, minimal bytes / copy bandwidth); 'of roofline' is floor / time; 'vs cuBLAS' "
           "is cuBLAS's time over the version's, same input type"
        << (kSim ? " (no roofs and no cuBLAS on the simulator)" : "") << ".\n";
    if (!dump_dir.empty()) {
        const std::size_t T = std::size_t(shape.tokens), N = std::size_t(shape.n), K = std::size_t(shape.k);
        std::vector<float> x = in.x, w = in.w;
        if (x.empty()) {  // bf16 only: the fp32 values were dropped above; dump the rounded ones
            x = pd::to_float_all<bf16>(in.xb);
            w = pd::to_float_all<bf16>(in.wb);
        }
        pd::write_npy<float>(dump_dir + "x.npy", x, {T, K});
        pd::write_npy<float>(dump_dir + "w.npy", w, {N, K});
        if (need_fp32) {
            const std::vector<float> ref(val.expected.at(gm::DType::fp32).begin(),
                                         val.expected.at(gm::DType::fp32).end());
            pd::write_npy<float>(dump_dir + "y_reference.npy", ref, {T, N});
        }
        if (need_bf16) {
            pd::write_npy<float>(dump_dir + "x_bf16.npy", pd::to_float_all<bf16>(in.xb), {T, K});
            pd::write_npy<float>(dump_dir + "w_bf16.npy", pd::to_float_all<bf16>(in.wb), {N, K});
            const std::vector<float> ref(val.expected.at(gm::DType::bf16).begin(),
                                         val.expected.at(gm::DType::bf16).end());
            pd::write_npy<float>(dump_dir + "y_reference_bf16.npy", ref, {T, N});
        }
        for (const Row& row : rows) pd::write_npy<float>(dump_dir + "y_" + row.r.kernel + ".npy", row.y, {T, N});
        out << "dumped x, w, y_reference" << (need_bf16 ? " (and the bf16-rounded x_bf16, w_bf16, y_reference_bf16)" : "")
            << " and y_<kernel> to " << dump_dir << "\n";
    }

    // ---- the sweep: intensity and TFLOP/s against T ----
    nlohmann::json sweep = nlohmann::json::array();
    bool sweep_passed = true;
    if (o.sweep) {
        const int last = kSim ? 256 : 8192;
        out << "\nsweep over T = 1, 2, 4 ... " << last << " at N = " << shape.n << ", K = " << shape.k
            << " (each point validated, on sampled rows when large" << (kSim ? "; CPU figures" : "") << "):\n";
        pd::Table st({"T", "dtype", "FLOP/byte", "bound", "kernel", "time ms", "TFLOP/s", "of roofline",
                      "vs cuBLAS"});
        Inputs sw;
        sw.w = in.w.empty() ? std::vector<float>(shape.w_elements()) : in.w;
        if (in.w.empty()) pd::fill_uniform<float>(sw.w, -1.f, 1.f, pd::derive_seed(o.common.seed, 2));
        if (need_bf16) sw.wb = pd::round_all<bf16>(sw.w);
        for (int T = 1; T <= last; T *= 2) {
            const gm::Shape ss{T, shape.n, shape.k};
            if (problem_bytes(ss) > 0.9 * double(free_b)) {
                out << "T = " << T << ": does not fit in device memory, sweep stops\n";
                break;
            }
            sw.x.assign(ss.x_elements(), 0.f);
            pd::fill_uniform<float>(sw.x, -1.f, 1.f, pd::derive_seed(o.common.seed, 100 + std::uint64_t(T)));
            if (need_bf16) sw.xb = pd::round_all<bf16>(sw.x);
            const Validation sval = reference_for(ss, sw, dtypes, false);
            DeviceProblem sp = upload(ss, sw);
            for (const Row& row : run_all(ss, dtypes, sp, sval, roofs, o.common, cublas_ptr)) {
                sweep_passed = sweep_passed && row.r.passed;
                std::string bound = "-";
                if (roofs.peak(row.dtype) && roofs.bytes_per_s)
                    bound = pd::roofline::to_string(
                        pd::roofline::bound_at(row.intensity, *roofs.peak(row.dtype) / *roofs.bytes_per_s));
                st.add_row({std::to_string(T), gm::to_string(row.dtype), fmt("%.1f", row.intensity), bound,
                            row.r.kernel, row.r.passed ? opt(row.r.time_ms) : "FAILED", opt(row.r.tflops),
                            opt(row.r.roofline_fraction, 3), opt(row.r.vs_baseline, 3)});
                sweep.push_back(row_json(row, ss));
            }
        }
        out << st.render()
            << "intensity = 2TNK / (bytes of X, W and Y): it grows with T until W's bytes no longer dominate; "
               "below the ridge point the GEMM is memory-bound, above it compute-bound\n";
    }

    bool passed = sweep_passed;
    std::vector<pd::KernelResult> results;
    for (const Row& row : rows) {
        passed = passed && row.r.passed;
        results.push_back(row.r);
    }
    if (!o.common.json.empty()) {
        nlohmann::json problem = {{"tokens", shape.tokens},
                                  {"n", shape.n},
                                  {"k", shape.k},
                                  {"dtype", o.dtype},
                                  {"seed", o.common.seed},
                                  {"flops", shape.flops()},
                                  {"validated_rows", val.full ? "all" : "sampled"},
                                  {"check_only", o.common.check_only}};
        nlohmann::json device = pd::to_json(dev);
        const auto js = [](const std::optional<double>& v, double scale) {
            return v ? nlohmann::json(*v / scale) : nlohmann::json(nullptr);
        };
        device["measured"] = {{"copy_gbps", js(roofs.bytes_per_s, 1e9)}};
        device["roofs"] = {{"fp32_tflops", js(roofs.fp32_flops, 1e12)},
                           {"bf16_tflops", js(roofs.bf16_flops, 1e12)},
                           {"bf16_source", roofs.bf16_source}};
        nlohmann::json report = pd::make_report(kChapter, pd::backend_name(), device, problem, results);
        for (std::size_t i = 0; i < rows.size(); ++i) report["results"][i] = row_json(rows[i], shape);
        report["sweep"] = sweep;
        report["passed"] = passed;
        pd::write_json(report, o.common.json);
    }
    if (!passed) out << "FAILED: a version did not match the reference\n";
    return passed ? pd::kExitOk : pd::kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) { return pd::guarded_main("ch02_prefill_gemm", run, argc, argv); }
