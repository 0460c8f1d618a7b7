// Chapter 05's workloads: gamma-spaced arrivals with drawn lengths, CSV traces, and the
// long-prompt scenario.
#include "pd/serving/workload.hpp"

#include "pd/files.hpp"
#include "pd/rng.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace pd::serving {

namespace {

/// Uniform in the open interval (0, 1), 53 random bits: never 0, so its log is finite.
double uniform_open(Rng& rng) {
    return (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53;
}

/// Gamma(shape, 1) by Marsaglia and Tsang (2000), "A simple method for generating gamma
/// variables": for shape >= 1 a squeezed rejection from a cubed normal (accepts over 95% of the
/// time); for shape < 1 the boost gamma(a) = gamma(a + 1) * U^(1/a).
double gamma_unit(Rng& rng, double shape) {
    if (shape < 1) return gamma_unit(rng, shape + 1) * std::pow(uniform_open(rng), 1 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1 / std::sqrt(9 * d);
    for (;;) {
        const double x = rng.normal();
        const double t = 1 + c * x;
        if (t <= 0) continue;
        const double v = t * t * t;
        const double u = uniform_open(rng);
        if (u < 1 - 0.0331 * (x * x) * (x * x)) return d * v;  // the squeeze: no log needed
        if (std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
    }
}

/// One length drawn from @p s, rounded and clamped to [s.min, s.max].
int draw_length(Rng& rng, const LengthSpec& s) {
    double x = s.mean;
    switch (s.dist) {
        case LengthDist::fixed:
            x = std::round(s.mean);
            break;
        case LengthDist::uniform: {
            // Integers lo..hi equally likely: their mean is (lo + hi) / 2 = mean.
            const double lo = std::round(s.mean - s.spread);
            const double hi = std::round(s.mean + s.spread);
            x = std::floor(lo + uniform_open(rng) * (hi - lo + 1));
            break;
        }
        case LengthDist::lognormal: {
            // E[exp(N(mu, sigma^2))] = exp(mu + sigma^2 / 2), so mu = log(mean) - sigma^2 / 2.
            const double sigma = s.spread;
            const double mu = std::log(s.mean) - 0.5 * sigma * sigma;
            x = std::round(std::exp(mu + sigma * static_cast<double>(rng.normal())));
            break;
        }
    }
    return static_cast<int>(std::clamp(x, static_cast<double>(s.min), static_cast<double>(s.max)));
}

void check_length(const LengthSpec& s, const char* name) {
    const std::string n = name;
    if (!(s.mean > 0) || !std::isfinite(s.mean))
        throw std::invalid_argument("workload: " + n + ".mean must be positive and finite, got " +
                                    std::to_string(s.mean));
    if (!(s.spread >= 0) || !std::isfinite(s.spread))
        throw std::invalid_argument("workload: " + n + ".spread must be >= 0 and finite, got " +
                                    std::to_string(s.spread));
    if (s.min < 1) throw std::invalid_argument("workload: " + n + ".min must be >= 1, got " + std::to_string(s.min));
    if (s.max < s.min)
        throw std::invalid_argument("workload: " + n + ".max (" + std::to_string(s.max) + ") must be >= " + n +
                                    ".min (" + std::to_string(s.min) + ")");
}

/// @p s without surrounding spaces, tabs and carriage returns.
std::string_view trim(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return {};
    return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

/// Parses all of @p s as a T (double or int); false when it is not exactly one number.
template <typename T>
bool parse(std::string_view s, T& out) {
    if (s.empty()) return false;
    if (s.front() == '+') s.remove_prefix(1);  // from_chars takes no leading '+'
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::vector<Request> poisson_workload(const WorkloadSpec& spec) {
    if (spec.requests < 0)
        throw std::invalid_argument("workload: requests must be >= 0, got " + std::to_string(spec.requests));
    if (!(spec.rate >= 0))
        throw std::invalid_argument("workload: rate must be >= 0 (0 or inf: all at t = 0), got " +
                                    std::to_string(spec.rate));
    if (!(spec.burstiness > 0) || !std::isfinite(spec.burstiness))
        throw std::invalid_argument("workload: burstiness must be positive and finite, got " +
                                    std::to_string(spec.burstiness));
    check_length(spec.prompt, "prompt");
    check_length(spec.output, "output");

    Rng gaps(derive_seed(spec.seed, 0));
    Rng prompts(derive_seed(spec.seed, 1));
    Rng outputs(derive_seed(spec.seed, 2));
    const bool at_once = spec.rate == 0 || std::isinf(spec.rate);
    const double scale = at_once ? 0 : 1 / (spec.rate * spec.burstiness);

    std::vector<Request> out(static_cast<std::size_t>(spec.requests));
    double t = 0;
    for (int i = 0; i < spec.requests; ++i) {
        if (i > 0 && !at_once) t += scale * gamma_unit(gaps, spec.burstiness);
        Request& r = out[static_cast<std::size_t>(i)];
        r.id = i;
        r.arrival_s = t;
        r.prompt_tokens = draw_length(prompts, spec.prompt);
        r.output_tokens = draw_length(outputs, spec.output);
    }
    return out;
}

namespace {

/// Reads the next line of @p in into @p text, ending at "\n", "\r\n" or a lone "\r" (files
/// saved with classic Mac line ends); false at the end of the input. A line longer than
/// @p max_chars is not read to its end (a file of one endless line, such as /dev/zero): the
/// caller is told through @p too_long.
bool next_line(std::istream& in, std::string& text, std::size_t max_chars, bool& too_long) {
    text.clear();
    too_long = false;
    std::streambuf* buf = in.rdbuf();
    bool any = false;
    for (int c = buf->sbumpc(); c != std::char_traits<char>::eof(); c = buf->sbumpc()) {
        any = true;
        if (c == '\n') return true;
        if (c == '\r') {
            if (buf->sgetc() == '\n') buf->sbumpc();
            return true;
        }
        if (text.size() == max_chars) {
            too_long = true;
            return true;
        }
        text.push_back(char(c));
    }
    return any;
}

/// True for a header field: a name, not a number (starts with a letter or '_').
bool is_name(std::string_view field) {
    return !field.empty() && (std::isalpha(static_cast<unsigned char>(field.front())) || field.front() == '_');
}

}  // namespace

std::vector<Request> read_trace(const std::string& path) {
    pd::require_regular_file(path);  // a directory or a pipe: refused before the open (a FIFO would block)
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument(path + ": cannot open");
    const auto fail = [&](int line, const std::string& what) {
        throw std::invalid_argument(path + ":" + std::to_string(line) + ": " + what);
    };

    std::vector<Request> out;
    bool seen_data = false;  // a header may only come before the first data line
    int line_no = 0;
    bool too_long = false;
    for (std::string text; next_line(in, text, kMaxTraceLineChars, too_long);) {
        ++line_no;
        if (too_long)
            fail(line_no, "line longer than " + std::to_string(kMaxTraceLineChars) +
                              " characters (a trace has one short request per line)");
        if (line_no == 1 && text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);  // a UTF-8 byte-order mark
        std::string_view line = text;
        if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        line = trim(line);
        if (line.empty()) continue;

        std::vector<std::string_view> fields;
        for (std::size_t start = 0;;) {
            const std::size_t comma = line.find(',', start);
            fields.push_back(trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
            if (comma == std::string_view::npos) break;
            start = comma + 1;
        }

        double arrival = 0;
        int prompt = 0;
        int output = 0;
        const bool ok_arrival = fields.size() > 0 && parse(fields[0], arrival);
        const bool ok_prompt = fields.size() > 1 && parse(fields[1], prompt);
        const bool ok_output = fields.size() > 2 && parse(fields[2], output);
        if (!seen_data && std::all_of(fields.begin(), fields.end(), is_name)) {  // a header line
            seen_data = true;
            continue;
        }
        seen_data = true;
        if (fields.size() != 3)
            fail(line_no, "expected 3 fields (arrival seconds, prompt tokens, output tokens), got " +
                              std::to_string(fields.size()));
        if (!ok_arrival || !std::isfinite(arrival))
            fail(line_no, "bad arrival time '" + std::string(fields[0]) + "' (decimal seconds expected)");
        if (!ok_prompt)
            fail(line_no, "bad prompt token count '" + std::string(fields[1]) + "' (a decimal integer expected)");
        if (!ok_output)
            fail(line_no, "bad output token count '" + std::string(fields[2]) + "' (a decimal integer expected)");
        if (arrival < 0) fail(line_no, "negative arrival time " + std::string(fields[0]));
        if (arrival >= kMaxTraceArrival)
            fail(line_no, "arrival time " + std::string(fields[0]) +
                              " s is past 2^32 s, where a double no longer resolves a microsecond; give seconds"
                              " from the trace's start");
        if (prompt < 1 || prompt > kMaxTracePromptTokens)
            fail(line_no, "prompt tokens must be in [1, " + std::to_string(kMaxTracePromptTokens) + "], got " +
                              std::string(fields[1]));
        if (output < 1 || output > kMaxTraceOutputTokens)
            fail(line_no, "output tokens must be in [1, " + std::to_string(kMaxTraceOutputTokens) + "], got " +
                              std::string(fields[2]));
        if (out.size() == kMaxTraceRequests)
            fail(line_no, "more than " + std::to_string(kMaxTraceRequests) + " requests (the most a run takes)");
        Request r;
        r.arrival_s = arrival;
        r.prompt_tokens = prompt;
        r.output_tokens = output;
        out.push_back(r);
    }
    if (in.bad()) throw std::invalid_argument(path + ": read error");
    if (out.empty()) fail(std::max(line_no, 1), "no requests in the file");

    std::stable_sort(out.begin(), out.end(),
                     [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
    // Times from the first arrival: a trace of absolute timestamps replays as one that starts at 0.
    const double start = out.front().arrival_s;
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i].id = static_cast<int>(i);
        out[i].arrival_s -= start;
    }
    return out;
}

std::vector<Request> long_prompt_scenario(int users, int long_prompt, double long_arrival_s, int user_prompt,
                                          int user_output, int long_output) {
    const auto at_least = [](int v, int lo, const char* name) {
        if (v < lo)
            throw std::invalid_argument(std::string("long-prompt scenario: ") + name +
                                        " must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
    };
    at_least(users, 0, "users");
    at_least(long_prompt, 1, "long_prompt");
    at_least(user_prompt, 1, "user_prompt");
    at_least(user_output, 1, "user_output");
    at_least(long_output, 1, "long_output");
    if (!(long_arrival_s >= 0) || !std::isfinite(long_arrival_s))
        throw std::invalid_argument("long-prompt scenario: long_arrival_s must be >= 0 and finite, got " +
                                    std::to_string(long_arrival_s));

    std::vector<Request> out;
    for (int i = 0; i < users; ++i) out.push_back(Request{i, 0.0, user_prompt, user_output});
    out.push_back(Request{users, long_arrival_s, long_prompt, long_output});
    return out;
}

std::vector<Request> shared_prefix_scenario(const WorkloadSpec& spec, int system_tokens, int question_tokens,
                                            int vocab) {
    if (system_tokens < 1 || question_tokens < 1)
        throw std::invalid_argument(
            "shared-prefix scenario: the system prompt and the question must be >= 1 token, got " +
            std::to_string(system_tokens) + " and " + std::to_string(question_tokens));
    if (vocab < 2)
        throw std::invalid_argument("shared-prefix scenario: vocab must be >= 2, got " + std::to_string(vocab));
    WorkloadSpec fixed = spec;
    fixed.prompt = LengthSpec{.dist = LengthDist::fixed, .mean = double(system_tokens + question_tokens)};
    std::vector<Request> out = poisson_workload(fixed);
    Rng system(derive_seed(spec.seed, 0x5157));
    std::vector<int> prefix(static_cast<std::size_t>(system_tokens));
    for (int& t : prefix) t = system.integer(0, vocab - 1);
    for (Request& r : out) {
        Rng own(derive_seed(spec.seed, 0x51570000ull + static_cast<std::uint64_t>(r.id)));
        r.prompt = prefix;
        for (int i = 0; i < question_tokens; ++i) r.prompt.push_back(own.integer(0, vocab - 1));
        r.prompt_tokens = system_tokens + question_tokens;
    }
    return out;
}

}  // namespace pd::serving
