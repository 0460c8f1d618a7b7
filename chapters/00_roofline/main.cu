// Chapter 00: roofline and arithmetic intensity.
//
// Why prefill and decode behave differently, in numbers: the device's limits (a report and
// three measured ceilings: copy bandwidth, FP32 FMA rate, cuBLAS BF16 rate) and a calculator
// that places one prefill and one decode step of a model on the roofline.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "pd/bench.hpp"
#include "pd/cublas.hpp"
#include "pd/rng.hpp"

#include "quant/quant.hpp"
#include "roofline/roofline.hpp"
#include "roofline_reference.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace rl = pd::roofline;
namespace k = pd::kernels::roofline;
using pd::fmt;

struct Options {
    rl::CalculatorOptions calc;   // what is served, on which GPU
    std::string dtype, kv_dtype;  // --dtype, --kv-dtype: b and the KV bytes by format (chapter 08)
    bool calculator_only = false;
    // Measured ceilings: benchmark sizes on a GPU, seconds-long runs on the simulator.
#if defined(PD_BACKEND_SIM)
    int copy_mib = 64, fma_iters = 256;
#else
    int copy_mib = 1024, fma_iters = 16384;
#endif
    int gemm_n = 8192;
};

/// Rows of a result that passed, by name: the measured ceilings.
std::optional<double> best(const std::vector<pd::Row>& rows, const std::string& prefix, bool gbps) {
    std::optional<double> v;
    for (const pd::Row& r : rows) {
        const std::optional<double>& x = gbps ? r.result.gbps : r.result.tflops;
        if (r.result.passed && x && r.result.kernel.rfind(prefix, 0) == 0) v = std::max(v.value_or(0), *x);
    }
    return v;
}

// [ch00_formats]
/// Bytes per weight of format @p dtype as chapter 08 stores an N x K matrix of the model: the
/// values, and the scales (int8 and fp8: one fp32 per row; int4: a bf16 per group of 128 along K).
double bytes_per_weight(const std::string& dtype, int k) {
    if (dtype == "fp32" || dtype == "bf16") return double(pd::size_of(pd::dtype_named(dtype)));
    const pd::kernels::quant::Layout layout{pd::kernels::quant::format_named(dtype), k};
    return layout.bytes_per_weight(k);
}

/// `--dtype` and `--kv-dtype` set the calculator's b and KV bytes: the formats' bytes, scales
/// included, at the --model's sizes (K = d_model, the head dim; without a model K = 4096).
void apply_formats(Options& o) {
    const std::optional<pd::ModelConfig> m = pd::find_model(o.calc.model);
    if (!o.dtype.empty()) o.calc.bytes_per_param = bytes_per_weight(o.dtype, m ? m->d_model : 4096);
    if (!o.kv_dtype.empty()) {
        if (!m) throw std::invalid_argument("--kv-dtype needs a --model: the cache's size comes from its shape");
        o.calc.kv_bytes = pd::kv_element_bytes(pd::dtype_named(o.kv_dtype), m->head_dim);
    }
}

/// What fits, by format: the sequences of the analysis's context whose caches fit beside the
/// weights, for each weight format (rows) and cache format (columns). Empty without a model or
/// a known memory. @param o the options  @param machine the GPUs  @param context S_k
std::string capacity_by_format(const Options& o, const rl::Machine& machine, long long context) {
    const std::optional<pd::ModelConfig> m = pd::find_model(o.calc.model);
    if (!m || machine.memory_bytes <= 0) return "";
    const auto pad = [](std::string text, std::size_t width, bool right) {
        const std::string fill(width > text.size() ? width - text.size() : 0, ' ');
        return right ? fill + text : text + fill;
    };
    const std::vector<std::string> weights = {"bf16", "int8", "fp8", "int4"}, caches = {"bf16", "fp8", "int8"};
    std::string text =
        "capacity by format (sequences of " + std::to_string(context) +
        " tokens that fit beside the weights; bytes per weight and per KV element, scales included):\n  " +
        pad("weights \\ cache", 18, false);
    for (const std::string& c : caches)
        text += pad(c + " " + fmt("%.3g", pd::kv_element_bytes(pd::dtype_named(c), m->head_dim)), 12, true);
    text += "\n";
    for (const std::string& w : weights) {
        const double b = bytes_per_weight(w, m->d_model);
        text += "  " + pad(w + " " + fmt("%.3f", b), 18, false);
        for (const std::string& c : caches) {
            rl::CalculatorOptions calc = o.calc;
            calc.bytes_per_param = b;
            calc.kv_bytes = pd::kv_element_bytes(pd::dtype_named(c), m->head_dim);
            const rl::Analysis a = rl::analyze(rl::workload(calc), machine);
            text += pad(std::to_string(a.max_sequences.value_or(0)), 12, true);
        }
        text += "\n";
    }
    return text;
}
// [ch00_formats]

// [ch00_ceilings]
/// The copy bandwidth: cudaMemcpy (the baseline) and a copy kernel, bytes read plus written.
std::vector<pd::Row> measure_copy(pd::Bench& bench, const Options& o) {
    const std::size_t n = std::size_t(o.copy_mib) * pd::kMiB / sizeof(float);
    std::vector<float> host(n);
    pd::fill_uniform<float>(host, -1.f, 1.f, pd::derive_seed(bench.options.seed, 1));
    pd::DeviceBuffer<float> in{std::span<const float>(host)}, dst{n};
    const pd::Check exact = [&](std::span<const float> got) {
        return pd::compare<float, float>(got, host, pd::Tolerance::exact());
    };
    const std::size_t head = std::min<std::size_t>(n, std::size_t(1) << 20);
    pd::Kernel copy{
        .cost = {0, k::copy_bytes_moved(double(in.bytes()))}, .dump = "copy_out_head", .dump_shape = {head}};
    std::vector<pd::Row> rows;
    std::optional<pd::Row> memcpy_row;
    if (bench.selects("copy_memcpy")) {
        copy.name = "copy_memcpy";
        memcpy_row = bench.measure(
            copy, [&] { PD_CHECK_CUDA(cudaMemcpyAsync(dst.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice)); },
            dst, exact);
        rows.push_back(*memcpy_row);
    }
    if (bench.selects("copy_kernel")) {
        copy.name = "copy_kernel";
        copy.baseline = memcpy_row ? &*memcpy_row : nullptr;
        rows.push_back(bench.measure(
            copy, [&] { k::copy_grid_stride(in.data(), dst.data(), n); }, dst, exact));
    }
    bench.dump<float>("copy_in_head", std::span<const float>(host).first(head), {head});
    return rows;
}

/// The FP32 FMA rate: k::kFmaChains independent chains per thread, twice @p dev's resident threads.
pd::Row measure_fma(pd::Bench& bench, const Options& o, const pd::DeviceInfo& dev) {
    const std::uint64_t seed = bench.options.seed;
    constexpr int kPatterns = 256;  // thread t computes row t % kPatterns of the reference
    const std::size_t n = std::size_t(kPatterns) * k::kFmaChains;
    std::vector<float> init(n), mul(n), add(n);
    pd::fill_uniform<float>(init, -1.f, 1.f, pd::derive_seed(seed, 10));
    pd::fill_uniform<float>(mul, 0.5f, 0.999f, pd::derive_seed(seed, 11));  // |mul| < 1: stays finite
    pd::fill_uniform<float>(add, -1.f, 1.f, pd::derive_seed(seed, 12));
    const std::vector<float> ref = pd::reference::fma_chains(init, mul, add, kPatterns, k::kFmaChains, o.fma_iters);
    const std::size_t threads = std::size_t(dev.sm_count) * std::size_t(dev.max_threads_per_sm) * 2;  // 2 waves
    pd::DeviceBuffer<float> d_init{std::span<const float>(init)}, d_mul{std::span<const float>(mul)},
        d_add{std::span<const float>(add)}, d_out{threads * k::kFmaChains};
    const pd::Check exact = [&](std::span<const float> got) {  // FFMA and std::fma round alike
        std::vector<float> expected(got.size());
        for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = ref[i % n];
        return pd::compare<float, float>(got, expected, pd::Tolerance::exact());
    };
    const std::vector<std::size_t> shape = {std::size_t(kPatterns), std::size_t(k::kFmaChains)};
    pd::Row row = bench.measure(
        {.name = "fma_fp32", .cost = {k::fma_flops(threads, o.fma_iters), 0}, .dump = "fma_out", .dump_shape = shape},
        [&] {
            k::fma_chains(d_init.data(), d_mul.data(), d_add.data(), kPatterns, d_out.data(), threads, o.fma_iters);
        },
        d_out, exact);
    bench.dump<float>("fma_init", init, shape);
    bench.dump<float>("fma_mul", mul, shape);
    bench.dump<float>("fma_add", add, shape);
    bench.dump<float>("fma_reference", ref, shape);
    return row;
}

/// The cuBLAS BF16 rate of an n^3 product, BF16 in, FP32 accumulate and out (CUDA only:
/// cuBLAS does not run on the simulator).
pd::Row measure_cublas(pd::Bench& bench, const Options& o) {
    const int g = o.gemm_n;
    const std::size_t nn = std::size_t(g) * g;
    std::vector<__nv_bfloat16> a(nn), b(nn);
    pd::fill_uniform<__nv_bfloat16>(a, -1.f, 1.f, pd::derive_seed(bench.options.seed, 20));
    pd::fill_uniform<__nv_bfloat16>(b, -1.f, 1.f, pd::derive_seed(bench.options.seed, 21));
    pd::DeviceBuffer<__nv_bfloat16> d_a{std::span<const __nv_bfloat16>(a)}, d_b{std::span<const __nv_bfloat16>(b)};
    pd::DeviceBuffer<float> d_c(nn);
    // A 64 x 64 sample of C = A B^T (spread over the matrix, the last row and column included)
    // against a double-precision product of the same bf16 inputs; every element must be finite.
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < 64 && i < std::size_t(g); ++i)
        idx.push_back(std::min(std::size_t(g) - 1, i * g / 64 + (i * 7) % 5));
    idx.back() = std::size_t(g) - 1;
    const std::vector<double> ref = pd::reference::gemm_abt_sample(pd::to_float_all<__nv_bfloat16>(a),
                                                                   pd::to_float_all<__nv_bfloat16>(b), g, idx, idx);
    pd::Expected sample{.values = ref, .tolerance = {1e-5 * g, 1e-5}};  // fp32 sums of g products <= 1
    std::vector<float> got_sample(ref.size());
    const pd::Check check = [&](std::span<const float> c) {
        for (std::size_t i = 0; i < idx.size(); ++i)
            for (std::size_t j = 0; j < idx.size(); ++j) got_sample[i * idx.size() + j] = c[idx[i] * g + idx[j]];
        pd::CompareResult r = pd::check(sample, got_sample);
        for (float v : c) r.passed = r.passed && std::isfinite(v);
        return r;
    };
    const pd::CublasHandle handle;
    pd::Row row = bench.measure(  // C [g, g] = A [g, g] B [g, g]^T
        {.name = "cublas_bf16",
         .dtype = pd::DType::bf16,
         .units = pd::Units::tensor_cores,
         .cost = {2.0 * g * g * double(g), 0}},
        [&] { pd::cublas_linear(handle.get(), d_a.data(), d_b.data(), d_c.data(), g, g, g); }, d_c, check);
    const std::vector<std::int64_t> idx64(idx.begin(), idx.end());
    bench.dump<std::int64_t>("gemm_rows", idx64, {idx64.size()});
    bench.dump<std::int64_t>("gemm_cols", idx64, {idx64.size()});
    bench.dump<float>("gemm_sample_out", got_sample, {idx.size(), idx.size()});
    bench.dump<double>("gemm_sample_reference", ref, {idx.size(), idx.size()});
    return row;
}

/// Measures the ceilings of this device, each validated before it is timed: the copy
/// bandwidth (cudaMemcpy and a copy kernel, bytes read plus written), the FP32 FMA rate, and
/// the cuBLAS BF16 rate of an n^3 product.
std::vector<pd::Row> measure_ceilings(pd::Bench& bench, const Options& o, const pd::DeviceInfo& dev) {
    std::vector<pd::Row> rows;
    if (bench.selects("copy_memcpy") || bench.selects("copy_kernel")) rows = measure_copy(bench, o);
    if (bench.selects("fma_fp32")) rows.push_back(measure_fma(bench, o, dev));
    if (bench.selects("cublas_bf16")) rows.push_back(measure_cublas(bench, o));
    for (pd::Row& r : rows) r.copy_fraction.reset();  // the copy is the roof being measured here
    return rows;
}
// [ch00_ceilings]

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

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
