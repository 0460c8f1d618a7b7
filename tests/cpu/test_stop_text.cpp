// A stream's text (serving/stop_text.hpp): a stop string spanning tokens is never sent, a
// prefix that turns out not to be one is sent whole once decided, characters split across
// tokens are sent whole, ill-formed bytes become U+FFFD (RFC 3629's rules, Unicode's maximal
// subparts), the earliest of several stop strings wins; and over seeded random texts cut into
// random tokens, what is sent is always the text up to the first stop string, in whole
// characters, never taken back.
#include "pd/rng.hpp"
#include "pd/serving/stop_text.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

/// What a stream sends for @p pieces, push by push, then finish() (last).
std::vector<std::string> sent(sv::StopText& s, const std::vector<std::string>& pieces) {
    std::vector<std::string> out;
    for (const std::string& p : pieces) out.push_back(s.push(p));
    out.push_back(s.finish());
    return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

}  // namespace

TEST_CASE("stop text: a stop string across tokens is never sent, nor anything after it", "[stop_text]") {
    sv::StopText s({"STOP"});
    CHECK(sent(s, {"Hel", "lo wo", "rld ST", "OP and", " more"}) ==
          std::vector<std::string>{"Hel", "lo wo", "rld ", "", "", ""});
    CHECK(s.stopped());
    CHECK(s.matched() == "STOP");
}

TEST_CASE("stop text: a prefix that is not a stop string after all is sent when decided", "[stop_text]") {
    sv::StopText s({"STOP", "\n\n"});
    CHECK(sent(s, {"a ST", "AR", "\n", "x", "ST"}) == std::vector<std::string>{"a ", "STAR", "", "\nx", "", "ST"});
    CHECK_FALSE(s.stopped());
    CHECK(s.matched().empty());
    // a stop string inside one token, with text on both sides
    sv::StopText t({"\n\n"});
    CHECK(sent(t, {"one\n\ntwo"}) == std::vector<std::string>{"one", ""});
}

TEST_CASE("stop text: the earliest stop string wins, whichever is listed first", "[stop_text]") {
    sv::StopText s({"world", "lo"});
    CHECK(sent(s, {"hello world"}) == std::vector<std::string>{"hel", ""});
    CHECK(s.matched() == "lo");
    // overlapping prefixes: "abd" begins inside "aab", so "aa" is held, then "a" sent
    sv::StopText t({"aab", "abd"});
    CHECK(sent(t, {"xa", "a", "bd"}) == std::vector<std::string>{"x", "", "", ""});  // "aab" starts at 1
    CHECK(t.matched() == "aab");
}

TEST_CASE("stop text: characters split across tokens are sent whole, ill-formed bytes as U+FFFD", "[stop_text]") {
    sv::StopText s;
    // é (C3 A9), then a 4-byte emoji (F0 9F 98 80) one byte per token
    CHECK(sent(s, {"caf\xC3", "\xA9!", "\xF0", "\x9F", "\x98", "\x80"}) ==
          std::vector<std::string>{"caf", "\xC3\xA9!", "", "", "", "\xF0\x9F\x98\x80", ""});
    sv::StopText bad;
    // a stray continuation byte, an overlong lead (C0), a surrogate (ED A0 80), a lead cut short
    // by an ASCII byte, and a character cut short by the end of the stream
    CHECK(bad.push("a\x80"
                   "b\xC0\xAF"
                   "c\xED\xA0\x80"
                   "d\xE2\x82"
                   "e\xE2\x82") == "a" + kFffd + "b" + kFffd + kFffd + "c" + kFffd + kFffd + kFffd + "d" + kFffd + "e");
    CHECK(bad.finish() == kFffd);
    // the text before a stop string ends in a cut character
    sv::StopText cut({"END"});
    CHECK(sent(cut, {"x\xC3", "END"}) == std::vector<std::string>{"x", kFffd, ""});
}

TEST_CASE("stop text: an empty stop string is refused by name", "[stop_text]") {
    CHECK_THROWS_WITH(sv::StopText({"ok", ""}), Contains("stop[1] is empty"));
}

TEST_CASE("stop text: random texts in random tokens send the text up to the first stop string", "[stop_text]") {
    // an alphabet of 1- to 4-byte characters, and stop strings made of it (so they recur)
    const std::vector<std::string> chars = {"a", "b", " ", "\n", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
    pd::Rng rng(pd::derive_seed(20261207, 13));
    for (int trial = 0; trial < 2000; ++trial) {
        const auto word = [&](int n) {
            std::string w;
            for (int i = 0; i < n; ++i) w += chars[std::size_t(rng.integer(0, int(chars.size()) - 1))];
            return w;
        };
        std::vector<std::string> stops;
        for (int i = 0, n = int(rng.integer(0, 3)); i < n; ++i) stops.push_back(word(int(rng.integer(1, 4))));
        const std::string text = word(int(rng.integer(0, 60)));
        std::size_t first = std::string::npos;
        for (const std::string& s : stops) first = std::min(first, text.find(s));
        const std::string want = text.substr(0, first);

        sv::StopText st(stops);
        std::string got;
        for (std::size_t at = 0; at < text.size() && !st.stopped();) {  // tokens of 1 to 6 bytes
            const std::size_t n = std::size_t(rng.integer(1, 6));
            const std::string part = st.push(std::string_view(text).substr(at, n));
            // every piece sent is whole characters, and never an undone part of the text
            std::size_t kept = 0;
            CHECK(sv::utf8_sanitized(part, true, &kept) == part);
            CHECK(kept == part.size());
            got += part;
            REQUIRE(want.compare(0, got.size(), got) == 0);
            at += n;
        }
        got += st.finish();
        INFO("trial " << trial << ": " << stops.size() << " stop strings, text of " << text.size() << " bytes");
        CHECK(got == want);
        CHECK(st.stopped() == (first != std::string::npos));
    }
}
