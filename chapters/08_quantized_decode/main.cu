// Chapter 08: quantized decode.
//
// A decode step reads every weight for a few tokens, so its time is its bytes over the memory
// bandwidth (chapter 03). Storing the weights in 8 or 4 bits cuts those bytes 2 to 4 times, and
// a kernel that decodes them in registers, at the speed of the memory, turns that into a 2 to 4
// times faster step. The program prints the bytes a decode step of a model reads per format,
// validates the int8, int4 and fp8 GEMVs against the GEMV of their dequantized weights and
// reports their error against the bf16 weights, times them over a stack of weight matrices
// beside chapter 03's batched bf16 GEMV (the same kernel reading bf16) and the copy bandwidth,
// and with --sweep-batch shows the speed-up shrink as the batch grows toward the ridge.
//
// The steps every chapter shares are in pd/bench.hpp; this file holds the lesson, problem.cu its
// options, needs and inputs, and studies.cu its further studies.
#include "chapter.hpp"

#include "pd/llama2c.hpp"

#include "linear_reference.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ch08 {

using pd::fmt;

// [ch08_bytes]
/// Bytes a decode step of @p c reads from its weights in @p format: every linear layer's
/// matrix (the LM head too), each at its own K, and one embedding row.
double decode_weight_bytes(const pd::ModelConfig& c, Format format, int group, bool zero_point) {
    const auto matrix = [&](int n, int k) {
        return double(n) * k * qt::Layout{format, k, group, format == Format::int4 && zero_point}.bytes_per_weight(n);
    };
    const int D = c.d_model, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
    const double layer =
        matrix(q, D) + 2 * matrix(kv, D) + matrix(D, q) + 2 * matrix(c.ffn_dim, D) + matrix(D, c.ffn_dim);
    return c.layers * layer + matrix(c.vocab, D) + 2.0 * D;
}
// [ch08_bytes]

// [ch08_cost]
/// The bytes a decode step of @p config reads per sequence at @p context, per weight format, with
/// a bf16 and an 8-bit KV cache (what fewer bytes per weight and per cached element buy).
void print_bytes(std::ostream& out, const pd::ModelConfig& config, int context, int group, bool zero_point) {
    const double kv_elements = 2.0 * config.layers * config.kv_heads * config.head_dim * context;
    const double kv_bf16 = 2 * kv_elements,
                 kv_8bit = kv_elements * (1 + 4.0 / config.head_dim);  // fp32 scale per (token, head)
    const double bf16_weights = decode_weight_bytes(config, Format::bf16, group, zero_point);
    out << "bytes one decode step of " << config.name << " reads per sequence at a context of " << context
        << " (int4 in groups of " << group << (zero_point ? " with a zero point" : "")
        << "; an 8-bit cache keeps an fp32 scale per token and KV head):\n"
        << "  weights  bytes/param  weights     +bf16 KV    +8-bit KV   fewer than bf16 (weights, +8-bit KV)\n";
    const auto pad = [](std::string text, std::size_t width) {
        return text.append(width > text.size() ? width - text.size() : 0, ' ');
    };
    for (Format f : qt::all_formats()) {
        const double w = decode_weight_bytes(config, f, group, zero_point);
        out << "  " << pad(qt::to_string(f), 7) << fmt("%12.3f", w / config.parameter_count()) << "  "
            << pad(pd::format_bytes(w), 10) << "  " << pad(pd::format_bytes(w + kv_bf16), 10) << "  "
            << pad(pd::format_bytes(w + kv_8bit), 10) << "  " << fmt("%.2fx, ", bf16_weights / w)
            << fmt("%.2fx", (bf16_weights + kv_bf16) / (w + kv_8bit)) << "\n";
    }
}
// [ch08_cost]

/// The reference of one weight draw per format: the GEMV of the dequantized weights (double
/// accumulation, bf16-rounded X), row for row of Y's first and last matrix.
pd::Expected expected_for(const Problem& p, const std::vector<float> (&w)[2]) {
    const gv::Shape& s = p.s;
    pd::Expected e{.row_length = std::size_t(s.n),
                   .dims = {std::size_t(p.layers), std::size_t(s.batch), std::size_t(s.n)}};
    const std::vector<float> x = pd::rounded_to(pd::DType::bf16, p.x);
    for (int l : p.layers > 1 ? std::vector<int>{0, p.layers - 1} : std::vector<int>{0}) {
        for (int b = 0; b < s.batch; ++b) e.rows.push_back(std::size_t(l) * s.batch + b);
        std::vector<double> magnitudes;
        const std::vector<double> ref = pd::reference::linear(x, w[l % 2], s.batch, s.n, s.k, &magnitudes);
        e.values.insert(e.values.end(), ref.begin(), ref.end());
        e.magnitudes.insert(e.magnitudes.end(), magnitudes.begin(), magnitudes.end());
    }
    e.sum_length = std::size_t(s.k);
    return e;
}

// [ch08_versions]
/// cuBLAS bf16 (on a GPU, when timing), chapter 03's batched bf16 GEMV v5 (the baseline: the
/// same kernel reading 2 bytes per weight), then each selected format: validated against its
/// dequantized weights, timed against the copy bandwidth of its packed bytes, and its error
/// against the bf16 weights' GEMV reported beside ("quant err": max |y - y_bf16| / max |y_bf16|).
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas) {
    const gv::Shape& s = p.s;
    const std::size_t wn = std::size_t(s.n) * s.k, yn = std::size_t(s.batch) * s.n;
    std::vector<float> w16_values[2];  // the bf16 weights, whose GEMV the quantization error is measured against
    for (int i = 0; i < 2; ++i) w16_values[i] = pd::rounded_to(pd::DType::bf16, p.w[i]);
    const pd::Expected bf16_ref = expected_for(p, w16_values);
    pd::Kernel k{
        .dtype = pd::DType::bf16, .tokens = double(s.batch), .point = {{"batch", s.batch}, {"layers", p.layers}}};
    k.context = "B=" + std::to_string(s.batch) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k);
    const auto step = [&p](std::function<void(int)> layer) {
        return pd::Launch([&p, layer] {
            for (int l = 0; l < p.layers; ++l) layer(l);
        });
    };
    const auto bf16_bytes = p.layers * gv::Shape{s.batch, s.n, s.k}.min_bytes(2);
    std::vector<pd::Row> rows;
    std::optional<pd::Row> baseline;
    k.point["weights"] = "bf16";
    if (cublas) {
        k.name = "cublas_bf16";
        k.units = s.batch == 1 ? pd::Units::simt : pd::Units::tensor_cores;
        k.cost = {p.layers * s.flops(), bf16_bytes};
        rows.push_back(bench.measure(
            k, step([&](int l) {
                float* y = p.y.data() + l * yn;
                if (s.batch == 1)
                    pd::cublas_gemv(cublas->get(), p.w16.data() + (l % 2) * wn, p.x16.data(), y, s.n, s.k);
                else
                    pd::cublas_linear(cublas->get(), p.x16.data(), p.w16.data() + (l % 2) * wn, y, s.batch, s.n, s.k);
            }),
            p.y, bf16_ref));
    }
    k.name = "bf16_v5";
    k.units = pd::Units::simt;
    k.cost = {p.layers * s.flops(), bf16_bytes};
    baseline = bench.measure(
        k, step([&](int l) { gv::gemv("v5", p.w16.data() + (l % 2) * wn, p.x16.data(), p.y.data() + l * yn, s); }), p.y,
        bf16_ref);
    baseline->point["quant_err"] = 0.0;
    rows.push_back(*baseline);
    k.baseline = &*baseline;
    for (const pd::Version& v : qt::versions()) {
        if (!bench.selects(v)) continue;
        const Format f = qt::version_format(v.name);
        const std::vector<qt::DeviceQuantizedMatrix>& stack = p.packed.at(f);
        const qt::Shape qs{s.batch, s.n, s.k};
        const std::vector<float> dq[2] = {qt::dequantize(p.host.at(f)[0]), qt::dequantize(p.host.at(f)[1])};
        // the tensor-core path rounds int4's dequantized weights to bf16 (int8 and fp8 codes are exact)
        const bool tc = v.units == pd::Units::tensor_cores;
        const std::vector<float> dq_tc[2] = {pd::rounded_to(pd::DType::bf16, dq[0]),
                                             pd::rounded_to(pd::DType::bf16, dq[1])};
        k.name = v.name;
        k.units = v.units;
        k.point["weights"] = qt::to_string(f);
        k.cost = {p.layers * s.flops(), p.layers * qs.min_bytes(double(stack.front().bytes))};
        k.dump = "y_" + v.name;
        k.dump_shape = {std::size_t(s.batch), std::size_t(s.n)};
        const auto run = [&](int l) {
            tc ? qt::gemv_mma(stack[l], p.x16.data(), p.y.data() + l * yn, qs)
               : qt::gemv(stack[l], p.x16.data(), p.y.data() + l * yn, qs);
        };
        pd::Row row = bench.measure(k, step(run), p.y, expected_for(p, tc && f == Format::int4 ? dq_tc : dq));
        // The quantization error, on the first matrix: against the bf16 weights' GEMV.
        const std::vector<float> y = p.y.download();
        double err = 0, scale = 0;
        for (std::size_t i = 0; i < yn; ++i) {
            err = std::max(err, std::fabs(double(y[i]) - bf16_ref.values[i]));
            scale = std::max(scale, std::fabs(bf16_ref.values[i]));
        }
        row.point["quant_err"] = err / scale;
        rows.push_back(std::move(row));
    }
    return rows;
}
// [ch08_versions]

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"08_quantized_decode", "quantized decode",
                    "Chapter 08: quantized decode. The bytes a decode step reads per weight format (bf16, int8, int4 "
                    "in groups, fp8 e4m3), and Y [B, N] = X [B, K] W [N, K]^T with the weights packed and decoded "
                    "in registers, over a stack of distinct matrices: against chapter 03's bf16 GEMV, cuBLAS and "
                    "the copy bandwidth of the packed bytes.",
                    qt::versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const gv::Shape shape{o.batch, o.n, o.k};
    if (shape.w_elements() > std::size_t(2147483647))
        throw std::invalid_argument("--n x --k = " + std::to_string(shape.w_elements()) + " elements exceeds 2^31 - 1");
    std::optional<pd::llama2c::Checkpoint> ckpt;
    if (!o.checkpoint.empty())
        ckpt = pd::llama2c::read_checkpoint(o.checkpoint, !o.bytes_only);  // --bytes-only: its shape
    const pd::ModelConfig config = ckpt ? ckpt->config : *pd::find_model(o.model);
    check_problem(o, config);
    std::ostream& out = bench.out();
    if (o.bytes_only) {  // the table alone: nothing runs, no device needed
        bench.title();
        print_bytes(out, config, o.context, o.group, o.zero_point);
        return bench.finish(
            bench.report({{"model", config.name}, {"context", o.context}, {"group", o.group}}, {}, nullptr));
    }

    bench.device();
    print_bytes(out, config, o.context, o.group, o.zero_point);
    require_problem(bench, o, config);
    bench.measure_roofs();

    out << "problem: Y [B, N] = X [B, K] W [N, K]^T with B = " << shape.batch << ", N = " << o.n << ", K = " << o.k
        << ", over a stack of " << o.layers << " matrices (bf16 X, fp32 accumulation)\n";
    out << "reference: CPU, double accumulation, of each format's dequantized weights (the first and last matrix); "
           "'quant err' is the error against the GEMV of the bf16 weights, max |y - y_bf16| / max |y_bf16|\n\n";

    std::optional<pd::CublasHandle> cublas;
    if (bench.timing() && !bench.sim()) cublas.emplace();
    Problem p{.s = shape, .layers = o.layers};
    set_weights(bench, p, o);
    set_tokens(p, shape.batch, bench.options.seed);
    std::vector<pd::Row> rows = run_versions(bench, p, cublas ? &*cublas : nullptr);
    const pd::Column vs_bf16("vs bf16", [](const pd::Row& r) { return pd::format_number(r.result.vs_baseline, 3); });
    out << pd::render(rows, {"kernel", pd::Column::point("weights", "weights"), "step ms", "GB/s", "of copy", vs_bf16,
                             pd::Column::point("quant err", "quant_err"), "max abs err", "status"})
        << "GB/s counts the packed weights (scales included), X and Y once per matrix; 'of copy' is GB/s over the copy "
           "bandwidth; 'vs bf16' is bf16_v5's step time over the row's"
        << (bench.sim() ? " (CPU figures on the simulator: the profile's bytes are its lesson, --profile)" : "")
        << ".\n";

    // the whole decode step, and the accuracy of each format against bf16 (studies.cu)
    const nlohmann::json model = model_section(bench, o, config, ckpt ? &ckpt->weights : nullptr, vs_bf16);
    const std::vector<pd::Row> sweep =
        o.sweep ? sweep_section(bench, p, cublas ? &*cublas : nullptr, vs_bf16) : std::vector<pd::Row>{};
    nlohmann::json report = bench.report({{"batch", shape.batch},
                                          {"n", o.n},
                                          {"k", o.k},
                                          {"layers", o.layers},
                                          {"group", o.group},
                                          {"zero_point", o.zero_point},
                                          {"model", config.name},
                                          {"context", o.context},
                                          {"kv_dtype", o.kv_dtype},
                                          {"dtype", "bf16"}},
                                         rows);
    report["sweep"] = bench.json(sweep);
    report["model"] = model;
    return bench.finish(report);
}

}  // namespace ch08

int main(int argc, char** argv) {
    return pd::guarded_main(ch08::run, argc, argv);
}
