// Chapter 08's further studies: the whole model's decode step per format with its accuracy against
// bf16, and the batch sweep that shows the speed-up shrink toward the ridge. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"
#include "pd/rng.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace ch08 {

namespace md = pd::model;

/// What the model's decode step and generation ask of the machine, required before they run.
void require_model(pd::Bench& bench, const Options& o, const pd::ModelConfig& config) {
    md::ModelOptions biggest{.weights = pd::DType::bf16,
                             .batch = o.batch,
                             .max_seq = o.context,
                             .cache = {.kv = pd::DType::bf16},
                             .quant = {.format = "int8"}};
    bench.require(  // two models through the prompt, the context and the generation, per format
        pd::Needs{"the decode step and the generation of " + config.name,
                  "lower --context or --gen, or choose a smaller --model"}
            .device("the model (bf16, then each quantized copy)", md::Model::device_bytes(config, biggest))
            .work(8.0 * 4 * config.parameter_count() * o.batch * (o.context + bench.runs())));
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
                        .batch = B,
                        .max_seq = C,
                        .cache = {.kv = pd::dtype_named(o.kv_dtype)},
                        .kernels = {.sm_count = std::max(bench.device().sm_count, 1)}};
    std::vector<pd::Row> rows;
    std::optional<pd::Row> baseline;
    std::optional<md::Generation> original;
    for (Format f : qt::all_formats()) {
        if (f != Format::bf16 && !bench.selects(qt::to_string(f))) continue;
        mo.quant = {.format = f == Format::bf16 ? "none" : qt::to_string(f), .group = o.group};
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

/// The whole decode step, and the accuracy of each format against bf16: run_model()'s rows,
/// printed; returns the report's "model" section.
nlohmann::json model_section(pd::Bench& bench, const Options& o, const pd::ModelConfig& config,
                             const pd::ModelWeights* weights, const pd::Column& vs_bf16) {
    std::ostream& out = bench.out();
    nlohmann::json accuracy = nlohmann::json::array();
    const std::vector<pd::Row> model_rows = run_model(bench, o, config, weights, accuracy);
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
    return {{"name", config.name}, {"steps", bench.json(model_rows)}, {"accuracy", accuracy}};
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

}  // namespace ch08
