// Chapter 00: roofline and arithmetic intensity.
//
// Why prefill and decode behave differently, in numbers: the device's limits (a report and
// three measured ceilings: copy bandwidth, FP32 FMA rate, cuBLAS BF16 rate) and a calculator
// that places one prefill and one decode step of a model on the roofline.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "chapter.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch00 {

using pd::fmt;

/// Rows of a result that passed, by name: the measured ceilings.
std::optional<double> best(const std::vector<pd::Row>& rows, const std::string& prefix, bool gbps) {
    std::optional<double> v;
    for (const pd::Row& r : rows) {
        const std::optional<double>& x = gbps ? r.result.gbps : r.result.tflops;
        if (r.result.passed && x && r.result.kernel.rfind(prefix, 0) == 0) v = std::max(v.value_or(0), *x);
    }
    return v;
}

/// The chapter's options, beside the harness's own (--kernel, --seed, ...) and the calculator's.
void add_options(pd::Bench& bench, Options& o) {
    rl::add_calculator_options(bench.app, o.calc);
    bench
        .option("--dtype", o.dtype,
                "Weights' format, instead of --bytes-per-param: its bytes with its scales (chapter 08)",
                CLI::IsMember({"fp32", "bf16", "int8", "int4", "fp8"}))
        ->excludes("--bytes-per-param");
    bench
        .option("--kv-dtype", o.kv_dtype,
                "KV cache's format, instead of --kv-bytes: its bytes with its scales (fp8, int8: chapter 08)",
                CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
        ->excludes("--kv-bytes");
    bench.app.add_flag("--calculator-only", o.calculator_only, "Skip the device report and the measured ceilings");
    bench.option("--copy-mib", o.copy_mib, "Size of the copied buffer in MiB (bytes moved: twice that)",
                 CLI::Range(1, 65536));
    bench.option("--fma-iters", o.fma_iters, "FMA steps per chain in the FP32 kernel", CLI::Range(1, 1000000));
    bench.option("--gemm-n", o.gemm_n, "Size n of the n x n x n cuBLAS BF16 product", CLI::Range(16, 32768));
}

/// The device and its measured ceilings: its report, the ceiling kernels' table (@p rows) and
/// the measured ridge point. @return the device's JSON with the measured rates
nlohmann::json measure_device(pd::Bench& bench, const Options& o, const pd::DeviceInfo& dev,
                              std::vector<pd::Row>& rows) {
    std::ostream& out = bench.out();
    out << "== Device ==\n"
        << pd::describe(dev)
        << (bench.sim() ? "  (the CPU simulator: its timings below are CPU figures, not GPU performance)\n" : "")
        << "\n";
    const double copy_bytes = 2.0 * o.copy_mib * double(pd::kMiB);
    bench.require_fits(copy_bytes, "the copy's two buffers (--copy-mib " + std::to_string(o.copy_mib) + ")",
                       "lower --copy-mib");
    if (bench.selects("cublas_bf16"))
        bench.require_fits(double(o.gemm_n) * o.gemm_n * (2 + 2 + 4),
                           "the cuBLAS product's A, B and C (--gemm-n " + std::to_string(o.gemm_n) + ")",
                           "lower --gemm-n");
    const double floats = o.copy_mib * double(pd::kMiB) / 4, threads = 2.0 * dev.sm_count * dev.max_threads_per_sm;
    bench.require_sim_work(bench.versions_work([&](const pd::Version& v, pd::DType) {
        return k::sim_work(v.name, floats, threads, o.fma_iters);
    }) + 2 * pd::kSimElementWork * floats,
                           "the ceiling kernels", "lower --copy-mib or --fma-iters, or choose one --kernel");
    // Each ceiling is judged against the datasheet-style figure it approaches: the
    // theoretical bandwidth (memory clock x bus width) and the FP32 peak (clock x lanes).
    if (dev.theoretical_bandwidth_gbps > 0) bench.roofs.bytes_per_s = dev.theoretical_bandwidth_gbps * 1e9;
    if (const double peak = pd::fp32_peak_flops(dev); peak > 0) bench.roofs.fp32_flops = peak;
    out << (bench.sim() ? "== Ceiling kernels, run on the CPU simulator ==\n" : "== Measured ceilings ==\n")
        << "copy: " << pd::format_bytes(o.copy_mib * double(pd::kMiB)) << " read and written; FMA: " << o.fma_iters
        << " steps x " << k::kFmaChains << " chains per thread; cuBLAS: " << o.gemm_n
        << "^3 BF16 in, FP32 accumulate and out" << (bench.timing() ? "" : "; --check-only: validated, not timed")
        << "\n\n";
    rows = measure_ceilings(bench, o, dev);
    out << pd::render(rows,
                      {"kernel", "time ms", "GB/s", "TFLOP/s", "of roofline", "vs baseline", "max abs err", "status"})
        << "GB/s count bytes read plus written; 'of roofline' is the fraction of the theoretical bandwidth "
           "(copies) or FP32 peak (FMA); 'vs baseline' is cudaMemcpy's time over the kernel's.\n";
    const std::optional<double> copy = best(rows, "copy", true), bf16 = best(rows, "cublas", false);
    if (copy && bf16)
        out << "measured ridge point (BF16 tensor rate / copy bandwidth): " << fmt("%.1f", *bf16 * 1e12 / (*copy * 1e9))
            << " FLOP/byte\n";
    out << "\n";
    const auto js = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    nlohmann::json device = pd::to_json(dev);
    device["measured"] = {
        {"copy_gbps", js(copy)}, {"fp32_tflops", js(best(rows, "fma", false))}, {"bf16_tflops", js(bf16)}};
    return device;
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"00_roofline", "roofline and arithmetic intensity",
                    "Chapter 00: roofline and arithmetic intensity. Reports the device, measures its ceilings (copy "
                    "bandwidth, FP32 FMA rate, cuBLAS BF16 rate), and places prefill and decode of a model on the "
                    "roofline.",
                    k::versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    apply_formats(o);
    rl::check_calculator_options(o.calc);  // before the ceilings: --context needs a --model
    if (o.calc.gpu == "measured" && o.calculator_only)
        throw std::invalid_argument("--gpu measured needs this run's ceilings; drop --calculator-only");
    if (o.calc.gpu == "measured" && bench.sim())
        throw std::invalid_argument(
            "--gpu measured needs a GPU's ceilings; the simulator's timings are CPU figures "
            "(run ch00_roofline on a GPU)");

    // ---- the device and its measured ceilings ----
    std::ostream& out = bench.out();
    bench.title();
    out << "\n";
    std::vector<pd::Row> rows;
    nlohmann::json device = {{"name", nullptr}};
    std::string reason;
    const pd::DeviceInfo* dev = o.calculator_only ? nullptr : bench.device_if_present(reason);
    const std::string absent = o.calculator_only ? "--calculator-only" : "no CUDA device (" + reason + ")";
    if (!dev && !o.calculator_only) {
        out << "== Device ==\n"
            << absent << ".\n"
            << "The measured ceilings need a device; the calculator below works from published figures.\n\n";
        device["reason"] = absent;
        if (o.calc.gpu == "measured") throw std::invalid_argument("--gpu measured needs a CUDA device: " + absent);
    }
    if (dev) device = measure_device(bench, o, *dev, rows);

    // [ch00_calculator]
    // Prefill and decode on the roofline: P parameters of b bytes, B sequences of S prompt
    // tokens (with a model, decode steps at a context of S_k cached tokens), on a GPU preset
    // (or this run's ceilings).
    const rl::Workload w = rl::workload(o.calc);
    rl::GpuSpec spec;
    std::string source;
    if (o.calc.gpu == "measured") {
        const std::optional<double> copy = best(rows, "copy", true), bf16 = best(rows, "cublas", false);
        if (!copy || !bf16)
            throw std::invalid_argument(
                "--gpu measured needs the copy and cublas_bf16 ceilings to run and pass "
                "(check --kernel and --check-only)");
        spec = {dev->name,
                *copy,
                *bf16,
                best(rows, "fma", false).value_or(0),
                double(dev->global_mem_bytes) / 1e9,
                "measured in this run"};
        source = spec.source;
    } else {
        spec = *rl::find_gpu(o.calc.gpu);
        source = "spec: " + spec.source;
    }
    const rl::Machine machine = rl::machine_from(spec, o.calc.gpus);
    const rl::Analysis analysis = rl::analyze(w, machine);
    out << "== Prefill and decode on the roofline ==\n"
        << rl::describe(w, machine, source, analysis) << capacity_by_format(o, machine, analysis.context);
    // [ch00_calculator]

    nlohmann::json report = bench.report({{"copy_bytes", double(o.copy_mib) * double(pd::kMiB)},
                                          {"fma_iters", o.fma_iters},
                                          {"fma_chains", k::kFmaChains},
                                          {"gemm_n", o.gemm_n},
                                          {"gemm_dtype", "bf16"}},
                                         rows, device);
    report["ceilings_skipped"] = dev ? nlohmann::json(nullptr) : nlohmann::json(absent);
    report["analysis"] = rl::to_json(w, machine, source, analysis);
    return bench.finish(report);
}

}  // namespace ch00

int main(int argc, char** argv) {
    return pd::guarded_main(ch00::run, argc, argv);
}
