// Speculative decoding on the host: greedy acceptance, the acceptance metrics, Leviathan et al.'s
// formulas and the two proposers without a model. The rejection sampler is lab 09's
// (<lab tree>/09_speculative/rejection_sampler.cpp, in pd_serving_labs_<tree>).
#include "pd/serving/speculative.hpp"

#include "pd/philox.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

/// @p x as a person writes it: 0.5, 1.5, 1e-07 (std::to_string would print 0.500000).
std::string spec_number(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
}

/// Throws unless @p a is an acceptance rate (in [0, 1]) and @p k a draft length (>= 0).
void spec_check_rate_and_k(const char* what, double a, int k) {
    if (!(a >= 0.0 && a <= 1.0))
        throw std::invalid_argument(std::string(what) + ": a = " + spec_number(a) + " must be in [0, 1]");
    if (k < 0) throw std::invalid_argument(std::string(what) + ": k = " + std::to_string(k) + " must be >= 0");
}

}  // namespace

int accept_greedy(std::span<const int> draft, std::span<const int> target_choice) {
    if (target_choice.size() != draft.size() + 1)
        throw std::invalid_argument("accept_greedy: target_choice has " + std::to_string(target_choice.size()) +
                                    " tokens, must have draft.size() + 1 = " + std::to_string(draft.size() + 1));
    std::size_t n = 0;
    while (n < draft.size() && draft[n] == target_choice[n]) ++n;
    return static_cast<int>(n);
}

void AcceptanceStats::record(int proposed, int accepted_tokens) {
    if (proposed < 0 || accepted_tokens < 0 || accepted_tokens > proposed)
        throw std::invalid_argument("AcceptanceStats::record: accepted = " + std::to_string(accepted_tokens) +
                                    " must be in 0 ... proposed = " + std::to_string(proposed));
    if (proposed == 0) return;  // a step without a draft: not a draft (vLLM counts none)
    ++drafts;
    draft_tokens += proposed;
    accepted += accepted_tokens;
    const std::size_t k = static_cast<std::size_t>(proposed);
    if (proposed_at.size() < k) proposed_at.resize(k, 0), accepted_at.resize(k, 0);
    for (std::size_t i = 0; i < k; ++i) ++proposed_at[i];
    for (std::size_t i = 0; i < static_cast<std::size_t>(accepted_tokens); ++i) ++accepted_at[i];
}

void AcceptanceStats::merge(const AcceptanceStats& other) {
    drafts += other.drafts;
    draft_tokens += other.draft_tokens;
    accepted += other.accepted;
    if (proposed_at.size() < other.proposed_at.size()) {
        proposed_at.resize(other.proposed_at.size(), 0);
        accepted_at.resize(other.proposed_at.size(), 0);
    }
    for (std::size_t i = 0; i < other.proposed_at.size(); ++i) {
        proposed_at[i] += other.proposed_at[i];
        accepted_at[i] += other.accepted_at[i];
    }
}

double AcceptanceStats::acceptance_rate() const {
    return draft_tokens > 0 ? double(accepted) / double(draft_tokens) : 0.0;
}

double AcceptanceStats::mean_acceptance_length() const {
    return drafts > 0 ? 1.0 + double(accepted) / double(drafts) : 1.0;
}

std::vector<double> AcceptanceStats::per_position() const {
    std::vector<double> rates(proposed_at.size(), 0.0);
    for (std::size_t i = 0; i < rates.size(); ++i)
        rates[i] = proposed_at[i] > 0 ? double(accepted_at[i]) / double(proposed_at[i]) : 0.0;
    return rates;
}

double expected_tokens_per_step(double a, int k) {
    spec_check_rate_and_k("expected_tokens_per_step", a, k);
    if (a == 1.0) return k + 1.0;
    // 1 + a + a^2 + ... + a^k: token i + 1 of the step exists when the first i draft tokens were kept
    return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

double predicted_speedup(double a, int k, double c_draft, double c_verify) {
    spec_check_rate_and_k("predicted_speedup", a, k);
    if (!(c_draft >= 0.0) || !std::isfinite(c_draft))
        throw std::invalid_argument("predicted_speedup: c_draft = " + spec_number(c_draft) + " must be >= 0");
    if (!(c_verify > 0.0) || !std::isfinite(c_verify))
        throw std::invalid_argument("predicted_speedup: c_verify = " + spec_number(c_verify) + " must be > 0");
    return expected_tokens_per_step(a, k) / (k * c_draft + c_verify);
}

std::vector<int> propose_ngram(std::span<const int> tokens, int k, int max_n, int min_n) {
    if (k < 1) throw std::invalid_argument("propose_ngram: k = " + std::to_string(k) + " must be >= 1");
    if (min_n < 1) throw std::invalid_argument("propose_ngram: min_n = " + std::to_string(min_n) + " must be >= 1");
    if (max_n < min_n)
        throw std::invalid_argument("propose_ngram: max_n = " + std::to_string(max_n) +
                                    " must be >= min_n = " + std::to_string(min_n));
    const std::ptrdiff_t L = static_cast<std::ptrdiff_t>(tokens.size());
    for (std::ptrdiff_t n = max_n; n >= min_n; --n) {
        // an occurrence at s is earlier than the suffix and followed by a token when s + n < L
        for (std::ptrdiff_t s = L - n - 1; s >= 0; --s) {
            if (!std::equal(tokens.begin() + s, tokens.begin() + s + n, tokens.end() - n)) continue;
            const std::ptrdiff_t end = std::min(L, s + n + k);
            return std::vector<int>(tokens.begin() + s + n, tokens.begin() + end);
        }
    }
    return {};
}

std::vector<int> propose_oracle(std::span<const int> truth, int V, double a, std::uint64_t seed, std::uint64_t stream,
                                std::uint64_t index0) {
    if (V < 2) throw std::invalid_argument("propose_oracle: V = " + std::to_string(V) + " must be >= 2");
    if (!(a >= 0.0 && a <= 1.0))
        throw std::invalid_argument("propose_oracle: a = " + spec_number(a) + " must be in [0, 1]");
    std::vector<int> draft(truth.size());
    for (std::size_t i = 0; i < truth.size(); ++i) {
        const int t = truth[i];
        if (t < 0 || t >= V)
            throw std::invalid_argument("propose_oracle: truth[" + std::to_string(i) + "] = " + std::to_string(t) +
                                        " must be in [0, V = " + std::to_string(V) + ")");
        const std::uint64_t index = index0 + 2 * std::uint64_t(i);
        if (pd::philox_uniform(seed, stream, index) < a) {
            draft[i] = t;
            continue;
        }
        // one of the V - 1 other tokens, uniformly: an index among them, past t when it reaches t
        const float r = pd::philox_uniform(seed, stream, index + 1);
        const int other = std::min(V - 2, static_cast<int>(r * float(V - 1)));
        draft[i] = other < t ? other : other + 1;
    }
    return draft;
}

}  // namespace pd::serving
