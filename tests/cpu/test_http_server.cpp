// The HTTP server (pd::http::Server) on 127.0.0.1 and a free port, with real sockets: requests
// answered, one after another on a kept-alive connection and pipelined in one write; a malformed
// request answered with its status by the error body's maker, and the server still serving; a
// client that sends nothing, or half a request, answered 408 at the timeout; a connection when
// every worker is busy answered 503 with Retry-After; a stream whose client goes away seen gone
// by its handler; stop() with a connection idle; a port in use and a bad host refused by name.
#include "pd/http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace http = pd::http;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// A client connection to 127.0.0.1:port.
class Client {
public:
    explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(std::uint16_t(port));
        ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    }
    ~Client() { close(); }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    void send(const std::string& bytes) {
        REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
    }
    /// Reads until @p until appears in what was read, the server closes, or 10 s pass.
    std::string read_until(const std::string& until) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (got_.find(until) == std::string::npos && std::chrono::steady_clock::now() < end) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char b[4096];
            const ssize_t n = ::recv(fd_, b, sizeof b, 0);
            if (n <= 0) break;
            got_.append(b, std::size_t(n));
        }
        return got_;
    }
    /// True when the server has closed the connection (within 10 s).
    bool closed_by_server() {
        read_until("\x01never\x01");
        char b;
        return ::recv(fd_, &b, 1, MSG_DONTWAIT) == 0;
    }
    void clear() { got_.clear(); }

private:
    int fd_;
    std::string got_;
};

http::Server::Options options(int workers = 4, double timeout_s = 5) {
    http::Server::Options o;
    o.workers = workers;
    o.read_timeout_s = timeout_s;
    o.error_body = [](int status, const std::string& message) {
        return "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":\"" + message + "\"}}";
    };
    o.error_type = "application/json";
    return o;
}

const http::Server::Handler kEcho = [](const http::Request& r, http::Responder& out) {
    out.send(200, "text/plain", r.method + " " + r.path + " " + r.body);
};

}  // namespace

TEST_CASE("http server: requests kept alive and pipelined are answered in order", "[http_server]") {
    http::Server server(options(), kEcho);
    server.start();
    REQUIRE(server.port() > 0);
    Client c(server.port());
    c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_THAT(c.read_until("GET /a "), StartsWith("HTTP/1.1 200 OK\r\n"));
    c.clear();
    c.send(
        "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /c HTTP/1.1\r\nHost: x\r\nConnection: "
        "close\r\n\r\n");
    const std::string both = c.read_until("GET /c ");
    CHECK_THAT(both, Contains("POST /b hi"));
    CHECK(both.find("POST /b hi") < both.find("GET /c "));
    CHECK(c.closed_by_server());  // Connection: close
}

TEST_CASE("http server: a malformed request gets its status and the server goes on", "[http_server]") {
    http::Server server(options(), kEcho);
    server.start();
    Client bad(server.port());
    bad.send("GET / HTTP/2.0\r\nHost: x\r\n\r\n");
    const std::string r = bad.read_until("}}");
    CHECK_THAT(r, StartsWith("HTTP/1.1 505 HTTP Version Not Supported\r\n"));
    CHECK_THAT(r, Contains("Content-Type: application/json") && Contains("\"code\":505"));
    CHECK(bad.closed_by_server());
    Client good(server.port());
    good.send("GET /ok HTTP/1.0\r\n\r\n");
    CHECK_THAT(good.read_until("GET /ok"), StartsWith("HTTP/1.1 200"));
    // a handler that throws: 500 with its message
    http::Server thrower(options(), [](const http::Request&, http::Responder&) { throw std::runtime_error("boom"); });
    thrower.start();
    Client c(thrower.port());
    c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_THAT(c.read_until("boom"), StartsWith("HTTP/1.1 500") && Contains("boom"));
}

TEST_CASE("http server: a client that sends nothing, or half a request, gets 408 at the timeout", "[http_server]") {
    http::Server server(options(2, 0.3), kEcho);
    server.start();
    const auto start = std::chrono::steady_clock::now();
    Client silent(server.port()), slow(server.port());
    slow.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    CHECK_THAT(silent.read_until("}}"), StartsWith("HTTP/1.1 408"));
    CHECK_THAT(slow.read_until("}}"), StartsWith("HTTP/1.1 408"));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(waited >= 0.3);
    CHECK(waited < 5);
    // and the workers are free again
    Client next(server.port());
    next.send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_THAT(next.read_until("GET /after"), StartsWith("HTTP/1.1 200"));
}

TEST_CASE("http server: a connection when every worker is busy gets 503 with Retry-After", "[http_server]") {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<int> entered{0};
    http::Server server(options(1), [&](const http::Request& r, http::Responder& out) {
        ++entered;
        released.wait();
        out.send(200, "text/plain", r.path);
    });
    server.start();
    Client first(server.port());
    first.send("GET /first HTTP/1.1\r\nHost: x\r\n\r\n");
    for (int ms = 0; entered == 0 && ms < 10000; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(entered == 1);
    Client second(server.port());
    const std::string busy = second.read_until("}}");
    CHECK_THAT(busy, StartsWith("HTTP/1.1 503") && Contains("Retry-After: 1\r\n"));
    release.set_value();
    CHECK_THAT(first.read_until("/first"), StartsWith("HTTP/1.1 200"));
}

TEST_CASE("http server: a stream's handler sees its client go", "[http_server]") {
    std::promise<int> sent;
    http::Server server(options(), [&](const http::Request&, http::Responder& out) {
        int events = 0;
        if (out.start_events())
            for (; events < 100000 && !out.gone() && out.send_event("{\"n\":" + std::to_string(events) + "}"); ++events)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        sent.set_value(events);
    });
    server.start();
    Client c(server.port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    const std::string head = c.read_until("data: {\"n\":2}");
    CHECK_THAT(head, StartsWith("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"));
    CHECK_THAT(head, Contains("\r\n\r\ndata: {\"n\":0}\n\ndata: {\"n\":1}\n\n"));
    c.close();
    std::future<int> f = sent.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(f.get() < 100000);  // it stopped when the client went, not at its end
}

TEST_CASE("http server: stop() closes an idle connection, and a port in use and a bad host are refused by name",
          "[http_server]") {
    auto server = std::make_unique<http::Server>(options(), kEcho);
    server->start();
    Client idle(server->port());
    idle.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    idle.read_until("GET / ");
    http::Server::Options same = options();
    same.port = server->port();
    CHECK_THROWS_WITH(http::Server(same, kEcho), Contains("127.0.0.1:" + std::to_string(server->port())));
    const auto start = std::chrono::steady_clock::now();
    server->stop();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    CHECK(idle.closed_by_server());
    http::Server::Options host = options();
    host.host = "localhost:80";
    CHECK_THROWS_AS(http::Server(host, kEcho), std::invalid_argument);
    host = options();
    host.workers = 0;
    CHECK_THROWS_WITH(http::Server(host, kEcho), Contains("workers = 0"));
}
