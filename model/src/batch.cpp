/// @file batch.cpp
/// @brief Chapter 04's model (model.hpp): a pass's plan (which kernels its batch takes), its
/// batch checked and uploaded, chapter 04's batches (prefill, decode) and the choice of the next
/// tokens.
#include "pd/model/model.hpp"

#include "attention/attention.hpp"
#include "attention/decode_attention.hpp"
#include "gemm/gemm.hpp"
#include "gemv/gemv.hpp"
#include "layers/layers.hpp"
#include "layers/sampling.hpp"
#include "runtime/runtime.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::model {

namespace at = pd::kernels::attention;
namespace ly = pd::kernels::layers;

using bf16 = __nv_bfloat16;

std::string to_string(Plan::Projections p) {
    return p == Plan::Projections::gemv ? "gemv" : "gemm";
}

std::string to_string(Plan::Attention a) {
    switch (a) {
        case Plan::Attention::decode:
            return "decode";
        case Plan::Attention::prefill:
            return "prefill";
        case Plan::Attention::varlen:
            return "varlen";
    }
    return "?";
}

// ---- the plan -------------------------------------------------------------------------------

// [plan]
Plan Model::plan(std::span<const StepSequence> sequences) const {
    Plan p;
    p.sequences = int(sequences.size());
    bool decode = true, fresh = true, in_order = options_.cache.block_size == 0;
    for (std::size_t s = 0; s < sequences.size(); ++s) {
        const StepSequence& q = sequences[s];
        p.tokens += q.tokens;
        decode = decode && q.tokens == 1;
        fresh = fresh && q.context == 0 && q.tokens == sequences[0].tokens;  // prompts from 0, all alike
        in_order = in_order && q.slot == int(s);
    }
    BatchView view;
    view.sequences = p.sequences;
    view.tokens = p.tokens;
    view.rows_in_order = in_order;
    view.uniform = decode ? 1 : 0;
    p.projections = decode ? Plan::Projections::gemv : Plan::Projections::gemm;
    if (decode && cache_->serves_decode(view))
        p.attention = Plan::Attention::decode;
    else if (fresh && !decode && options_.kernels.prefill_attention == "naive")
        p.attention = Plan::Attention::prefill;
    else
        p.attention = Plan::Attention::varlen;
    return p;
}
// [plan]

// ---- the batch ------------------------------------------------------------------------------

void Model::check(std::span<const int> tokens, std::span<const StepSequence> sequences) const {
    const int S = int(sequences.size()), B = options_.batch;
    if (S < 1 || S > B)
        throw std::invalid_argument("forward: " + std::to_string(S) +
                                    " sequences, must be in 1 .. batch = " + std::to_string(B));
    std::vector<bool> taken(std::size_t(B), false);
    long long T = 0, R = 0;
    for (int s = 0; s < S; ++s) {
        const StepSequence& q = sequences[std::size_t(s)];
        const std::string who = "forward: sequence " + std::to_string(s) + ": ";
        if (q.slot < 0 || q.slot >= B)
            throw std::invalid_argument(who + "slot = " + std::to_string(q.slot) + " must be in 0 .. " +
                                        std::to_string(B - 1));
        if (taken[std::size_t(q.slot)])
            throw std::invalid_argument(who + "slot " + std::to_string(q.slot) + " is used twice");
        taken[std::size_t(q.slot)] = true;
        if (q.tokens < 1 || q.context < 0 || q.context + q.tokens > max_seq_)
            throw std::invalid_argument(
                who + "context " + std::to_string(q.context) + " + tokens " + std::to_string(q.tokens) +
                " must fit in max_seq = " + std::to_string(max_seq_) + " with tokens >= 1 and context >= 0");
        if (options_.cache.block_size > 0) {  // its block table covers its positions with blocks of the cache
            const long long need = ceil_div<long long>(q.context + q.tokens, options_.cache.block_size);
            if (static_cast<long long>(q.blocks.size()) < need)
                throw std::invalid_argument(who + std::to_string(q.blocks.size()) + " blocks for " +
                                            std::to_string(q.context + q.tokens) + " positions of " +
                                            std::to_string(options_.cache.block_size));
            for (std::size_t i = 0; i < std::size_t(need); ++i)
                if (q.blocks[i] < 0 || q.blocks[i] >= options_.cache.num_blocks)
                    throw std::invalid_argument(who + "block " + std::to_string(q.blocks[i]) +
                                                " is not one of the cache's " +
                                                std::to_string(options_.cache.num_blocks));
        }
        if (q.logits < 1 || q.logits > q.tokens)
            throw std::invalid_argument(who + "logits = " + std::to_string(q.logits) +
                                        " must be in 1 .. tokens = " + std::to_string(q.tokens));
        R += q.logits;
        T += q.tokens;
    }
    if (R > max_logit_rows_)
        throw std::invalid_argument(
            "forward: " + std::to_string(R) +
            " rows of logits exceed ModelOptions.max_logit_rows = " + std::to_string(max_logit_rows_));
    if (!tokens.empty() && T != static_cast<long long>(tokens.size()))
        throw std::invalid_argument("forward: " + std::to_string(tokens.size()) + " tokens, the sequences bring " +
                                    std::to_string(T));
    if (T > max_step_tokens_)
        throw std::invalid_argument("forward: " + std::to_string(T) + " tokens exceed ModelOptions.max_step_tokens = " +
                                    std::to_string(max_step_tokens_) + " (the activations are allocated for it)");
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= full_.vocab)
            throw std::invalid_argument("token " + std::to_string(i) + " = " + std::to_string(tokens[i]) +
                                        " is outside the vocabulary [0, " + std::to_string(full_.vocab) + ")");
}

/// Uploads the pass's metadata (q_len, context and slot of each sequence, and its block table),
/// then computes on the device each sequence's first row and context after the pass, and each
/// row's position and slot (or table row).
void Model::upload_batch(std::span<const int> tokens, std::span<const StepSequence> sequences) {
    const int S = int(sequences.size()), B = options_.batch;
    const bool paged = options_.cache.block_size > 0;
    batch_ = BatchView{};
    bool in_order = !paged, uniform = true;
    // the rows whose logits the pass produces, listed when a sequence asks for more than its last
    logit_rows_host_.clear();
    if (std::any_of(sequences.begin(), sequences.end(), [](const StepSequence& q) { return q.logits > 1; }))
        for (int s = 0, row = 0; s < S; row += sequences[std::size_t(s)].tokens, ++s)
            for (int i = sequences[std::size_t(s)].tokens - sequences[std::size_t(s)].logits;
                 i < sequences[std::size_t(s)].tokens; ++i)
                logit_rows_host_.push_back(row + i);
    for (int s = 0; s < S; ++s) {
        const StepSequence& q = sequences[std::size_t(s)];
        meta_host_[std::size_t(s)] = q.tokens;
        meta_host_[std::size_t(B + s)] = q.context;
        meta_host_[std::size_t(2 * B + s)] = paged ? s : q.slot;  // paged: row s of the pass's tables
        if (paged) {
            std::fill_n(table_host_.begin() + std::ptrdiff_t(s) * max_blocks_, max_blocks_, -1);
            const std::size_t need = std::size_t(ceil_div(q.context + q.tokens, options_.cache.block_size));
            std::copy_n(q.blocks.begin(), need, table_host_.begin() + std::ptrdiff_t(s) * max_blocks_);
        }
        batch_.tokens += q.tokens;
        batch_.max_q_len = std::max(batch_.max_q_len, q.tokens);
        batch_.max_kv_len = std::max(batch_.max_kv_len, q.context + q.tokens);
        in_order = in_order && q.slot == s;
        uniform = uniform && q.tokens == sequences[0].tokens;
    }
    // asynchronous copies from members, which outlive them
    if (!tokens.empty())
        PD_CHECK_CUDA(cudaMemcpy(tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpyAsync(meta_.data(), meta_host_.data(), meta_.bytes(), cudaMemcpyHostToDevice));
    if (paged)
        PD_CHECK_CUDA(
            cudaMemcpyAsync(block_table_.data(), table_host_.data(), block_table_.bytes(), cudaMemcpyHostToDevice));
    if (!logit_rows_host_.empty())
        PD_CHECK_CUDA(cudaMemcpyAsync(logit_rows_.data(), logit_rows_host_.data(),
                                      logit_rows_host_.size() * sizeof(int), cudaMemcpyHostToDevice));
    const int* q_len = meta_.data();
    ly::pack_batch(q_len, meta_.data() + B, meta_.data() + 2 * B, q_start_.data(), kv_len_.data(), positions_.data(),
                   row_seq_.data(), S, scratch_.data(), scratch_.size());
    batch_.sequences = S;
    batch_.q_len = q_len;
    batch_.context = meta_.data() + B;
    batch_.slot = meta_.data() + 2 * B;
    batch_.q_start = q_start_.data();
    batch_.kv_len = kv_len_.data();
    batch_.positions = positions_.data();
    batch_.row_seq = row_seq_.data();
    batch_.block_table = paged ? block_table_.data() : nullptr;
    batch_.rows_in_order = in_order;
    batch_.uniform = uniform ? sequences[0].tokens : 0;
    batch_.stream = stream_;
}

// ---- chapter 04's batches -------------------------------------------------------------------

void Model::prefill(std::span<const int> tokens, int P) {
    const int B = options_.batch;
    if (options_.cache.block_size > 0)
        throw std::invalid_argument("prefill: a paged cache runs forward() with block tables");
    if (P < 1 || P > max_seq_)
        throw std::invalid_argument("prompt length " + std::to_string(P) +
                                    " must be in 1 .. max_seq = " + std::to_string(max_seq_));
    if (tokens.size() != std::size_t(B) * P)
        throw std::invalid_argument("prefill: " + std::to_string(tokens.size()) +
                                    " tokens, expected B * P = " + std::to_string(std::size_t(B) * P));
    std::vector<StepSequence> rows(static_cast<std::size_t>(B));  // sequence b in slot b, from position 0
    for (int b = 0; b < B; ++b) rows[std::size_t(b)] = {.slot = b, .context = 0, .tokens = P};
    forward(tokens, rows);  // length() = P
}

void Model::decode(std::span<const int> tokens) {
    if (tokens.size() != std::size_t(options_.batch))
        throw std::invalid_argument("decode: " + std::to_string(tokens.size()) +
                                    " tokens, expected B = " + std::to_string(options_.batch));
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= full_.vocab)
            throw std::invalid_argument("token " + std::to_string(i) + " = " + std::to_string(tokens[i]) +
                                        " is outside the vocabulary [0, " + std::to_string(full_.vocab) + ")");
    PD_CHECK_CUDA(cudaMemcpy(tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice));
    decode(tokens_.data());
}

void Model::decode(const int* tokens_device) {
    if (options_.cache.block_size > 0)
        throw std::invalid_argument("decode: a paged cache runs forward() with block tables");
    if (length_ < 1)
        throw std::invalid_argument(
            "decode before prefill: no pass has left every sequence at one length (length() = 0)");
    if (length_ >= max_seq_)
        throw std::invalid_argument("decode at position " + std::to_string(length_) +
                                    ": the cache holds max_seq = " + std::to_string(max_seq_) + " positions");
    const int B = options_.batch;
    std::vector<StepSequence> rows(static_cast<std::size_t>(B));  // one token per sequence, at position length()
    for (int b = 0; b < B; ++b) rows[std::size_t(b)] = {.slot = b, .context = length_, .tokens = 1};
    check({}, rows);
    if (group_) {  // split across ranks: each rank uploads the tokens to its device
        std::vector<int> host(static_cast<std::size_t>(B));
        PD_CHECK_CUDA(cudaMemcpy(host.data(), tokens_device, host.size() * sizeof(int), cudaMemcpyDeviceToHost));
        on_every_rank([&](Model& m) { m.forward_local(host, rows); });
        ++length_;
        return;
    }
    communication_ = {};
    graph_stats_.last_bucket = 0;
    if (replay_) {  // chapter 12: the batch's graph
        graph_pass({}, tokens_device, rows);
        ++length_;
        return;
    }
    if (tokens_device != tokens_.data())
        PD_CHECK_CUDA(
            cudaMemcpyAsync(tokens_.data(), tokens_device, std::size_t(B) * sizeof(int), cudaMemcpyDeviceToDevice));
    upload_batch({}, rows);
    const Plan p = plan(rows);
    if (options_.weights == DType::fp32)
        forward_pass<float>(p);
    else
        forward_pass<bf16>(p);
    ++length_;
}

void Model::rewind(int length) {
    if (length < 1 || length > length_)
        throw std::invalid_argument("rewind to " + std::to_string(length) + ": must be in 1 .. " +
                                    std::to_string(length_));
    length_ = length;
}

void Model::argmax(int* out_device) const {
    ly::argmax(logits_.data(), out_device, rows_ > 0 ? rows_ : options_.batch, full_.vocab);
}

std::vector<int> Model::greedy_tokens() const {
    DeviceBuffer<int> out(std::size_t(rows_ > 0 ? rows_ : options_.batch));
    argmax(out.data());
    return out.download();
}

void Model::sample(const ly::SamplingParams& p, std::span<const int> streams, std::span<const int> positions,
                   int* out_device) {
    const int R = rows_ > 0 ? rows_ : options_.batch;
    if (streams.size() != std::size_t(R) || positions.size() != std::size_t(R))
        throw std::invalid_argument("sample: " + std::to_string(streams.size()) + " streams and " +
                                    std::to_string(positions.size()) + " positions for " + std::to_string(R) +
                                    " rows of logits");
    PD_CHECK_CUDA(cudaMemcpy(draw_.data(), streams.data(), streams.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpy(draw_.data() + R, positions.data(), positions.size_bytes(), cudaMemcpyHostToDevice));
    ly::sample(logits_.data(), probs_.data(), out_device, draw_.data(), draw_.data() + R, R, full_.vocab, p);
}

void Model::sample(std::span<const ly::SamplingParams> rules, std::span<const int> streams,
                   std::span<const int> positions, int* out_device) {
    const int R = rows_ > 0 ? rows_ : options_.batch;
    if (rules.size() != std::size_t(R) || streams.size() != std::size_t(R) || positions.size() != std::size_t(R))
        throw std::invalid_argument(
            "sample: " + std::to_string(rules.size()) + " rules, " + std::to_string(streams.size()) + " streams and " +
            std::to_string(positions.size()) + " positions for " + std::to_string(R) + " rows of logits");
    for (const ly::SamplingParams& p : rules) ly::check_sampling(p, full_.vocab);  // before anything runs
    PD_CHECK_CUDA(cudaMemcpy(draw_.data(), streams.data(), streams.size_bytes(), cudaMemcpyHostToDevice));
    PD_CHECK_CUDA(cudaMemcpy(draw_.data() + R, positions.data(), positions.size_bytes(), cudaMemcpyHostToDevice));
    const auto same = [](const ly::SamplingParams& a, const ly::SamplingParams& b) {
        return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.seed == b.seed;
    };
    const std::size_t V = std::size_t(full_.vocab);
    for (int r = 0, end = 0; r < R; r = end) {  // each run of rows with one rule: one launch
        for (end = r + 1; end < R && same(rules[std::size_t(r)], rules[std::size_t(end)]);) ++end;
        ly::sample(logits_.data() + std::size_t(r) * V, probs_.data() + std::size_t(r) * V, out_device + r,
                   draw_.data() + r, draw_.data() + R + r, end - r, full_.vocab, rules[std::size_t(r)]);
    }
}

// [warm_up]
void Model::warm_up() {
    const int B = options_.batch, bs = options_.cache.block_size;
    std::vector<int> blocks(std::size_t(B) * std::size_t(std::max(max_blocks_, 1)));
    for (std::size_t i = 0; i < blocks.size(); ++i)
        blocks[i] = int(i % std::size_t(std::max(options_.cache.num_blocks, 1)));
    const auto table = [&](int s) {
        return bs > 0 ? std::span<const int>(blocks).subspan(std::size_t(s) * max_blocks_, std::size_t(max_blocks_))
                      : std::span<const int>();
    };
    // the largest pass: one prompt of as many tokens as a pass and a sequence take
    const int n = std::min(max_step_tokens_, max_seq_);
    const StepSequence prompt{.slot = 0, .context = 0, .tokens = n, .blocks = table(0)};
    forward(std::vector<int>(std::size_t(n), 0), std::span(&prompt, 1));
    // a mixed pass (varlen attention), when a sequence holds 3 positions and a pass 2 tokens
    if (max_seq_ >= 3 && max_step_tokens_ >= 2) {
        const StepSequence chunk{.slot = 0, .context = 1, .tokens = 2, .blocks = table(0)};
        forward(std::vector<int>(2, 0), std::span(&chunk, 1));
    }
    // decode batches of one sequence and of every slot (GEMV v3 and v5, decode attention)
    for (int S : {1, B}) {
        if (S > max_step_tokens_) continue;
        std::vector<StepSequence> rows(static_cast<std::size_t>(S));
        for (int s = 0; s < S; ++s) rows[std::size_t(s)] = {.slot = s, .context = 0, .tokens = 1, .blocks = table(s)};
        forward(std::vector<int>(std::size_t(S), 0), rows);
    }
    if (graphs_) capture_graphs();  // chapter 12: every bucket's graph, before anything is timed
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    length_ = 0;
}
// [warm_up]

}  // namespace pd::model
