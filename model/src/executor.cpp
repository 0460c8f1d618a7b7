/// @file executor.cpp
/// @brief Chapter 05's real executor (executor.hpp): a step of the scheduler becomes one
/// forward pass of the model, followed by greedy sampling of the sequences that emit.
#include "pd/model/executor.hpp"

#include "pd/model/generate.hpp"

#include "pd/serving/engine.hpp"
#include "pd/serving/speculative.hpp"

#include "pd/cuda_check.hpp"
#include "pd/device.hpp"
#include "pd/rng.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

namespace pd::model {

std::vector<int> synthetic_prompt(int n, int vocab, std::uint64_t seed, int id) {
    Rng rng(derive_seed(seed, 0x05000000u + std::uint64_t(id)));
    std::vector<int> p(std::size_t(n > 0 ? n : 0));
    for (int& t : p) t = static_cast<int>(rng.integer(0, vocab - 1));
    return p;
}

ModelExecutor::ModelExecutor(Model& model, const std::vector<serving::Request>& requests, std::uint64_t seed,
                             const serving::PagedCache* pages)
    : model_(model), pages_(pages), next_(std::size_t(model.max_logit_rows())), seed_(seed) {
    if ((pages != nullptr) != (model.options().cache.block_size > 0) ||
        (pages && pages->block_size() != model.options().cache.block_size))
        throw std::invalid_argument(
            "model executor: the scheduler's cache and the model's must both be slots or both "
            "pages of the same block size");
    for (const serving::Request& r : requests) {
        if (r.id != int(prompts_.size()))
            throw std::invalid_argument("model executor: request ids must be 0, 1, 2, ... in order");
        arrive(r);
    }
}

void ModelExecutor::arrive(const serving::Request& r) {
    if (r.id < int(prompts_.size())) return;  // the constructor's workload
    if (r.id != int(prompts_.size()))
        throw std::invalid_argument("model executor: request " + std::to_string(r.id) + " arrived after " +
                                    std::to_string(prompts_.size()) + " requests (ids 0, 1, 2, ... in order)");
    if (r.prompt_tokens + r.output_tokens > model_.max_seq())
        throw std::invalid_argument("request " + std::to_string(r.id) + ": prompt " + std::to_string(r.prompt_tokens) +
                                    " + output " + std::to_string(r.output_tokens) +
                                    " tokens exceed the cache slot of " + std::to_string(model_.max_seq()) +
                                    " positions (Request.prompt_tokens, Request.output_tokens)");
    for (int t : r.prompt)
        if (t < 0 || t >= model_.config().vocab)
            throw std::invalid_argument("request " + std::to_string(r.id) + ": token " + std::to_string(t) +
                                        " is outside the model's vocabulary");
    kernels::layers::check_sampling(
        {.temperature = r.sampling.temperature, .top_k = r.sampling.top_k, .top_p = r.sampling.top_p},
        model_.config().vocab);  // its rule's field out of range, by name
    prompts_.push_back(r.prompt.empty() ? synthetic_prompt(r.prompt_tokens, model_.config().vocab, seed_, r.id)
                                        : r.prompt);
    sampling_.push_back(r.sampling);
    generated_.emplace_back();
}

namespace {

/// "8 slots of 512 positions" or "130 blocks of 16 positions": the cache of a model's options.
std::string describe_cache(const ModelConfig& config, const ModelOptions& o) {
    const int max_seq = o.max_seq > 0 ? o.max_seq : config.max_seq;
    return o.cache.block_size > 0
               ? std::to_string(o.cache.num_blocks) + " blocks of " + std::to_string(o.cache.block_size) + " positions"
               : std::to_string(o.batch) + " slots of " + std::to_string(max_seq) + " positions";
}

/// "model: tiny, fp32 weights, fp32 cache, <caches>, <device> (wall-clock step times)"; quantized
/// weights: "int4 g128 weights".
std::string describe_model(const ModelConfig& config, const ModelOptions& o, const std::string& caches) {
    const std::string weights = o.quant.format == "none"   ? to_string(o.weights)
                                : o.quant.format == "int4" ? "int4 g" + std::to_string(o.quant.group)
                                                           : o.quant.format;
    return "model: " + config.name + ", " + weights + " weights, " + to_string(o.cache.kv) + " cache, " + caches +
           ", " + query_device(0).name + " (wall-clock step times)";
}

}  // namespace

// [model_executor_run]
double ModelExecutor::run(const serving::Step& step) {
    const auto start = std::chrono::steady_clock::now();
    // pack the items' tokens: each request's prompt then its output, from its context on; a
    // speculative decode (chapter 09) adds its draft: prompt lookup's guesses of what follows
    Pass pass;
    std::vector<std::vector<int>> drafts(step.items.size());
    for (std::size_t n = 0; n < step.items.size(); ++n) {
        const serving::BatchItem& item = step.items[n];
        const std::vector<int>& p = prompts_.at(std::size_t(item.request));
        const std::vector<int>& g = generated_.at(std::size_t(item.request));
        const int own = item.tokens - item.draft;  // the tokens the request has
        std::vector<int> fed;
        for (int i = item.context; i < item.context + own; ++i) {
            if (i >= int(p.size() + g.size()))
                throw std::logic_error("model executor: request " + std::to_string(item.request) + " has no token at " +
                                       std::to_string(i) + " yet");
            fed.push_back(i < int(p.size()) ? p[std::size_t(i)] : g[std::size_t(i) - p.size()]);
        }
        if (item.draft > 0) {
            std::vector<int> so_far = p;
            so_far.insert(so_far.end(), g.begin(), g.end());
            drafts[n] = serving::propose_ngram(so_far, item.draft);
            // fewer guesses than the step holds: the last token again (the pass's shape was planned)
            while (int(drafts[n].size()) < item.draft) drafts[n].push_back(so_far.back());
            fed.insert(fed.end(), drafts[n].begin(), drafts[n].end());
        }
        pass.add(item.slot, item.context, fed, item.request, 1 + item.draft,
                 pages_ ? std::span<const int>(pages_->table(item.request)) : std::span<const int>());
    }
    accepted_.assign(step.items.size(), 0);
    tokens_.clear();
    if (pass.sequences.empty()) return 0;
    const Cost cost = model_.cost(pass.sequences);
    spent_.flops += cost.flops;
    spent_.bytes += cost.bytes;
    model_.forward(pass.tokens, pass.sequences);  // one turn of the token loop (generate.hpp): run_engine() loops
    // item s's rows of the logits follow item s - 1's (one, or 1 + its draft); each chosen by its
    // request's rule (greedy unless it asks otherwise)
    const std::vector<int> next = choose_rows(step, pass);
    std::size_t row = 0;
    for (std::size_t s = 0; s < step.items.size(); ++s) {
        const serving::BatchItem& item = step.items[s];
        const std::span<const int> choice(next.data() + row, std::size_t(1 + item.draft));
        row += choice.size();
        if (!item.emits) continue;
        std::vector<int>& g = generated_[std::size_t(item.request)];
        // the longest prefix the target chose too (by its rule: a draw keyed by position keeps a
        // draft token exactly when the draw without the draft would have chosen it)
        const int kept = serving::accept_greedy(drafts[s], choice);
        g.insert(g.end(), drafts[s].begin(), drafts[s].begin() + kept);
        g.push_back(choice[std::size_t(kept)]);
        tokens_.insert(tokens_.end(), g.end() - (1 + kept), g.end());
        accepted_[s] = kept;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
// [model_executor_run]

// [choose_rows]
std::vector<int> ModelExecutor::choose_rows(const serving::Step& step, Pass& pass) {
    std::vector<kernels::layers::SamplingParams> rules;
    bool greedy = true;
    for (const serving::BatchItem& item : step.items) {
        const serving::Request::Sampling& s = sampling_.at(std::size_t(item.request));
        const std::size_t row = rules.size();
        // a seeded request's draws are keyed by (its seed, position) alone; the others' by the
        // executor's seed, the request's id (their stream, as Pass::add() set it) and position
        rules.resize(
            row + std::size_t(1 + item.draft),
            {.temperature = s.temperature, .top_k = s.top_k, .top_p = s.top_p, .seed = s.seeded ? s.seed : seed_});
        if (s.seeded)
            std::fill(pass.streams.begin() + std::ptrdiff_t(row), pass.streams.begin() + std::ptrdiff_t(rules.size()),
                      0);
        greedy = greedy && s.temperature == 0.f;
    }
    if (greedy) return choose(model_, pass, {}, next_);  // the argmax of every row, one launch
    model_.sample(rules, pass.streams, pass.positions, next_.data());
    std::vector<int> chosen = next_.download();
    chosen.resize(rules.size());
    return chosen;
}
// [choose_rows]

ModelOptions engine_model_options(const ModelConfig& config, const serving::SchedulerConfig& scheduler,
                                  const std::vector<serving::Request>& requests, DType weights, DType kv, int sm_count,
                                  const std::string& quant) {
    ModelOptions o{.weights = weights,
                   .batch = scheduler.max_seqs,
                   .cache = {.kv = kv},
                   .kernels = {.sm_count = sm_count},
                   .quant = {.format = quant}};
    if (scheduler.block_size > 0) {
        o.cache.block_size = scheduler.block_size;
        o.cache.num_blocks = int(scheduler.kv_capacity / scheduler.block_size);
    }
    o.max_step_tokens = int(serving::max_step_tokens(scheduler, requests));
    int draft = 0;  // chapter 09: a verify pass asks for the logits of every one of its tokens
    for (const serving::Request& r : requests) draft = std::max(draft, r.speculate);
    o.max_logit_rows = scheduler.max_seqs * (1 + draft);
    Model::check_options(config, o);  // its errors now, before a replay starts
    return o;
}

// [serve_on_model]
serving::Timeline serve_on_model(const ModelConfig& config, const serving::SchedulerConfig& scheduler,
                                 const std::vector<serving::Request>& requests, DType weights, DType kv, int sm_count,
                                 const std::string& quant, std::uint64_t seed, std::vector<std::vector<int>>* generated,
                                 std::pair<Bench*, nlohmann::json*> steps_profile) {
    serving::Scheduler s(scheduler);
    Model model(config, engine_model_options(config, scheduler, requests, weights, kv, sm_count, quant));
    model.init_synthetic(seed);
    model.warm_up();  // first-launch costs outside the timed steps
    ModelExecutor executor(model, requests, seed, s.paged());
    const auto [bench, profile] = steps_profile;
    if (bench && profile) bench->begin_profile();
    serving::Timeline t = serving::run_engine(requests, s, executor, true);
    // the model's GEMMs run on tensor cores in bf16 (its prefill; its decode GEMVs on the SIMT units)
    if (bench && profile)
        *profile = bench->end_profile(executor.spent(), weights == DType::bf16 ? Units::tensor_cores : Units::simt);
    if (generated) {
        generated->clear();
        for (const serving::Request& r : requests) generated->push_back(executor.generated(r.id));
    }
    return t;
}
// [serve_on_model]

std::string prepare_engine_models(Bench& bench, const ModelConfig& config,
                                  const std::vector<serving::SchedulerConfig>& schedulers,
                                  const std::vector<serving::Request>& requests, DType kv, const std::string& advice) {
    std::optional<ModelOptions> first;
    std::string caches;
    for (const serving::SchedulerConfig& s : schedulers) {
        const ModelOptions o = engine_model_options(config, s, requests, bench.single_dtype(), kv,
                                                    bench.device().sm_count, bench.weight_quant());
        bench.require_fits(Model::device_bytes(config, o),
                           std::string("the model, its cache ") + (o.cache.block_size > 0 ? "blocks" : "slots") +
                               " and the activations",
                           advice);
        if (!first) first = o;
        const std::string cache = describe_cache(config, o);
        if (caches.find(cache) == std::string::npos) caches += (caches.empty() ? "" : " / ") + cache;
    }
    return first ? describe_model(config, *first, caches) : std::string();
}

serving::Timeline replay(const serving::ServingOptions& o, Bench& bench, const serving::CostModelConfig& cost,
                         const serving::SchedulerConfig& scheduler, const std::vector<serving::Request>& requests,
                         std::vector<std::vector<int>>* generated, nlohmann::json* profile) {
    if (o.on_model())
        return serve_on_model(cost.model, scheduler, requests, bench.single_dtype(), dtype_named(o.kv_dtype),
                              bench.device().sm_count, bench.weight_quant(), bench.options.seed, generated,
                              {&bench, profile});
    serving::Scheduler s(scheduler);
    serving::CostModel executor(cost);
    return serving::run_engine(requests, s, executor, true);
}

std::string describe_engine_model(const ModelConfig& config, const ModelOptions& o) {
    return describe_model(config, o, describe_cache(config, o));
}

std::string ModelExecutor::describe() const {
    return describe_engine_model(model_.config(), model_.options());
}

}  // namespace pd::model
