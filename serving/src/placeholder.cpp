// Placeholder tokens for the cost model (placeholder.hpp).
#include "pd/serving/placeholder.hpp"

#include "pd/rng.hpp"

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pd::serving {

namespace {

// 32 words, so that streamed placeholder text reads as words and its lengths vary
constexpr std::array<std::string_view, 32> kWords = {
    "the",   "prefill", "decode", "token",  "cache", "block", "batch",  "step",   "kernel", "warp",  "tile",
    "query", "key",     "value",  "head",   "layer", "slot",  "page",   "stream", "clock",  "queue", "budget",
    "chunk", "prompt",  "model",  "memory", "bound", "roof",  "tensor", "core",   "rank",   "graph"};

}  // namespace

PlaceholderTokens::PlaceholderTokens(Executor& inner, int eos_after) : inner_(inner), eos_after_(eos_after) {
    if (eos_after < 0)
        throw std::invalid_argument("eos_after = " + std::to_string(eos_after) +
                                    " must be >= 0 (0: no end-of-sequence token)");
}

int PlaceholderTokens::vocab() {
    return static_cast<int>(kWords.size()) + 1;
}

std::string PlaceholderTokens::text(int id) {
    if (id < 0 || id >= vocab())
        throw std::invalid_argument("placeholder token " + std::to_string(id) + " is outside 0 ... " +
                                    std::to_string(vocab() - 1));
    return id == placeholder_eos() ? std::string() : " " + std::string(kWords[static_cast<std::size_t>(id)]);
}

void PlaceholderTokens::arrive(const Request& r) {
    if (r.id >= static_cast<int>(emitted_.size())) emitted_.resize(static_cast<std::size_t>(r.id) + 1, 0);
    inner_.arrive(r);
}

double PlaceholderTokens::run(const Step& step) {
    const double seconds = inner_.run(step);
    const std::vector<int> kept = inner_.accepted();
    tokens_.clear();
    for (std::size_t i = 0; i < step.items.size(); ++i) {
        const BatchItem& item = step.items[i];
        if (!item.emits) continue;
        const auto id = static_cast<std::size_t>(item.request);
        if (id >= emitted_.size()) emitted_.resize(id + 1, 0);
        for (int t = 0; t <= (kept.empty() ? 0 : kept[i]); ++t) {
            const int k = emitted_[id]++;
            const std::uint64_t draw =
                derive_seed(static_cast<std::uint64_t>(item.request), static_cast<std::uint64_t>(k));
            tokens_.push_back(eos_after_ > 0 && k == eos_after_ - 1 ? placeholder_eos()
                                                                    : static_cast<int>(draw % kWords.size()));
        }
    }
    return seconds;
}

std::string PlaceholderTokens::describe() const {
    return inner_.describe() + ", placeholder tokens" +
           (eos_after_ > 0 ? " (end of sequence after " + std::to_string(eos_after_) + ")" : std::string());
}

}  // namespace pd::serving
