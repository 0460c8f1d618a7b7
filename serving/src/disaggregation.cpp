// Chapter 11's setups on the cost model: aggregated and disaggregated replays, SLO attainment,
// the capacity knee and the placement searches (see disaggregation.hpp).
#include "pd/serving/disaggregation.hpp"

#include "pd/report.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pd::serving {

const std::vector<LinkPreset>& link_presets() {
    // Bandwidths are line rates in one direction, per GPU. The fixed cost of a transfer is a
    // setting, not a measurement: 10 us in a node (the cost model's small all-reduce on NVLink,
    // CostModelConfig::allreduce_latency_s), 30 us across nodes; it is under 0.1% of a
    // 512-token transfer of a 13B model's cache on every link.
    static const std::vector<LinkPreset> presets = {
        {"nvlink", 450e9, 10e-6,
         "NVIDIA H100 Tensor Core GPU datasheet, SXM: NVLink 900 GB/s (both directions together)"},
        {"pcie5", 64e9, 10e-6, "NVIDIA H100 Tensor Core GPU datasheet: PCIe Gen5 128 GB/s (both directions together)"},
        {"ib-ndr", 50e9, 30e-6,
         "NVIDIA ConnectX-7 datasheet: InfiniBand NDR 400 Gb/s per port, one port per GPU (as in a DGX H100)"},
        {"eth-25g", 3.125e9, 30e-6, "25 Gb/s Ethernet line rate (IEEE 802.3by)"},
    };
    return presets;
}

std::optional<LinkPreset> find_link(std::string_view name) {
    for (const LinkPreset& l : link_presets())
        if (l.name == name) return l;
    return std::nullopt;
}

std::string Setup::name() const {
    if (!disaggregated)
        return to_string(policy) + ", budget " + std::to_string(pool.token_budget) + ", " +
               std::to_string(pool.gpus / std::max(pool.tp, 1)) + " x TP " + std::to_string(pool.tp);
    return std::to_string(prefill.gpus) + "P (TP " + std::to_string(prefill.tp) + ") + " + std::to_string(decode.gpus) +
           "D (TP " + std::to_string(decode.tp) + "), " + link.name + (layerwise ? ", layer-wise" : "");
}

CostModelConfig instance_cost(const Cluster& c, int tp) {
    CostModelConfig cost = c.cost;
    cost.machine = roofline::machine_from(c.gpu, tp);
    return cost;
}

namespace {

void check_pool(const Pool& p, const std::string& name) {
    const auto bad = [&](const std::string& what) { throw std::invalid_argument("Setup." + name + "." + what); };
    if (p.tp < 1) bad("tp = " + std::to_string(p.tp) + " must be >= 1");
    if (p.gpus < p.tp || p.gpus % p.tp != 0)
        bad("gpus = " + std::to_string(p.gpus) + " must be a positive multiple of tp = " + std::to_string(p.tp));
    if (p.max_seqs < 1) bad("max_seqs = " + std::to_string(p.max_seqs) + " must be >= 1");
    if (p.token_budget < 1) bad("token_budget = " + std::to_string(p.token_budget) + " must be >= 1");
}

/// The cache of one instance of @p tp GPUs, or a clear error naming the pool.
long long instance_kv(const Cluster& c, int tp, const std::string& pool) {
    const long long kv = kv_positions(instance_cost(c, tp));
    if (kv <= 0)
        throw std::invalid_argument(c.cost.model.name + " leaves no room for a KV cache on " + std::to_string(tp) +
                                    " x " + c.gpu.name + " (Setup." + pool + ".tp = " + std::to_string(tp) +
                                    "): raise the TP");
    return kv;
}

/// Requests dealt to @p n instances in turn, each instance's renumbered 0, 1, 2, ...; @p ids
/// gets each one's global id.
std::vector<std::vector<Request>> deal(const std::vector<Request>& requests, int n,
                                       std::vector<std::vector<int>>& ids) {
    std::vector<std::vector<Request>> parts(static_cast<std::size_t>(n));
    ids.assign(static_cast<std::size_t>(n), {});
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const std::size_t k = i % std::size_t(n);
        Request r = requests[i];
        ids[k].push_back(r.id);
        r.id = static_cast<int>(parts[k].size());
        parts[k].push_back(std::move(r));
    }
    return parts;
}

/// Moves an instance's timeline into @p all: its steps (with global ids) and its requests' records.
void merge(Timeline&& part, const std::vector<int>& ids, Timeline& all) {
    for (Timeline::StepRecord& s : part.steps) {
        for (BatchItem& item : s.step.items) item.request = ids[static_cast<std::size_t>(item.request)];
        all.steps.push_back(std::move(s));
    }
    for (Timeline::RequestRecord& r : part.requests) {
        const int id = ids[static_cast<std::size_t>(r.request.id)];
        r.request.id = id;
        all.requests[static_cast<std::size_t>(id)] = std::move(r);
    }
}

Served serve_aggregated(const std::vector<Request>& requests, const Setup& s, const Cluster& c) {
    check_pool(s.pool, "pool");
    Served out;
    out.kv_capacity = instance_kv(c, s.pool.tp, "pool");
    out.timeline.policy = s.name();
    out.timeline.requests.resize(requests.size());
    std::vector<std::vector<int>> ids;
    const std::vector<std::vector<Request>> parts = deal(requests, s.pool.gpus / s.pool.tp, ids);
    const SchedulerConfig config{
        .policy = s.policy,
        .token_budget = s.pool.token_budget,
        .max_seqs = s.policy == Policy::chunked ? std::min(s.pool.max_seqs, s.pool.token_budget) : s.pool.max_seqs,
        .kv_capacity = out.kv_capacity,
        .block_size = s.pool.block_size,
        .prefix_caching = s.pool.prefix_caching,
        .draft_limit = s.pool.draft_limit};
    for (std::size_t k = 0; k < parts.size(); ++k) {
        Scheduler scheduler(config);
        CostModel cost(instance_cost(c, s.pool.tp));
        merge(run_engine(parts[k], scheduler, cost), ids[k], out.timeline);
    }
    return out;
}

/// A request arriving at a decode instance with its cache.
struct Arrival {
    int id = 0;          ///< global id
    double ready_s = 0;  ///< its cache arrived
    int context = 0;     ///< positions in its cache (its prompt)
    int remaining = 0;   ///< tokens left to decode
};

/// One decode instance: chapter 05's engine (run_engine()) under continuous batching, on requests
/// that arrive with their cache (Request::cached: no prefill, context = the prompt) and are
/// admitted first come first served while a slot is free and their whole sequences fit
/// (SchedulerConfig::reserve_whole: no decode waits for room). Appends its steps to @p all (with
/// global ids) and each request's decode tokens after the first token, which came with its cache.
void run_decode(std::vector<Arrival> arrivals, int max_seqs, long long capacity, CostModel& cost, Timeline& all) {
    std::stable_sort(arrivals.begin(), arrivals.end(),
                     [](const Arrival& a, const Arrival& b) { return a.ready_s < b.ready_s; });
    std::vector<Request> requests;  // the instance's ids: 0, 1, 2, ... in arrival order
    for (const Arrival& a : arrivals)
        requests.push_back({.id = static_cast<int>(requests.size()),
                            .arrival_s = a.ready_s,
                            .prompt_tokens = a.context,
                            .output_tokens = a.remaining + 1,
                            .cached = true});
    Scheduler scheduler(
        {.policy = Policy::continuous, .max_seqs = max_seqs, .kv_capacity = capacity, .reserve_whole = true});
    Timeline t = run_engine(requests, scheduler, cost);
    for (Timeline::StepRecord& step : t.steps) {
        for (BatchItem& item : step.step.items) item.request = arrivals[static_cast<std::size_t>(item.request)].id;
        all.steps.push_back(std::move(step));
    }
    for (const Timeline::RequestRecord& r : t.requests) {
        std::vector<double>& tokens =
            all.requests[static_cast<std::size_t>(arrivals[std::size_t(r.request.id)].id)].token_s;
        tokens.insert(tokens.end(), r.token_s.begin(), r.token_s.end());
    }
}

/// The prefill pool of @p s: whole prompts, one output token each, dealt to the instances in
/// turn, each running the serving engine. Merges their steps into @p out's timeline (a request's
/// first token at its prefill's end, replaced by the caller with the cache's arrival) and fills
/// @p out's transfer records of the prefill; returns each request's transfer job, by id.
std::vector<TransferJob> run_prefill_pool(const std::vector<Request>& requests, const Setup& s, const Cluster& c,
                                          long long prefill_kv, Served& out) {
    out.transfers.resize(requests.size());
    std::vector<Request> prompts = requests;
    for (Request& r : prompts) r.output_tokens = 1;
    std::vector<std::vector<int>> ids;
    const std::vector<std::vector<Request>> parts = deal(prompts, s.prefill.gpus / s.prefill.tp, ids);
    const SchedulerConfig config{.policy = Policy::continuous,
                                 .token_budget = s.prefill.token_budget,
                                 .max_seqs = s.prefill.max_seqs,
                                 .kv_capacity = prefill_kv};
    const double per_token = c.cost.model.kv_bytes_per_token(c.cost.kv_bytes_per_element);
    std::vector<TransferJob> jobs(requests.size());
    for (std::size_t k = 0; k < parts.size(); ++k) {
        Scheduler scheduler(config);
        CostModel cost(instance_cost(c, s.prefill.tp));
        Timeline t = run_engine(parts[k], scheduler, cost);
        for (const Timeline::StepRecord& step : t.steps)
            for (const BatchItem& item : step.step.items) {
                if (!item.emits) continue;
                const int id = ids[k][static_cast<std::size_t>(item.request)];
                TransferRecord& rec = out.transfers[static_cast<std::size_t>(id)];
                rec = {.request = id,
                       .prefill_instance = static_cast<int>(k),
                       .prefill_start_s = step.start_s,
                       .prefill_end_s = step.end_s,
                       .bytes = per_token * requests[static_cast<std::size_t>(id)].prompt_tokens};
                jobs[static_cast<std::size_t>(id)] = {.link = static_cast<int>(k),
                                                      .prefill_start_s = step.start_s,
                                                      .prefill_end_s = step.end_s,
                                                      .bytes = rec.bytes,
                                                      .layers = c.cost.model.layers};
            }
        merge(std::move(t), ids[k], out.timeline);  // token_s[0]: the prefill's end, replaced below
    }
    return jobs;
}

Served serve_disaggregated(const std::vector<Request>& requests, const Setup& s, const Cluster& c) {
    check_pool(s.prefill, "prefill");
    check_pool(s.decode, "decode");
    if (!(s.link.bytes_per_s > 0)) throw std::invalid_argument("Setup.link.bytes_per_s must be > 0");
    Served out;
    const long long prefill_kv = instance_kv(c, s.prefill.tp, "prefill");
    out.kv_capacity = instance_kv(c, s.decode.tp, "decode");
    out.timeline.policy = s.name();
    out.timeline.requests.resize(requests.size());
    for (const Request& r : requests)
        if (r.prompt_tokens + r.output_tokens > out.kv_capacity)
            throw std::invalid_argument("request " + std::to_string(r.id) + " (" +
                                        std::to_string(r.prompt_tokens + r.output_tokens) +
                                        " positions) never fits a decode instance's cache of " +
                                        std::to_string(out.kv_capacity) + " positions");

    // 1. The prefill pool: whole prompts, one output token each, the instances in turn.
    const std::vector<TransferJob> jobs = run_prefill_pool(requests, s, c, prefill_kv, out);

    // 2. The transfers (lab 11's schedule): an instance's tp GPUs send their heads at once.
    const LinkModel link{.bytes_per_s = s.link.bytes_per_s * s.prefill.tp, .latency_s = s.link.latency_s};
    std::vector<TransferJob> sent;
    std::vector<int> sent_ids;
    for (const Request& r : requests)
        if (r.output_tokens > 1) {
            sent.push_back(jobs[static_cast<std::size_t>(r.id)]);
            sent_ids.push_back(r.id);
        }
    const std::vector<TransferTime> times = schedule_transfers(sent, link, s.layerwise);

    // 3. The decode pool, the instances in turn by the arrival of the caches.
    std::vector<std::size_t> order(sent.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return times[a].end_s < times[b].end_s; });
    const int decoders = s.decode.gpus / s.decode.tp;
    std::vector<std::vector<Arrival>> arrivals(static_cast<std::size_t>(decoders));
    for (std::size_t n = 0; n < order.size(); ++n) {
        const std::size_t i = order[n];
        const int id = sent_ids[i];
        const Request& r = requests[static_cast<std::size_t>(id)];
        TransferRecord& rec = out.transfers[static_cast<std::size_t>(id)];
        rec.transfer_start_s = times[i].start_s;
        rec.transfer_end_s = times[i].end_s;
        rec.decode_instance = static_cast<int>(n % std::size_t(decoders));
        // the first token leaves with the cache
        out.timeline.requests[static_cast<std::size_t>(id)].token_s = {times[i].end_s};
        out.timeline.requests[static_cast<std::size_t>(id)].request = r;
        arrivals[static_cast<std::size_t>(rec.decode_instance)].push_back(
            {.id = id, .ready_s = times[i].end_s, .context = r.prompt_tokens, .remaining = r.output_tokens - 1});
    }
    for (const Request& r : requests)
        if (r.output_tokens == 1) {  // done at the prefill: no transfer
            TransferRecord& rec = out.transfers[static_cast<std::size_t>(r.id)];
            rec.transfer_start_s = rec.transfer_end_s = rec.first_decode_s = rec.prefill_end_s;
            out.timeline.requests[static_cast<std::size_t>(r.id)].request = r;
        }
    for (int k = 0; k < decoders; ++k) {
        CostModel cost(instance_cost(c, s.decode.tp));
        run_decode(std::move(arrivals[static_cast<std::size_t>(k)]), s.decode.max_seqs, out.kv_capacity, cost,
                   out.timeline);
    }
    for (const Request& r : requests)
        if (r.output_tokens > 1) {
            const auto& tokens = out.timeline.requests[static_cast<std::size_t>(r.id)].token_s;
            out.transfers[static_cast<std::size_t>(r.id)].first_decode_s = tokens[1];
        }
    return out;
}

}  // namespace

Served serve(const std::vector<Request>& requests, const Setup& setup, const Cluster& cluster) {
    cluster.cost.check();
    return setup.disaggregated ? serve_disaggregated(requests, setup, cluster)
                               : serve_aggregated(requests, setup, cluster);
}

double slo_attainment(const Timeline& t, const Slo& slo) {
    if (t.requests.empty()) return 0;
    int good = 0;
    for (const Timeline::RequestRecord& r : t.requests) {
        if (r.token_s.empty()) continue;
        const int n = r.request.output_tokens;
        const double ttft = r.token_s.front() - r.request.arrival_s;
        const double tpot = n > 1 ? (r.token_s.back() - r.token_s.front()) / (n - 1) : 0.0;
        if ((slo.ttft_s == 0 || ttft <= slo.ttft_s) && (slo.tpot_s == 0 || tpot <= slo.tpot_s)) ++good;
    }
    return double(good) / double(t.requests.size());
}

// [find_capacity]
Capacity find_capacity(const std::function<double(double)>& attainment_at, int gpus, double target, double first,
                       double max_rate, int steps) {
    Capacity c;
    const auto ok = [&](double rate, double& share) {
        share = attainment_at(rate);
        ++c.replays;
        return share >= target;
    };
    double share = 0, lo = 0, lo_share = 0, hi = first;
    while (hi <= max_rate && ok(hi, share)) {  // double until the SLOs fail
        lo = hi, lo_share = share;
        hi *= 2;
    }
    if (lo > 0 && hi <= max_rate)
        for (int i = 0; i < steps; ++i) {  // then bisect between the last rate that met them and the first that did not
            const double mid = (lo + hi) / 2;
            if (ok(mid, share))
                lo = mid, lo_share = share;
            else
                hi = mid;
        }
    c.rate = lo;
    c.attainment = lo_share;
    c.per_gpu = lo / std::max(gpus, 1);
    return c;
}
// [find_capacity]

std::vector<Request> workload_at(const WorkloadSpec& base, double rate, double seconds) {
    WorkloadSpec w = base;
    w.rate = rate;
    w.requests = std::max(base.requests, std::min(4000, static_cast<int>(std::ceil(rate * seconds))));
    return poisson_workload(w);
}

Capacity capacity_of(const Setup& setup, const Cluster& cluster, const WorkloadSpec& base, const Slo& slo,
                     double target) {
    return find_capacity(
        [&](double rate) { return slo_attainment(serve(workload_at(base, rate), setup, cluster).timeline, slo); },
        setup.gpus(), target);
}

namespace {

std::vector<Placement> best_first(std::vector<Placement> all) {
    std::stable_sort(all.begin(), all.end(),
                     [](const Placement& a, const Placement& b) { return a.capacity.per_gpu > b.capacity.per_gpu; });
    return all;
}

}  // namespace

double replay_work(double requests, double prompt, double output, int budget) {
    return requests * (output + std::ceil(prompt / std::max(budget, 1)));
}

double search_work(int gpus, const std::vector<Policy>& policies, const std::vector<int>& budgets,
                   const std::vector<int>& tps, int token_budget, int links, const WorkloadSpec& base) {
    constexpr double kReplays = 25;  // find_capacity(): doublings from 0.25 to 4096, then 10 bisections
    const double n = std::max(double(base.requests), 4000.0), P = base.prompt.mean, O = base.output.mean;
    double work = 0;
    for (int tp : tps) {
        if (tp < 1 || gpus % tp != 0) continue;
        for (int budget : budgets) work += double(policies.size()) * kReplays * replay_work(n, P, O, budget);
    }
    double splits = 0;  // as search_disaggregated() enumerates them
    for (int p = 1; p < gpus; ++p)
        for (int tp_p : tps)
            for (int tp_d : tps) splits += tp_p >= 1 && tp_d >= 1 && p % tp_p == 0 && (gpus - p) % tp_d == 0;
    return work + links * splits * kReplays * replay_work(n, P, O, token_budget);
}

std::vector<Placement> search_aggregated(int gpus, const std::vector<Policy>& policies, const std::vector<int>& budgets,
                                         const std::vector<int>& tps, int max_seqs, const Cluster& cluster,
                                         const WorkloadSpec& base, const Slo& slo) {
    std::vector<Placement> all;
    for (int tp : tps) {
        if (tp < 1 || gpus % tp != 0) continue;
        const bool fits = kv_positions(instance_cost(cluster, tp)) > 0;
        for (Policy p : policies)
            for (int budget : budgets) {
                Placement pl;
                pl.setup.policy = p;
                pl.setup.pool = {.gpus = gpus, .tp = tp, .token_budget = budget, .max_seqs = max_seqs};
                pl.fits = fits;
                if (fits) pl.capacity = capacity_of(pl.setup, cluster, base, slo);
                all.push_back(pl);
            }
    }
    return best_first(std::move(all));
}

std::vector<Placement> search_disaggregated(int gpus, const std::vector<int>& tps, int token_budget, int max_seqs,
                                            const LinkPreset& link, bool layerwise, const Cluster& cluster,
                                            const WorkloadSpec& base, const Slo& slo) {
    std::vector<Placement> all;
    for (int p = 1; p < gpus; ++p)
        for (int tp_p : tps)
            for (int tp_d : tps) {
                const int d = gpus - p;
                if (tp_p < 1 || tp_d < 1 || p % tp_p != 0 || d % tp_d != 0) continue;
                Placement pl;
                pl.setup.disaggregated = true;
                pl.setup.prefill = {.gpus = p, .tp = tp_p, .token_budget = token_budget, .max_seqs = max_seqs};
                pl.setup.decode = {.gpus = d, .tp = tp_d, .token_budget = token_budget, .max_seqs = max_seqs};
                pl.setup.link = link;
                pl.setup.layerwise = layerwise;
                pl.fits =
                    kv_positions(instance_cost(cluster, tp_p)) > 0 && kv_positions(instance_cost(cluster, tp_d)) > 0;
                if (pl.fits) pl.capacity = capacity_of(pl.setup, cluster, base, slo);
                all.push_back(pl);
            }
    return best_first(std::move(all));
}

nlohmann::json to_json(const Placement& p) {
    const Setup& s = p.setup;
    nlohmann::json setup{{"name", s.name()}, {"disaggregated", s.disaggregated}, {"gpus", s.gpus()}};
    const auto pool = [](const Pool& q) {
        return nlohmann::json{
            {"gpus", q.gpus}, {"tp", q.tp}, {"token_budget", q.token_budget}, {"max_seqs", q.max_seqs}};
    };
    if (s.disaggregated) {
        setup["prefill"] = pool(s.prefill);
        setup["decode"] = pool(s.decode);
        setup["link"] = s.link.name;
        setup["layerwise"] = s.layerwise;
    } else {
        setup["policy"] = to_string(s.policy);
        setup["pool"] = pool(s.pool);
    }
    return {{"setup", setup},
            {"fits", p.fits},
            {"rate", p.capacity.rate},
            {"per_gpu", p.capacity.per_gpu},
            {"attainment", p.capacity.attainment}};
}

}  // namespace pd::serving
