/// @file speculative.cpp
/// @brief Chapter 09's speculative decoding on the model (speculative.hpp): propose, verify in
/// one pass, accept, roll back.
#include "pd/model/speculative.hpp"

#include "pd/model/generate.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/philox.hpp"
#include "pd/timer.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace ly = kernels::layers;

namespace {

/// The Philox streams of sequence s: the target's draws, the draft's, the acceptance's.
int target_stream(int s) {
    return 3 * s;
}
int draft_stream(int s) {
    return 3 * s + 1;
}
std::uint64_t accept_stream(int s) {
    return std::uint64_t(3 * s + 2);
}

[[noreturn]] void reject(const std::string& field, const std::string& value, const std::string& rule) {
    throw std::invalid_argument("SpecOptions." + field + " = " + value + " " + rule);
}

/// One sequence as the loop sees it.
struct Sequence {
    std::vector<int> tokens;  // prompt and output so far; the last is not in the target's cache yet
    int context = 0;          // positions in the target's cache: tokens[0 .. context)
    int draft_context = 0;    // positions in the draft model's cache
    int generated = 0;
    std::vector<int> blocks;  // pages: its block table
    std::vector<int> draft;   // this step's proposal
    std::vector<float> q;     // this step's draft distributions [draft.size(), V] (draft model, sampled)
    std::vector<int> top5;    // greedy: the 5 best ids of the row that emitted each generated token
    int off_truth = -1;       // oracle: the first generated position off the truth (-1: none yet)
};

/// The blocks of a paged cache, handed out and taken back as a stack.
class Blocks {
public:
    Blocks(int count, int size) : size_(size) {
        for (int b = count - 1; b >= 0; --b) free_.push_back(b);
    }
    /// Grows @p s's table to cover @p positions.
    void reserve(Sequence& s, int positions) {
        while (int(s.blocks.size()) * size_ < positions) {
            if (free_.empty()) throw std::invalid_argument("speculative decoding: the paged cache has no block left");
            s.blocks.push_back(free_.back());
            free_.pop_back();
        }
    }
    /// Shrinks @p s's table to the blocks its first @p positions occupy: the rollback.
    void release(Sequence& s, int positions) {
        while (int(s.blocks.size()) > ceil_div(positions, size_)) {
            free_.push_back(s.blocks.back());
            s.blocks.pop_back();
        }
    }

private:
    int size_;
    std::vector<int> free_;
};

/// The ids of the 5 largest logits of each of the first @p rows rows of @p m's last pass,
/// largest first (ties to the smaller id): [rows, 5].
std::vector<int> top5_rows(const Model& m, std::size_t rows) {
    const std::size_t V = std::size_t(m.config().vocab), n = std::min<std::size_t>(5, V);
    const std::vector<float> logits = m.logits().download();
    std::vector<int> out(rows * 5, -1), ids(V);
    for (std::size_t r = 0; r < rows; ++r) {
        const float* l = logits.data() + r * V;
        for (std::size_t v = 0; v < V; ++v) ids[v] = int(v);
        std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(n), ids.end(),
                          [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        std::copy(ids.begin(), ids.begin() + std::ptrdiff_t(n), out.begin() + std::ptrdiff_t(r * 5));
    }
    return out;
}

/// The draft model's proposals, k_s tokens for each sequence s, greedy or sampled (keeping the
/// distributions in q), in the token loop on the draft model: first one pass that feeds each
/// sequence's tokens the draft has not cached (its last, and the accepted ones it never fed) and
/// proposes the first token, then one decode pass per further token.
void propose_with_draft(Model& draft, std::vector<Sequence>& seqs, const std::vector<int>& k, const SpecOptions& o,
                        SpecGeneration& g) {
    const std::size_t V = std::size_t(draft.config().vocab);
    const bool greedy = o.sampling.greedy();
    int round = 0;
    std::vector<int> who;  // the sequences of the round's pass
    token_loop(
        draft, o.sampling,
        [&](Pass& p) {
            who.clear();
            for (int s = 0; s < int(seqs.size()); ++s) {
                const Sequence& q = seqs[std::size_t(s)];
                if (k[std::size_t(s)] <= round) continue;
                const int from = round == 0 ? q.draft_context : q.context + round;  // its first new position
                std::vector<int> fed;                                               // up to its last, context + round
                for (int i = from; i <= q.context + round; ++i)
                    fed.push_back(i <= q.context ? q.tokens[std::size_t(i)] : q.draft[std::size_t(i - q.context - 1)]);
                p.add(s, from, fed, draft_stream(s));
                who.push_back(s);
            }
            return !who.empty();
        },
        [&](std::span<const int> picked, double ms) {
            g.draft_ms += ms;
            ++g.draft_passes;
            std::vector<float> probs;
            if (!greedy) probs = draft.probs().download();
            for (std::size_t i = 0; i < who.size(); ++i) {
                Sequence& q = seqs[std::size_t(who[i])];
                q.draft.push_back(picked[i]);
                q.draft_context = q.context + round + 1;
                if (!greedy)
                    q.q.insert(q.q.end(), probs.begin() + std::ptrdiff_t(i * V),
                               probs.begin() + std::ptrdiff_t((i + 1) * V));
            }
            ++round;
        });
}

}  // namespace

ModelConfig draft_config(const ModelConfig& target, int layers) {
    if (layers < 1 || layers >= target.layers)
        reject("draft_layers", std::to_string(layers),
               "must be in 1 .. " + std::to_string(target.layers - 1) + " (the target " + target.name + " has " +
                   std::to_string(target.layers) + " layers)");
    ModelConfig c = target;
    c.layers = layers;
    c.name = target.name + "-draft" + std::to_string(layers);
    c.source = "the first " + std::to_string(layers) + " layers of " + target.name;
    return c;
}

ModelWeights draft_weights(const ModelWeights& target, const ModelConfig& c, int layers) {
    const ModelConfig d = draft_config(c, layers);
    ModelWeights w = target;
    const auto keep = [&](std::vector<float>& t) { t.resize(t.size() / std::size_t(c.layers) * std::size_t(layers)); };
    for (std::vector<float>* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down})
        keep(*t);
    w.check(d, "draft weights");
    return w;
}

void check_spec(const SpecOptions& o, const Model& target, const Model* draft, int B, int P, int G,
                std::span<const int> truth) {
    const std::string& p = o.proposer;
    if (p != "none" && p != "ngram" && p != "draft" && p != "oracle")
        reject("proposer", p, "must be none, ngram, draft or oracle");
    const int k = p == "none" ? 0 : o.k;
    if (p != "none" && (o.k < 1 || o.k > kMaxDraft))
        reject("k", std::to_string(o.k), "must be in 1 .. " + std::to_string(kMaxDraft));
    if (p == "oracle" && !(o.accept_rate >= 0 && o.accept_rate <= 1))
        reject("accept_rate", std::to_string(o.accept_rate), "must be in [0, 1]");
    if (p == "oracle" && !o.sampling.greedy())
        reject("proposer", p, "proposes the target's greedy choice: it needs temperature 0");
    if (p == "oracle" && truth.size() != std::size_t(G) * std::size_t(B))
        reject("proposer", p,
               "needs the target's greedy tokens [G, B] = " + std::to_string(std::size_t(G) * B) + ", got " +
                   std::to_string(truth.size()));
    if (p == "ngram" && (o.ngram_min < 1 || o.ngram_max < o.ngram_min))
        reject("ngram_min", std::to_string(o.ngram_min) + " (ngram_max = " + std::to_string(o.ngram_max) + ")",
               "must satisfy 1 <= ngram_min <= ngram_max");
    if ((p == "draft") != (draft != nullptr))
        reject("proposer", p, draft ? "takes no draft model" : "needs a draft model");
    ly::check_sampling(o.sampling, target.config().vocab);
    const ModelOptions& t = target.options();
    if (t.batch != B)
        throw std::invalid_argument("generate_speculative: the target's batch is " + std::to_string(t.batch) +
                                    ", the prompts " + std::to_string(B));
    if (P < 1 || G < 1 || P + G > target.max_seq())
        throw std::invalid_argument("generate_speculative: P = " + std::to_string(P) + " and G = " + std::to_string(G) +
                                    " must be >= 1 with P + G <= max_seq = " + std::to_string(target.max_seq()));
    if (target.max_step_tokens() < B * std::max(P, k + 1))
        throw std::invalid_argument(
            "generate_speculative: ModelOptions.max_step_tokens = " + std::to_string(target.max_step_tokens()) +
            " must hold a prefill of B P = " + std::to_string(B * P) +
            " and a verify pass of B (k + 1) = " + std::to_string(B * (k + 1)) + " tokens");
    if (target.max_logit_rows() < B * (k + 1))
        throw std::invalid_argument(
            "generate_speculative: ModelOptions.max_logit_rows = " + std::to_string(target.max_logit_rows()) +
            " must hold B (k + 1) = " + std::to_string(B * (k + 1)) + " rows");
    if (draft) {
        const ModelOptions& d = draft->options();
        if (d.batch != B || d.cache.block_size != 0 || draft->max_seq() < P + G || draft->max_step_tokens() < B * P ||
            draft->config().vocab != target.config().vocab)
            throw std::invalid_argument(
                "generate_speculative: the draft model needs batch B = " + std::to_string(B) +
                ", slots, max_seq >= P + G, max_step_tokens >= B P and the target's vocabulary");
    }
}

// [generate_speculative]
namespace {

/// Step 1 without a draft model: each unfinished sequence's proposal (an n-gram's or the
/// oracle's), of up to @p k_max tokens, fewer when its generation or the cache ends sooner.
/// @return the tokens each sequence may propose (the draft model proposes that many itself)
std::vector<int> propose(std::vector<Sequence>& seqs, const SpecOptions& o, int k_max, int G, int max_seq, int V,
                         std::span<const int> truth) {
    const std::size_t B = seqs.size();
    std::vector<int> k(B, 0);
    for (std::size_t s = 0; s < B; ++s) {
        Sequence& q = seqs[s];
        q.draft.clear();
        q.q.clear();
        if (q.generated >= G) continue;
        const int n = k[s] = std::min({k_max, G - q.generated - 1, max_seq - q.context - 1});
        if (n == 0) continue;
        if (o.proposer == "ngram") {
            q.draft = serving::propose_ngram(q.tokens, n, o.ngram_max, o.ngram_min);
        } else if (o.proposer == "oracle") {
            std::vector<int> next;  // the target's choices for the next n positions
            for (int i = 0; i < n; ++i) next.push_back(truth[std::size_t(q.generated + i) * B + s]);
            q.draft = serving::propose_oracle(next, V, o.accept_rate, o.sampling.seed, accept_stream(int(s)),
                                              4 * kMaxDraft * std::uint64_t(q.context));
        }
    }
    return k;
}

/// Step 3 for sequence @p s: how many of its drafts the target accepts, and the token after
/// them. Greedy: the drafts that match the target's argmax; sampled: rejection sampling of the
/// target's probabilities @p p (from @p row) against the drafts' distributions.
/// @param picked the tokens the target chose, from the sequence's first verify row
serving::SpecVerdict verdict(Sequence& q, int s, const SpecOptions& o, std::span<const int> picked,
                             std::span<const float> p, std::size_t row, int V) {
    const int n = int(q.draft.size());
    serving::SpecVerdict v;
    if (o.sampling.greedy() || n == 0) {
        v.accepted = serving::accept_greedy(q.draft, picked.first(std::size_t(n + 1)));
        v.token = picked[std::size_t(v.accepted)];
        if (!o.sampling.greedy()) v.token = picked[0];  // no draft: the target's own draw
        return v;
    }
    if (q.q.empty())  // a proposer without a distribution: the draft is certain
        for (int t : q.draft) {
            q.q.resize(q.q.size() + std::size_t(V), 0.f);
            q.q[q.q.size() - std::size_t(V) + std::size_t(t)] = 1.f;
        }
    std::vector<float> u;
    for (int i = 0; i <= n; ++i)
        u.push_back(
            philox_uniform(o.sampling.seed, accept_stream(s),
                           i < n ? 2 * std::uint64_t(q.context + 1 + i) : 2 * std::uint64_t(q.context + 1) + 1));
    return serving::rejection_sample(p.subspan(row * std::size_t(V), std::size_t(n + 1) * V), q.q, q.draft, V, u);
}

/// Step 2's pass: each unfinished sequence's last token and its draft, k + 1 positions after its
/// context, asking for every row's logits. @param blocks a paged cache's (the tables grow to
/// cover the positions), or null
void verify_pass(Pass& p, std::vector<Sequence>& seqs, int G, Blocks* blocks) {
    for (int s = 0; s < int(seqs.size()); ++s) {
        Sequence& q = seqs[std::size_t(s)];
        if (q.generated >= G) continue;
        const int n = int(q.draft.size());
        if (blocks) blocks->reserve(q, q.context + 1 + n);
        std::vector<int> fed{q.tokens.back()};
        fed.insert(fed.end(), q.draft.begin(), q.draft.end());
        p.add(s, q.context, fed, target_stream(s), 1 + n, q.blocks);
    }
}

/// The generation's tokens [G, B] (and greedy top-5 ids, the oracle's positions off the
/// truth), the sequences' contexts and the blocks they hold, into @p g.
void collect(SpecGeneration& g, const std::vector<Sequence>& seqs, int P, int G, bool greedy, bool oracle) {
    const std::size_t B = seqs.size();
    g.tokens.assign(std::size_t(G) * B, -1);
    if (greedy) g.top5.assign(std::size_t(G) * B * 5, -1);
    for (std::size_t s = 0; s < B; ++s) {
        const Sequence& q = seqs[s];
        for (int i = 0; i < G; ++i) {
            g.tokens[std::size_t(i) * B + s] = q.tokens[std::size_t(P + i)];
            if (greedy)
                std::copy_n(q.top5.begin() + 5 * i, 5, g.top5.begin() + std::ptrdiff_t((std::size_t(i) * B + s) * 5));
        }
        g.context.push_back(q.context);
        g.blocks_held += int(q.blocks.size());
        if (oracle) g.off_truth.push_back(q.off_truth < 0 ? G : q.off_truth);
    }
}

}  // namespace

SpecGeneration generate_speculative(Model& target, Model* draft, std::span<const int> prompt, int P, int G,
                                    const SpecOptions& o, std::span<const int> truth) {
    const int B = target.options().batch, V = target.config().vocab, bs = target.options().cache.block_size;
    check_spec(o, target, draft, B, P, G, truth);
    if (prompt.size() != std::size_t(B) * std::size_t(P))
        throw std::invalid_argument("generate_speculative: the prompts hold " + std::to_string(prompt.size()) +
                                    " tokens, expected B P = " + std::to_string(std::size_t(B) * P));
    const bool greedy = o.sampling.greedy(), paged = bs > 0, oracle = o.proposer == "oracle";
    const int k_max = o.proposer == "none" ? 0 : o.k;
    SpecGeneration g;
    Blocks blocks(paged ? target.options().cache.num_blocks : 0, std::max(bs, 1));
    std::vector<Sequence> seqs(static_cast<std::size_t>(B));
    for (int s = 0; s < B; ++s) {
        Sequence& q = seqs[std::size_t(s)];
        q.tokens.assign(prompt.begin() + std::ptrdiff_t(s) * P, prompt.begin() + std::ptrdiff_t(s + 1) * P);
        if (paged) blocks.reserve(q, P);
    }
    const auto left_truth = [&](Sequence& q, int s, int at, int token) {  // oracle: the first position off it
        if (oracle && q.off_truth < 0 && token != truth[std::size_t(at) * B + std::size_t(s)]) q.off_truth = at;
    };
    bool prompted = false;  // the first pass feeds the prompts

    token_loop(
        target, o.sampling,
        [&](Pass& p) {
            if (!prompted) {  // the prompts, in one pass of each model
                for (int s = 0; s < B; ++s)
                    p.add(s, 0, seqs[std::size_t(s)].tokens, target_stream(s), 1, seqs[std::size_t(s)].blocks);
                if (draft)
                    g.prefill_ms +=
                        time_device([&] { draft->forward(prompt, Pass::batch(prompt, B, 0).sequences); }, 0, 1)
                            .median_ms;
                return true;
            }
            if (std::none_of(seqs.begin(), seqs.end(), [&](const Sequence& q) { return q.generated < G; }))
                return false;
            // 1. propose: up to k tokens, fewer when the generation or the cache ends sooner
            const std::vector<int> k = propose(seqs, o, k_max, G, target.max_seq(), V, truth);
            if (draft) propose_with_draft(*draft, seqs, k, o, g);
            verify_pass(p, seqs, G, paged ? &blocks : nullptr);  // 2. verify
            return true;
        },
        [&](std::span<const int> picked, double ms) {
            const std::vector<int> best = greedy ? top5_rows(target, picked.size()) : std::vector<int>{};
            if (!prompted) {  // each sequence's first token
                g.prefill_ms += ms;
                prompted = true;
                for (int s = 0; s < B; ++s) {
                    Sequence& q = seqs[std::size_t(s)];
                    q.tokens.push_back(picked[std::size_t(s)]);
                    q.context = q.draft_context = P;
                    q.generated = 1;
                    if (greedy) q.top5.assign(best.begin() + 5 * s, best.begin() + 5 * (s + 1));
                    left_truth(q, s, 0, picked[std::size_t(s)]);
                }
                return;
            }
            g.target_ms += ms;
            ++g.target_passes;
            std::vector<float> p;
            if (!greedy && k_max > 0) p = target.probs().download();
            // 3. accept, and 4. roll back: the cache keeps the last token and the accepted drafts
            std::size_t row = 0;
            for (int s = 0; s < B; ++s) {
                Sequence& q = seqs[std::size_t(s)];
                if (q.generated >= G) continue;
                const int n = int(q.draft.size());
                const serving::SpecVerdict v = verdict(q, s, o, picked.subspan(row), p, row, V);
                if (q.off_truth < 0) {  // (an oracle's metrics stop where its sequence left the truth)
                    if (n > 0) g.stats.record(n, v.accepted);
                    ++g.sequence_steps;
                    g.step_tokens += v.accepted + 1;
                }
                if (greedy)  // the rows that emitted the accepted drafts and the token after them
                    q.top5.insert(q.top5.end(), best.begin() + std::ptrdiff_t(5 * row),
                                  best.begin() + std::ptrdiff_t(5 * (row + std::size_t(v.accepted) + 1)));
                q.tokens.insert(q.tokens.end(), q.draft.begin(), q.draft.begin() + v.accepted);
                q.tokens.push_back(v.token);
                for (int i = 0; i <= v.accepted; ++i)
                    left_truth(q, s, q.generated + i, q.tokens[std::size_t(P + q.generated + i)]);
                q.generated += v.accepted + 1;
                q.context += 1 + v.accepted;  // its last token and the accepted drafts are cached
                if (paged) blocks.release(q, q.context);
                q.draft_context = std::min(q.draft_context, q.context);
                row += std::size_t(n + 1);
            }
        });

    collect(g, seqs, P, G, greedy, oracle);
    return g;
}
// [generate_speculative]

std::string compare_spec_tokens(const SpecGeneration& plain, const SpecGeneration& spec, int B, DType d, bool& passed) {
    passed = plain.tokens.size() == spec.tokens.size() && plain.top5.size() == spec.top5.size() &&
             plain.top5.size() == plain.tokens.size() * 5;
    if (!passed) return "the generations differ in length, or one has no top-5 ids (a sampled run?) (FAILED)";
    const int G = int(plain.tokens.size()) / B;
    const auto in_top5 = [](const SpecGeneration& g, std::size_t at, int token) {
        return std::find(g.top5.begin() + std::ptrdiff_t(5 * at), g.top5.begin() + std::ptrdiff_t(5 * at + 5), token) !=
               g.top5.begin() + std::ptrdiff_t(5 * at + 5);
    };
    int diverged = 0;
    for (int s = 0; s < B; ++s)
        for (int i = 0; i < G; ++i) {
            const std::size_t at = std::size_t(i) * B + std::size_t(s);
            if (plain.tokens[at] == spec.tokens[at]) continue;
            ++diverged;
            passed = passed && d == DType::bf16 && in_top5(plain, at, spec.tokens[at]) &&
                     in_top5(spec, at, plain.tokens[at]);
            break;  // after a divergence the two sequences differ: nothing more to compare
        }
    const std::string seqs = std::to_string(B) + (B == 1 ? " sequence" : " sequences");
    if (diverged == 0) return "identical tokens at all " + std::to_string(G) + " positions of " + seqs;
    return std::to_string(diverged) + " of " + seqs + " diverged" +
           (passed ? " (at a near tie: each side's token in the other's top 5)" : " (FAILED)");
}

}  // namespace pd::model
