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
// The steps every chapter shares are in pd/bench.hpp; this file holds the lesson.
#include "pd/bench.hpp"
#include "pd/cublas.hpp"
#include "pd/llama2c.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/model_config.hpp"
#include "pd/rng.hpp"

#include "gemv/gemv.hpp"
#include "linear_reference.hpp"
#include "quant/quant.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace gv = pd::kernels::gemv;
namespace md = pd::model;
namespace qt = pd::kernels::quant;
using bf16 = __nv_bfloat16;
using pd::fmt;
using qt::Format;

struct Options {
#if defined(PD_BACKEND_SIM)
    int n = 256, k = 2048, layers = 2;  // seconds on a CPU; K is two of the 1,024-column chunks
    std::string model = "tiny";
    int context = 24, gen = 8;
#else
    int n = 14336, k = 4096, layers = 8;  // llama-3-8b's up projection; int4: 8 x 29 MB = 4 x an H200's L2
    std::string model = "llama-3-8b";
    int context = 4096, gen = 256;
#endif
    int batch = 1, group = qt::kDefaultGroup;
    bool zero_point = false, sweep = false, bytes_only = false;
    std::string checkpoint, kv_dtype = "bf16";
};

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

/// One decode step over the stack: W [L, N, K] in each format (the even matrices from one draw,
/// the odd ones from another: the first and the last differ, so a kernel reading the wrong
/// matrix fails), X [B, K] bf16, Y [L, B, N], and the references of the first and last matrix.
struct Problem {
    gv::Shape s;
    int layers = 1;
    std::vector<float> w[2], x;
    pd::DeviceBuffer<bf16> w16, x16;
    std::map<Format, std::vector<qt::DeviceQuantizedMatrix>> packed;
    std::map<Format, std::vector<qt::QuantizedMatrix>> host;  // both draws, for the references
    pd::DeviceBuffer<float> y;
};

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

/// Draws X for @p batch tokens and uploads it.
void set_tokens(Problem& p, int batch, std::uint64_t seed) {
    p.s.batch = batch;
    p.x.resize(std::size_t(batch) * p.s.k);
    pd::fill_uniform<float>(p.x, -1.f, 1.f, pd::derive_seed(seed, 10 + std::uint64_t(batch)));
    p.x16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(p.x));
    p.y = pd::DeviceBuffer<float>(std::size_t(p.layers) * batch * p.s.n);
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

/// Quantizes the two weight draws into every selected format and uploads the stack.
void set_weights(pd::Bench& bench, Problem& p, const Options& o) {
    const gv::Shape& s = p.s;
    for (int i = 0; i < 2; ++i) {
        p.w[i].resize(std::size_t(s.n) * s.k);
        pd::fill_uniform<float>(p.w[i], -1.f, 1.f, pd::derive_seed(bench.options.seed, 1 + std::uint64_t(i)));
    }
    std::vector<bf16> both = pd::round_all<bf16>(p.w[0]);
    const std::vector<bf16> second = pd::round_all<bf16>(p.w[1]);
    both.insert(both.end(), second.begin(), second.end());
    p.w16 = pd::DeviceBuffer<bf16>(std::span<const bf16>(both));
    for (const pd::Version& v : qt::versions()) {
        if (!bench.selects(v)) continue;
        const Format f = qt::version_format(v.name);
        if (p.host.count(f)) continue;  // the format's SIMT and tensor-core versions share the weights
        const qt::Layout layout{f, s.k, o.group, f == Format::int4 && o.zero_point};
        p.host[f] = {qt::quantize(p.w[0], s.n, layout), qt::quantize(p.w[1], s.n, layout)};
        for (int l = 0; l < p.layers; ++l) p.packed[f].emplace_back(p.host[f][l % 2]);
    }
}

// [ch08_model]
/// The whole model, once per format: the accuracy against the bf16 model over a teacher-forced
/// generation of G tokens after a prompt of C - G random tokens (top-1 agreement and mean KL
/// divergence of the next-token distributions), then one decode step of B sequences at the
/// context C that generation reached, timed against the copy-bandwidth floor of its bytes (the
/// packed weights and the KV it reads). A quantized row fails when its logits are not finite or
/// its agreement is below one half (a broken format, not a coarse one).
std::vector<pd::Row> run_model(pd::Bench& bench, const Options& o, const pd::ModelConfig& config,
                               const pd::ModelWeights* weights, nlohmann::json& accuracy) {
    const int B = o.batch, C = o.context, P = C - o.gen;
    pd::Rng rng(pd::derive_seed(bench.options.seed, 20));
    std::vector<int> prompt(std::size_t(B) * P);
    for (int& t : prompt) t = rng.integer(0, config.vocab - 1);
    md::ModelOptions mo{.weights = pd::DType::bf16,
                        .kv = pd::dtype_named(o.kv_dtype),
                        .batch = B,
                        .max_seq = C,
                        .sm_count = std::max(bench.device().sm_count, 1)};
    std::vector<pd::Row> rows;
    std::optional<pd::Row> baseline;
    std::optional<md::Generation> original;
    for (Format f : qt::all_formats()) {
        if (f != Format::bf16 && !bench.selects(qt::to_string(f))) continue;
        mo.quant = f == Format::bf16 ? "none" : qt::to_string(f);
        mo.quant_group = o.group;
        md::Model m(config, mo);
        weights ? m.load(*weights) : m.init_synthetic(bench.options.seed);
        md::Agreement a{.tokens = B * o.gen, .top1 = 1.0};  // bf16: the original itself
        if (original)
            a = md::teacher_forced_agreement(*original, m, prompt, P);
        else
            original = md::generate_cached(m, prompt, P, o.gen);
        // the decode step at context C: the cache holds C - 1 positions, the step writes and attends to C
        const std::vector<int> last(original->tokens.end() - B, original->tokens.end());
        const auto step = [&] {
            m.rewind(C - 1);
            m.decode(last);
        };
        step();
        const std::vector<float> logits = m.logits().download();
        const bool finite = std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
        pd::Kernel k{.name = std::string("step_") + qt::to_string(f),
                     .dtype = pd::DType::bf16,
                     .cost = m.cost(C - 1, 1),
                     .tokens = double(B),
                     .baseline = baseline ? &*baseline : nullptr,
                     .point = {{"weights", qt::to_string(f)},
                               {"batch", B},
                               {"context", C},
                               {"weight_bytes", m.weight_bytes()},
                               {"top1", a.top1},
                               {"mean_kl", a.mean_kl}}};
        const std::optional<double> ms = bench.timing() ? std::optional<double>(bench.time_ms(step)) : std::nullopt;
        rows.push_back(bench.timed_row(k, ms, finite && a.top1 >= 0.5));
        if (!baseline) baseline = rows.back();
        accuracy.push_back({{"weights", qt::to_string(f)},
                            {"tokens", a.tokens},
                            {"top1", a.top1},
                            {"mean_kl", a.mean_kl},
                            {"max_kl", a.max_kl}});
    }
    return rows;
}
// [ch08_model]

/// The chapter's options, beside the harness's own (--kernel, --seed, ...).
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--n", o.n, "Rows N of each weight matrix (outputs)", CLI::Range(1, 1 << 20));
    bench.option("--k", o.k, "Columns K of each weight matrix (inputs)", CLI::Range(1, 1 << 20));
    bench.option("--batch", o.batch, "Tokens B decoded together", CLI::Range(1, qt::kMaxQuantBatch));
    bench.option("--layers", o.layers, "Weight matrices in the stack (a decode step reads them all)",
                 CLI::Range(1, 1024));
    bench.option("--group", o.group, "int4: values per scale along K", CLI::IsMember({32, 64, 128, 256}));
    bench.app.add_flag("--zero-point", o.zero_point, "int4: a zero point per group (asymmetric)");
    bench.app.add_option("--model", o.model, "The model of the bytes table and the decode step")
        ->check(CLI::IsMember(pd::model_names()))
        ->capture_default_str();
    bench.app
        .add_option("--checkpoint", o.checkpoint, "A llama2.c checkpoint (e.g. stories15M.bin) instead of --model")
        ->excludes("--model")
        ->check(pd::input_file());
    bench.option("--kv-dtype", o.kv_dtype, "The model's KV cache: bf16, or 8 bits with a scale per token and KV head",
                 CLI::IsMember({"bf16", "fp8", "int8"}));
    bench.option("--context", o.context, "Context of the decode step (positions attended)", CLI::Range(1, 1 << 20));
    bench.option(
        "--gen", o.gen,
        "Tokens of the teacher-forced generation that measures the accuracy (its prompt: --context minus these)",
        CLI::Range(1, 4096));
    bench.app.add_flag("--bytes-only", o.bytes_only,
                       "Print the bytes table of --model and stop (any model, on any machine: nothing runs)");
    bench.app.add_flag("--sweep-batch", o.sweep, "Also run B = 1, 2, 4, 8, 16: the speed-up over bf16 against B");
}

/// The rules between the options and the model @p config (exit code 2).
void check_problem(const Options& o, const pd::ModelConfig& config) {
    if (o.context > config.max_seq)
        throw std::invalid_argument("--context " + std::to_string(o.context) + " is past the model's " +
                                    std::to_string(config.max_seq) + " positions");
    if (o.gen >= o.context)
        throw std::invalid_argument("--gen " + std::to_string(o.gen) + " must be below --context " +
                                    std::to_string(o.context) +
                                    " (the generation ends at the context, after a prompt)");
}

/// What the formats on the stack and the model's decode step ask of the machine, required
/// before either runs.
void require_problem(pd::Bench& bench, const Options& o, const pd::ModelConfig& config) {
    // The host holds per weight the two draws, their bf16 roundings, one format's two dequantized copies
    // (fp32) and every format's bytes; its work is about 12 passes over them and 8 reference GEMVs.
    pd::Needs formats{"the formats on " + std::to_string(o.layers) + " matrices of N = " + std::to_string(o.n) +
                          ", K = " + std::to_string(o.k),
                      "lower --layers, --n or --k, or choose one --kernel"};
    const double weights = double(o.n) * o.k;  // each format's stack: at most 1.03 bytes per weight
    formats.device("the two bf16 draws", 2 * 2.0 * weights)
        .device("the weight stacks", 3 * 1.03 * o.layers * weights)
        .device("X", 2.0 * qt::kMaxQuantBatch * o.k)
        .device("Y", 4.0 * o.layers * qt::kMaxQuantBatch * o.n)
        .host("the weight draws and their references", (2 * 4 * 4.0 + 2 * 3 * 1.03) * weights)
        .elements(12.0 * weights);
    const auto add_work = [&](int B) {
        const qt::Shape s{B, o.n, o.k};
        formats.work(o.layers * (bench.versions_work([&](const pd::Version& v, pd::DType) {
                         return qt::sim_work(s, v.units == pd::Units::tensor_cores);
                     }) + bench.runs() * gv::sim_work("v5", {B, o.n, o.k})) +
                     8 * s.flops());
    };
    add_work(o.batch);
    for (int B = 1; o.sweep && B <= qt::kMaxQuantBatch; B *= 2) add_work(B);
    bench.require(formats);
    md::ModelOptions biggest{
        .weights = pd::DType::bf16, .kv = pd::DType::bf16, .batch = o.batch, .max_seq = o.context, .quant = "int8"};
    bench.require(  // two models through the prompt, the context and the generation, per format
        pd::Needs{"the decode step and the generation of " + config.name,
                  "lower --context or --gen, or choose a smaller --model"}
            .device("the model (bf16, then each quantized copy)", md::Model::device_bytes(config, biggest))
            .work(8.0 * 4 * config.parameter_count() * o.batch * (o.context + bench.runs())));
}

// [ch08_sweep]
/// --sweep-batch: the speed-up against B. The packed bytes stay the same while the work per weight
/// grows with B, so the speed-up holds while the bytes dominate and falls as the batch nears the ridge.
std::vector<pd::Row> sweep_section(pd::Bench& bench, Problem& p, const pd::CublasHandle* cublas,
                                   const pd::Column& vs_bf16) {
    std::ostream& out = bench.out();
    std::vector<pd::Row> sweep;
    out << "\nsweep over B = 1, 2, 4, 8, 16 (each point validated" << (bench.sim() ? "; CPU figures" : "") << "):\n";
    for (int B = 1; B <= qt::kMaxQuantBatch; B *= 2) {
        set_tokens(p, B, bench.options.seed);
        for (pd::Row& r : run_versions(bench, p, cublas)) sweep.push_back(std::move(r));
    }
    out << pd::render(
               sweep,
               {pd::Column::point("B", "batch"), "kernel", "FLOP/byte", "step ms", "tokens/s", "of copy", vs_bf16},
               bench.options.check_only)
        << "'vs bf16' falls as B grows: each weight's bytes are read once, but its decoding and B FMAs run per "
           "step on the SIMT units, whose share of the time grows with B; the _tc versions move the B products "
           "to the tensor cores and keep only the decoding per weight\n";
    return sweep;
}
// [ch08_sweep]

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

    // the whole decode step, and the accuracy of each format against bf16
    nlohmann::json accuracy = nlohmann::json::array();
    const std::vector<pd::Row> model_rows = run_model(bench, o, config, ckpt ? &ckpt->weights : nullptr, accuracy);
    out << "\ndecode step of " << config.name << ", B = " << o.batch << " at a context of " << o.context << " ("
        << o.kv_dtype << " cache), and accuracy against the bf16 model (its cache " << o.kv_dtype << ") over " << o.gen
        << " teacher-forced tokens per sequence:\n"
        << pd::render(model_rows,
                      {"kernel", pd::Column::point("weights", "weights"), "step ms", "GB/s", "of copy", vs_bf16,
                       pd::Column::point("top-1", "top1"), pd::Column::point("mean KL", "mean_kl"), "status"})
        << "'top-1': the share of next-token distributions whose argmax is the bf16 model's; 'mean KL': KL(bf16 || "
           "quantized) in nats; 'of copy': the step's bytes (weights as packed, the KV it reads) over the copy "
           "bandwidth"
        << (bench.sim() ? " (none on the simulator)" : "") << ".\n";
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
    report["model"] = {{"name", config.name}, {"steps", bench.json(model_rows)}, {"accuracy", accuracy}};
    return bench.finish(report);
}

}  // namespace

int main(int argc, char** argv) {
    return pd::guarded_main(run, argc, argv);
}
