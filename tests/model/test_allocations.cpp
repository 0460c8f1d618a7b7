// Honest step timings: the model allocates its activations, the batch's metadata and the scan's
// scratch when it is built, for the largest pass it will run (ModelOptions::max_step_tokens), so
// no pass allocates device memory: not a prefill of the largest size, not a mixed or a decode
// batch, not any step of the engine on slots or on pages. The simulator counts every
// cudaMalloc (pd::sim::device_allocations()), which is what this checks; a GPU build has no
// such count and runs the rest of the model tests.
#include "pd/cuda_check.hpp"
#include "pd/model/executor.hpp"
#include "pd/model/model.hpp"
#include "pd/serving/engine.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace md = pd::model;
namespace sv = pd::serving;
using Catch::Matchers::Contains;

#if defined(PD_BACKEND_SIM)

namespace {

/// Requests of ragged prompts and outputs arriving a millisecond apart, with prompt tokens.
std::vector<sv::Request> workload(int vocab) {
    std::vector<sv::Request> requests;
    const int prompts[] = {13, 3, 20, 1, 9, 17, 6}, outputs[] = {6, 9, 4, 7, 2, 5, 8};
    for (int i = 0; i < 7; ++i) {
        sv::Request r{.id = i, .arrival_s = 0.001 * i, .prompt_tokens = prompts[i], .output_tokens = outputs[i]};
        r.prompt = md::synthetic_prompt(r.prompt_tokens, vocab, 3, i);
        for (int t = 0; t < 8 && t < r.prompt_tokens; ++t)
            r.prompt[std::size_t(t)] = 40 + (i / 2) * 10 + t;  // shared starts
        requests.push_back(r);
    }
    return requests;
}

}  // namespace

TEST_CASE("model: no pass allocates device memory once the model is built", "[model][allocation]") {
    const pd::ModelConfig c = *pd::find_model("tiny");
    md::Model m(c, {.batch = 3, .max_seq = 32, .max_step_tokens = 24});
    m.init_synthetic(5);
    m.warm_up();
    const std::uint64_t before = pd::sim::device_allocations();
    // every plan: a prefill of the largest pass, a mixed batch, decode batches in and out of slot order
    const std::vector<md::StepSequence> prefill = {{.slot = 0, .context = 0, .tokens = 8},
                                                   {.slot = 1, .context = 0, .tokens = 8},
                                                   {.slot = 2, .context = 0, .tokens = 8}};
    const std::vector<md::StepSequence> mixed = {{.slot = 2, .context = 8, .tokens = 1},
                                                 {.slot = 0, .context = 8, .tokens = 5}};
    const std::vector<md::StepSequence> decodes = {{.slot = 1, .context = 8, .tokens = 1},
                                                   {.slot = 0, .context = 13, .tokens = 1}};
    CHECK(m.plan(prefill).attention == md::Plan::Attention::varlen);  // flash attention over the cache
    CHECK(m.plan(mixed).attention == md::Plan::Attention::varlen);
    CHECK(m.plan(decodes).projections == md::Plan::Projections::gemv);
    m.forward(std::vector<int>(24, 7), prefill);
    m.forward(std::vector<int>(6, 8), mixed);
    m.forward(std::vector<int>(2, 9), decodes);
    m.prefill(std::vector<int>(3 * 8, 4), 8);  // chapter 04's batches: 24 tokens, then one per sequence
    m.decode(std::vector<int>{1, 2, 3});
    CHECK(pd::sim::device_allocations() == before);
    // a pass larger than the activations were made for is refused, naming the field
    CHECK_THROWS_WITH(m.forward(std::vector<int>(25, 1), std::vector<md::StepSequence>{{.slot = 0, .tokens = 25}}),
                      Contains("ModelOptions.max_step_tokens = 24"));
}

TEST_CASE("model: no engine step allocates device memory, on slots or on pages, under every policy",
          "[model][allocation]") {
    const pd::ModelConfig c = *pd::find_model("tiny");
    const std::vector<sv::Request> requests = workload(c.vocab);
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        for (int block_size : {0, 4}) {
            INFO("policy " << sv::to_string(p) << ", block size " << block_size);
            // small limits: chunks, waiting and preemptions
            const sv::SchedulerConfig config{.policy = p,
                                             .token_budget = 8,
                                             .max_seqs = 3,
                                             .kv_capacity = 48,
                                             .block_size = block_size,
                                             .prefix_caching = block_size > 0};
            sv::Scheduler scheduler(config);
            md::ModelOptions o = md::engine_model_options(c, config, requests, pd::DType::fp32, pd::DType::fp32, 1);
            o.max_seq = 32;
            md::Model m(c, o);
            m.init_synthetic(5);
            m.warm_up();
            md::ModelExecutor executor(m, requests, 3, scheduler.paged());
            const std::uint64_t before = pd::sim::device_allocations();
            const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
            int largest = 0;
            for (const auto& s : t.steps) largest = std::max(largest, s.step.tokens());
            INFO(t.steps.size() << " steps, the largest of " << largest << " tokens; max_step_tokens "
                                << o.max_step_tokens);
            CHECK(largest <= o.max_step_tokens);
            CHECK(pd::sim::device_allocations() == before);
        }
}

TEST_CASE("model: with flash attention no allocation grows with the square of the prompt", "[model][allocation]") {
    // Device memory a model takes for one prompt of S tokens (max_seq = max_step_tokens = S): the
    // weights are fixed, the cache and the activations grow as S; only chapter 01's attention adds
    // a score buffer of Hq S^2 floats. So going from S to 2S adds twice what going from S/2 to S
    // added with flash attention (the growth is linear), and more than that with the naive path.
    const pd::ModelConfig c = *pd::find_model("tiny");
    const auto used = [&](const std::string& attention, int S) {
        std::size_t free_before = 0, free_after = 0, total = 0;
        PD_CHECK_CUDA(cudaMemGetInfo(&free_before, &total));
        md::Model m(c, {.batch = 1, .max_seq = S, .max_step_tokens = S, .kernels = {.prefill_attention = attention}});
        PD_CHECK_CUDA(cudaMemGetInfo(&free_after, &total));
        return double(free_before - free_after);
    };
    for (const std::string attention : {"flash", "naive"}) {
        const double a = used(attention, 128), b = used(attention, 256), d = used(attention, 512);
        const double ratio = (d - b) / (b - a);
        INFO(attention << ": " << a << ", " << b << " and " << d << " bytes for S = 128, 256, 512; growth ratio "
                       << ratio << " (2: linear)");
        if (attention == "flash")
            CHECK(ratio == Approx(2.0).epsilon(0.01));
        else
            CHECK(ratio > 2.5);  // the S^2 buffer: the check above can fail
    }
}

#endif
