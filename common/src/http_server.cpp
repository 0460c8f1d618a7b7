// A small HTTP/1.1 server (http.hpp): an acceptor, a fixed pool of workers, one connection per
// worker at a time; every wait on a client bounded.
#include "pd/http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace pd::http {

bool Responder::write_all(std::string_view bytes) {
    while (!gone_ && !bytes.empty()) {
        const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            gone_ = true;  // reset, closed, or a client that stopped reading (the send timeout)
        else
            bytes.remove_prefix(std::size_t(n));
    }
    return !gone_;
}

bool Responder::send(int status, std::string_view content_type, std::string_view body,
                     const std::vector<std::pair<std::string, std::string>>& extra) {
    responded_ = true;
    return write_all(response(status, content_type, body, !closes_, extra));
}

bool Responder::start_events() {
    responded_ = closes_ = true;
    return write_all(event_stream_head());
}

bool Responder::send_event(std::string_view data) {
    return write_all(event(data));
}

bool Responder::gone() {
    if (gone_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) gone_ = true;
    return gone_;
}

Server::Server(Options options, Handler handler) : options_(std::move(options)), handler_(std::move(handler)) {
    if (options_.workers < 1)
        throw std::invalid_argument("workers = " + std::to_string(options_.workers) + " must be >= 1");
    if (!(options_.read_timeout_s > 0) || !std::isfinite(options_.read_timeout_s))
        throw std::invalid_argument("read timeout = " + std::to_string(options_.read_timeout_s) + " s must be > 0");
    if (options_.port < 0 || options_.port > 65535)
        throw std::invalid_argument("port = " + std::to_string(options_.port) + " must be in 0 ... 65535");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(options_.port));
    if (::inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1)
        throw std::invalid_argument("host '" + options_.host + "' is not an IPv4 address");
    const std::string where = options_.host + ":" + std::to_string(options_.port);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error(where + ": " + std::strerror(errno));
    const int on = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
        const std::string why = std::strerror(errno);
        ::close(listen_fd_);
        throw std::runtime_error(where + ": " + why);
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (!options_.error_body)
        options_.error_body = [](int status, const std::string& message) {
            return std::to_string(status) + " " + std::string(reason(status)) + ": " + message + "\n";
        };
}

Server::~Server() {
    stop();
    ::close(listen_fd_);
}

void Server::start() {
    for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
    acceptor_ = std::thread([this] { accept_loop(); });
}

void Server::stop() {
    {
        const std::lock_guard lock(mutex_);
        if (stopping_.exchange(true)) return;
    }
    ready_.notify_all();
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& w : workers_) w.join();
    for (int fd : queue_) ::close(fd);
    queue_.clear();
}

void Server::accept_loop() {
    while (!stopping_) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;  // every 100 ms: stopping?
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        // a client that stops reading cannot hold a worker past the timeout
        const auto us = static_cast<long>(options_.read_timeout_s * 1e6);
        const timeval tv{us / 1000000, us % 1000000};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        std::unique_lock lock(mutex_);
        if (busy_ + static_cast<int>(queue_.size()) < options_.workers) {
            queue_.push_back(fd);
            lock.unlock();
            ready_.notify_one();
            continue;
        }
        lock.unlock();
        Responder busy(fd, false);  // every worker serves a connection: come back later
        busy.send(503, options_.error_type, options_.error_body(503, "every worker is busy; retry"),
                  {{"Retry-After", "1"}});
        ::close(fd);
    }
}

void Server::worker_loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        const int fd = queue_.front();
        queue_.pop_front();
        ++busy_;
        lock.unlock();
        serve(fd);
        ::close(fd);
        lock.lock();
        --busy_;
    }
}

// [http_serve]
void Server::serve(int fd) {
    using clock = std::chrono::steady_clock;
    std::string pending;  // bytes read past the last request (a pipelined next one)
    char buffer[8192];
    for (;;) {
        RequestParser parser(options_.limits);
        std::size_t used = 0;
        parser.feed(pending, &used);
        pending.erase(0, used);
        bool started = used > 0;
        // the whole request must arrive within the timeout (a client that sends slowly, or not
        // at all, gets 408); a connection with nothing under way closes when the server stops
        const clock::time_point deadline =
            clock::now() + std::chrono::microseconds(static_cast<long long>(options_.read_timeout_s * 1e6));
        while (parser.state() == RequestParser::State::more) {
            if (stopping_ && !started) return;
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
            if (left <= 0) {
                Responder(fd, false).send(408, options_.error_type,
                                          options_.error_body(408, "the request did not arrive in time"));
                return;
            }
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, int(std::min<long long>(left, 100))) <= 0) continue;
            const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return;  // the client closed (or reset) the connection
            started = true;
            parser.feed(std::string_view(buffer, std::size_t(n)), &used);
            pending.assign(buffer + used, std::size_t(n) - used);
        }
        if (parser.state() == RequestParser::State::error) {
            Responder(fd, false).send(parser.status(), options_.error_type,
                                      options_.error_body(parser.status(), parser.error()));
            return;
        }
        Responder r(fd, parser.request().keep_alive());
        try {
            handler_(parser.request(), r);
        } catch (const std::exception& e) {
            if (!r.responded()) r.send(500, options_.error_type, options_.error_body(500, e.what()));
        }
        if (!r.responded()) r.send(500, options_.error_type, options_.error_body(500, "the handler sent nothing"));
        if (r.closes() || r.gone()) return;
    }
}
// [http_serve]

}  // namespace pd::http
