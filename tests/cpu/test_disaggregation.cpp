// Chapter 11: setups on the cost model (disaggregation.hpp) and the design review (review.hpp):
// the transfer term against hand-computed cases, attainment and goodput on hand-made timelines,
// the capacity knee, the placement search on cases whose answer is clear by hand, the chapter's
// target case as the cost model sees it, and the review's complaint and binding limit on the
// three cases of the chapter's page.
#include "pd/serving/disaggregation.hpp"
#include "pd/serving/review.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace sv = pd::serving;

namespace {

const pd::roofline::GpuSpec& h100() {
    static const pd::roofline::GpuSpec g = *pd::roofline::find_gpu("H100-SXM");
    return g;
}

sv::Cluster cluster(const std::string& model) {
    return {.cost = sv::cost_model_config(*pd::find_model(model), h100(), 1), .gpu = h100()};
}

sv::Setup split(int p, int d, const std::string& link, int tp = 1) {
    sv::Setup s;
    s.disaggregated = true;
    s.prefill = {.gpus = p, .tp = tp, .token_budget = 4096, .max_seqs = 128};
    s.decode = {.gpus = d, .tp = tp, .token_budget = 4096, .max_seqs = 128};
    s.link = *sv::find_link(link);
    return s;
}

sv::Request request(int id, double arrival, int prompt, int output) {
    return {.id = id, .arrival_s = arrival, .prompt_tokens = prompt, .output_tokens = output};
}

/// The cost model's time of one step of @p items on @p tp GPUs of @p c.
double step_time(const sv::Cluster& c, int tp, std::vector<sv::BatchItem> items) {
    sv::CostModel cm(sv::instance_cost(c, tp));
    return cm.run({std::move(items)});
}

}  // namespace

TEST_CASE("disagg: the link presets are named, sourced and ordered by speed", "[disagg]") {
    REQUIRE(sv::link_presets().size() == 4);
    for (const sv::LinkPreset& l : sv::link_presets()) {
        CHECK(l.bytes_per_s > 0);
        CHECK(l.latency_s > 0);
        CHECK(!l.source.empty());
    }
    CHECK(sv::find_link("nvlink")->bytes_per_s > sv::find_link("pcie5")->bytes_per_s);
    CHECK(sv::find_link("pcie5")->bytes_per_s > sv::find_link("ib-ndr")->bytes_per_s);
    CHECK(sv::find_link("ib-ndr")->bytes_per_s > sv::find_link("eth-25g")->bytes_per_s);
    CHECK(sv::find_link("eth-25g")->bytes_per_s == 25e9 / 8);
    CHECK(!sv::find_link("carrier-pigeon"));
}

TEST_CASE("disagg: one request's transfer, first token and first decode by hand", "[disagg]") {
    const sv::Cluster c = cluster("llama-2-13b");
    const double per_token = 2.0 * 40 * 40 * 128 * 2;  // K and V, 40 layers, 40 heads of 128, bf16: 819,200 bytes
    REQUIRE(c.cost.model.kv_bytes_per_token(2) == per_token);
    const sv::Served s = sv::serve({request(0, 0.5, 100, 3)}, split(1, 1, "eth-25g"), c);
    const sv::TransferRecord& t = s.transfers.at(0);
    const double prefill = step_time(c, 1, {{.request = 0, .tokens = 100, .context = 0, .prefill = true}});
    CHECK(t.prefill_start_s == 0.5);
    CHECK(t.prefill_end_s == Approx(0.5 + prefill).epsilon(1e-12));
    CHECK(t.bytes == per_token * 100);
    CHECK(t.transfer_start_s == t.prefill_end_s);
    // 81.92 MB at 3.125 GB/s is 26.2144 ms, plus the link's 30 us
    CHECK(t.transfer_end_s - t.transfer_start_s == Approx(30e-6 + 81.92e6 / 3.125e9).epsilon(1e-9));
    const std::vector<double>& tokens = s.timeline.requests.at(0).token_s;
    REQUIRE(tokens.size() == 3);
    CHECK(tokens[0] == t.transfer_end_s);  // TTFT includes the transfer
    const double d1 = step_time(c, 1, {{.request = 0, .tokens = 1, .context = 100}});
    const double d2 = step_time(c, 1, {{.request = 0, .tokens = 1, .context = 101}});
    CHECK(t.first_decode_s == Approx(t.transfer_end_s + d1).epsilon(1e-12));
    CHECK(tokens[2] == Approx(t.transfer_end_s + d1 + d2).epsilon(1e-12));
    CHECK(t.decode_instance == 0);
}

TEST_CASE("disagg: transfers queue on their prefill instance's link, and TP widens it", "[disagg]") {
    const sv::Cluster c = cluster("llama-2-13b");
    // two prompts at once: one prefill step of both, then the second transfer waits for the first
    const sv::Served s = sv::serve({request(0, 0, 64, 2), request(1, 0, 64, 2)}, split(1, 1, "eth-25g"), c);
    const double one = 30e-6 + 819200.0 * 64 / 3.125e9;
    CHECK(s.transfers[0].prefill_end_s == s.transfers[1].prefill_end_s);
    CHECK(s.transfers[0].transfer_end_s == Approx(s.transfers[0].prefill_end_s + one).epsilon(1e-12));
    CHECK(s.transfers[1].transfer_start_s == s.transfers[0].transfer_end_s);
    CHECK(s.transfers[1].transfer_end_s == Approx(s.transfers[0].prefill_end_s + 2 * one).epsilon(1e-12));
    // a TP 2 prefill instance sends its two halves of the heads over two links at once
    const sv::Served w = sv::serve({request(0, 0, 64, 2)}, split(2, 2, "eth-25g", 2), c);
    CHECK(w.transfers[0].transfer_end_s - w.transfers[0].transfer_start_s ==
          Approx(30e-6 + 819200.0 * 64 / (2 * 3.125e9)).epsilon(1e-9));
    // one output token: no transfer, the token leaves with the prefill
    const sv::Served none = sv::serve({request(0, 0, 64, 1)}, split(1, 1, "eth-25g"), c);
    CHECK(none.transfers[0].decode_instance == -1);
    CHECK(none.timeline.requests[0].token_s == std::vector<double>{none.transfers[0].prefill_end_s});
}

TEST_CASE("disagg: a layer-wise transfer hides under the prefill on a fast link", "[disagg]") {
    const sv::Cluster c = cluster("llama-2-13b");
    sv::Setup s = split(1, 1, "nvlink");
    s.layerwise = true;
    const sv::Served o = sv::serve({request(0, 0, 512, 2)}, s, c);
    const sv::TransferRecord& t = o.transfers[0];
    // NVLink keeps up with the prefill's layers: only the last layer's part (1/40) is left at its end
    const double d = 819200.0 * 512 / 450e9;
    CHECK(t.transfer_end_s == Approx(t.prefill_end_s + d / 40).epsilon(1e-9));
    s.layerwise = false;
    const sv::Served after = sv::serve({request(0, 0, 512, 2)}, s, c);
    CHECK(after.transfers[0].transfer_end_s == Approx(t.prefill_end_s + 10e-6 + d).epsilon(1e-9));
}

TEST_CASE("disagg: attainment and goodput on hand-made timelines", "[disagg]") {
    sv::Timeline t;
    // TTFT, TPOT: 0.1 s, 10 ms (meets both); 0.3 s, 10 ms (TTFT misses); 0.1 s, 50 ms (TPOT misses);
    // one token after 0.15 s (TPOT taken as 0)
    t.requests.push_back({.request = request(0, 0, 8, 3), .token_s = {0.1, 0.11, 0.12}});
    t.requests.push_back({.request = request(1, 1, 8, 3), .token_s = {1.3, 1.31, 1.32}});
    t.requests.push_back({.request = request(2, 2, 8, 3), .token_s = {2.1, 2.15, 2.2}});
    t.requests.push_back({.request = request(3, 3, 8, 1), .token_s = {3.15}});
    const sv::Slo slo{0.2, 0.02};
    CHECK(sv::slo_attainment(t, slo) == 0.5);
    CHECK(sv::slo_attainment(t, {0.25, 0}) == 0.75);
    CHECK(sv::slo_attainment(t, {0, 0.02}) == 0.75);
    CHECK(sv::slo_attainment(t, {}) == 1.0);
    CHECK(sv::slo_attainment(sv::Timeline{}, slo) == 0);
    // vLLM's goodput: the same requests counted, per second of the run (first arrival to last token)
    const sv::Metrics m = sv::compute_metrics(t, slo);
    CHECK(m.goodput_requests_per_s == Approx(2 / 3.15));
}

TEST_CASE("disagg: the capacity knee by doubling and bisection", "[disagg]") {
    int calls = 0;
    const sv::Capacity c = sv::find_capacity(
        [&](double rate) {
            ++calls;
            return rate <= 10 ? 0.95 : 0.5;
        },
        4);
    CHECK(c.rate <= 10);
    CHECK(c.rate > 10 - 8.0 / 1024 - 1e-12);  // 10 bisections between 8 and 16
    CHECK(c.per_gpu == c.rate / 4);
    CHECK(c.attainment == 0.95);
    CHECK(c.replays == calls);
    CHECK(calls == 7 + 10);  // 0.25 ... 8 meet it, 16 does not, then 10 bisections
    // never met: 0; always met: the ceiling
    CHECK(sv::find_capacity([](double) { return 0.0; }, 1).rate == 0);
    CHECK(sv::find_capacity([](double) { return 1.0; }, 1, 0.9, 1, 64).rate == 64);
}

TEST_CASE("disagg: the placement search gives the pool the work where it is", "[disagg]") {
    // Worked out by hand: with 2,048-token prompts and 2 output tokens, the work is the prefills
    // (a decode step of a 13B model is 10 ms of weight reads, 2 x 13e9 x 2048 FLOPs of a prompt
    // 67 ms of compute), so the best split has 3 prefill GPUs; with 16-token prompts and 512
    // output tokens it is the decodes, so the best has 3 decode GPUs.
    const sv::Cluster c = cluster("llama-2-13b");
    const sv::Slo slo{2.0, 0.1};
    sv::WorkloadSpec prefill_heavy;
    prefill_heavy.requests = 100;
    prefill_heavy.prompt.mean = 2048;
    prefill_heavy.output.mean = 2;
    const auto p = sv::search_disaggregated(4, {1}, 4096, 128, *sv::find_link("nvlink"), false, c, prefill_heavy, slo);
    REQUIRE(p.size() == 3);
    CHECK(p.front().setup.prefill.gpus == 3);
    CHECK(p.front().capacity.per_gpu > p.back().capacity.per_gpu);
    sv::WorkloadSpec decode_heavy = prefill_heavy;
    decode_heavy.prompt.mean = 16;
    decode_heavy.output.mean = 512;
    const auto d = sv::search_disaggregated(4, {1}, 4096, 128, *sv::find_link("nvlink"), false, c, decode_heavy, slo);
    CHECK(d.front().setup.decode.gpus == 3);
}

TEST_CASE("disagg: the chapter's target case, as the cost model sees it", "[disagg]") {
    // llama-2-13b on 4 x H100, prompts of 512, outputs of 64, Poisson arrivals, TTFT <= 200 ms and
    // TPOT <= 40 ms at 90% attainment. The target was disaggregation >= 1.5x the best
    // aggregated setup over NVLink. The roofline cost model says otherwise: a chunked step's
    // time is max(compute, memory), so the decodes ride on the compute-bound prefill chunks at
    // almost no cost, and chunked prefill on all 4 GPUs gives every GPU's compute to the prompts;
    // a 2 + 2 split gives the prompts half of it. Asserted here is what the model says.
    const sv::Cluster c = cluster("llama-2-13b");
    sv::WorkloadSpec w;
    w.requests = 200;
    w.prompt.mean = 512;
    w.output.mean = 64;
    const sv::Slo slo{0.2, 0.04};
    const auto agg = sv::search_aggregated(4, {sv::Policy::continuous, sv::Policy::chunked},
                                           {256, 512, 1024, 2048, 4096}, {1, 2}, 128, c, w, slo);
    const auto fast = sv::search_disaggregated(4, {1, 2}, 4096, 128, *sv::find_link("nvlink"), false, c, w, slo);
    const auto slow = sv::search_disaggregated(4, {1, 2}, 4096, 128, *sv::find_link("eth-25g"), false, c, w, slo);
    double continuous = 0;
    for (const sv::Placement& p : agg)
        if (p.setup.policy == sv::Policy::continuous) continuous = std::max(continuous, p.capacity.per_gpu);
    const double best_agg = agg.front().capacity.per_gpu, disagg = fast.front().capacity.per_gpu;
    CAPTURE(agg.front().setup.name(), best_agg, continuous, fast.front().setup.name(), disagg,
            slow.front().setup.name(), slow.front().capacity.per_gpu);
    CHECK(agg.front().setup.policy == sv::Policy::chunked);
    CHECK(fast.front().setup.prefill.gpus == 2);  // the balanced split
    CHECK(disagg < best_agg);                     // the target's 1.5x is not what the model says
    CHECK(disagg > 0.5 * best_agg);
    CHECK(disagg >= 0.95 * continuous);                    // level with prefill-first continuous batching
    CHECK(slow.front().capacity.per_gpu < 0.25 * disagg);  // over 25 Gb/s it falls far below
}

namespace {

sv::ReviewInput review_case(const std::string& model, int gpus, sv::Policy policy, double prompt, double output,
                            double rate, double ttft, double tpot, int requests = 200, int budget = 512) {
    sv::ReviewInput in{.cluster = cluster(model), .slo = {ttft, tpot}, .link = *sv::find_link("nvlink")};
    in.setup.policy = policy;
    in.setup.pool = {.gpus = gpus, .tp = 1, .token_budget = budget, .max_seqs = 128};
    sv::WorkloadSpec w;
    w.requests = requests;
    w.prompt.mean = prompt;
    w.output.mean = output;
    in.requests = sv::workload_at(w, rate);
    return in;
}

}  // namespace

TEST_CASE("review: the three cases of the chapter's page", "[review]") {
    SECTION("RAG: long prompts, short answers: a slow first token, bound by the GEMMs") {
        const sv::ReviewInput in = review_case("llama-3-8b", 2, sv::Policy::continuous, 4096, 128, 17, 0.15, 0.05);
        const sv::Review r = sv::review(in);
        CAPTURE(sv::describe(r, in));
        CHECK(r.complaint == "slow first token");
        CHECK(r.binds == "compute (dense GEMMs)");
        CHECK(r.prompt_tokens_per_s > 20 * r.output_tokens_per_s);
        CHECK(r.usd_per_m_output > r.usd_per_m_prompt);
        REQUIRE(!r.remedies.empty());
        CHECK(r.remedies.front().outcome.goodput_rps >= r.baseline.goodput_rps);
    }
    SECTION("chat: short prompts, long answers: slow streaming, bound by the weight reads") {
        const sv::ReviewInput in = review_case("llama-3-8b", 1, sv::Policy::chunked, 256, 1024, 6, 1.0, 0.006);
        const sv::Review r = sv::review(in);
        CAPTURE(sv::describe(r, in));
        CHECK(r.complaint == "slow streaming");
        CHECK(r.binds == "weight reads");
        CHECK(r.usd_per_m_output > 5 * r.usd_per_m_prompt);
        // the remedies that read fewer bytes per token come first
        const std::string first = r.remedies.front().chapter;
        CHECK((first == "08" || first == "09" || first == "00"));
    }
    SECTION("long context: out of memory, the KV cache binds") {
        const sv::ReviewInput in =
            review_case("llama-3.1-8b", 1, sv::Policy::chunked, 32000, 1024, 0.6, 5.0, 0.05, 40, 2048);
        const sv::Review r = sv::review(in);
        CAPTURE(sv::describe(r, in));
        CHECK(r.complaint == "out of memory");
        CHECK(r.binds == "KV capacity");
        CHECK(r.baseline.preemptions > 0);
        CHECK(r.work.kv > r.work.weights);
        const nlohmann::json j = sv::to_json(r, in);
        CHECK(j["complaint"] == "out of memory");
        CHECK(j["remedies"].size() == r.remedies.size());
        CHECK(j["cost"]["usd_per_million_generated_tokens"].get<double>() == r.usd_per_m_output);
    }
    SECTION("a model that does not fit: out of memory before anything runs") {
        const sv::ReviewInput in = review_case("llama-3-70b", 1, sv::Policy::chunked, 512, 64, 1, 1, 0.05);
        const sv::Review r = sv::review(in);
        CHECK(r.complaint == "out of memory");
        CHECK(!r.baseline.fits);
        CHECK(r.binds == "memory capacity (weights)");
        CHECK(r.remedies.front().outcome.fits);  // 8-bit weights fit (70 GB on 80)
    }
}

TEST_CASE("disagg: bad setups and reviews are named", "[disagg]") {
    const sv::Cluster c = cluster("llama-2-13b");
    sv::Setup s;
    s.pool = {.gpus = 3, .tp = 2};
    REQUIRE_THROWS_WITH(sv::serve({request(0, 0, 8, 2)}, s, c), Catch::Contains("Setup.pool.gpus = 3"));
    sv::Setup d = split(1, 1, "nvlink");
    d.decode.gpus = 0;
    REQUIRE_THROWS_WITH(sv::serve({request(0, 0, 8, 2)}, d, c), Catch::Contains("Setup.decode.gpus = 0"));
    REQUIRE_THROWS_WITH(sv::serve({request(0, 0, 4000, 200)}, split(1, 1, "nvlink"), cluster("llama-3-70b")),
                        Catch::Contains("leaves no room for a KV cache"));
    sv::ReviewInput in = review_case("llama-3-8b", 1, sv::Policy::chunked, 64, 8, 1, 1, 0.05);
    in.slo.tpot_s = 0;
    REQUIRE_THROWS_WITH(sv::review(in), Catch::Contains("both bounds"));
}
