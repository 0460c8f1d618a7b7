/// @file workload.hpp
/// @brief Chapter 05's workloads: seeded Poisson (gamma) arrivals with fixed, uniform or
/// lognormal lengths as vLLM's serving benchmark draws them, a CSV trace reader, and the
/// `long-prompt` scenario (streams interrupted by one very long prompt).
#pragma once

#include "pd/serving/types.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pd::serving {

/// How a length (prompt or output tokens) is distributed.
enum class LengthDist {
    fixed,     ///< always LengthSpec::mean (rounded)
    uniform,   ///< integers uniform in [mean - spread, mean + spread] (rounded ends)
    lognormal  ///< exp(N(mu, spread^2)) rounded, with mu chosen so that the mean is LengthSpec::mean
};

/// The distribution of one length of a workload, clamped to [min, max] after drawing (so the
/// mean of a clamped distribution moves towards the bounds).
struct LengthSpec {
    LengthDist dist = LengthDist::fixed;  ///< the distribution
    double mean = 256;                    ///< its mean in tokens (> 0)
    /// uniform: the half-width of the range; lognormal: sigma of the log (0 gives `mean`);
    /// unused by fixed. Must be >= 0.
    double spread = 0;
    int min = 1;        ///< smallest length after clamping (>= 1)
    int max = 1 << 20;  ///< largest length after clamping (>= min)
};

/// A synthetic workload: @ref requests arrivals at @ref rate, each with a prompt and an output
/// length drawn from their distributions.
struct WorkloadSpec {
    int requests = 100;  ///< number of requests (>= 0)
    /// Mean arrival rate in requests per second; 0 or +infinity puts every arrival at t = 0
    /// (vLLM's `--request-rate inf`).
    double rate = 1.0;
    /// Shape of the gamma distribution of the gaps between arrivals (> 0): 1 is a Poisson
    /// process (exponential gaps), below 1 burstier, above 1 more regular. The coefficient of
    /// variation of the gaps is 1/sqrt(burstiness).
    double burstiness = 1.0;
    LengthSpec prompt;       ///< prompt lengths
    LengthSpec output;       ///< output lengths (the first output token comes from the prefill)
    std::uint64_t seed = 1;  ///< fixes the whole workload
};

/// Draws a synthetic workload, as vLLM's serving benchmark (`benchmark_serving.py`,
/// `get_request`) spaces its requests: request 0 arrives at t = 0 and each next one a gap later,
/// the gaps independent gamma(shape = burstiness, scale = 1 / (rate * burstiness)) variables,
/// so their mean is 1/rate whatever the burstiness. (Newer vLLM versions also rescale the
/// arrival times so that the last lands at requests/rate; this does not.)
///
/// Gaps, prompt lengths and output lengths come from three independent streams of the seed
/// (pd::derive_seed), so changing a length distribution leaves the arrival times unchanged.
/// The generator is pd::Rng (std::mt19937_64 with the conversions written out) and the gamma
/// sampler is Marsaglia and Tsang's, so a seed gives the same workload on every platform.
/// @param spec the workload; every field is checked
/// @return spec.requests requests with ids 0, 1, 2, ... in arrival order
/// @throws std::invalid_argument naming the field for a spec out of range (negative or NaN
///         rate, burstiness <= 0, a length mean <= 0, a spread < 0, min < 1 or max < min)
std::vector<Request> poisson_workload(const WorkloadSpec& spec);

/// The longest line read_trace() reads (characters): a request takes a few dozen.
inline constexpr std::size_t kMaxTraceLineChars = 4096;
/// The most requests a trace may hold: the range of `--requests`.
inline constexpr std::size_t kMaxTraceRequests = 1000000;
/// The largest prompt and output token counts of a trace line: the ranges of `--prompt-len` and
/// `--output-len` (their sum stays far inside an int).
inline constexpr int kMaxTracePromptTokens = 10000000;
inline constexpr int kMaxTraceOutputTokens = 1000000;  ///< see kMaxTracePromptTokens
/// Arrival times must be below 2^32 s (136 years): past it a double's step exceeds 1 us.
inline constexpr double kMaxTraceArrival = 0x1p32;

/// Reads a trace file: a CSV of one request per line, `arrival seconds, prompt tokens, output
/// tokens`, in decimal. Lines end with "\n", "\r\n" or "\r"; a UTF-8 byte-order mark is
/// skipped; blank lines are skipped, `#` starts a comment that runs to the end of the line, and
/// the first non-comment line is a header (skipped) when every field is a name (starts with a
/// letter or '_'). Fields may be padded with spaces; token counts are integers. Arrival times
/// are taken from the earliest one: a trace of absolute timestamps replays from 0.
/// @param path the CSV file
/// @return the requests sorted by arrival time (stably, so ties keep the file's order), with ids
///         0, 1, 2, ... in that order, the first arriving at 0
/// @throws std::invalid_argument "<path>:<line>: <what>" for a line that is not three fields
///         or longer than kMaxTraceLineChars, a field that is not a decimal number, an arrival
///         time that is negative, not finite or past kMaxTraceArrival, a token count outside
///         [1, kMaxTracePromptTokens] (prompt) or [1, kMaxTraceOutputTokens] (output), more than
///         kMaxTraceRequests requests, or a file without requests (the line is then the file's
///         last, or 1); "<path>: cannot open" when the file cannot be read
std::vector<Request> read_trace(const std::string& path);

/// The `--scenario long-prompt` workload: @p users requests arrive at t = 0 with short prompts
/// and long outputs, so they are all streaming when one long prompt arrives at
/// @p long_arrival_s. Served with whole-prompt prefill, the long prompt's prefill freezes every
/// stream for its duration; chunked prefill keeps them flowing. The defaults are sized for a
/// 70B model on 8 x H100 (ITL about 25 ms, a 50,000-token prefill about 2.8 s): after 1 s each
/// stream has produced about 40 of its 400 tokens, and it is still streaming well after the
/// long prompt's prefill ends.
/// @param users number of streaming requests (>= 0), ids 0 .. users - 1
/// @param long_prompt the long prompt's length in tokens (>= 1); its id is @p users
/// @param long_arrival_s when the long prompt arrives, seconds (>= 0)
/// @param user_prompt each stream's prompt length (>= 1)
/// @param user_output each stream's output length (>= 1)
/// @param long_output the long prompt's output length (>= 1)
/// @return users + 1 requests in arrival order
/// @throws std::invalid_argument naming the parameter out of range
std::vector<Request> long_prompt_scenario(int users = 16, int long_prompt = 50000, double long_arrival_s = 1.0,
                                          int user_prompt = 100, int user_output = 400, int long_output = 16);

/// The `--scenario shared-prefix` workload (chapter 06): requests that all begin with the same
/// system prompt, each followed by its own question, arriving as @p spec says (its prompt
/// lengths are ignored). The prompts carry their token ids: the system prompt's are the same
/// in every request, each question's are its own, so a prefix cache can find what they share.
/// @param spec arrivals and output lengths (its prompt field is not used)
/// @param system_tokens the shared system prompt's length (>= 1)
/// @param question_tokens each request's own part (>= 1)
/// @param vocab token ids are drawn in [0, vocab) (>= 2)
/// @return spec.requests requests with their prompts, ids 0, 1, 2, ... in arrival order
/// @throws std::invalid_argument naming the parameter out of range
std::vector<Request> shared_prefix_scenario(const WorkloadSpec& spec, int system_tokens = 1000,
                                            int question_tokens = 100, int vocab = 32000);

}  // namespace pd::serving
