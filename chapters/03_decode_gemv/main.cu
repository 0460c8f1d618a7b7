// Chapter 03: decode GEMV.
//
// Decode applies every linear layer to one new token per sequence: y [N] = W [N, K] x [K].
// Each weight is read for two FLOPs, so the step is bound by memory bandwidth and the goal is
// to stream the weights at the speed of the memory. The program validates five versions (v1
// thread per row ... v5 batched) against the CPU reference, times a decode step over a stack of
// distinct weight matrices (several times the L2, as a real model's layers are) next to cuBLAS
// and the measured copy bandwidth, and with --sweep-batch shows that B tokens cost about the
// same as one until the batch reaches the ridge point.
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

#include "gemv/gemv.hpp"
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

namespace gv = pd::kernels::gemv;
using bf16 = __nv_bfloat16;

const char* const kChapter = "03_decode_gemv";
const bool kSim = pd::backend_name() == std::string("sim");

enum class DType { fp32, bf16 };
const char* name_of(DType d) { return d == DType::fp32 ? "fp32" : "bf16"; }
int elem_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

struct Options {
    pd::CommonOptions common;
#if defined(PD_BACKEND_SIM)
    int n = 100, k = 259, layers = 3;  // K odd: the vector loads' head and tail run; seconds on a CPU
#else
    int n = 4096, k = 4096, layers = 16;  // 16 matrices of 4096 x 4096: 512 MiB in bf16, ~10x an H200's L2
#endif
    int batch = 1;
    std::string dtype = "all";
    bool sweep = false;
};

/// Host inputs: the weight stack [L, N, K] and the tokens [B, K], fp32 values uniform in
/// [-1, 1), and their bf16 roundings.
struct Inputs {
    std::vector<float> w, x;
    std::vector<bf16> wb, xb;
};

/// The expected Y of the first and the last matrix of the stack (they are the ones checked:
/// the first catches indexing errors, the last offset errors across the stack).
struct Expected {
    std::vector<double> first, last;        // reference of the kernel's own inputs, [B, N] each
    std::vector<double> first_hi, last_hi;  // bf16: the reference of the unrounded fp32 inputs
};

template <typename T>
std::span<const T> matrix(const std::vector<T>& stack, const gv::Shape& s, int layer) {
    return std::span<const T>(stack).subspan(std::size_t(layer) * s.w_elements(), s.w_elements());
}

Expected reference_for(const gv::Shape& s, int layers, const Inputs& in, DType d) {
    Expected e;
    const auto lin = [&](int layer) {
        return pd::reference::linear(std::span<const float>(in.x), matrix(in.w, s, layer), s.batch, s.n, s.k);
    };
    const auto lin_lp = [&](int layer) {
        return pd::reference::linear(std::span<const bf16>(in.xb), matrix(in.wb, s, layer), s.batch, s.n, s.k);
    };
    if (d == DType::fp32) {
        e.first = lin(0);
        e.last = lin(layers - 1);
    } else {
        e.first = lin_lp(0);
        e.last = lin_lp(layers - 1);
        e.first_hi = lin(0);
        e.last_hi = lin(layers - 1);
    }
    return e;
}

/// fp32: the CRAFT tolerance. bf16: the FlashAttention rule, against the reference of the
/// unrounded inputs, with the rounding error of the bf16 reference as the yardstick.
pd::CompareResult check_one(DType d, std::span<const float> got, const std::vector<double>& ref,
                            const std::vector<double>& ref_hi) {
    if (d == DType::fp32) return pd::compare<float, double>(got, ref, pd::Tolerance::fp32());
    return pd::compare_to_lowp_reference<float, double>(got, ref_hi, ref, 2.0);
}

pd::CompareResult check(DType d, const std::vector<float>& y, const gv::Shape& s, int layers, const Expected& e) {
    const std::size_t m = s.y_elements();
    const std::span<const float> all(y);
    pd::CompareResult c = check_one(d, all.first(m), e.first, e.first_hi);
    if (layers > 1) {
        const pd::CompareResult l = check_one(d, all.subspan(std::size_t(layers - 1) * m, m), e.last, e.last_hi);
        const double max_abs = std::max(c.max_abs_err, l.max_abs_err), max_rel = std::max(c.max_rel_err, l.max_rel_err);
        if (c.passed && !l.passed) c = l;  // report the mismatches of the matrix that failed
        c.max_abs_err = max_abs;
        c.max_rel_err = max_rel;
    }
    for (float v : y)  // the other matrices' outputs are not compared, but must all have been written
        if (!std::isfinite(v)) {
            c.passed = false;
            ++c.non_finite;
        }
    return c;
}

/// Device copies of the inputs of one type, and Y for every matrix of the stack.
struct DeviceProblem {
    pd::DeviceBuffer<float> w, x;
    pd::DeviceBuffer<bf16> wb, xb;
    pd::DeviceBuffer<float> y;  // [L, B, N]
};

/// One row of the results.
struct Row {
    pd::KernelResult r;
    DType dtype = DType::fp32;
    int batch = 1;
    double intensity = 0;
    std::optional<double> copy_fraction;  // GB/s over the measured copy bandwidth
    std::vector<float> y;                 // Y of the first matrix, for --dump
};

/// The runner of one decode step over the stack: every matrix once, with the same tokens.
using StepFn = std::function<void(int layer)>;

Row measure(const std::string& name, DType d, const StepFn& launch, DeviceProblem& p, const gv::Shape& s,
            int layers, const Expected& e, std::optional<double> copy_bps, const pd::CommonOptions& c) {
    Row row;
    row.r.kernel = name;
    row.dtype = d;
    row.batch = s.batch;
    const double bytes = layers * s.min_bytes(elem_bytes(d)), flops = layers * s.flops();
    row.intensity = flops / bytes;
    const auto step = [&] {
        for (int l = 0; l < layers; ++l) launch(l);
    };
    p.y.fill_bytes(pd::kPoisonByte);
    step();
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> y = p.y.download();
    const pd::CompareResult cmp = check(d, y, s, layers, e);
    row.r.passed = cmp.passed;
    row.r.max_abs_err = cmp.max_abs_err;
    row.r.max_rel_err = cmp.max_rel_err;
    row.y.assign(y.begin(), y.begin() + std::ptrdiff_t(s.y_elements()));
    if (!cmp.passed) {
        const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.n)};
        std::cerr << pd::describe(cmp,
                                  name + " " + name_of(d) + " seed=" + std::to_string(c.seed) + " B=" +
                                      std::to_string(s.batch) + " N=" + std::to_string(s.n) + " K=" +
                                      std::to_string(s.k) + " (first or last matrix of " + std::to_string(layers) +
                                      ")",
                                  dims);
    }
    if (row.r.passed && !c.check_only) {
        const double ms = pd::time_device(step, c.warmup, c.iters).median_ms;
        row.r.time_ms = ms;
        row.r.gbps = bytes / (ms * 1e-3) / 1e9;
        row.r.tflops = flops / (ms * 1e-3) / 1e12;
        if (copy_bps) {
            row.copy_fraction = *row.r.gbps * 1e9 / *copy_bps;
            row.r.roofline_fraction = (bytes / *copy_bps) / (ms * 1e-3);  // memory-bound: the floor is the bytes
        }
    }
    return row;
}

/// cuBLAS (cuda, when timing) and every selected version for one type on one problem;
/// vs_baseline is cuBLAS's step time over the version's.
std::vector<Row> run_all(const gv::Shape& s, int layers, DType d, DeviceProblem& p, const Expected& e,
                         std::optional<double> copy_bps, const pd::CommonOptions& c, void* cublas) {
    std::vector<Row> rows;
    const std::size_t wn = s.w_elements(), yn = s.y_elements();
    std::optional<double> cublas_ms;
#if !defined(PD_BACKEND_SIM)
    if (cublas != nullptr) {
        const cublasHandle_t h = static_cast<pd::CublasHandle*>(cublas)->get();
        StepFn launch;
        std::string name;
        if (d == DType::fp32 && s.batch == 1) {
            name = "cublas_sgemv";
            launch = [&, h](int l) { pd::cublas_gemv(h, p.w.data() + l * wn, p.x.data(), p.y.data() + l * yn, s.n, s.k); };
        } else if (d == DType::fp32) {
            name = "cublas_sgemm";
            launch = [&, h](int l) {
                pd::cublas_linear(h, p.x.data(), p.w.data() + l * wn, p.y.data() + l * yn, s.batch, s.n, s.k);
            };
        } else {
            name = "cublas_bf16";
            launch = [&, h](int l) {
                pd::cublas_linear(h, p.xb.data(), p.wb.data() + l * wn, p.y.data() + l * yn, s.batch, s.n, s.k);
            };
        }
        rows.push_back(measure(name, d, launch, p, s, layers, e, copy_bps, c));
        if (rows.back().r.passed) cublas_ms = rows.back().r.time_ms;
    }
#else
    (void)cublas;
#endif
    for (const gv::Version& v : gv::versions()) {
        if (!c.selects(v.name)) continue;
        const StepFn launch =
            d == DType::fp32
                ? StepFn([&](int l) { gv::gemv(v.name, p.w.data() + l * wn, p.x.data(), p.y.data() + l * yn, s); })
                : StepFn([&](int l) { gv::gemv(v.name, p.wb.data() + l * wn, p.xb.data(), p.y.data() + l * yn, s); });
        Row row = measure(v.name, d, launch, p, s, layers, e, copy_bps, c);
        if (cublas_ms && row.r.time_ms) row.r.vs_baseline = *cublas_ms / *row.r.time_ms;
        rows.push_back(std::move(row));
    }
    return rows;
}

/// Uploads the weight stack of type @p d (once per type: the sweep keeps it).
void upload_weights(DeviceProblem& p, const Inputs& in, DType d) {
    if (d == DType::fp32) p.w = pd::DeviceBuffer<float>(std::span<const float>(in.w));
    else p.wb = pd::DeviceBuffer<bf16>(std::span<const bf16>(in.wb));
}

/// Uploads the tokens of type @p d and allocates Y for every matrix of the stack.
void upload_tokens(DeviceProblem& p, const gv::Shape& s, int layers, const Inputs& in, DType d) {
    if (d == DType::fp32) p.x = pd::DeviceBuffer<float>(std::span<const float>(in.x));
    else p.xb = pd::DeviceBuffer<bf16>(std::span<const bf16>(in.xb));
    p.y = pd::DeviceBuffer<float>(std::size_t(layers) * s.y_elements());
}

std::string opt(const std::optional<double>& v, int digits = 4) { return pd::format_number(v, digits); }

nlohmann::json row_json(const Row& row, const gv::Shape& s, int layers) {
    nlohmann::json j = pd::to_json(row.r);
    j["dtype"] = name_of(row.dtype);
    j["batch"] = row.batch;
    j["layers"] = layers;
    j["bytes"] = layers * s.min_bytes(elem_bytes(row.dtype));
    j["flops"] = layers * s.flops();
    j["arithmetic_intensity"] = row.intensity;
    j["copy_fraction"] = row.copy_fraction ? nlohmann::json(*row.copy_fraction) : nlohmann::json(nullptr);
    j["tokens_per_s"] = row.r.time_ms ? nlohmann::json(row.batch / (*row.r.time_ms * 1e-3)) : nlohmann::json(nullptr);
    j["vs_cublas"] = j["vs_baseline"];
    return j;
}

/// Seeded weights for a stack of @p layers matrices (fp32, and bf16 roundings for bf16).
Inputs make_weights(const gv::Shape& s, int layers, DType d, std::uint64_t seed) {
    Inputs in;
    in.w.resize(std::size_t(layers) * s.w_elements());
    pd::fill_uniform<float>(in.w, -1.f, 1.f, pd::derive_seed(seed, 1));
    if (d == DType::bf16) in.wb = pd::round_all<bf16>(in.w);
    return in;
}

/// Seeded tokens X [B, K] into @p in (a new draw for each B).
void make_tokens(Inputs& in, const gv::Shape& s, DType d, std::uint64_t seed) {
    in.x.resize(s.x_elements());
    pd::fill_uniform<float>(in.x, -1.f, 1.f, pd::derive_seed(seed, 2 + std::uint64_t(s.batch)));
    if (d == DType::bf16) in.xb = pd::round_all<bf16>(in.x);
}

int run(int argc, char** argv) {
    Options o;
#if defined(PD_BACKEND_SIM)
    o.common.iters = 3;
    o.common.warmup = 1;
#endif
    std::vector<std::string> names;
    for (const gv::Version& v : gv::versions()) names.push_back(v.name);
    CLI::App app{"Chapter 03: decode GEMV. Y [B, N] = X [B, K] W [N, K]^T for B new tokens over a stack of distinct "
                 "weight matrices: v1 thread per row, v2 warp per row, v3 128-bit loads, v4 CUB reduction, v5 "
                 "batched decode; against cuBLAS and the copy bandwidth.",
                 "ch03_decode_gemv"};
    pd::add_common_options(app, o.common, names);
    app.add_option("--n", o.n, "Rows N of each weight matrix (outputs)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--k", o.k, "Columns K of each weight matrix (inputs)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--batch", o.batch, "Tokens B decoded together, one per sequence")
        ->check(CLI::Range(1, gv::kMaxBatch))
        ->capture_default_str();
    app.add_option("--layers", o.layers, "Distinct weight matrices in the stack (a decode step reads them all)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    app.add_option("--dtype", o.dtype, "Type of W and X: fp32, bf16 or all")
        ->check(CLI::IsMember({"fp32", "bf16", "all"}))
        ->capture_default_str();
    app.add_flag("--sweep-batch", o.sweep,
                 std::string("Also run B = 1, 2, 4 ... 64: step time, tokens per second and intensity against B") +
                     (kSim ? " (CPU figures on the simulator)" : ""));
    if (auto code = pd::parse_command_line(app, argc, argv)) return *code;

    std::vector<DType> dtypes;
    if (o.dtype != "bf16") dtypes.push_back(DType::fp32);
    if (o.dtype != "fp32") dtypes.push_back(DType::bf16);
    const gv::Shape shape{o.batch, o.n, o.k};
    if (shape.w_elements() > std::size_t(2147483647))
        return pd::bad_input(app, "--n x --k = " + std::to_string(shape.w_elements()) +
                                      " elements exceeds 2^31 - 1 (the kernels' 32-bit offsets)");

    std::ostream& out = pd::text_out(o.common);
    const pd::DeviceProbe probe = pd::probe_devices();
    if (probe.count == 0)
        return pd::bad_input(app, "no CUDA device (" + probe.reason + "); run ch03_decode_gemv-sim, the same "
                                  "program on the CPU simulator");
    const pd::DeviceInfo dev = pd::query_device(0);
    const std::string dump_dir = pd::prepare_dump_dir(o.common);

    // Memory: the largest type's stack, its tokens and Y (the sweep goes to B = 64); the host
    // holds the fp32 stack and its bf16 copy.
    const int max_batch = o.sweep ? gv::kMaxBatch : o.batch;
    const double stack_bytes = double(o.layers) * double(shape.w_elements()) * (o.dtype == "bf16" ? 2.0 : 4.0);
    const double device_bytes =
        stack_bytes + double(o.layers) * max_batch * double(o.n) * 4.0 + double(max_batch) * double(o.k) * 4.0;
    std::size_t free_b = 0, total_b = 0;
    PD_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (device_bytes > 0.9 * double(free_b))
        return pd::bad_input(app, "the weight stack, X and Y (" + pd::format_bytes(device_bytes) +
                                      ") do not fit in the " + pd::format_bytes(double(free_b)) +
                                      " of free device memory: lower --layers, --n or --k");

    std::optional<double> copy_bps;
    if (!kSim && !o.common.check_only) copy_bps = 1e9 * pd::measure_copy_gbps(std::size_t(1) << 30, 2, 10);

    out << "Chapter 03: decode GEMV  [backend " << pd::backend_name() << ", seed " << o.common.seed << "]\n"
        << "device: " << dev.name << (kSim ? " (timings are CPU figures, not GPU performance)" : "") << "\n"
        << "problem: Y [B, N] = X [B, K] W [N, K]^T with B = " << shape.batch << ", N = " << shape.n
        << ", K = " << shape.k << ", over a stack of " << o.layers << " distinct matrices (one decode step)\n";
    for (DType d : dtypes) {
        const double wb = double(o.layers) * double(shape.w_elements()) * elem_bytes(d);
        out << "  " << name_of(d) << ": weights " << pd::format_bytes(wb);
        if (dev.l2_bytes > 0) out << " = " << fmt("%.1f", wb / dev.l2_bytes) << " x the L2";
        out << "; intensity " << fmt("%.2f", shape.flops() / shape.min_bytes(elem_bytes(d)))
            << " FLOP/byte (2 FLOPs per weight per token)\n";
    }
    if (copy_bps) out << "roof: copy bandwidth " << fmt("%.0f", *copy_bps / 1e9) << " GB/s (measured in this run)\n";
    out << "reference: CPU, double accumulation, the first and the last matrix of the stack; bf16 by the "
           "FlashAttention rule (error <= 2 x that of the bf16-rounded reference)\n\n";

#if !defined(PD_BACKEND_SIM)
    std::optional<pd::CublasHandle> cublas;
    if (!o.common.check_only) cublas.emplace();
    void* cublas_ptr = cublas ? &*cublas : nullptr;
#else
    void* cublas_ptr = nullptr;
#endif

    // ---- every version: validate, then time ----
    std::vector<Row> rows;
    for (DType d : dtypes) {
        Inputs in = make_weights(shape, o.layers, d, o.common.seed);
        make_tokens(in, shape, d, o.common.seed);
        const Expected e = reference_for(shape, o.layers, in, d);
        DeviceProblem p;
        upload_weights(p, in, d);
        upload_tokens(p, shape, o.layers, in, d);
        std::vector<Row> part = run_all(shape, o.layers, d, p, e, copy_bps, o.common, cublas_ptr);
        if (!dump_dir.empty()) {
            const std::size_t B = std::size_t(shape.batch), N = std::size_t(shape.n), K = std::size_t(shape.k);
            const std::string suffix = d == DType::fp32 ? "" : "_bf16";
            if (d == DType::fp32) {
                pd::write_npy<float>(dump_dir + "w.npy", matrix(in.w, shape, 0), {N, K});
                pd::write_npy<float>(dump_dir + "x.npy", in.x, {B, K});
            } else {
                pd::write_npy<float>(dump_dir + "w_bf16.npy", pd::to_float_all<bf16>(matrix(in.wb, shape, 0)), {N, K});
                pd::write_npy<float>(dump_dir + "x_bf16.npy", pd::to_float_all<bf16>(in.xb), {B, K});
            }
            const std::vector<float> ref(e.first.begin(), e.first.end());
            pd::write_npy<float>(dump_dir + "y_reference" + suffix + ".npy", ref, {B, N});
            for (const Row& row : part)
                pd::write_npy<float>(dump_dir + "y_" + row.r.kernel + suffix + ".npy", row.y, {B, N});
        }
        rows.insert(rows.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    pd::Table t({"kernel", "dtype", "step ms", "GB/s", "of copy", "tokens/s", "vs cuBLAS", "max abs err", "status"});
    for (const Row& row : rows)
        t.add_row({row.r.kernel, name_of(row.dtype), opt(row.r.time_ms), opt(row.r.gbps), opt(row.copy_fraction, 3),
                   row.r.time_ms ? pd::format_number(row.batch / (*row.r.time_ms * 1e-3)) : "-",
                   opt(row.r.vs_baseline, 3), pd::format_number(row.r.max_abs_err, 2),
                   row.r.passed ? "ok" : "FAILED"});
    out << t.render();
    out << "a step reads all " << o.layers << " matrices once; GB/s counts W, X and Y once per matrix; 'of copy' is "
           "GB/s over the copy bandwidth; 'vs cuBLAS' is cuBLAS's step time over the version's"
        << (kSim ? " (no copy bandwidth and no cuBLAS on the simulator)" : "") << ".\n";
    if (!dump_dir.empty())
        out << "dumped the first matrix's w, x, y_reference and y_<kernel> (bf16: *_bf16.npy) to " << dump_dir << "\n";

    // ---- the sweep: step time against B ----
    nlohmann::json sweep = nlohmann::json::array();
    bool sweep_passed = true;
    if (o.sweep) {
        out << "\nsweep over B = 1, 2, 4 ... " << gv::kMaxBatch << " (N = " << shape.n << ", K = " << shape.k << ", "
            << o.layers << " matrices; each point validated" << (kSim ? "; CPU figures" : "") << "):\n";
        pd::Table st({"B", "dtype", "FLOP/byte", "kernel", "step ms", "x B=1", "tokens/s", "of copy"});
        for (DType d : dtypes) {
            std::map<std::string, double> at_one;
            Inputs in = make_weights(shape, o.layers, d, o.common.seed);
            DeviceProblem p;
            upload_weights(p, in, d);
            for (int B = 1; B <= gv::kMaxBatch; B *= 2) {
                const gv::Shape ss{B, shape.n, shape.k};
                make_tokens(in, ss, d, o.common.seed);
                const Expected e = reference_for(ss, o.layers, in, d);
                upload_tokens(p, ss, o.layers, in, d);
                for (const Row& row : run_all(ss, o.layers, d, p, e, copy_bps, o.common, cublas_ptr)) {
                    sweep_passed = sweep_passed && row.r.passed;
                    std::string growth = "-";
                    if (row.r.time_ms) {
                        if (B == 1) at_one[row.r.kernel] = *row.r.time_ms;
                        if (at_one.count(row.r.kernel)) growth = fmt("%.2f", *row.r.time_ms / at_one[row.r.kernel]);
                    }
                    st.add_row({std::to_string(B), name_of(d), fmt("%.2f", row.intensity), row.r.kernel,
                                row.r.passed ? opt(row.r.time_ms) : "FAILED", growth,
                                row.r.time_ms ? pd::format_number(B / (*row.r.time_ms * 1e-3)) : "-",
                                opt(row.copy_fraction, 3)});
                    nlohmann::json j = row_json(row, ss, o.layers);
                    j["step_vs_batch1"] = growth == "-" ? nlohmann::json(nullptr)
                                                        : nlohmann::json(*row.r.time_ms / at_one[row.r.kernel]);
                    sweep.push_back(j);
                }
            }
        }
        out << st.render()
            << "'x B=1' is the step time over the same kernel's at B = 1: while the weights dominate the bytes, B "
               "tokens cost about as much as one (v5 reads each weight once for all B; v1-v4 once per token)\n";
    }

    bool passed = sweep_passed;
    std::vector<pd::KernelResult> results;
    for (const Row& row : rows) {
        passed = passed && row.r.passed;
        results.push_back(row.r);
    }
    if (!o.common.json.empty()) {
        nlohmann::json problem = {{"batch", shape.batch},   {"n", shape.n},
                                  {"k", shape.k},           {"layers", o.layers},
                                  {"dtype", o.dtype},       {"seed", o.common.seed},
                                  {"check_only", o.common.check_only}};
        nlohmann::json device = pd::to_json(dev);
        device["measured"] = {{"copy_gbps", copy_bps ? nlohmann::json(*copy_bps / 1e9) : nlohmann::json(nullptr)}};
        nlohmann::json report = pd::make_report(kChapter, pd::backend_name(), device, problem, results);
        for (std::size_t i = 0; i < rows.size(); ++i) report["results"][i] = row_json(rows[i], shape, o.layers);
        report["sweep"] = sweep;
        report["passed"] = passed;
        pd::write_json(report, o.common.json);
    }
    if (!passed) out << "FAILED: a version did not match the reference\n";
    return passed ? pd::kExitOk : pd::kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) { return pd::guarded_main("ch03_decode_gemv", run, argc, argv); }
