// Chapter 00: roofline and arithmetic intensity.
//
// Why prefill and decode behave differently, in numbers: the device's limits (a report and
// three measured ceilings: copy bandwidth, FP32 FMA rate, cuBLAS BF16 rate) and a calculator
// that places one prefill and one decode step of a model on the roofline.
//
// Program shape (every chapter): options, device and problem, seeded inputs, CPU reference,
// each kernel validated then timed, a table, JSON, exit code.
#include "pd/buffer.hpp"
#include "pd/cli.hpp"
#include "pd/common.hpp"
#include "pd/compare.hpp"
#include "pd/device.hpp"
#include "pd/half.hpp"
#include "pd/npy.hpp"
#include "pd/report.hpp"
#include "pd/rng.hpp"
#include "pd/roofline.hpp"
#include "pd/timer.hpp"
#if !defined(PD_BACKEND_SIM)
#include "pd/cublas.hpp"
#endif

#include "roofline/roofline.hpp"
#include "roofline_reference.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using pd::fmt;

namespace rl = pd::roofline;

const char* const kChapter = "00_roofline";
#if defined(PD_BACKEND_SIM)
const std::vector<std::string> kKernels = {"copy_memcpy", "copy_kernel", "fma_fp32"};  // no cuBLAS on the sim
#else
const std::vector<std::string> kKernels = {"copy_memcpy", "copy_kernel", "fma_fp32", "cublas_bf16"};
#endif

struct Options {
    pd::CommonOptions common;
    // Calculator.
    std::optional<double> params;
    double bytes_per_param = 2;
    std::optional<double> kv_bytes;
    long long batch = 1;
    long long prompt_tokens = 2048;
    std::string gpu = "H200";
    int gpus = 1;
    std::string model = "none";
    bool calculator_only = false;
    // Measured ceilings: benchmark sizes on a GPU, seconds-long runs on the simulator.
#if defined(PD_BACKEND_SIM)
    int copy_mib = 64;
    int fma_iters = 256;
#else
    int copy_mib = 1024;
    int fma_iters = 16384;
#endif
    int gemm_n = 8192;
};

/// The ceilings measured in this run (absent when not run or failed).
struct Ceilings {
    std::optional<double> copy_gbps;    // best of cudaMemcpy and the copy kernel
    std::optional<double> fp32_tflops;
    std::optional<double> bf16_tflops;
};

// ---- ceilings -------------------------------------------------------------------------------

pd::KernelResult run_copy_memcpy(const Options& o, pd::DeviceBuffer<float>& in, pd::DeviceBuffer<float>& out,
                                 const std::vector<float>& host_in, double theoretical_gbps) {
    pd::KernelResult r;
    r.kernel = "copy_memcpy";
    out.fill_bytes(pd::kPoisonByte);
    PD_CHECK_CUDA(cudaMemcpy(out.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice));
    const std::vector<float> got = out.download();
    const pd::CompareResult cmp = pd::compare<float, float>(got, host_in, pd::Tolerance::exact());
    r.passed = cmp.passed;
    r.max_abs_err = cmp.max_abs_err;
    if (!cmp.passed) std::cerr << pd::describe(cmp, "copy_memcpy seed=" + std::to_string(o.common.seed));
    if (o.common.check_only || !r.passed) return r;
    const pd::TimingStats t = pd::time_device(
        [&] { PD_CHECK_CUDA(cudaMemcpyAsync(out.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice)); },
        o.common.warmup, o.common.iters);
    const double bytes = 2.0 * in.bytes();  // read plus written
    r.time_ms = t.median_ms;
    r.gbps = bytes / (t.median_ms * 1e-3) / 1e9;
    if (theoretical_gbps > 0) r.roofline_fraction = *r.gbps / theoretical_gbps;
    return r;
}

pd::KernelResult run_copy_kernel(const Options& o, pd::DeviceBuffer<float>& in, pd::DeviceBuffer<float>& out,
                                 const std::vector<float>& host_in, double theoretical_gbps,
                                 std::optional<double> memcpy_ms) {
    pd::KernelResult r;
    r.kernel = "copy_kernel";
    out.fill_bytes(pd::kPoisonByte);
    pd::kernels::roofline::copy_grid_stride(in.data(), out.data(), in.size());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = out.download();
    const pd::CompareResult cmp = pd::compare<float, float>(got, host_in, pd::Tolerance::exact());
    r.passed = cmp.passed;
    r.max_abs_err = cmp.max_abs_err;
    if (!cmp.passed) std::cerr << pd::describe(cmp, "copy_kernel seed=" + std::to_string(o.common.seed));
    if (o.common.check_only || !r.passed) return r;
    const pd::TimingStats t = pd::time_device(
        [&] { pd::kernels::roofline::copy_grid_stride(in.data(), out.data(), in.size()); }, o.common.warmup,
        o.common.iters);
    r.time_ms = t.median_ms;
    r.gbps = 2.0 * in.bytes() / (t.median_ms * 1e-3) / 1e9;
    if (theoretical_gbps > 0) r.roofline_fraction = *r.gbps / theoretical_gbps;
    if (memcpy_ms) r.vs_baseline = *memcpy_ms / t.median_ms;
    return r;
}

pd::KernelResult run_fma(const Options& o, const pd::DeviceInfo& dev, const std::string& dump_dir) {
    namespace k = pd::kernels::roofline;
    pd::KernelResult r;
    r.kernel = "fma_fp32";
    constexpr int kPatterns = 256;
    const std::size_t n = std::size_t(kPatterns) * k::kFmaChains;
    std::vector<float> init(n), mul(n), add(n);
    pd::fill_uniform<float>(init, -1.f, 1.f, pd::derive_seed(o.common.seed, 10));
    pd::fill_uniform<float>(mul, 0.5f, 0.999f, pd::derive_seed(o.common.seed, 11));  // |mul| < 1: stays finite
    pd::fill_uniform<float>(add, -1.f, 1.f, pd::derive_seed(o.common.seed, 12));
    const std::vector<float> ref = pd::reference::fma_chains(init, mul, add, kPatterns, k::kFmaChains, o.fma_iters);

    // Two full waves of resident threads.
    const std::size_t threads = std::size_t(dev.sm_count) * std::size_t(dev.max_threads_per_sm) * 2;
    pd::DeviceBuffer<float> d_init{std::span<const float>(init)}, d_mul{std::span<const float>(mul)},
        d_add{std::span<const float>(add)}, d_out{threads * k::kFmaChains};
    d_out.fill_bytes(pd::kPoisonByte);
    k::fma_chains(d_init.data(), d_mul.data(), d_add.data(), kPatterns, d_out.data(), threads, o.fma_iters);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = d_out.download();
    // Thread t computed row t % kPatterns: expand the reference to every thread.
    std::vector<float> expected(got.size());
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = ref[i % n];
    const pd::CompareResult cmp = pd::compare<float, float>(got, expected, pd::Tolerance::exact());
    r.passed = cmp.passed;
    r.max_abs_err = cmp.max_abs_err;
    if (!cmp.passed) {
        const std::size_t shape[] = {threads, std::size_t(k::kFmaChains)};
        std::cerr << pd::describe(cmp, "fma_fp32 seed=" + std::to_string(o.common.seed), shape);
    }
    if (!dump_dir.empty()) {
        const std::vector<std::size_t> shape = {std::size_t(kPatterns), std::size_t(k::kFmaChains)};
        pd::write_npy<float>(dump_dir + "fma_init.npy", init, shape);
        pd::write_npy<float>(dump_dir + "fma_mul.npy", mul, shape);
        pd::write_npy<float>(dump_dir + "fma_add.npy", add, shape);
        pd::write_npy<float>(dump_dir + "fma_out.npy", std::span<const float>(got).first(n), shape);
        pd::write_npy<float>(dump_dir + "fma_reference.npy", ref, shape);
    }
    if (o.common.check_only || !r.passed) return r;
    const pd::TimingStats t = pd::time_device(
        [&] {
            k::fma_chains(d_init.data(), d_mul.data(), d_add.data(), kPatterns, d_out.data(), threads,
                          o.fma_iters);
        },
        o.common.warmup, o.common.iters);
    const double flops = 2.0 * k::kFmaChains * double(o.fma_iters) * double(threads);
    r.time_ms = t.median_ms;
    r.tflops = flops / (t.median_ms * 1e-3) / 1e12;
    if (const double peak = pd::fp32_peak_flops(dev); peak > 0) r.roofline_fraction = *r.tflops * 1e12 / peak;
    return r;
}

#if !defined(PD_BACKEND_SIM)
pd::KernelResult run_cublas_bf16(const Options& o, const std::string& dump_dir) {
    pd::KernelResult r;
    r.kernel = "cublas_bf16";
    const std::size_t n = std::size_t(o.gemm_n);
    std::vector<__nv_bfloat16> a(n * n), b(n * n);
    pd::fill_uniform<__nv_bfloat16>(a, -1.f, 1.f, pd::derive_seed(o.common.seed, 20));
    pd::fill_uniform<__nv_bfloat16>(b, -1.f, 1.f, pd::derive_seed(o.common.seed, 21));
    pd::DeviceBuffer<__nv_bfloat16> d_a{std::span<const __nv_bfloat16>(a)}, d_b{std::span<const __nv_bfloat16>(b)};
    pd::DeviceBuffer<float> d_c(n * n);
    d_c.fill_bytes(pd::kPoisonByte);
    pd::CublasHandle handle;
    const float alpha = 1.f, beta = 0.f;
    // Row-major C = A B^T, read by column-major cuBLAS as C^T = B A^T: the row-major [n, k]
    // buffers of B and A are k x n column-major matrices, so B takes op T and A takes op N.
    auto gemm = [&] {
        PD_CHECK_CUBLAS(cublasGemmEx(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, o.gemm_n, o.gemm_n, o.gemm_n, &alpha,
                                     d_b.data(), CUDA_R_16BF, o.gemm_n, d_a.data(), CUDA_R_16BF, o.gemm_n, &beta,
                                     d_c.data(), CUDA_R_32F, o.gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    gemm();
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> c = d_c.download();

    // Check a 64 x 64 sample of C (spread over the matrix, first and last rows included)
    // against a double-precision product of the same bf16 inputs, and every element for NaN.
    std::vector<std::size_t> rows, cols;
    for (std::size_t i = 0; i < 64 && i < n; ++i) rows.push_back(std::min(n - 1, i * n / 64 + (i * 7) % 5));
    rows.back() = n - 1;
    cols = rows;
    std::vector<float> af(a.size()), bf(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) af[i] = pd::to_float(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) bf[i] = pd::to_float(b[i]);
    const std::vector<double> ref = pd::reference::gemm_abt_sample(af, bf, n, rows, cols);
    std::vector<float> sample(ref.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t j = 0; j < cols.size(); ++j) sample[i * cols.size() + j] = c[rows[i] * n + cols[j]];
    // FP32 accumulation of n products of magnitude <= 1: allow 1e-5 * n absolute.
    const pd::Tolerance tol{1e-5 * double(n), 1e-5};
    pd::CompareResult cmp = pd::compare<float, double>(sample, ref, tol);
    std::size_t non_finite = 0;
    for (float v : c) non_finite += !std::isfinite(v);
    r.passed = cmp.passed && non_finite == 0;
    r.max_abs_err = cmp.max_abs_err;
    if (!cmp.passed) std::cerr << pd::describe(cmp, "cublas_bf16 sample seed=" + std::to_string(o.common.seed));
    if (non_finite) std::cerr << "cublas_bf16: " << non_finite << " outputs are NaN or inf\n";
    if (!dump_dir.empty()) {
        const std::vector<std::size_t> shape = {rows.size(), cols.size()};
        std::vector<std::int64_t> r64(rows.begin(), rows.end()), c64(cols.begin(), cols.end());
        pd::write_npy<std::int64_t>(dump_dir + "gemm_rows.npy", r64, {r64.size()});
        pd::write_npy<std::int64_t>(dump_dir + "gemm_cols.npy", c64, {c64.size()});
        pd::write_npy<float>(dump_dir + "gemm_sample_out.npy", sample, shape);
        pd::write_npy<double>(dump_dir + "gemm_sample_reference.npy", ref, shape);
    }
    if (o.common.check_only || !r.passed) return r;
    const pd::TimingStats t = pd::time_device(gemm, o.common.warmup, o.common.iters);
    r.time_ms = t.median_ms;
    r.tflops = 2.0 * double(n) * double(n) * double(n) / (t.median_ms * 1e-3) / 1e12;
    return r;
}
#endif

// ---- calculator -----------------------------------------------------------------------------

std::string format_time(double s) {
    if (s >= 1) return fmt("%.3g s", s);
    if (s >= 1e-3) return fmt("%.3g ms", s * 1e3);
    return fmt("%.3g us", s * 1e6);
}

void print_analysis(std::ostream& out, const rl::Workload& w, const rl::Machine& m, const std::string& machine_source,
                    const rl::Analysis& a) {
    out << "workload: P = " << fmt("%.3g", w.params) << " parameters x " << fmt("%.3g", w.bytes_per_param)
        << " bytes = " << fmt("%.2f GB", a.weight_bytes / 1e9) << " of weights, batch B = " << w.batch
        << ", prompt S = " << w.prompt_tokens << " tokens" << (w.model ? ", model " + w.model->name : "") << "\n";
    out << "machine:  " << m.name << ": " << fmt("%.0f GB/s", m.bytes_per_s / 1e9) << ", "
        << fmt("%.1f TFLOP/s", m.peak_flops_per_s / 1e12) << " (" << machine_source << ")\n";
    if (m.gpus > 1) out << "          ideal " << m.gpus << "-way tensor parallelism: rates add up, no communication\n";
    out << "ridge point: " << fmt("%.1f", a.ridge) << " FLOP/byte (peak FLOP/s / bandwidth)\n";
    out << "counted: ";
    for (std::size_t i = 0; i < a.terms.size(); ++i) out << (i ? "; " : "") << a.terms[i];
    out << "\n\n";
    pd::Table t({"phase", "FLOPs", "bytes", "FLOP/byte", "bound", "floor"});
    t.add_row({"prefill", pd::format_flops(a.prefill.flops), fmt("%.3g GB", a.prefill.bytes / 1e9),
               fmt("%.4g", a.prefill.intensity), rl::to_string(a.prefill.bound),
               format_time(a.prefill.floor_s) + " (TTFT)"});
    t.add_row({"decode", pd::format_flops(a.decode.flops), fmt("%.3g GB", a.decode.bytes / 1e9),
               fmt("%.4g", a.decode.intensity), rl::to_string(a.decode.bound),
               format_time(a.decode.floor_s) + " per token (ITL)"});
    out << t.render() << "\n";
    out << "decode reads every weight for " << w.batch << " token(s) per step: "
        << fmt("%.0f", double(w.batch) / a.decode.floor_s) << " tokens/s at best; it turns compute-bound only at B >= "
        << fmt("%.0f", std::ceil(a.critical_batch)) << " (2*B/b = ridge, weights only)\n";
    if (w.model) {
        out << "KV cache: " << pd::format_bytes(a.kv_bytes_per_token) << " per token (2 x " << w.model->layers
            << " layers x " << w.model->kv_heads << " KV heads x " << w.model->head_dim << " x "
            << fmt("%.3g", w.kv_bytes_per_element) << " bytes), " << fmt("%.2f GB", a.kv_bytes_total / 1e9)
            << " for B x S tokens\n";
    }
    if (m.memory_bytes > 0) {
        const double need = a.weight_bytes + a.kv_bytes_total;
        out << "memory: " << fmt("%.1f GB", need / 1e9) << " of weights" << (w.model ? " and KV cache" : "")
            << " on " << fmt("%.0f GB", m.memory_bytes / 1e9)
            << (need > m.memory_bytes ? "  -- does NOT fit: more GPUs or fewer bytes per parameter\n" : "  (fits)\n");
    }
}

nlohmann::json analysis_json(const rl::Workload& w, const rl::Machine& m, const std::string& source,
                             const rl::Analysis& a) {
    auto phase = [](const rl::PhaseCost& c) {
        return nlohmann::json{{"flops", c.flops},
                              {"bytes", c.bytes},
                              {"arithmetic_intensity", c.intensity},
                              {"bound", rl::to_string(c.bound)},
                              {"floor_s", c.floor_s}};
    };
    nlohmann::json prefill = phase(a.prefill), decode = phase(a.decode);
    prefill["predicted_ms"] = a.prefill.floor_s * 1e3;
    decode["predicted_ms_per_token"] = a.decode.floor_s * 1e3;
    decode["tokens_per_s"] = double(w.batch) / a.decode.floor_s;
    nlohmann::json j = {
        {"params", w.params},
        {"bytes_per_param", w.bytes_per_param},
        {"batch", w.batch},
        {"prompt_tokens", w.prompt_tokens},
        {"model", w.model ? nlohmann::json(w.model->name) : nlohmann::json(nullptr)},
        {"machine",
         {{"name", m.name}, {"gpus", m.gpus}, {"bandwidth_gbps", m.bytes_per_s / 1e9},
          {"peak_tflops", m.peak_flops_per_s / 1e12}, {"source", source}}},
        {"ridge_point", a.ridge},
        {"critical_decode_batch", a.critical_batch},
        {"weight_bytes", a.weight_bytes},
        {"kv_cache",
         w.model ? nlohmann::json{{"bytes_per_token", a.kv_bytes_per_token}, {"bytes_total", a.kv_bytes_total},
                                  {"bytes_per_element", w.kv_bytes_per_element}}
                 : nlohmann::json(nullptr)},
        {"terms", a.terms},
        {"prefill", prefill},
        {"decode", decode}};
    return j;
}

// ---- main -----------------------------------------------------------------------------------

int run(int argc, char** argv) {
    Options o;
    CLI::App app{"Chapter 00: roofline and arithmetic intensity. Reports the device, measures its ceilings "
                 "(copy bandwidth, FP32 FMA rate, cuBLAS BF16 rate), and places prefill and decode of a "
                 "model on the roofline.",
                 "ch00_roofline"};
    pd::add_common_options(app, o.common, kKernels);
    std::vector<std::string> gpu_names;
    for (const auto& g : rl::gpu_presets()) gpu_names.push_back(g.name);
    gpu_names.push_back("measured");
    std::vector<std::string> model_names = {"none"};
    for (const auto& m : rl::model_presets()) model_names.push_back(m.name);

    auto* params = app.add_option("--params", o.params, "Model parameters P (default 7e9, or the --model's)")
                       ->check(CLI::Range(1e3, 1e14));
    app.add_option("--bytes-per-param", o.bytes_per_param, "Bytes per weight b (2 = bf16, 1 = fp8, 0.5 = int4)")
        ->check(CLI::Range(0.125, 8.0))
        ->capture_default_str();
    app.add_option("--kv-bytes", o.kv_bytes, "Bytes per cached K/V element (default: --bytes-per-param)")
        ->check(CLI::Range(0.125, 8.0));
    app.add_option("--batch", o.batch, "Sequences served together B")->check(CLI::Range(1LL, 1000000LL))
        ->capture_default_str();
    app.add_option("--prompt-tokens", o.prompt_tokens, "Prompt length S in tokens")
        ->check(CLI::Range(1LL, 100000000LL))
        ->capture_default_str();
    app.add_option("--gpu", o.gpu, "GPU preset for the calculator, or 'measured' (this run's ceilings)")
        ->check(CLI::IsMember(gpu_names))
        ->capture_default_str();
    app.add_option("--gpus", o.gpus, "GPUs with an ideal tensor-parallel split")->check(CLI::Range(1, 4096))
        ->capture_default_str();
    app.add_option("--model", o.model, "Model preset: adds attention FLOPs and the KV cache")
        ->check(CLI::IsMember(model_names))
        ->excludes(params)
        ->capture_default_str();
    app.add_flag("--calculator-only", o.calculator_only, "Skip the device report and the measured ceilings");
    app.add_option("--copy-mib", o.copy_mib, "Size of the copied buffer in MiB (bytes moved: twice that)")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    app.add_option("--fma-iters", o.fma_iters, "FMA steps per chain in the FP32 kernel")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    app.add_option("--gemm-n", o.gemm_n, "Size n of the n x n x n cuBLAS BF16 product")
        ->check(CLI::Range(16, 32768))
        ->capture_default_str();
    if (auto code = pd::parse_command_line(app, argc, argv)) return *code;
    if (o.gpu == "measured" && o.calculator_only)
        return pd::bad_input(app, "--gpu measured needs this run's ceilings; drop --calculator-only");
#if defined(PD_BACKEND_SIM)
    if (o.gpu == "measured")
        return pd::bad_input(app, "--gpu measured needs a GPU's ceilings; the simulator's timings are CPU figures "
                                  "(run ch00_roofline on a GPU)");
#endif

    std::ostream& out = pd::text_out(o.common);
    const std::string dump_dir = pd::prepare_dump_dir(o.common);
    out << "Chapter 00: roofline and arithmetic intensity  [backend " << pd::backend_name() << ", seed "
        << o.common.seed << "]\n\n";

    // ---- device and measured ceilings ----
    nlohmann::json device_json = {{"name", nullptr}};
    std::vector<pd::KernelResult> results;
    Ceilings ceilings;
    std::string ceilings_absent;
    if (o.calculator_only) {
        ceilings_absent = "--calculator-only";
    } else {
        const pd::DeviceProbe probe = pd::probe_devices();
        if (probe.count == 0) {
            ceilings_absent = "no CUDA device (" + probe.reason + ")";
            out << "== Device ==\n" << ceilings_absent << ".\n";
            out << "The measured ceilings need a device; the calculator below works from published figures.\n\n";
            device_json["reason"] = ceilings_absent;
        }
        if (probe.count == 0 && o.gpu == "measured")
            return pd::bad_input(app, "--gpu measured needs a CUDA device: " + ceilings_absent);
        if (probe.count > 0) {
            const pd::DeviceInfo dev = pd::query_device(0);
            device_json = pd::to_json(dev);
            out << "== Device ==\n" << pd::describe(dev);
#if defined(PD_BACKEND_SIM)
            out << "  (the CPU simulator: its timings below are CPU figures, not GPU performance)\n";
#endif
            out << "\n";

            const std::size_t copy_n = std::size_t(o.copy_mib) * pd::kMiB / sizeof(float);
            const double gemm_bytes = double(o.gemm_n) * o.gemm_n * (2 + 2 + 4);
            std::size_t free_b = 0, total_b = 0;
            PD_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
            if (2.0 * copy_n * sizeof(float) > 0.9 * double(free_b))
                return pd::bad_input(app, "--copy-mib " + std::to_string(o.copy_mib) + " needs " +
                                              pd::format_bytes(2.0 * copy_n * sizeof(float)) + " but only " +
                                              pd::format_bytes(double(free_b)) + " of device memory is free");
            if (o.common.selects("cublas_bf16") && gemm_bytes > 0.9 * double(free_b))
                return pd::bad_input(app, "--gemm-n " + std::to_string(o.gemm_n) + " needs " +
                                              pd::format_bytes(gemm_bytes) + " but only " +
                                              pd::format_bytes(double(free_b)) + " of device memory is free");
            out << (pd::backend_name() == std::string("sim") ? "== Ceiling kernels, run on the CPU simulator ==\n"
                                                              : "== Measured ceilings ==\n")
                << "copy: " << pd::format_bytes(double(copy_n) * sizeof(float)) << " read and written; FMA: "
                << o.fma_iters << " steps x " << pd::kernels::roofline::kFmaChains << " chains per thread; cuBLAS: "
                << o.gemm_n << "^3 BF16 in, FP32 accumulate and out"
                << (o.common.check_only ? "; --check-only: validated, not timed" : "") << "\n\n";

            if (o.common.selects("copy_memcpy") || o.common.selects("copy_kernel")) {
                std::vector<float> host_in(copy_n);
                pd::fill_uniform<float>(host_in, -1.f, 1.f, pd::derive_seed(o.common.seed, 1));
                pd::DeviceBuffer<float> in{std::span<const float>(host_in)}, dst{copy_n};
                std::optional<double> memcpy_ms;
                if (o.common.selects("copy_memcpy")) {
                    results.push_back(run_copy_memcpy(o, in, dst, host_in, dev.theoretical_bandwidth_gbps));
                    memcpy_ms = results.back().time_ms;
                }
                if (o.common.selects("copy_kernel"))
                    results.push_back(run_copy_kernel(o, in, dst, host_in, dev.theoretical_bandwidth_gbps, memcpy_ms));
                if (!dump_dir.empty()) {
                    const std::size_t head = std::min<std::size_t>(copy_n, std::size_t(1) << 20);
                    const std::vector<float> got = dst.download();
                    pd::write_npy<float>(dump_dir + "copy_in_head.npy", std::span<const float>(host_in).first(head),
                                         {head});
                    pd::write_npy<float>(dump_dir + "copy_out_head.npy", std::span<const float>(got).first(head),
                                         {head});
                }
                for (const auto& r : results)
                    if (r.gbps && r.passed) ceilings.copy_gbps = std::max(ceilings.copy_gbps.value_or(0), *r.gbps);
            }
            if (o.common.selects("fma_fp32")) {
                results.push_back(run_fma(o, dev, dump_dir));
                if (results.back().passed) ceilings.fp32_tflops = results.back().tflops;
            }
#if !defined(PD_BACKEND_SIM)
            if (o.common.selects("cublas_bf16")) {
                results.push_back(run_cublas_bf16(o, dump_dir));
                if (results.back().passed) ceilings.bf16_tflops = results.back().tflops;
            }
#endif
            out << pd::results_table(results).render();
            out << "GB/s count bytes read plus written; 'of roofline' is the fraction of the theoretical "
                   "bandwidth (copies) or FP32 peak (FMA); 'vs baseline' is cudaMemcpy's time over the "
                   "kernel's.\n";
            if (ceilings.copy_gbps && ceilings.bf16_tflops)
                out << "measured ridge point (BF16 tensor rate / copy bandwidth): "
                    << fmt("%.1f", *ceilings.bf16_tflops * 1e12 / (*ceilings.copy_gbps * 1e9)) << " FLOP/byte\n";
            out << "\n";
            device_json["measured"] = {{"copy_gbps", ceilings.copy_gbps ? nlohmann::json(*ceilings.copy_gbps) : nullptr},
                                       {"fp32_tflops", ceilings.fp32_tflops ? nlohmann::json(*ceilings.fp32_tflops) : nullptr},
                                       {"bf16_tflops", ceilings.bf16_tflops ? nlohmann::json(*ceilings.bf16_tflops) : nullptr}};
        }
    }

    // ---- calculator ----
    rl::Workload w;
    std::optional<rl::ModelConfig> model = rl::find_model(o.model);
    w.model = model;
    w.params = o.params ? *o.params : (model ? model->parameter_count() : 7e9);
    w.bytes_per_param = o.bytes_per_param;
    w.kv_bytes_per_element = o.kv_bytes.value_or(o.bytes_per_param);
    w.batch = o.batch;
    w.prompt_tokens = o.prompt_tokens;
    rl::Machine machine;
    std::string source;
    if (o.gpu == "measured") {
        if (!ceilings.copy_gbps || !ceilings.bf16_tflops)
            return pd::bad_input(app, "--gpu measured needs the copy and cublas_bf16 ceilings to run and pass "
                                      "(check --kernel and --check-only)");
        rl::GpuSpec spec{device_json.value("name", std::string("this GPU")), *ceilings.copy_gbps,
                         *ceilings.bf16_tflops, ceilings.fp32_tflops.value_or(0),
                         double(device_json.value("global_mem_bytes", std::size_t(0))) / 1e9,
                         "measured in this run"};
        machine = rl::machine_from(spec, o.gpus);
        source = spec.source;
    } else {
        const rl::GpuSpec spec = *rl::find_gpu(o.gpu);
        machine = rl::machine_from(spec, o.gpus);
        source = "spec: " + spec.source;
    }
    const rl::Analysis analysis = rl::analyze(w, machine);
    out << "== Prefill and decode on the roofline ==\n";
    print_analysis(out, w, machine, source, analysis);

    // ---- report ----
    bool passed = true;
    for (const auto& r : results) passed = passed && r.passed;
    if (!o.common.json.empty()) {
        nlohmann::json problem = {{"seed", o.common.seed},
                                  {"copy_bytes", double(o.copy_mib) * double(pd::kMiB)},
                                  {"fma_iters", o.fma_iters},
                                  {"fma_chains", pd::kernels::roofline::kFmaChains},
                                  {"gemm_n", o.gemm_n},
                                  {"gemm_dtype", "bf16"},
                                  {"check_only", o.common.check_only}};
        nlohmann::json report = pd::make_report(kChapter, pd::backend_name(), device_json, problem, results);
        report["ceilings_skipped"] = ceilings_absent.empty() ? nlohmann::json(nullptr) : nlohmann::json(ceilings_absent);
        report["analysis"] = analysis_json(w, machine, source, analysis);
        pd::write_json(report, o.common.json);
    }
    out << (passed ? "" : "FAILED: a measured kernel did not match its reference\n");
    return passed ? pd::kExitOk : pd::kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) { return pd::guarded_main("ch00_roofline", run, argc, argv); }
