// HTTP/1.1 requests (pd::http::RequestParser, the server's reader of what clients send): the
// bytes fed whole and fed in two pieces cut where the input's first byte says end in the same
// state, with the same request or the same status; a complete request holds its Content-Length
// of body; an error's status is one the parser documents; never more taken than given.
#include "fuzz_input.hpp"
#include "pd/http.hpp"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace http = pd::http;
    if (size == 0) return 0;
    const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::size_t cut = std::size_t(data[0]) * bytes.size() / 255;
    const http::Limits limits{.max_head = 512, .max_body = 256, .max_headers = 8};

    http::RequestParser whole(limits);
    std::size_t used = 0;
    whole.feed(bytes, &used);
    pd::fuzz::require(used <= bytes.size(), "never more taken than given");
    http::RequestParser split(limits);
    std::size_t used1 = 0, used2 = 0;
    split.feed(bytes.substr(0, cut), &used1);
    split.feed(bytes.substr(used1 == cut ? cut : bytes.size()), &used2);
    pd::fuzz::require(split.state() == whole.state(), "the same state however the bytes are cut");
    pd::fuzz::require(split.status() == whole.status(), "the same status however the bytes are cut");
    if (whole.state() == http::RequestParser::State::done) {
        const http::Request& a = whole.request();
        const http::Request& b = split.request();
        pd::fuzz::require(used1 + used2 == used, "the same bytes taken");
        pd::fuzz::require(a.method == b.method && a.target == b.target && a.headers == b.headers && a.body == b.body,
                          "the same request");
        const std::string* length = a.header("content-length");
        pd::fuzz::require(a.body.size() == (length ? std::stoull(*length) : 0), "the body is Content-Length bytes");
        pd::fuzz::require(a.body.size() <= limits.max_body && a.headers.size() <= limits.max_headers, "within limits");
        pd::fuzz::require(!a.path.empty() && a.path[0] == '/', "a path");
    }
    if (whole.state() == http::RequestParser::State::error) {
        const int s = whole.status();
        pd::fuzz::require(s == 400 || s == 411 || s == 413 || s == 431 || s == 501 || s == 505, "a documented status");
        pd::fuzz::require(!whole.error().empty(), "a reason");
    }
    return 0;
}
