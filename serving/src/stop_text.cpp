// A stream's text (stop_text.hpp): held back while a character is incomplete or a stop string
// may be starting; sent once the next token decides.
#include "pd/serving/stop_text.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace pd::serving {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// The range the byte after @p lead must fall in (RFC 3629's table: it rules out overlong forms,
/// the surrogates and what lies past U+10FFFF); the bytes after it are 0x80 ... 0xBF.
std::pair<unsigned char, unsigned char> second_byte_range(unsigned char lead) {
    switch (lead) {
        case 0xE0:
            return {0xA0, 0xBF};
        case 0xED:
            return {0x80, 0x9F};
        case 0xF0:
            return {0x90, 0xBF};
        case 0xF4:
            return {0x80, 0x8F};
        default:
            return {0x80, 0xBF};
    }
}

}  // namespace

int utf8_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

std::string utf8_sanitized(std::string_view text, bool keep_incomplete, std::size_t* kept) {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        const auto lead = static_cast<unsigned char>(text[i]);
        const int n = utf8_length(lead);
        if (n == 0) {  // a byte no character starts with
            out += kReplacement;
            ++i;
            continue;
        }
        // how many of its bytes are well formed: 1 ... n
        int good = 1;
        for (; good < n && i + std::size_t(good) < text.size(); ++good) {
            const auto b = static_cast<unsigned char>(text[i + std::size_t(good)]);
            const auto [lo, hi] =
                good == 1 ? second_byte_range(lead) : std::pair<unsigned char, unsigned char>{0x80, 0xBF};
            if (b < lo || b > hi) break;
        }
        if (good == n) {
            out.append(text.substr(i, std::size_t(n)));
        } else if (i + std::size_t(good) == text.size() && keep_incomplete) {
            break;  // the text ends inside it: the next bytes may complete it
        } else {
            out += kReplacement;  // its well-formed start, as one replacement (Unicode's maximal subpart)
        }
        i += std::size_t(good);
    }
    if (kept) *kept = i;
    return out;
}

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (std::size_t i = 0; i < stops_.size(); ++i)
        if (stops_[i].empty()) throw std::invalid_argument("stop[" + std::to_string(i) + "] is empty");
}

// [stop_text_push]
std::string StopText::push(std::string_view piece) {
    if (stopped_) return {};
    held_.append(piece);
    // The first stop string in the text (the earliest start): the text before it is the last sent.
    std::size_t first = std::string::npos;
    for (const std::string& s : stops_) {
        const std::size_t at = held_.find(s);
        if (at < first) first = at, matched_ = s;
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = utf8_sanitized(std::string_view(held_).substr(0, first), false);
        held_.clear();
        return out;
    }
    // Held back: the longest end of the text that begins a stop string, and a last character
    // still incomplete. Everything before them is final.
    std::size_t hold = 0;
    for (const std::string& s : stops_)
        for (std::size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    std::size_t sent = 0;
    std::string out = utf8_sanitized(std::string_view(held_).substr(0, held_.size() - hold), true, &sent);
    held_.erase(0, sent);
    return out;
}
// [stop_text_push]

std::string StopText::finish() {
    if (stopped_) return {};
    std::string out = utf8_sanitized(held_, false);
    held_.clear();
    return out;
}

}  // namespace pd::serving
