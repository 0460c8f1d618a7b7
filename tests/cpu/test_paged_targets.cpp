// Chapter 06's targets, as tests (the cost model is deterministic): llama-3-8b on one H100 with
// a 16 GiB KV cache, the setups of ch06_paged_kv at its defaults.
//  - a Poisson trace with lognormal lengths (400 requests at 20 per second, prompts of mean 600,
//    answers of mean 250): the paged cache (blocks of 16) wastes under 4% of what it reserves,
//    slots of the model's max_seq waste over 50%, and pages run at least 2 x the requests of
//    slots at once;
//  - the shared-prefix scenario (a 1,000-token system prompt and a 100-token question each) at
//    30 requests per second, where computing every prompt takes about two thirds of the GPU's
//    compute: prefix caching removes at least 85% of the prefill tokens and cuts the median
//    TTFT at least 3 x. (At 20 per second, a light load, the cut is 2.8 x: a request's first
//    step then costs about the same with or without its prefix, the decodes riding along.)
#include "pd/model_config.hpp"
#include "pd/roofline.hpp"
#include "pd/serving/cost_model.hpp"
#include "pd/serving/engine.hpp"
#include "pd/serving/metrics.hpp"
#include "pd/serving/options.hpp"
#include "pd/serving/scheduler.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace sv = pd::serving;

namespace {

struct Run {
    sv::Metrics m;
    sv::CacheStats c;
};

/// One setup of ch06_paged_kv: slots (block_size 0) or pages, as the program builds them.
Run serve(const std::vector<sv::Request>& requests, int block_size, bool prefix) {
    const pd::ModelConfig model = *pd::find_model("llama-3-8b");
    const sv::CostModelConfig cost = sv::cost_model_config(model, *pd::roofline::find_gpu("H100-SXM"), 1);
    const long long positions =
        static_cast<long long>(16.0 * (1ull << 30) / model.kv_bytes_per_token(cost.kv_bytes_per_element));
    sv::SchedulerConfig c{.policy = sv::Policy::chunked, .token_budget = 512, .max_seqs = 256};
    if (block_size == 0) {  // as many slots of max_seq as the memory holds
        c.max_seqs = static_cast<int>(std::min<long long>(256, positions / model.max_seq));
        c.kv_capacity = static_cast<long long>(c.max_seqs) * model.max_seq;
    } else {
        c.kv_capacity = positions;
        c.block_size = block_size;
        c.prefix_caching = prefix;
    }
    sv::Scheduler s(c);
    sv::CostModel exec(cost);
    const sv::Timeline t = sv::run_engine(requests, s, exec, true);
    return {sv::compute_metrics(t), sv::cache_stats(t, block_size, model.max_seq)};
}

sv::WorkloadOptions defaults() {
    sv::WorkloadOptions w;
    w.requests = 400;
    w.rate = 20;
    w.prompt_len = 600;
    w.output_len = 250;
    w.prompt_dist = w.output_dist = "lognormal";
    w.max_len = 8192 / 2;
    return w;
}

}  // namespace

TEST_CASE("chapter 06 target: pages waste under 4%, slots over 50%, and pages run 2 x the requests",
          "[targets][paged]") {
    const std::vector<sv::Request> requests = sv::make_workload(defaults(), 20, 42, 128256);
    const Run slots = serve(requests, 0, false), paged = serve(requests, 16, false);
    INFO("waste: slots " << slots.c.waste << ", paged " << paged.c.waste << "; running at once: slots "
                         << slots.c.running_max << ", paged " << paged.c.running_max);
    CHECK(paged.c.waste < 0.04);
    CHECK(slots.c.waste > 0.50);
    CHECK(paged.c.running_max >= 2 * slots.c.running_max);
    CHECK(paged.m.completed == 400);
    CHECK(slots.m.completed == 400);
}

TEST_CASE("chapter 06 target: prefix caching removes 85% of the prefill and cuts the median TTFT 3 x",
          "[targets][paged]") {
    sv::WorkloadOptions w = defaults();
    w.scenario = "shared-prefix";
    w.rate = 30;
    const std::vector<sv::Request> requests = sv::make_workload(w, w.rate, 42, 128256);
    const Run without = serve(requests, 16, false), with = serve(requests, 16, true);
    const double removed = 1 - double(with.c.prefill_tokens) / double(without.c.prefill_tokens);
    const double cut = without.m.ttft_s.p50 / with.m.ttft_s.p50;
    INFO("prefill tokens: " << without.c.prefill_tokens << " -> " << with.c.prefill_tokens << " (" << removed * 100
                            << "% removed); median TTFT " << without.m.ttft_s.p50 * 1e3 << " -> "
                            << with.m.ttft_s.p50 * 1e3 << " ms (" << cut << " x)");
    CHECK(removed >= 0.85);
    CHECK(cut >= 3.0);
    CHECK(with.m.completed == 400);
}
