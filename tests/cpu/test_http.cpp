// HTTP/1.1 requests (pd/http.hpp): a request parsed whole and cut at every byte gives the same
// fields; a pipelined request is left for the next parser; each malformed or oversized request
// gets its status (400, 411, 413, 431, 501, 505) as soon as its bytes decide it, a head past
// the limit without waiting for its end; keep-alive by version and Connection; the responses'
// and the server-sent events' bytes.
#include "pd/http.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace http = pd::http;
using Catch::Matchers::Contains;
using State = http::RequestParser::State;

namespace {

const std::string kPost =
    "POST /v1/completions?stream=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type:  application/json \r\n"
    "Content-Length: 13\r\n\r\n{\"prompt\":42}";

/// The parser after @p bytes, fed whole.
http::RequestParser parsed(const std::string& bytes, const http::Limits& limits = {}) {
    http::RequestParser p(limits);
    p.feed(bytes);
    return p;
}

}  // namespace

TEST_CASE("http: a request whole, and cut at every byte, gives the same fields", "[http]") {
    const http::RequestParser whole = parsed(kPost);
    REQUIRE(whole.state() == State::done);
    const http::Request& r = whole.request();
    CHECK(r.method == "POST");
    CHECK(r.target == "/v1/completions?stream=1");
    CHECK(r.path == "/v1/completions");
    CHECK(r.query == "stream=1");
    CHECK(r.minor == 1);
    REQUIRE(r.header("content-type"));
    CHECK(*r.header("content-type") == "application/json");  // spaces around it trimmed
    CHECK(r.header("accept") == nullptr);
    CHECK(r.body == "{\"prompt\":42}");
    CHECK(r.keep_alive());
    for (std::size_t cut = 0; cut <= kPost.size(); ++cut) {
        http::RequestParser p;
        std::size_t used = 0;
        CHECK(p.feed(std::string_view(kPost).substr(0, cut), &used) ==
              (cut < kPost.size() ? State::more : State::done));
        CHECK(used == cut);
        CHECK(p.feed(std::string_view(kPost).substr(cut)) == State::done);
        CHECK(p.request().headers == r.headers);
        CHECK(p.request().body == r.body);
    }
    http::RequestParser bytewise;
    for (char c : kPost) bytewise.feed(std::string_view(&c, 1));
    CHECK(bytewise.state() == State::done);
    CHECK(bytewise.request().body == r.body);
}

TEST_CASE("http: a pipelined request is left to the next parser, and empty lines before one are skipped", "[http]") {
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    http::RequestParser first;
    std::size_t used = 0;
    CHECK(first.feed("\r\n" + get + kPost, &used) == State::done);
    CHECK(used == 2 + get.size());
    CHECK(first.request().path == "/health");
    CHECK(first.request().body.empty());
    http::RequestParser second;
    CHECK(second.feed(std::string_view(kPost)) == State::done);
    // a bare LF ends lines too (RFC 9112 lets a server accept it); empty lines of either kind
    // before the request line are skipped, however many (the fuzzer's find: one, then more bytes)
    CHECK(parsed("GET / HTTP/1.0\n\n").state() == State::done);
    CHECK(parsed("\n\r\n\nGET / HTTP/1.0\n\n").state() == State::done);
    CHECK(parsed("\nsoj").state() == State::more);
}

TEST_CASE("http: each malformed or oversized request gets its status", "[http]") {
    struct Case {
        std::string bytes;
        int status;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
        {"GET / HTTP/1.1 x\r\nHost: x\r\n\r\n", 400, "request line"},
        {"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "method"},
        {"GET v1 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "target"},
        {"GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "target"},
        {"GET / http/1.1\r\nHost: x\r\n\r\n", 400, "HTTP version"},
        {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "2.0"},
        {"GET / HTTP/1.1\r\nHost x\r\n\r\n", 400, "no ':'"},
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "not a token"},
        {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "folded"},
        {"GET / HTTP/1.1\r\nHost: x\x7f\r\n\r\n", 400, "control character"},
        {"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400, "without Host"},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "Content-Length"},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "not a number"},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400, "not a number"},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400, "twice"},
        {"POST / HTTP/1.1\r\nHost: x\r\n\r\n", 411, "without Content-Length"},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", 413, "2000 bytes"},
    };
    for (const Case& c : cases) {
        INFO(c.bytes);
        const http::RequestParser p = parsed(c.bytes, {.max_body = 1000});
        REQUIRE(p.state() == State::error);
        CHECK(p.status() == c.status);
        CHECK_THAT(p.error(), Contains(c.says));
    }
    // HTTP/1.0 needs no Host
    CHECK(parsed("GET / HTTP/1.0\r\n\r\n").state() == State::done);
    // a head past the limit fails at its limit, without waiting for a newline that never comes
    http::RequestParser endless({.max_head = 64});
    std::size_t used = 0;
    CHECK(endless.feed("GET /" + std::string(200, 'a'), &used) == State::error);
    CHECK(endless.status() == 431);
    CHECK(used == 65);
    CHECK(endless.feed("more") == State::error);  // it takes nothing after an error
    std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 10; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
    const http::RequestParser fields = parsed(many + "\r\n", {.max_headers = 8});
    CHECK(fields.status() == 431);
    // a body past the limit fails once its head is read, before any of the body arrives
    http::RequestParser big({.max_body = 10});
    CHECK(big.feed("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n") == State::error);
    CHECK(big.status() == 413);
}

TEST_CASE("http: keep-alive by version and Connection", "[http]") {
    CHECK(parsed("GET / HTTP/1.1\r\nHost: x\r\n\r\n").request().keep_alive());
    CHECK_FALSE(parsed("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n").request().keep_alive());
    CHECK_FALSE(parsed("GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade, close\r\n\r\n").request().keep_alive());
    CHECK_FALSE(parsed("GET / HTTP/1.0\r\n\r\n").request().keep_alive());
    CHECK(parsed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").request().keep_alive());
}

TEST_CASE("http: responses and server-sent events", "[http]") {
    CHECK(http::response(429, "application/json", "{}", false, {{"Retry-After", "1"}}) ==
          "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: 2\r\nRetry-After: "
          "1\r\nConnection: close\r\n\r\n{}");
    CHECK(http::response(200, "text/plain", "ok") ==
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok");
    CHECK_THAT(http::event_stream_head(), Contains("Content-Type: text/event-stream\r\n"));
    CHECK(http::event("[DONE]") == "data: [DONE]\n\n");
    CHECK(http::reason(431) == "Request Header Fields Too Large");
}

TEST_CASE("http: random requests cut at random give what they were made of", "[http]") {
    pd::Rng rng(pd::derive_seed(20261207, 80));
    for (int trial = 0; trial < 500; ++trial) {
        const std::string path = "/p" + std::to_string(rng.integer(0, 999));
        std::vector<std::pair<std::string, std::string>> fields = {{"host", "h"}};
        for (int i = 0, n = int(rng.integer(0, 6)); i < n; ++i)
            fields.emplace_back("x-f" + std::to_string(i), std::string(std::size_t(rng.integer(0, 40)), 'v'));
        std::string body(std::size_t(rng.integer(0, 300)), 'b');
        for (char& c : body) c = char(rng.integer(0, 255));  // any bytes
        fields.emplace_back("content-length", std::to_string(body.size()));
        std::string bytes = "POST " + path + " HTTP/1.1\r\n";
        for (const auto& [n, v] : fields) bytes += n + ": " + v + "\r\n";
        bytes += "\r\n" + body;
        http::RequestParser p;
        for (std::size_t at = 0; at < bytes.size();) {
            const std::size_t n = std::size_t(rng.integer(1, 64));
            p.feed(std::string_view(bytes).substr(at, n));
            at += n;
        }
        INFO("trial " << trial);
        REQUIRE(p.state() == State::done);
        CHECK(p.request().path == path);
        CHECK(p.request().headers == fields);
        CHECK(p.request().body == body);
    }
}
