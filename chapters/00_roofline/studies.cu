// Chapter 00's further studies: what fits by weight and cache format (chapter 08's formats), and
// the measured ceilings of this device (copy, FP32 FMA, cuBLAS BF16). The lesson is main.cu.
#include "chapter.hpp"

#include "pd/cublas.hpp"
#include "pd/rng.hpp"

#include "quant/quant.hpp"
#include "roofline_reference.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace ch00 {

using pd::fmt;

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

}  // namespace ch00
