// Chapter 03: decode GEMV.
//
// Decode applies every linear layer to one new token per sequence: y [N] = W [N, K] x [K].
// Each weight is read for two FLOPs, so the step is bound by memory bandwidth and the goal is
// to stream the weights at the speed of the memory. The program validates six versions (v1
// thread per row ... v5 batched, v6 batched on tensor cores) against the CPU reference, times a
// decode step over a stack of distinct weight matrices (several times the L2, as a real model's
// layers are) next to cuBLAS and the measured copy bandwidth, and with --sweep-batch shows that
// B tokens cost about the same as one until the batch reaches the ridge point.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include "linear_reference.hpp"

#include <optional>
#include <string>
#include <vector>

namespace ch03 {

using pd::fmt;

/// Draws the weight stack (once per type: the batch sweep keeps it) and uploads it.
void set_weights(Problem& p, std::uint64_t seed) {
    p.w.resize(std::size_t(p.layers) * p.s.w_elements());
    pd::fill_uniform<float>(p.w, -1.f, 1.f, pd::derive_seed(seed, 1));
    if (p.d == DType::fp32)
        p.w32 = pd::DeviceBuffer<float>(std::span<const float>(p.w));
    else
        p.w16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(p.w));
}

/// Draws B tokens (a new draw for each B), uploads them, and computes the reference.
void set_tokens(Problem& p, int batch, std::uint64_t seed) {
    p.s.batch = batch;
    const gv::Shape& s = p.s;
    p.x.resize(s.x_elements());
    pd::fill_uniform<float>(p.x, -1.f, 1.f, pd::derive_seed(seed, 2 + std::uint64_t(batch)));
    if (p.d == DType::fp32)
        p.x32 = pd::DeviceBuffer<float>(std::span<const float>(p.x));
    else
        p.x16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(p.x));
    p.y = pd::DeviceBuffer<float>(std::size_t(p.layers) * s.y_elements());

    pd::Expected& e = p.expected;
    e = pd::Expected{.row_length = std::size_t(s.n),
                     .dims = {std::size_t(p.layers), std::size_t(batch), std::size_t(s.n)}};
    for (int l : p.layers > 1 ? std::vector<int>{0, p.layers - 1} : std::vector<int>{0}) {
        for (int b = 0; b < batch; ++b) e.rows.push_back(std::size_t(l) * batch + b);
        const std::span<const float> w = std::span<const float>(p.w).subspan(l * s.w_elements(), s.w_elements());
        std::vector<double> magnitudes;  // fp32: the rounding bound grows like sqrt(K)
        const std::vector<double> ref =
            pd::reference::linear(std::span<const float>(p.x), w, batch, s.n, s.k, &magnitudes);
        e.values.insert(e.values.end(), ref.begin(), ref.end());
        e.magnitudes.insert(e.magnitudes.end(), magnitudes.begin(), magnitudes.end());
        e.sum_length = std::size_t(s.k);
        if (p.d == DType::bf16) {  // the reference of the rounded inputs: the yardstick of the bf16 rule
            const std::vector<bf16> xb = pd::round_all<bf16>(p.x), wb = pd::round_all<bf16>(w);
            const std::vector<double> lp =
                pd::reference::linear(std::span<const bf16>(xb), std::span<const bf16>(wb), batch, s.n, s.k);
            e.values_lowp.insert(e.values_lowp.end(), lp.begin(), lp.end());
        }
    }
}

// [ch03_versions]
/// cuBLAS (on a GPU, when timing), then every selected version, on one decode step: each one
/// validated against the reference, then timed against the first cuBLAS row. A step runs the
/// kernel on every matrix in turn.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas) {
    const gv::Shape& s = p.s;
    const std::size_t wn = s.w_elements(), yn = s.y_elements();
    const std::string suffix = p.d == DType::fp32 ? "" : "_bf16";
    pd::Kernel k{.dtype = p.d,
                 .cost = {p.layers * s.flops(), p.layers * s.min_bytes(pd::size_of(p.d))},
                 .tokens = double(s.batch),
                 .point = {{"batch", s.batch}, {"layers", p.layers}}};
    k.context = "B=" + std::to_string(s.batch) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) +
                " (first and last matrix of " + std::to_string(p.layers) + ")";
    k.dump_shape = {std::size_t(s.batch), std::size_t(s.n)};  // the first matrix's Y
    const auto step = [&p](std::function<void(int)> layer) {
        return pd::Launch([&p, layer] {
            for (int l = 0; l < p.layers; ++l) layer(l);
        });
    };
    std::vector<pd::Row> rows;
    std::optional<pd::Row> baseline;
    if (cublas) {  // the baselines: cuBLAS's GEMV at B = 1, its GEMM for B > 1 (and in bf16 at B = 1 too)
        const auto h = cublas->get();
        const bool fp32 = p.d == DType::fp32;
        const auto w32 = [&](int l) { return p.w32.data() + l * wn; };
        const auto w16 = [&](int l) { return p.w16.data() + l * wn; };
        if (s.batch == 1) {  // cublasSgemv, or cublasTSSgemvStridedBatched for bf16
            k.name = fp32 ? "cublas_sgemv" : "cublas_bf16_gemv";
            k.dump = "y_" + k.name + suffix;
            baseline = bench.measure(k, step([&](int l) {
                                         float* y = p.y.data() + l * yn;
                                         if (fp32)
                                             pd::cublas_gemv(h, w32(l), p.x32.data(), y, s.n, s.k);
                                         else
                                             pd::cublas_gemv(h, w16(l), p.x16.data(), y, s.n, s.k);
                                     }),
                                     p.y, p.expected);
            rows.push_back(*baseline);
        }
        if (s.batch > 1 || !fp32) {  // cublasSgemm (no TF32), or cublasGemmEx with bf16 inputs
            k.name = fp32 ? "cublas_sgemm" : "cublas_bf16";
            k.units = fp32 ? pd::Units::simt : pd::Units::tensor_cores;
            k.baseline = baseline ? &*baseline : nullptr;
            k.dump = "y_" + k.name + suffix;
            rows.push_back(bench.measure(k, step([&](int l) {
                                             float* y = p.y.data() + l * yn;
                                             if (fp32)
                                                 pd::cublas_linear(h, p.x32.data(), w32(l), y, s.batch, s.n, s.k);
                                             else
                                                 pd::cublas_linear(h, p.x16.data(), w16(l), y, s.batch, s.n, s.k);
                                         }),
                                         p.y, p.expected));
            if (!baseline) baseline = rows.back();
        }
    }
    k.baseline = baseline ? &*baseline : nullptr;
    for (const pd::Version& v : gv::versions()) {
        if (!v.takes(p.d) || !bench.selects(v)) continue;
        k.name = v.name;
        k.units = v.units;
        k.dump = "y_" + v.name + suffix;
        const pd::Launch launch =
            p.d == DType::fp32
                ? step([&](int l) { gv::gemv(v.name, p.w32.data() + l * wn, p.x32.data(), p.y.data() + l * yn, s); })
                : step([&](int l) { gv::gemv(v.name, p.w16.data() + l * wn, p.x16.data(), p.y.data() + l * yn, s); });
        rows.push_back(bench.measure(k, launch, p.y, p.expected));
    }
    return rows;
}
// [ch03_versions]

// [ch03_cost]
/// The problem, and per input type the bytes of the weight stack beside the L2 and the intensity.
void print_cost(std::ostream& out, const pd::DeviceInfo& dev, const Options& o, const gv::Shape& shape,
                const std::vector<DType>& dtypes) {
    out << "problem: Y [B, N] = X [B, K] W [N, K]^T with B = " << shape.batch << ", N = " << shape.n
        << ", K = " << shape.k << ", over a stack of " << o.layers << " distinct matrices (one decode step)\n";
    for (DType d : dtypes) {
        // Every weight is read once per step for 2 FLOPs per token: the intensity is about 2B / b.
        const double weights = double(o.layers) * double(shape.w_elements()) * pd::size_of(d);
        out << "  " << to_string(d) << ": weights " << pd::format_bytes(weights);
        if (dev.l2_bytes > 0) out << " = " << fmt("%.1f", weights / dev.l2_bytes) << " x the L2";
        out << "; intensity " << fmt("%.2f", shape.flops() / shape.min_bytes(pd::size_of(d)))
            << " FLOP/byte (2 FLOPs per weight per token)\n";
    }
}
// [ch03_cost]

/// --dump: the first matrix's inputs and reference of problem @p p (measure() dumps the outputs).
void dump_problem(pd::Bench& bench, const Problem& p) {
    const std::string suffix = p.d == DType::fp32 ? "" : "_bf16";
    const std::size_t B = p.s.batch, N = p.s.n, K = p.s.k;
    const auto& ref = p.d == DType::fp32 ? p.expected.values : p.expected.values_lowp;
    bench.dump<float>("w" + suffix, pd::rounded_to(p.d, std::span(p.w).first(N * K)), {N, K});
    bench.dump<float>("x" + suffix, pd::rounded_to(p.d, p.x), {B, K});
    bench.dump<float>("y_reference" + suffix, std::vector<float>(ref.begin(), ref.begin() + B * N), {B, N});
}

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"03_decode_gemv", "decode GEMV",
                    "Chapter 03: decode GEMV. Y [B, N] = X [B, K] W [N, K]^T for B new tokens over a stack of "
                    "distinct weight matrices: v1 thread per row, v2 warp per row, v3 128-bit loads, v4 CUB "
                    "reduction, v5 batched decode, v6 batched on tensor cores; against cuBLAS and the copy bandwidth.",
                    gv::versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const std::vector<DType> dtypes = bench.dtypes();
    const gv::Shape shape{o.batch, o.n, o.k};
    check_problem(shape);

    std::ostream& out = bench.out();
    const pd::DeviceInfo& dev = bench.device();
    pd::Needs needs{"the versions on " + std::to_string(o.layers) + " matrices of N = " + std::to_string(o.n) +
                        ", K = " + std::to_string(o.k),
                    "lower --layers, --n or --k, or choose one --kernel"};
    const double max_batch = o.sweep ? gv::kMaxBatch : o.batch;  // X and Y up to the sweep's B = 64
    needs.device("the weight stack", double(o.layers) * double(shape.w_elements()) * pd::size_of(dtypes.front()))
        .device("X", max_batch * double(o.k) * 4.0)
        .device("Y", double(o.layers) * max_batch * double(o.n) * 4.0)
        .elements(double(dtypes.size()) * o.layers * double(shape.w_elements()));
    const auto add_work = [&](int B) {  // the versions' launches over the stack, and the reference's two matrices
        const gv::Shape s{B, o.n, o.k};
        needs.work(o.layers * bench.versions_work([&](const pd::Version& v, DType) {
            return gv::sim_work(v.name, s);
        }) + double(dtypes.size()) * 4 * s.flops());
    };
    add_work(o.batch);
    for (int B = 1; o.sweep && B <= gv::kMaxBatch; B *= 2) add_work(B);
    bench.require(needs);
    bench.measure_roofs();

    print_cost(out, dev, o, shape, dtypes);
    out << "reference: CPU, double accumulation, the first and the last matrix of the stack; bf16 within 2x "
           "the error of rounding the inputs (the reference of the bf16 inputs against that of the fp32 ones)\n\n";

    // ---- every version: validated, then timed ----
    std::optional<pd::CublasHandle> cublas;  // no cuBLAS on the simulator, none needed with --check-only
    if (bench.timing() && !bench.sim()) cublas.emplace();
    bench.baseline_alias = "vs_cublas";
    std::vector<pd::Row> rows;
    for (DType d : dtypes) {
        Problem p{.s = shape, .layers = o.layers, .d = d};
        set_weights(p, bench.options.seed);
        set_tokens(p, shape.batch, bench.options.seed);
        for (pd::Row& r : run_versions(bench, p, cublas ? &*cublas : nullptr)) rows.push_back(std::move(r));
        if (bench.dumping()) dump_problem(bench, p);
    }
    out << pd::render(rows, {"kernel", "dtype", "step ms", "GB/s", "of copy", "tokens/s", "vs cuBLAS", "max abs err",
                             "status"})
        << "a step reads all " << o.layers << " matrices once; GB/s counts W, X and Y once per matrix; 'of copy' is "
        << "GB/s over the copy bandwidth; 'vs cuBLAS' is cuBLAS's step time over the version's"
        << (bench.sim() ? " (no copy bandwidth and no cuBLAS on the simulator)" : "") << ".\n";
    if (bench.dumping())
        out << "dumped the first matrix's w, x, y_reference and y_<kernel> (bf16: *_bf16.npy) to " << bench.dump_dir()
            << "\n";

    const std::vector<pd::Row> sweep =
        o.sweep ? sweep_batch(bench, o, shape, dtypes, cublas ? &*cublas : nullptr) : std::vector<pd::Row>{};

    nlohmann::json report = bench.report({{"batch", shape.batch},
                                          {"n", shape.n},
                                          {"k", shape.k},
                                          {"layers", o.layers},
                                          {"dtype", dtypes.size() == 2 ? "all" : to_string(dtypes[0])}},
                                         rows);
    report["sweep"] = bench.json(sweep);
    return bench.finish(report);
}

}  // namespace ch03

int main(int argc, char** argv) {
    return pd::guarded_main(ch03::run, argc, argv);
}
