/// @file types.hpp
/// @brief Chapter 05's serving vocabulary, shared by the scheduler, the executors, the
/// workloads and the metrics (host C++, no backend): a request, one step's batch, the
/// executor interface, and the timeline a run leaves behind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pd::serving {

/// One request of a workload: it arrives, has a prompt, and wants a number of output tokens.
struct Request {
    int id = 0;             ///< index in the workload, 0, 1, 2, ... in arrival order
    double arrival_s = 0;   ///< arrival time, seconds from the start of the run
    int prompt_tokens = 1;  ///< prompt length (>= 1)
    int output_tokens = 1;  ///< tokens to generate (>= 1); the first comes out of the prefill
    /// The prompt's token ids, when the workload has them (prefix caching matches them; the
    /// model executor feeds them). Empty: a prompt of prompt_tokens tokens shared with no one.
    std::vector<int> prompt;
    /// Chapter 09: draft tokens it asks to have verified per decode step (speculative decoding;
    /// 0: plain decoding). The scheduler may grant fewer (SchedulerConfig::draft_limit).
    int speculate = 0;
    /// Chapter 11: it arrives with its prompt's K and V computed (a prefill instance sent them)
    /// and its first token out, so it joins at context prompt_tokens and decodes the other
    /// output_tokens - 1 (>= 1) tokens. A cache of slots only (SchedulerConfig::block_size = 0).
    bool cached = false;
    /// Chapter 13: token ids that end it early (the model's end-of-sequence unless the request
    /// ignores it, and its stop token ids): its output ends with the first of them it generates,
    /// which is its last token. Empty: it runs to output_tokens. (An executor without token ids,
    /// such as the cost model, never stops a request early.)
    std::vector<int> stop_ids;
    /// Chapter 13: how its tokens are chosen (OpenAI's temperature, top_k, top_p and seed), by
    /// an executor that has logits (the model's; greedy when temperature is 0). Its draw for
    /// position p is keyed by (seed, p), so its tokens do not depend on the row it lands in or
    /// on its neighbours; without a seed, by the executor's seed, its id and p.
    struct Sampling {
        float temperature = 0.f;  ///< 0: greedy (the argmax)
        int top_k = 0;            ///< 0: every token
        float top_p = 1.f;        ///< 1: every token
        bool seeded = false;      ///< true: seed keys its draws
        std::uint64_t seed = 0;   ///< its draws' key, when seeded
    };
    Sampling sampling;  ///< chapter 13: how its tokens are chosen (greedy by default)
};

/// How a request ended (chapter 13; OpenAI's finish_reason for the first two).
enum class Finish {
    length,     ///< it generated output_tokens
    stop,       ///< it generated one of its stop_ids
    cancelled,  ///< it was cancelled (Engine::cancel()) before either
};
/// "length", "stop" or "cancelled".
std::string to_string(Finish f);

/// What one request does in one step: `tokens` new tokens of its prompt (a prefill chunk, or
/// a whole prompt), or one decode token, attending to `context` cached positions before them.
struct BatchItem {
    int request = 0;       ///< Request::id
    int tokens = 1;        ///< query tokens this step (1 for a decode)
    int context = 0;       ///< positions already in the request's cache before this step
    bool prefill = false;  ///< true for prompt tokens (a chunk, or a recomputation after preemption)
    /// True when this item finishes the prompt, so the step emits the request's next token
    /// (every decode item emits one; a prefill chunk only when it is the last).
    bool emits = true;
    int slot = -1;  ///< the request's cache slot (set by the scheduler; the real executor's cache row)
    /// Rows of logits it needs when it emits: 1, or chapter 09's verify of a draft, every token's.
    int logits = 1;
    /// Chapter 09: of its tokens, the draft tokens after the decode token (a speculative decode:
    /// tokens = logits = 1 + draft; the executor proposes them and reports how many it kept).
    int draft = 0;
};

/// One iteration of the engine: the tokens of several requests processed together.
struct Step {
    std::vector<BatchItem> items;  ///< at most one item per request
    /// Tokens in the step (the sum of the items' tokens): what the token budget bounds.
    int tokens() const {
        int t = 0;
        for (const BatchItem& i : items) t += i.tokens;
        return t;
    }
    /// True when there is nothing to run.
    bool empty() const { return items.empty(); }
};

/// Runs steps: the model on a device (or the simulator), or a cost model that predicts times.
class Executor {
public:
    virtual ~Executor() = default;
    /// Runs (or predicts) @p step and returns its duration in seconds.
    virtual double run(const Step& step) = 0;
    /// A one-line description for reports ("cost model: llama-3-70b, 8 x H100-SXM, ...").
    virtual std::string describe() const = 0;
    /// Chapter 09: for each item of the last step run, the draft tokens it kept (0 for an item
    /// without a draft). Empty: none kept (an executor that does not speculate).
    virtual std::vector<int> accepted() const { return {}; }
    /// Chapter 13: the token ids the last step emitted, one per token in the order
    /// Scheduler::complete() lists the requests that emitted them. Empty: an executor that
    /// predicts times only (the engine records no ids and stops no request early).
    virtual std::vector<int> tokens() const { return {}; }
    /// Chapter 13: request @p r has been submitted to the engine (before any step it is in): an
    /// executor that keeps per-request state (the model's prompts) takes it on here.
    /// @param r the request, its id the next one
    virtual void arrive(const Request& r) { (void)r; }
};

/// What a run leaves behind: every step with its times, and every request's token times.
struct Timeline {
    /// One executed step.
    struct StepRecord {
        double start_s = 0;  ///< when it started
        double end_s = 0;    ///< when it ended (its tokens are emitted at end_s)
        Step step;           ///< what it ran
        long long kv_used =
            0;            ///< positions holding K and V while it ran (its new tokens included; a shared block's once)
        int running = 0;  ///< requests holding a cache slot while it ran (some may pause in it)
        long long kv_blocks = 0;  ///< paged: blocks held while it ran (0 otherwise)
    };
    /// One request's life.
    struct RequestRecord {
        Request request;                 ///< as it arrived
        std::vector<double> token_s;     ///< the time of each output token (token_s[0]: the first)
        int preemptions = 0;             ///< times it was preempted and later recomputed
        long long prefix_hit = 0;        ///< prompt positions found in the prefix cache (not computed)
        Finish finish = Finish::length;  ///< how it ended (chapter 13)
        std::vector<int> tokens;         ///< the ids of its tokens, when the executor has them (Executor::tokens())
    };
    std::string policy;                   ///< the scheduler's policy
    std::vector<StepRecord> steps;        ///< in order
    std::vector<RequestRecord> requests;  ///< by Request::id
};

}  // namespace pd::serving
