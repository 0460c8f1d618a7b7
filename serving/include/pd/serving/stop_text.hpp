/// @file stop_text.hpp
/// @brief A stream's text (host C++, no backend): the text of a request's tokens as they come,
/// sent only where it is whole and final. A token's bytes may end in the middle of a UTF-8
/// character (a byte-fallback token holds one byte of it), and its text may end with the start
/// of a stop string that the next token completes or not; what the stream sends must never be
/// taken back, so both are held until the next token decides. A stop string ends the text
/// before it (the stop string itself is not sent, as OpenAI's API and vLLM define `stop`).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pd::serving {

/// The text a stream may send, token by token, cut at the first of its stop strings.
class StopText {
public:
    /// @param stops the stop strings (may be empty; each non-empty)
    /// @throws std::invalid_argument naming an empty one ("stop[1] is empty")
    explicit StopText(std::vector<std::string> stops = {});

    /// Appends the bytes of the next token and returns the text that is now safe to send:
    /// whole UTF-8 characters (a byte that can never begin or continue one sent as U+FFFD),
    /// none of which could be the start of a stop string the next tokens complete. After a stop
    /// string, it returns the text before it and then nothing.
    /// @param piece the token's bytes
    std::string push(std::string_view piece);
    /// The stream ends (its token limit, its end-of-sequence token, or a cancellation): returns
    /// the text held back (an incomplete character at the very end sent as U+FFFD).
    std::string finish();
    /// True once a stop string appeared: push() sends nothing more.
    bool stopped() const { return stopped_; }
    /// The stop string that appeared (empty until one does).
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string held_;  // received, not sent
    bool stopped_ = false;
    std::string matched_;
};

/// The bytes of a complete UTF-8 character that starts with @p lead: 1 to 4, or 0 for a byte
/// that cannot start one (a continuation byte, 0xC0, 0xC1, 0xF5 ... 0xFF).
/// @param lead the first byte
int utf8_length(unsigned char lead);

/// @p text with every byte that does not belong to a well-formed UTF-8 character (RFC 3629: no
/// overlong form, no surrogate, nothing past U+10FFFF) replaced by U+FFFD, and where
/// @p keep_incomplete, an incomplete but well-formed character at the very end left out;
/// @p kept receives how many bytes of @p text the result covers.
/// @param text the bytes  @param keep_incomplete true: hold back an incomplete last character
/// @param kept where the covered length goes (or null)
std::string utf8_sanitized(std::string_view text, bool keep_incomplete, std::size_t* kept = nullptr);

}  // namespace pd::serving
