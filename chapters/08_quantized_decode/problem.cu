// Chapter 08's problem: its options and their rules, what it needs of the machine, and the weight stack and
// tokens it runs on. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch08 {

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

/// What the formats on the stack ask of the machine, then the model's decode step
/// (require_model()), required before either runs.
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
    require_model(bench, o, config);
}

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

/// Draws X for @p batch tokens and uploads it.
void set_tokens(Problem& p, int batch, std::uint64_t seed) {
    p.s.batch = batch;
    p.x.resize(std::size_t(batch) * p.s.k);
    pd::fill_uniform<float>(p.x, -1.f, 1.f, pd::derive_seed(seed, 10 + std::uint64_t(batch)));
    p.x16 = pd::DeviceBuffer<bf16>(pd::round_all<bf16>(p.x));
    p.y = pd::DeviceBuffer<float>(std::size_t(p.layers) * batch * p.s.n);
}

}  // namespace ch08
