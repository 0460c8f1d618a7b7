// Chapter 12's second experiment: a prefill captured as a graph for a comparison only, where the
// graph has little to remove. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/model/executor.hpp"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace ch12 {

// [ch12_prefill]
std::vector<pd::Row> prefill_comparison(pd::Bench& bench, const Options& o, md::Model& m) {
    std::vector<pd::Row> rows;
    const std::size_t V = std::size_t(m.config().vocab);
    for (const int P : o.prefill_lens) {
        const md::StepSequence prompt{.slot = 0, .context = 0, .tokens = P};
        const std::span<const md::StepSequence> seqs(&prompt, 1);
        const std::vector<int> tokens = md::synthetic_prompt(P, m.config().vocab, bench.options.seed, 2000 + P);
        m.forward(tokens, seqs);  // eager: the batch uploaded, every kernel launched
        std::vector<float> eager = m.logits().download();
        const md::Model::GraphNodes nodes = m.capture_pass(tokens, seqs);  // this prompt, for this comparison
        m.logits().fill_bytes(0xFF);
        m.replay_pass();
        std::vector<float> replayed = m.logits().download();
        eager.resize(V), replayed.resize(V);
        const bool passed = std::memcmp(eager.data(), replayed.data(), V * sizeof(float)) == 0;
        for (const bool graph : {false, true}) {
            const std::string name = graph ? "graph" : "eager";
            if (!bench.selects(name)) continue;
            const int launches = graph ? 1 : nodes.kernels;
            pd::Kernel k{
                .name = name,
                .dtype = m.options().weights,
                .units = m.options().weights == DType::bf16 ? pd::Units::tensor_cores : pd::Units::simt,
                .cost = m.cost(seqs),
                .tokens = double(P),
                .point = {{"prompt", P}, {"kernels", nodes.kernels}, {"host_launches", launches}, {"bitwise", passed}}};
            std::optional<double> ms;
            const std::function<void()> step = [&] {
                if (graph)
                    m.replay_pass();
                else
                    m.forward(tokens, seqs);
            };
            if (bench.timing() && !bench.sim()) {
                ms = bench.time_ms(step);
                k.point["host_us"] = host_us(bench, step);
            } else {
                model_times(k, o, launches, bench.options.gpu);
            }
            rows.push_back(bench.timed_row(k, ms, passed));
        }
    }
    if (rows.empty()) return rows;
    bench.out() << "\nprefill, one prompt of P tokens in slot 0 (its graph captured for this comparison only):\n"
                << pd::render(rows,
                              step_columns(bench, {pd::Column::name("prefill"), pd::Column::point("P", "prompt")}),
                              bench.options.check_only)
                << "a graph removes the host's launches and nothing else; a real model's prompt keeps the GPU in its "
                   "GEMMs far longer than the host takes to launch them (on a GPU, compare the rows), while the tiny "
                   "model's prompts are as launch-bound as its decode steps.\n";
    return rows;
}
// [ch12_prefill]

}  // namespace ch12
