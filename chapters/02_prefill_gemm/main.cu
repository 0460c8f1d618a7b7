// Chapter 02: batched prefill GEMM.
//
// Prefill applies every linear layer to all prompt tokens at once: Y [T, N] = X [T, K] W^T
// with W [N, K]. The program validates eight versions (v1 naive ... v6 vectorized in fp32,
// v7 WMMA and v8 mma.sync in bf16) against the CPU reference, times them next to cuBLAS at the
// same shape, and places each on the roofline: with --sweep-tokens it shows the arithmetic
// intensity growing with T until the GEMM turns from memory-bound to compute-bound.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include "linear_reference.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch02 {

using pd::fmt;

struct Options {
#if defined(PD_BACKEND_SIM)
    int tokens = 96, n = 160, k = 112;  // not multiples of the tiles; seconds on a 2-core CPU
#else
    int tokens = 4096, n = 4096, k = 4096;  // 4096^3: the cuBLAS comparison of the chapter page
#endif
    bool sweep = false;
};

/// Rows of Y checked for a large T: the first and last, those at the edges of 64- and 128-row
/// tiles, and evenly spread ones (the double-precision reference of 4096^3 would take minutes).
std::vector<std::size_t> checked_rows(int tokens, bool all) {
    std::vector<std::size_t> rows;
    const std::size_t t = std::size_t(tokens);
    if (all) {
        for (std::size_t r = 0; r < t; ++r) rows.push_back(r);
        return rows;
    }
    for (std::size_t edge : {63, 64, 127, 128})
        if (edge < t) rows.push_back(edge);
    for (std::size_t i = 0; i < 32; ++i) rows.push_back(t == 1 ? 0 : i * (t - 1) / 31);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

Problem make_problem(const gm::Shape& s, std::vector<float> w, std::uint64_t x_seed, const std::vector<DType>& dtypes,
                     bool check_all_rows) {
    Problem p{s};
    p.x.resize(s.x_elements());
    pd::fill_uniform<float>(p.x, -1.f, 1.f, x_seed);
    p.w = std::move(w);
    const std::vector<std::size_t> rows = checked_rows(s.tokens, check_all_rows || double(s.flops()) <= 4e8);
    for (DType d : dtypes) {
        pd::Expected& e = p.expected[d];
        e.rows = rows;
        e.row_length = std::size_t(s.n);
        e.dims = {std::size_t(s.tokens), std::size_t(s.n)};
        e.sum_length = std::size_t(s.k);  // fp32 accumulation: the rounding bound grows like sqrt(K)
        if (d == DType::fp32) {
            e.values = pd::reference::linear_rows(p.x, p.w, s.tokens, s.n, s.k, rows, &e.magnitudes);
            p.x32 = pd::DeviceBuffer<float>(std::span<const float>(p.x));
            p.w32 = pd::DeviceBuffer<float>(std::span<const float>(p.w));
        } else {
            const std::vector<bf16> xb = pd::round_all<bf16>(p.x), wb = pd::round_all<bf16>(p.w);
            e.values = pd::reference::linear_rows(std::span<const bf16>(xb), std::span<const bf16>(wb), s.tokens, s.n,
                                                  s.k, rows, &e.magnitudes);
            p.x16 = pd::DeviceBuffer<bf16>(std::span<const bf16>(xb));
            p.w16 = pd::DeviceBuffer<bf16>(std::span<const bf16>(wb));
        }
    }
    p.y = pd::DeviceBuffer<float>(s.y_elements());
    return p;
}

/// The units a GEMM of input type @p d runs on in this chapter: fp32 on the SIMT units (v1-v6,
/// and cublasSgemm without TF32), bf16 on the tensor cores (v7, v8, cublasGemmEx).
pd::Units units_of(DType d) {
    return d == DType::fp32 ? pd::Units::simt : pd::Units::tensor_cores;
}

// [ch02_versions]
/// cuBLAS (on a GPU, when timing), then every selected version of input type @p d, on
/// problem @p p: each one validated against the reference, then timed and placed on the roofline.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, DType d, const pd::CublasHandle* cublas) {
    const gm::Shape& s = p.s;
    pd::Kernel k{.dtype = d, .cost = {s.flops(), s.min_bytes(pd::size_of(d))}, .point = {{"tokens", s.tokens}}};
    k.context = "T=" + std::to_string(s.tokens) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k);
    k.dump_shape = {std::size_t(s.tokens), std::size_t(s.n)};
    std::vector<pd::Row> rows;
    std::optional<pd::Row> baseline;
    if (cublas) {  // the baseline: cublasSgemm (no TF32), or cublasGemmEx with bf16 inputs
        const auto h = cublas->get();
        k.name = d == DType::fp32 ? "cublas_sgemm" : "cublas_bf16";
        k.units = units_of(d);
        k.dump = "y_" + k.name;
        baseline = bench.measure(
            k,
            d == DType::fp32
                ? pd::Launch([&] { pd::cublas_linear(h, p.x32.data(), p.w32.data(), p.y.data(), s.tokens, s.n, s.k); })
                : pd::Launch([&] { pd::cublas_linear(h, p.x16.data(), p.w16.data(), p.y.data(), s.tokens, s.n, s.k); }),
            p.y, p.expected.at(d));
        rows.push_back(*baseline);
    }
    k.baseline = baseline ? &*baseline : nullptr;
    for (const pd::Version& v : gm::versions()) {
        if (!v.takes(d) || !bench.selects(v)) continue;
        k.name = v.name;
        k.units = v.units;
        k.dump = "y_" + v.name;
        const pd::Launch launch =
            d == DType::fp32 ? pd::Launch([&] { gm::gemm(v.name, p.x32.data(), p.w32.data(), p.y.data(), s); })
                             : pd::Launch([&] { gm::gemm(v.name, p.x16.data(), p.w16.data(), p.y.data(), s); });
        rows.push_back(bench.measure(k, launch, p.y, p.expected.at(d)));
    }
    return rows;
}
// [ch02_versions]

/// The kernels index X, W and Y with 32-bit offsets (exit code 2 past 2^31 - 1 elements).
void check_problem(const gm::Shape& shape) {
    for (auto [what, elements] :
         {std::pair{"--tokens x --k", shape.x_elements()}, std::pair{"--n x --k", shape.w_elements()},
          std::pair{"--tokens x --n", shape.y_elements()}})
        if (elements > std::size_t(2147483647))
            throw std::invalid_argument(std::string(what) + " = " + std::to_string(elements) +
                                        " elements exceeds 2^31 - 1 (the kernels' 32-bit offsets)");
}

/// What a problem holds on the device: X and W in each input type, and Y.
double problem_bytes(const gm::Shape& s, const std::vector<DType>& dtypes) {
    double bytes = 4.0 * double(s.y_elements());
    for (DType d : dtypes) bytes += pd::size_of(d) * double(s.x_elements() + s.w_elements());
    return bytes;
}

// [ch02_cost]
/// The problem's FLOPs, and per input type its minimal bytes and intensity beside the ridge point.
void print_cost(pd::Bench& bench, const gm::Shape& shape, const std::vector<DType>& dtypes) {
    std::ostream& out = bench.out();
    out << "problem: Y [T, N] = X [T, K] W [N, K]^T with T = " << shape.tokens << ", N = " << shape.n
        << ", K = " << shape.k << ": 2TNK = " << pd::format_flops(shape.flops()) << "\n";
    for (DType d : dtypes) {
        const pd::Cost cost{shape.flops(), shape.min_bytes(pd::size_of(d))};  // read X and W, write Y, once
        out << "  " << to_string(d) << " inputs (fp32 Y): minimal bytes " << pd::format_bytes(cost.bytes)
            << ", arithmetic intensity " << fmt("%.1f", cost.intensity()) << " FLOP/byte";
        if (const auto bound = bench.roofs.bound(cost, units_of(d)))  // ridge: the units' peak over bandwidth
            out << "; ridge point of the " << pd::to_string(units_of(d)) << " "
                << fmt("%.1f", *bench.roofs.peak(units_of(d)) / *bench.roofs.bytes_per_s) << " ("
                << pd::roofline::to_string(*bound) << ")";
        out << "\n";
    }
}
// [ch02_cost]

/// --dump: the inputs and references of problem @p p (measure() dumps the outputs).
void dump_problem(pd::Bench& bench, const Problem& p) {
    for (const auto& [d, e] : p.expected) {
        const std::string suffix = d == DType::fp32 ? "" : "_bf16";
        const std::size_t T = p.s.tokens, N = p.s.n, K = p.s.k;
        bench.dump<float>("x" + suffix, pd::rounded_to(d, p.x), {T, K});
        bench.dump<float>("w" + suffix, pd::rounded_to(d, p.w), {N, K});
        bench.dump<float>("y_reference" + suffix, std::vector<float>(e.values.begin(), e.values.end()), {T, N});
    }
    bench.out() << "dumped x, w, y_reference (bf16: *_bf16.npy) and y_<kernel> to " << bench.dump_dir() << "\n";
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"02_prefill_gemm", "batched prefill GEMM",
                    "Chapter 02: batched prefill GEMM. Y [T, N] = X [T, K] W [N, K]^T in eight steps (v1 naive, v2 "
                    "coalesced, v3 shared-memory tiles, v4 and v5 register blocking, v6 128-bit loads in fp32; v7 "
                    "WMMA and v8 mma.sync tensor cores in bf16), against cuBLAS at the same shape.",
                    gm::versions()};
    bench.option("--tokens", o.tokens, "Rows T of X and Y: batch x prompt tokens", CLI::Range(1, 1 << 20));
    bench.option("--n", o.n, "Output features N (rows of W)", CLI::Range(1, 1 << 20));
    bench.option("--k", o.k, "Input features K (the reduction)", CLI::Range(1, 1 << 20));
    bench.add_dtype_option();
    bench.app.add_flag("--sweep-tokens", o.sweep,
                       bench.sim() ? "Also run T = 1, 2, 4 ... 256 at this N and K (CPU figures on the simulator)"
                                   : "Also run T = 1, 2, 4 ... 8192 at this N and K: intensity and TFLOP/s against T");
    if (auto code = bench.parse(argc, argv)) return *code;
    const std::vector<DType> dtypes = bench.dtypes();
    const gm::Shape shape{o.tokens, o.n, o.k};
    check_problem(shape);
    std::ostream& out = bench.out();
    bench.device();
    pd::Needs needs{"the versions at T = " + std::to_string(o.tokens) + ", N = " + std::to_string(o.n) +
                        ", K = " + std::to_string(o.k),
                    "lower --tokens, --n or --k, or choose one --kernel"};
    needs.device("X, W and Y", problem_bytes(shape, dtypes));
    const auto add_work = [&](const gm::Shape& s) {  // the versions' launches, the inputs and the reference
        needs.elements(double(dtypes.size()) * double(s.x_elements() + s.w_elements() + s.y_elements()))
            .work(bench.versions_work([&](const pd::Version& v, DType) { return gm::sim_work(v.name, s); }) +
                  double(dtypes.size()) * (bench.dumping() ? s.flops() : std::min(s.flops(), 4e8)));
    };
    add_work(shape);
    for (int T = 1; o.sweep && T <= 256; T *= 2) add_work({T, shape.n, shape.k});
    bench.require(needs);
    bench.measure_roofs();
    print_cost(bench, shape, dtypes);

    // ---- inputs, reference, and every version: validated, then timed ----
    std::vector<float> w(shape.w_elements());
    pd::fill_uniform<float>(w, -1.f, 1.f, pd::derive_seed(bench.options.seed, 2));
    Problem p = make_problem(shape, w, pd::derive_seed(bench.options.seed, 1), dtypes, bench.dumping());
    const bool all_rows = p.expected.begin()->second.rows.size() == std::size_t(shape.tokens);
    out << "reference: CPU, double accumulation, "
        << (all_rows
                ? "every row of Y"
                : std::to_string(p.expected.begin()->second.rows.size()) + " sampled rows of Y (all must be finite)")
        << "; bf16 versions against the reference of the rounded inputs\n\n";
    std::optional<pd::CublasHandle> cublas;  // no cuBLAS on the simulator, none needed with --check-only
    if (bench.timing() && !bench.sim()) cublas.emplace();
    bench.baseline_alias = "vs_cublas";
    std::vector<pd::Row> rows;
    for (DType d : dtypes)
        for (pd::Row& r : run_versions(bench, p, d, cublas ? &*cublas : nullptr)) rows.push_back(std::move(r));
    out << pd::render(rows, {"kernel", "dtype", "time ms", "TFLOP/s", "FLOP/byte", "floor ms", "of roofline",
                             "vs cuBLAS", "max abs err", "status"})
        << "floor = max(2TNK / peak, minimal bytes / copy bandwidth); 'of roofline' is floor / time; 'vs cuBLAS' "
           "is cuBLAS's time over the version's, same input type"
        << (bench.sim() ? " (no roofs and no cuBLAS on the simulator)" : "") << ".\n";
    if (bench.dumping()) dump_problem(bench, p);
    const std::vector<pd::Row> sweep =
        o.sweep ? sweep_tokens(bench, shape, w, dtypes, cublas ? &*cublas : nullptr) : std::vector<pd::Row>{};

    nlohmann::json report = bench.report({{"tokens", shape.tokens},
                                          {"n", shape.n},
                                          {"k", shape.k},
                                          {"dtype", dtypes.size() == 2 ? "all" : to_string(dtypes[0])},
                                          {"flops", shape.flops()},
                                          {"validated_rows", all_rows ? "all" : "sampled"}},
                                         rows);
    report["sweep"] = bench.json(sweep);
    return bench.finish(report);
}

}  // namespace ch02

int main(int argc, char** argv) {
    return pd::guarded_main(ch02::run, argc, argv);
}
