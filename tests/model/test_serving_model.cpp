// Chapter 05 on chapter 04's model: the mixed step (prefill chunks and decode tokens of several
// sequences in one forward pass) against the one-shot prefill and against each sequence alone,
// and the engine with the real executor against chapter 04's cached decode: every request,
// under every policy (with chunking and preemption forced by small limits), generates exactly
// the tokens it generates alone (fp32).
#include "model_check.hpp"
#include "pd/model/executor.hpp"
#include "pd/model/model.hpp"
#include "pd/serving/scheduler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace md = pd::model;
namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

using pd::model::max_rel_diff;
using pd::test::random_tokens;
using pd::test::tiny;

/// The first `positions` rows of slot @p slot of a cache download [L, B, Hkv, positions, d].
std::vector<float> slot_rows(const std::vector<float>& all, const pd::ModelConfig& c, int B, int slot, int positions) {
    const std::size_t block = std::size_t(positions) * c.head_dim;
    std::vector<float> out;
    for (int l = 0; l < c.layers; ++l)
        for (int h = 0; h < c.kv_heads; ++h) {
            const std::size_t at = ((std::size_t(l) * B + slot) * c.kv_heads + h) * block;
            out.insert(out.end(), all.begin() + std::ptrdiff_t(at), all.begin() + std::ptrdiff_t(at + block));
        }
    return out;
}

/// The tokens request @p id generates alone with chapter 04's cached decode (batch 1).
std::vector<int> generate_alone(md::Model& m, const std::vector<int>& prompt, int output) {
    std::vector<int> out;
    pd::DeviceBuffer<int> next(1);
    m.prefill(prompt, int(prompt.size()));
    for (int i = 0; i < output; ++i) {
        m.argmax(next.data());
        out.push_back(next.download()[0]);
        if (i + 1 < output) m.decode(next.data());
    }
    return out;
}

}  // namespace

TEST_CASE("mixed step: a prompt prefilled in chunks equals the one-shot prefill", "[serving][model]") {
    const pd::ModelConfig c = tiny();
    const int P = 23, V = c.vocab;
    const std::vector<int> prompt = random_tokens(std::size_t(P), V, 71);
    md::Model whole(c, {.batch = 1, .max_seq = 32});
    whole.init_synthetic(7);
    whole.prefill(prompt, P);
    const std::vector<float> want = whole.logits().download();
    const std::vector<float> want_k = whole.download_cache(false, P), want_v = whole.download_cache(true, P);
    for (int chunk : {1, 7, 64, P}) {
        INFO("chunks of " << chunk << " tokens, the prompt in slot 2 of 3");
        md::Model m(c, {.batch = 3, .max_seq = 32});
        m.init_synthetic(7);
        m.logits().fill_bytes(0xFF);
        for (int at = 0; at < P; at += chunk) {
            const int n = std::min(chunk, P - at);
            const md::StepSequence s{.slot = 2, .context = at, .tokens = n};
            m.forward(std::span(prompt).subspan(std::size_t(at), std::size_t(n)), std::span(&s, 1));
        }
        const std::vector<float> got = m.logits().download();
        CHECK(max_rel_diff({got.data(), std::size_t(V)}, {want.data(), std::size_t(V)}) < 1e-4);
        const std::vector<float> k = slot_rows(m.download_cache(false, P), c, 3, 2, P);
        const std::vector<float> v = slot_rows(m.download_cache(true, P), c, 3, 2, P);
        REQUIRE(k.size() == want_k.size());
        CHECK(max_rel_diff(k, want_k) < 1e-4);
        CHECK(max_rel_diff(v, want_v) < 1e-4);
    }
}

TEST_CASE("mixed step: each sequence of a mixed batch gets the logits it gets alone", "[serving][model]") {
    const pd::ModelConfig c = tiny();
    const int V = c.vocab;
    using D = pd::DType;
    for (const auto& [weights, kv] :
         {std::pair{D::fp32, D::fp32}, std::pair{D::fp32, D::bf16}, std::pair{D::bf16, D::bf16}}) {
        INFO("weights " << to_string(weights) << ", cache " << to_string(kv));
        // A and B hold 9 and 5 positions; then one step: B decodes, C brings a prefill chunk
        // of 11, A decodes; slots deliberately out of order
        const std::vector<int> a = random_tokens(10, V, 81), b = random_tokens(6, V, 82), cc = random_tokens(11, V, 83);
        const md::StepSequence a_pre{.slot = 3, .context = 0, .tokens = 9}, b_pre{.slot = 0, .context = 0, .tokens = 5};
        md::Model mixed(c, {.weights = weights, .batch = 4, .max_seq = 24, .cache = {.kv = kv}});
        mixed.init_synthetic(8);
        mixed.forward(std::span(a).first(9), std::span(&a_pre, 1));
        mixed.forward(std::span(b).first(5), std::span(&b_pre, 1));
        const std::vector<md::StepSequence> seqs = {{.slot = 0, .context = 5, .tokens = 1},
                                                    {.slot = 1, .context = 0, .tokens = 11},
                                                    {.slot = 3, .context = 9, .tokens = 1}};
        std::vector<int> packed = {b[5]};
        packed.insert(packed.end(), cc.begin(), cc.end());
        packed.push_back(a[9]);
        mixed.logits().fill_bytes(0xFF);
        mixed.forward(packed, seqs);
        const std::vector<float> got = mixed.logits().download();

        // Each alone: in a model of its own, its cache filled first, then its step; with
        // `companion`, a second sequence of 2 fresh tokens shares the step, so that a decode
        // runs the mixed batch's kernels (GEMM and varlen attention). Alone, a decode is a
        // decode batch: the plan runs GEMV and decode attention instead.
        const auto alone = [&](const std::vector<int>& tokens, int context, int n, bool companion) {
            md::Model m(c, {.weights = weights, .batch = 2, .max_seq = 24, .cache = {.kv = kv}});
            m.init_synthetic(8);
            if (context > 0) {
                const md::StepSequence pre{.slot = 0, .context = 0, .tokens = context};
                m.forward(std::span(tokens).first(std::size_t(context)), std::span(&pre, 1));
            }
            std::vector<md::StepSequence> step = {{.slot = 0, .context = context, .tokens = n}};
            std::vector<int> fed(tokens.begin() + context, tokens.begin() + context + n);
            if (companion) {
                step.push_back({.slot = 1, .context = 0, .tokens = 2});
                fed.insert(fed.end(), {1, 2});
            }
            // a fresh prompt alone runs flash attention over the cache too (the varlen path)
            REQUIRE(m.plan(step).attention ==
                    (n == 1 && !companion ? md::Plan::Attention::decode : md::Plan::Attention::varlen));
            m.forward(fed, step);
            return m.logits().download();  // row 0: the sequence's
        };
        // the same kernels as in the mixed batch: the same logits
        const std::vector<float> want_b = alone(b, 5, 1, true), want_c = alone(cc, 0, 11, false),
                                 want_a = alone(a, 9, 1, true);
        CHECK(max_rel_diff({got.data(), std::size_t(V)}, {want_b.data(), std::size_t(V)}) < 1e-4);
        CHECK(max_rel_diff({got.data() + V, std::size_t(V)}, {want_c.data(), std::size_t(V)}) < 1e-4);
        CHECK(max_rel_diff({got.data() + 2 * V, std::size_t(V)}, {want_a.data(), std::size_t(V)}) < 1e-4);
        // a decode batch of its own (GEMV, decode attention): the same logits in fp32; with bf16
        // weights the GEMV and the tensor-core GEMM round differently (as chapter 04's cache and
        // recompute), within the bf16 rule ||out - ref|| / ||ref|| <= 2e-2
        for (const auto& [row, tokens, context] : {std::tuple{0, &b, 5}, std::tuple{2, &a, 9}}) {
            const std::vector<float> decode = alone(*tokens, context, 1, false);
            INFO("decode batch of sequence " << row);
            if (weights == D::fp32) {
                CHECK(max_rel_diff({got.data() + row * V, std::size_t(V)}, {decode.data(), std::size_t(V)}) < 1e-4);
            } else {
                double e2 = 0, r2 = 0;
                for (int v = 0; v < V; ++v) {
                    const double e = double(got[std::size_t(row * V + v)]) - decode[std::size_t(v)];
                    e2 += e * e;
                    r2 += double(decode[std::size_t(v)]) * decode[std::size_t(v)];
                }
                CHECK(std::isfinite(e2));
                CHECK(std::sqrt(e2 / r2) <= 2e-2);
            }
        }
    }
}

TEST_CASE("mixed step: bad input is rejected, naming the sequence and the field", "[serving][model]") {
    md::Model m(tiny(), {.batch = 2, .max_seq = 16});
    m.init_synthetic(9);
    const std::vector<int> t = {1, 2, 3};
    const auto step = [&](std::vector<md::StepSequence> s, std::vector<int> tokens) { m.forward(tokens, s); };
    CHECK_THROWS_WITH(step({{.slot = 2, .context = 0, .tokens = 3}}, t),
                      Contains("sequence 0") && Contains("slot = 2"));
    CHECK_THROWS_WITH(step({{.slot = 0, .context = 0, .tokens = 1}, {.slot = 0, .context = 0, .tokens = 2}}, t),
                      Contains("used twice"));
    CHECK_THROWS_WITH(step({{.slot = 1, .context = 14, .tokens = 3}}, t), Contains("max_seq = 16"));
    CHECK_THROWS_WITH(step({{.slot = 1, .context = 0, .tokens = 2}}, t), Contains("3 tokens"));
    CHECK_THROWS_WITH(step({}, {}), Contains("0 sequences"));
    CHECK_THROWS_WITH(step({{.slot = 0, .context = 0, .tokens = 3}}, {1, 2, 9999}), Contains("vocabulary"));
}

TEST_CASE("engine on the model: every request generates the tokens it generates alone, under every policy",
          "[serving][model]") {
    const pd::ModelConfig c = tiny();
    // ragged prompts and outputs, staggered arrivals; a budget of 8 tokens cuts the prompts
    // into chunks, 3 slots and a 30-position cache (the longest request needs 24) force waiting and preemptions
    std::vector<sv::Request> requests;
    const int prompts[] = {13, 3, 20, 1, 9, 17, 6}, outputs[] = {6, 9, 4, 7, 2, 5, 8};
    for (int i = 0; i < 7; ++i)
        requests.push_back({.id = i, .arrival_s = 0.001 * i, .prompt_tokens = prompts[i], .output_tokens = outputs[i]});
    md::Model alone(c, {.batch = 1, .max_seq = 32});
    alone.init_synthetic(10);
    std::vector<std::vector<int>> want;
    for (const sv::Request& r : requests)
        want.push_back(generate_alone(alone, md::synthetic_prompt(r.prompt_tokens, c.vocab, 5, r.id), r.output_tokens));
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked}) {
        INFO("policy " << sv::to_string(p));
        md::Model m(c, {.batch = 3, .max_seq = 32});
        m.init_synthetic(10);
        md::ModelExecutor executor(m, requests, 5);
        sv::Scheduler scheduler({.policy = p, .token_budget = 8, .max_seqs = 3, .kv_capacity = 30});
        const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
        int preemptions = 0;
        for (const auto& r : t.requests) preemptions += r.preemptions;
        INFO(t.steps.size() << " steps, " << preemptions << " preemptions");
        for (const sv::Request& r : requests) {
            INFO("request " << r.id);
            CHECK(executor.generated(r.id) == want[std::size_t(r.id)]);
            CHECK(t.requests[std::size_t(r.id)].tokens == want[std::size_t(r.id)]);  // the ids the engine recorded
        }
        if (p != sv::Policy::static_batch) CHECK(preemptions > 0);  // the recomputation path ran
    }

    // Online (chapter 13): the executor learns of each request as it arrives, and a request ends
    // at its stop token (its third token's id), with it, at its first occurrence
    md::Model m(c, {.batch = 3, .max_seq = 32});
    m.init_synthetic(10);
    md::ModelExecutor executor(m, {}, 5);
    sv::Scheduler scheduler({.policy = sv::Policy::chunked, .token_budget = 8, .max_seqs = 3, .kv_capacity = 30});
    sv::EngineClock clock;
    sv::Engine engine(scheduler, executor, clock, true);
    for (sv::Request r : requests) {
        if (r.output_tokens >= 3) r.stop_ids = {want[std::size_t(r.id)][2]};
        engine.submit(r);
    }
    engine.run();
    for (const sv::Request& r : requests) {
        INFO("request " << r.id);
        const std::vector<int>& w = want[std::size_t(r.id)];
        const sv::Timeline::RequestRecord& got = engine.timeline().requests[std::size_t(r.id)];
        const auto stop = r.output_tokens >= 3 ? std::find(w.begin(), w.end(), w[2]) + 1 : w.end();
        CHECK(got.tokens == std::vector<int>(w.begin(), stop));
        CHECK(got.finish == (r.output_tokens >= 3 ? sv::Finish::stop : sv::Finish::length));
    }
    CHECK_FALSE(scheduler.has_work());
}

TEST_CASE("engine on the model: a request's sampled tokens are the same alone and in a busy batch",
          "[serving][model]") {
    // Each request its own rule (chapter 13): seeded draws keyed by (seed, position) alone, so a
    // request gives the same tokens whatever row it lands in and whoever its neighbours are
    // (greedy requests, other rules, other seeds, drafts); two requests of one seed and prompt
    // give the same tokens; the rules do sample (their tokens are not the greedy ones).
    const pd::ModelConfig c = tiny();
    const auto serve = [&](const std::vector<sv::Request>& requests) {
        md::Model m(c, {.batch = 4, .max_seq = 40, .max_logit_rows = 4 * 3});
        m.init_synthetic(10);
        md::ModelExecutor executor(m, {}, 5);
        sv::Scheduler scheduler({.policy = sv::Policy::chunked, .token_budget = 12, .max_seqs = 4, .kv_capacity = 160});
        sv::EngineClock clock;
        sv::Engine engine(scheduler, executor, clock, true);
        for (const sv::Request& r : requests) engine.submit(r);
        engine.run();
        return engine.take_timeline();
    };
    const std::vector<int> prompt = random_tokens(9, c.vocab, 33);
    const sv::Request::Sampling hot{.temperature = 1.5f, .seeded = true, .seed = 1234};
    sv::Request probe{.prompt_tokens = 9, .output_tokens = 12, .prompt = prompt, .sampling = hot};
    const std::vector<int> alone = serve({probe}).requests[0].tokens;
    REQUIRE(alone.size() == 12);

    std::vector<sv::Request> busy;
    const int prompts[] = {14, 3, 9, 20, 6, 9};
    for (int i = 0; i < 6; ++i) {
        sv::Request r{.arrival_s = 0.5 * i, .prompt_tokens = prompts[i], .output_tokens = 10};
        if (i % 3 == 1) r.sampling = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f};  // unseeded
        if (i % 3 == 2) r.sampling = {.temperature = 1.2f, .top_p = 0.95f, .seeded = true, .seed = 77u + i};
        if (i == 3) r.speculate = 2;  // a neighbour with drafts (its rows come in threes)
        busy.push_back(r);
    }
    sv::Request twin = probe;
    twin.arrival_s = 0.7;
    busy.insert(busy.begin() + 2, probe);  // the probe in the middle of the batch, arriving with the others
    busy.push_back(twin);                  // and the same request again, later, beside other requests
    for (std::size_t i = 1; i < busy.size(); ++i)
        busy[i].arrival_s = std::max(busy[i].arrival_s, busy[i - 1].arrival_s);
    const sv::Timeline t = serve(busy);
    CHECK(t.requests[2].tokens == alone);
    CHECK(t.requests.back().tokens == alone);

    sv::Request greedy = probe;
    greedy.sampling = {};
    CHECK(serve({greedy}).requests[0].tokens != alone);
}

TEST_CASE("engine on the model: a request too long for its cache slot is rejected by name", "[serving][model]") {
    md::Model m(tiny(), {.batch = 2, .max_seq = 16});
    const std::vector<sv::Request> r = {{.id = 0, .arrival_s = 0, .prompt_tokens = 10, .output_tokens = 7}};
    CHECK_THROWS_WITH(md::ModelExecutor(m, r, 1), Contains("request 0") && Contains("Request.output_tokens"));
}

TEST_CASE("paged model: a request served from the prefix cache gets the logits computed from scratch",
          "[serving][model][paged]") {
    const pd::ModelConfig c = tiny();
    for (pd::DType kv : {pd::DType::fp32, pd::DType::bf16}) {
        INFO("cache " << to_string(kv));
        // A's prompt fills blocks 0 and 1 (block size 4) and part of 2; B shares A's first 8 tokens
        const std::vector<int> a = random_tokens(11, c.vocab, 91);
        std::vector<int> b(a.begin(), a.begin() + 8);
        for (int t : random_tokens(5, c.vocab, 92)) b.push_back(t);
        md::Model m(c, {.batch = 2, .max_seq = 32, .cache = {.kv = kv, .block_size = 4, .num_blocks = 12}});
        m.init_synthetic(12);
        const std::vector<int> a_blocks = {0, 1, 2}, b_blocks = {0, 1, 7, 5};  // B: A's two full blocks, then its own
        const md::StepSequence sa{.slot = 0, .context = 0, .tokens = 11, .blocks = a_blocks};
        m.forward(a, std::span(&sa, 1));
        const md::StepSequence sb{.slot = 0, .context = 8, .tokens = 5, .blocks = b_blocks};
        m.logits().fill_bytes(0xFF);
        m.forward(std::span(b).subspan(8), std::span(&sb, 1));
        const std::vector<float> cached = m.logits().download();
        // B from scratch, in a fresh model, its blocks elsewhere
        md::Model fresh(c, {.batch = 2, .max_seq = 32, .cache = {.kv = kv, .block_size = 4, .num_blocks = 12}});
        fresh.init_synthetic(12);
        const std::vector<int> own = {9, 3, 11, 4};
        const md::StepSequence whole{.slot = 0, .context = 0, .tokens = 13, .blocks = own};
        fresh.forward(b, std::span(&whole, 1));
        const std::vector<float> scratch = fresh.logits().download();
        CHECK(max_rel_diff({cached.data(), std::size_t(c.vocab)}, {scratch.data(), std::size_t(c.vocab)}) < 1e-4);
    }
}

TEST_CASE("paged model: the engine generates the same tokens with slots and with pages", "[serving][model][paged]") {
    const pd::ModelConfig c = tiny();
    // prompts that share their first 8 tokens in pairs, so the prefix cache has hits
    std::vector<sv::Request> requests;
    const int prompts[] = {13, 9, 20, 10, 9, 17, 6}, outputs[] = {6, 9, 4, 7, 2, 5, 8};
    for (int i = 0; i < 7; ++i) {
        sv::Request r{.id = i, .arrival_s = 0.001 * i, .prompt_tokens = prompts[i], .output_tokens = outputs[i]};
        r.prompt = md::synthetic_prompt(prompts[i], c.vocab, 5, i);
        for (int t = 0; t < 8 && t < prompts[i]; ++t) r.prompt[std::size_t(t)] = 40 + (i / 2) * 10 + t;
        requests.push_back(r);
    }
    md::Model alone(c, {.batch = 1, .max_seq = 32});
    alone.init_synthetic(10);
    std::vector<std::vector<int>> want;
    for (const sv::Request& r : requests) want.push_back(generate_alone(alone, r.prompt, r.output_tokens));
    for (sv::Policy p : {sv::Policy::static_batch, sv::Policy::continuous, sv::Policy::chunked})
        for (bool prefix : {false, true}) {
            INFO("policy " << sv::to_string(p) << ", prefix cache " << prefix);
            // 3 requests at once, 12 blocks of 4 positions (48, less a partly filled block each):
            // waiting and preemptions again
            md::Model m(c, {.batch = 3, .max_seq = 32, .cache = {.block_size = 4, .num_blocks = 12}});
            m.init_synthetic(10);
            sv::Scheduler scheduler({.policy = p,
                                     .token_budget = 8,
                                     .max_seqs = 3,
                                     .kv_capacity = 48,
                                     .block_size = 4,
                                     .prefix_caching = prefix});
            md::ModelExecutor executor(m, requests, 5, scheduler.paged());
            const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
            long long hits = 0;
            for (const auto& r : t.requests) hits += r.prefix_hit;
            INFO(t.steps.size() << " steps, " << hits << " prompt positions from the prefix cache");
            for (const sv::Request& r : requests) {
                INFO("request " << r.id);
                CHECK(executor.generated(r.id) == want[std::size_t(r.id)]);
            }
            if (prefix) CHECK(hits > 0);
        }
}

TEST_CASE("engine on the model: speculative decodes (prompt lookup, greedy) generate the tokens plain decoding does",
          "[serving][model][speculative]") {
    const pd::ModelConfig c = tiny();
    // prompts that repeat a 5-token phrase, so that prompt lookup guesses; every other request speculates
    std::vector<sv::Request> requests;
    const int prompts[] = {15, 10, 20, 10, 15, 12}, outputs[] = {9, 12, 5, 10, 3, 11};
    for (int i = 0; i < 6; ++i) {
        sv::Request r{.id = i,
                      .arrival_s = 0.001 * i,
                      .prompt_tokens = prompts[i],
                      .output_tokens = outputs[i],
                      .speculate = i % 2 == 0 ? 3 : 0};
        r.prompt = md::synthetic_prompt(prompts[i], c.vocab, 7, i);
        for (int t = 5; t < prompts[i]; ++t) r.prompt[std::size_t(t)] = r.prompt[std::size_t(t % 5)];
        requests.push_back(r);
    }
    md::Model alone(c, {.batch = 1, .max_seq = 40});
    alone.init_synthetic(11);
    std::vector<std::vector<int>> want;
    for (const sv::Request& r : requests) want.push_back(generate_alone(alone, r.prompt, r.output_tokens));
    for (sv::Policy p : {sv::Policy::continuous, sv::Policy::chunked})
        for (int block : {0, 4}) {
            INFO("policy " << sv::to_string(p) << ", block size " << block);
            // 3 requests at once in 48 positions (pages: 12 blocks): waiting and preemptions
            const sv::SchedulerConfig cfg{
                .policy = p, .token_budget = 12, .max_seqs = 3, .kv_capacity = 48, .block_size = block};
            sv::Scheduler scheduler(cfg);
            md::Model m(c, md::engine_model_options(c, cfg, requests, pd::DType::fp32, pd::DType::fp32, 1));
            m.init_synthetic(11);
            md::ModelExecutor executor(m, requests, 7, scheduler.paged());
            const sv::Timeline t = sv::run_engine(requests, scheduler, executor, true);
            int drafted = 0;
            for (const auto& s : t.steps)
                for (const sv::BatchItem& i : s.step.items) drafted += i.draft;
            INFO(t.steps.size() << " steps, " << drafted << " draft tokens, " << scheduler.preemptions()
                                << " preemptions");
            CHECK(drafted > 0);
            if (p == sv::Policy::continuous) CHECK(scheduler.preemptions() > 0);
            for (const sv::Request& r : requests) {
                INFO("request " << r.id);
                CHECK(executor.generated(r.id) == want[std::size_t(r.id)]);
            }
        }
}
