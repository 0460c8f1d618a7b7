// Chapter 11's design review (see review.hpp): the complaint, the workload, what binds, the
// remedies replayed with the cost model, and the cost per million tokens.
#include "pd/serving/review.hpp"

#include "pd/report.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

/// The setup's outcome on the workload (fits false when the weights leave no room).
Outcome outcome_of(const std::vector<Request>& requests, const Setup& setup, const Cluster& cluster, const Slo& slo,
                   Served* served_out = nullptr) {
    Outcome o;
    const CostModelConfig cost = instance_cost(cluster, setup.disaggregated ? setup.decode.tp : setup.pool.tp);
    if (kv_positions(cost) <= 0 ||
        (setup.disaggregated && kv_positions(instance_cost(cluster, setup.prefill.tp)) <= 0)) {
        o.fits = false;
        return o;
    }
    Served served = serve(requests, setup, cluster);
    const Metrics m = compute_metrics(served.timeline, slo);
    o.ttft_p90_s = m.ttft_s.p90;
    o.tpot_p90_s = m.tpot_s.p90;
    o.itl_p90_s = m.itl_s.p90;
    o.goodput_rps = m.goodput_requests_per_s;
    o.attainment = slo_attainment(served.timeline, slo);
    o.requests_per_s = m.requests_per_s;
    for (const Timeline::RequestRecord& r : served.timeline.requests) o.preemptions += r.preemptions;
    {  // the queue: the mean TTFT of the last quarter of the arrivals less the first quarter's
        const std::size_t n = served.timeline.requests.size(), q = std::max<std::size_t>(n / 4, 1);
        double first = 0, last = 0;
        for (std::size_t i = 0; i < q; ++i) {
            const Timeline::RequestRecord& a = served.timeline.requests[i];
            const Timeline::RequestRecord& z = served.timeline.requests[n - 1 - i];
            first += a.token_s.front() - a.request.arrival_s;
            last += z.token_s.front() - z.request.arrival_s;
        }
        o.wait_growth_s = (last - first) / double(q);
    }
    long long peak = 0;
    for (const Timeline::StepRecord& s : served.timeline.steps) peak = std::max(peak, s.kv_used);
    o.kv_peak_share = served.kv_capacity > 0 ? double(peak) / double(served.kv_capacity) : 0;
    const int tp = setup.disaggregated ? setup.decode.tp : setup.pool.tp;
    o.memory_per_gpu_bytes = (cost.model.parameter_count() * cost.weight_bytes_per_param +
                              double(peak) * cost.model.kv_bytes_per_token(cost.kv_bytes_per_element)) /
                             tp;
    if (served_out) *served_out = std::move(served);
    return o;
}

/// The time of @p step's items for which @p prefill holds (0 for none).
double part_time(const CostModel& cm, const Step& step, bool prefill) {
    Step part;
    for (const BatchItem& i : step.items)
        if (i.prefill == prefill) part.items.push_back(i);
    return cm.breakdown(part).total_s;
}

}  // namespace

double review_work(const ReviewInput& in) {
    double prompt = 0, output = 0;
    for (const Request& q : in.requests) prompt += q.prompt_tokens, output += q.output_tokens;
    const double n = double(in.requests.size()), splits = 2.0 * std::max(in.setup.pool.gpus - 1, 0);
    constexpr double kRemedies = 10;  // the setup and each remedy of the chapters, replayed once
    return (kRemedies + splits) *
           replay_work(n, n > 0 ? prompt / n : 0, n > 0 ? output / n : 0, in.setup.pool.token_budget);
}

namespace {

/// 2. The workload: the offered rate, the tokens per second, the mean prompt, output and context.
void describe_workload(Review& r, const std::vector<Request>& rq) {
    double prompt = 0, output = 0, context = 0;
    for (const Request& q : rq) {
        prompt += q.prompt_tokens;
        output += q.output_tokens;
        // a decode after k of its n - 1 steps attends to prompt + k positions: mean prompt + n / 2
        context += (q.output_tokens - 1) * (q.prompt_tokens + q.output_tokens / 2.0);
    }
    const double span = rq.back().arrival_s - rq.front().arrival_s;
    const double n = double(rq.size());
    r.offered_rps = span > 0 ? (n - 1) / span : 0;
    r.prompt_tokens_per_s = r.offered_rps * prompt / n;
    r.output_tokens_per_s = r.offered_rps * output / n;
    r.mean_prompt = prompt / n;
    r.mean_output = output / n;
    const double decodes = output - n;
    r.mean_context = decodes > 0 ? context / decodes : r.mean_prompt;
}

/// 3. What the steps of the setup as served spent their time on, and 5. the cost per million
/// tokens: every GPU from the first arrival to the last token.
void account(Review& r, const ReviewInput& in, const Served& served, const CostModelConfig& cost) {
    const std::vector<Request>& rq = in.requests;
    double prompt = 0, output = 0;
    for (const Request& q : rq) prompt += q.prompt_tokens, output += q.output_tokens;
    const CostModel cm(cost);
    double busy = 0, prefill_busy = 0;
    WorkShares w;
    for (const Timeline::StepRecord& s : served.timeline.steps) {
        const CostModel::Breakdown b = cm.breakdown(s.step);
        const double t = std::max(b.compute_s, b.memory_s) + b.launch_s + b.overhead_s;
        if (b.compute_s >= b.memory_s) {
            w.dense += t * b.dense_flops / b.flops;
            w.attention += t * b.attention_flops / b.flops;
        } else {
            w.weights += t * b.weight_bytes / b.bytes;
            w.kv += t * b.kv_bytes / b.bytes;
        }
        w.comm += b.comm_s;
        busy += b.total_s;
        const double tp = part_time(cm, s.step, true), td = part_time(cm, s.step, false);
        prefill_busy += b.total_s * (tp + td > 0 ? tp / (tp + td) : 0);
    }
    if (busy > 0) {
        r.work = {w.dense / busy, w.attention / busy, w.weights / busy, w.kv / busy, w.comm / busy};
        r.prefill_share = prefill_busy / busy;
    }
    double last = 0;
    for (const Timeline::RequestRecord& q : served.timeline.requests) last = std::max(last, q.token_s.back());
    const double usd = in.usd_per_gpu_hour * in.setup.gpus() * (last - rq.front().arrival_s) / 3600;
    r.usd_per_m_prompt = usd * r.prefill_share / prompt * 1e6;
    r.usd_per_m_output = usd * (1 - r.prefill_share) / output * 1e6;
}

/// 1. The complaint a user would make of the setup as served, why, and what binds.
void complain(Review& r, const ReviewInput& in, const CostModelConfig& cost) {
    const Outcome& b = r.baseline;
    if (!b.fits) {
        r.complaint = "out of memory";
        r.why = fmt("the weights (%.1f GB per GPU) leave no room for a KV cache",
                    cost.model.parameter_count() * cost.weight_bytes_per_param / in.setup.pool.tp / 1e9);
        r.binds = "memory capacity (weights)";
    } else if (b.preemptions > 0 || b.kv_peak_share > 0.95) {
        r.complaint = "out of memory";
        r.why = std::to_string(b.preemptions) + " preemptions, the cache at " + fmt("%.0f%%", b.kv_peak_share * 100) +
                " of its capacity at its peak";
        r.binds = "KV capacity";
    } else if (b.wait_growth_s > in.slo.ttft_s) {
        r.complaint = "low throughput";
        r.why = fmt("the first token waits %.0f ms longer", b.wait_growth_s * 1e3) +
                " for the last quarter of the requests than for the first: the queue grows";
    } else if (b.ttft_p90_s > in.slo.ttft_s) {
        r.complaint = "slow first token";
        r.why = fmt("p90 TTFT %.0f ms", b.ttft_p90_s * 1e3) + fmt(" against the SLO's %.0f ms", in.slo.ttft_s * 1e3);
    } else if (b.tpot_p90_s > in.slo.tpot_s) {
        r.complaint = "slow streaming";
        r.why = fmt("p90 TPOT %.1f ms", b.tpot_p90_s * 1e3) + fmt(" against the SLO's %.1f ms", in.slo.tpot_s * 1e3);
    } else {
        r.complaint = "none";
        r.why = fmt("%.0f%% of requests meet both SLOs", b.attainment * 100);
    }
    if (r.binds.empty()) {
        const std::vector<std::pair<double, std::string>> parts = {{r.work.dense, "compute (dense GEMMs)"},
                                                                   {r.work.attention, "compute (attention)"},
                                                                   {r.work.weights, "weight reads"},
                                                                   {r.work.kv, "KV reads"},
                                                                   {r.work.comm, "communication"}};
        r.binds = std::max_element(parts.begin(), parts.end())->second;
    }
}

/// 4. The remedies of the chapters, each replayed on the same workload.
void add_remedies(Review& r, const ReviewInput& in, const CostModelConfig& cost) {
    const std::vector<Request>& rq = in.requests;
    const auto add = [&](std::string name, std::string chapter, std::string change, const Setup& s, const Cluster& c,
                         const std::vector<Request>& requests) {
        r.remedies.push_back(
            {std::move(name), std::move(chapter), std::move(change), s, outcome_of(requests, s, c, in.slo)});
    };
    const Setup& base = in.setup;
    if (in.cluster.gpu.name != "H200") {
        Cluster c = in.cluster;
        c.gpu = *roofline::find_gpu("H200");
        add("more bandwidth and memory", "00", in.cluster.gpu.name + " -> H200", base, c, rq);
    }
    {
        Setup s = base;
        s.pool.max_seqs *= 2;
        s.pool.token_budget *= 2;
        add("larger batches", "05",
            "max_seqs " + std::to_string(s.pool.max_seqs) + ", token budget " + std::to_string(s.pool.token_budget), s,
            in.cluster, rq);
    }
    {
        Setup s = base;
        std::string change;
        if (s.policy != Policy::chunked) {
            s.policy = Policy::chunked;
            change = "policy chunked, budget " + std::to_string(s.pool.token_budget);
        } else {
            s.pool.token_budget = std::max(s.pool.max_seqs, s.pool.token_budget / 2);
            change = "smaller chunks: budget " + std::to_string(s.pool.token_budget);
        }
        add("chunked prefill", "05", change, s, in.cluster, rq);
    }
    {
        Setup s = base;
        s.pool.block_size = 16;
        s.pool.prefix_caching = true;
        add("paged KV and prefix caching", "06", "blocks of 16, prefix cache", s, in.cluster, rq);
    }
    {
        Cluster c = in.cluster;
        c.cost.weight_bytes_per_param = 1;
        c.cost.kv_bytes_per_element = 1;
        add("8-bit weights and cache", "08", "weights 1 byte, cache 1 byte", base, c, rq);
    }
    if (r.baseline.fits) {
        Setup s = base;
        const int k = 4;
        s.pool.draft_limit = speculation_limits(CostModel(cost), k, static_cast<int>(r.mean_context), s.pool.max_seqs);
        std::vector<Request> drafted = rq;
        for (Request& q : drafted) q.speculate = k;
        add("speculative decoding", "09", fmt("k = 4, acceptance %.1f", cost.accept_rate) + ", cost model's rule", s,
            in.cluster, drafted);
    }
    if (base.pool.gpus % (2 * base.pool.tp) == 0) {
        Setup s = base;
        s.pool.tp *= 2;
        add("tensor parallelism", "10", "TP " + std::to_string(base.pool.tp) + " -> " + std::to_string(s.pool.tp), s,
            in.cluster, rq);
    }
    if (base.pool.gpus >= 2) {  // the best split of the same GPUs at this rate
        Remedy best;
        bool any = false;
        for (int p = 1; p < base.pool.gpus; ++p)
            for (int tp : {1, 2}) {
                const int d = base.pool.gpus - p;
                if (p % tp != 0 || d % tp != 0) continue;
                Setup s;
                s.disaggregated = true;
                s.prefill = {
                    .gpus = p, .tp = tp, .token_budget = base.pool.token_budget, .max_seqs = base.pool.max_seqs};
                s.decode = {
                    .gpus = d, .tp = tp, .token_budget = base.pool.token_budget, .max_seqs = base.pool.max_seqs};
                s.link = in.link;
                s.layerwise = true;
                const Outcome o = outcome_of(rq, s, in.cluster, in.slo);
                if (!any || o.goodput_rps > best.outcome.goodput_rps) {
                    best = {"disaggregation", "11", s.name(), s, o};
                    any = true;
                }
            }
        if (any) r.remedies.push_back(best);
    }
}

/// The remedies ranked by goodput in steps of 1% of the offered rate (closer is a tie), then by
/// the metric of the complaint: p90 TPOT for slow streaming, the memory per GPU for out of
/// memory, p90 TTFT otherwise.
void rank_remedies(Review& r) {
    const double step = std::max(0.01 * r.offered_rps, 1e-9);
    const auto metric = [&](const Outcome& o) {
        return r.complaint == "slow streaming"  ? o.tpot_p90_s
               : r.complaint == "out of memory" ? o.memory_per_gpu_bytes
                                                : o.ttft_p90_s;
    };
    std::stable_sort(r.remedies.begin(), r.remedies.end(), [&](const Remedy& a, const Remedy& b) {
        if (a.outcome.fits != b.outcome.fits) return a.outcome.fits;
        const double ga = std::floor(a.outcome.goodput_rps / step), gb = std::floor(b.outcome.goodput_rps / step);
        if (ga != gb) return ga > gb;
        return metric(a.outcome) < metric(b.outcome);
    });
}

}  // namespace

Review review(const ReviewInput& in) {
    if (in.setup.disaggregated) throw std::invalid_argument("review: the setup as served must be aggregated");
    if (!(in.slo.ttft_s > 0 && in.slo.tpot_s > 0)) throw std::invalid_argument("review: the SLO needs both bounds");
    if (!(in.usd_per_gpu_hour > 0)) throw std::invalid_argument("review: the price per GPU-hour must be > 0");
    if (in.requests.empty()) throw std::invalid_argument("review: the workload has no requests");
    Review r;
    describe_workload(r, in.requests);
    Served served;  // 3. the setup as served
    r.baseline = outcome_of(in.requests, in.setup, in.cluster, in.slo, &served);
    const CostModelConfig cost = instance_cost(in.cluster, in.setup.pool.tp);
    if (r.baseline.fits) account(r, in, served, cost);
    complain(r, in, cost);
    add_remedies(r, in, cost);
    rank_remedies(r);
    return r;
}

namespace {

nlohmann::json outcome_json(const Outcome& o) {
    if (!o.fits) return {{"fits", false}};
    return {{"fits", true},
            {"ttft_p90_ms", o.ttft_p90_s * 1e3},
            {"tpot_p90_ms", o.tpot_p90_s * 1e3},
            {"itl_p90_ms", o.itl_p90_s * 1e3},
            {"goodput_rps", o.goodput_rps},
            {"attainment", o.attainment},
            {"requests_per_s", o.requests_per_s},
            {"wait_growth_ms", o.wait_growth_s * 1e3},
            {"preemptions", o.preemptions},
            {"kv_peak_share", o.kv_peak_share},
            {"memory_per_gpu_gb", o.memory_per_gpu_bytes / 1e9}};
}

}  // namespace

std::string describe(const Review& r, const ReviewInput& in) {
    std::string s;
    const Outcome& b = r.baseline;
    s += "1. the complaint: " + r.complaint + " (" + r.why + ")\n";
    s += "2. the workload: " + fmt("%.2f requests/s", r.offered_rps) + fmt(", prompts of %.0f", r.mean_prompt) +
         fmt(" and outputs of %.0f tokens (means): ", r.mean_output) +
         fmt("%.0f prompt tokens/s", r.prompt_tokens_per_s) + fmt(" against %.0f generated", r.output_tokens_per_s) +
         fmt(" (%.1f : 1); ", r.output_tokens_per_s > 0 ? r.prompt_tokens_per_s / r.output_tokens_per_s : 0) +
         fmt("a decode attends to %.0f positions on average\n", r.mean_context);
    if (b.fits)
        s += "3. what binds: " + r.binds + fmt(" (of the busy time: dense GEMMs %.0f%%", r.work.dense * 100) +
             fmt(", attention %.0f%%", r.work.attention * 100) + fmt(", weight reads %.0f%%", r.work.weights * 100) +
             fmt(", KV reads %.0f%%", r.work.kv * 100) + fmt(", communication %.0f%%", r.work.comm * 100) +
             fmt("; the cache at %.0f%% of its capacity at its peak", b.kv_peak_share * 100) + ", " +
             std::to_string(b.preemptions) + " preemptions)\n";
    else
        s += "3. what binds: " + r.binds + "\n";
    s += "4. the remedies, best goodput first (SLOs: TTFT " + fmt("%.0f ms", in.slo.ttft_s * 1e3) + ", TPOT " +
         fmt("%.0f ms", in.slo.tpot_s * 1e3) + "):\n";
    Table t({"remedy", "chapter", "change", "TTFT p90 ms", "ITL p90 ms", "TPOT p90 ms", "goodput req/s", "GB per GPU"});
    const auto row = [&](const std::string& name, const std::string& ch, const std::string& change, const Outcome& o) {
        if (!o.fits)
            t.add_row({name, ch, change, "-", "-", "-", "does not fit", "-"});
        else
            t.add_row({name, ch, change, fmt("%.0f", o.ttft_p90_s * 1e3), fmt("%.1f", o.itl_p90_s * 1e3),
                       fmt("%.1f", o.tpot_p90_s * 1e3), fmt("%.2f", o.goodput_rps),
                       fmt("%.1f", o.memory_per_gpu_bytes / 1e9)});
    };
    row("(as served)", "-", in.setup.name(), b);
    for (const Remedy& m : r.remedies) row(m.name, m.chapter, m.change, m.outcome);
    s += t.render();
    if (b.fits)
        s += "5. the cost at " + fmt("$%.2f per GPU-hour", in.usd_per_gpu_hour) +
             fmt(": $%.3f per million prompt tokens, ", r.usd_per_m_prompt) +
             fmt("$%.3f per million generated tokens", r.usd_per_m_output) +
             fmt(" (%.1f x; prefill takes ", r.usd_per_m_prompt > 0 ? r.usd_per_m_output / r.usd_per_m_prompt : 0) +
             fmt("%.0f%% of the GPU time)\n", r.prefill_share * 100);
    else
        s += "5. the cost: none as served (it does not fit)\n";
    return s;
}

nlohmann::json to_json(const Review& r, const ReviewInput& in) {
    nlohmann::json remedies = nlohmann::json::array();
    for (const Remedy& m : r.remedies)
        remedies.push_back(
            {{"name", m.name}, {"chapter", m.chapter}, {"change", m.change}, {"outcome", outcome_json(m.outcome)}});
    return {{"complaint", r.complaint},
            {"why", r.why},
            {"workload",
             {{"offered_rps", r.offered_rps},
              {"prompt_tokens_per_s", r.prompt_tokens_per_s},
              {"output_tokens_per_s", r.output_tokens_per_s},
              {"mean_prompt", r.mean_prompt},
              {"mean_output", r.mean_output},
              {"mean_context", r.mean_context}}},
            {"work",
             {{"dense", r.work.dense},
              {"attention", r.work.attention},
              {"weights", r.work.weights},
              {"kv", r.work.kv},
              {"comm", r.work.comm}}},
            {"binds", r.binds},
            {"setup", in.setup.name()},
            {"slo", {{"ttft_ms", in.slo.ttft_s * 1e3}, {"tpot_ms", in.slo.tpot_s * 1e3}}},
            {"baseline", outcome_json(r.baseline)},
            {"remedies", remedies},
            {"cost",
             {{"usd_per_gpu_hour", in.usd_per_gpu_hour},
              {"usd_per_million_prompt_tokens", r.usd_per_m_prompt},
              {"usd_per_million_generated_tokens", r.usd_per_m_output},
              {"prefill_share", r.prefill_share}}}};
}

}  // namespace pd::serving
