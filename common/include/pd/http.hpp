/// @file http.hpp
/// @brief HTTP/1.1 requests read from a socket's bytes, and responses written (host C++, no
/// backend): what chapter 13's server speaks (RFC 9112's message syntax; the subset an
/// OpenAI-compatible API needs: a request line, header fields and a body of Content-Length
/// bytes). A client is not trusted: every limit is checked as the bytes arrive, and a request
/// the server cannot take gets the status that says why (400, 413, 431, 501, 505), never a
/// crash or a wait for bytes that cannot make it valid.
///
/// (Why not cpp-httplib, which llama.cpp's server uses: the distribution's package is its
/// compiled form, a header of declarations and a shared library linked to OpenSSL, Brotli and
/// zlib, which a GPU machine that cannot install packages cannot be handed as a header.)
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace pd::http {

/// One request.
struct Request {
    std::string method;  ///< "GET", "POST", ... (case-sensitive, as RFC 9110 says)
    std::string target;  ///< the request target as sent ("/v1/completions?x=1")
    std::string path;    ///< the target up to '?'
    std::string query;   ///< after '?' (empty without one)
    int minor = 1;       ///< HTTP/1.minor: 0 or 1
    /// The header fields in order, names lowercased, values with their surrounding spaces trimmed.
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;  ///< Content-Length bytes (empty without one)
    /// The value of header @p name (lowercase), or null; the first if it repeats.
    /// @param name the field name, lowercase
    const std::string* header(std::string_view name) const;
    /// True when the connection stays open after the response: HTTP/1.1 unless "Connection:
    /// close", HTTP/1.0 only with "Connection: keep-alive".
    bool keep_alive() const;
};

/// What the parser accepts.
struct Limits {
    std::size_t max_head = 16 * 1024;    ///< bytes of the request line and the header fields (431 past it)
    std::size_t max_body = 1024 * 1024;  ///< bytes of the body (413 past it)
    std::size_t max_headers = 100;       ///< header fields (431 past it)
};

/// Reads one request from bytes as they arrive, however they are cut.
class RequestParser {
public:
    /// How far it has got.
    enum class State {
        more,   ///< a complete request needs more bytes
        done,   ///< request() is complete
        error,  ///< the bytes cannot be a request the server takes: status() and error() say why
    };
    /// @param limits what it accepts
    explicit RequestParser(const Limits& limits = {}) : limits_(limits) {}

    /// Takes @p bytes. Past a complete request (or an error), it takes nothing more: @p used
    /// receives how many of @p bytes it took, so the rest (a pipelined next request) can be fed
    /// to the next parser.
    /// @param bytes what arrived  @param used where the count taken goes (or null)
    /// @return the state after them
    State feed(std::string_view bytes, std::size_t* used = nullptr);
    /// The state.
    State state() const { return state_; }
    /// The request (complete when state() is done).
    const Request& request() const { return request_; }
    /// The status of the error (400, 413, 431, 501 or 505), 0 without one.
    int status() const { return status_; }
    /// What was wrong, for the error's message ("header field 3 has no ':'").
    const std::string& error() const { return error_; }

private:
    State fail(int status, std::string why);
    State parse_head();  // request_line_ and the fields in head_

    Limits limits_;
    State state_ = State::more;
    std::string head_;        // bytes up to the blank line
    bool head_done_ = false;  // the head is parsed: the body follows
    std::size_t body_ = 0;    // Content-Length
    Request request_;
    int status_ = 0;
    std::string error_;
};

/// "OK", "Bad Request", ... for the statuses the server uses ("Unknown" otherwise).
/// @param status an HTTP status code
std::string_view reason(int status);

/// A whole response with a body: the status line, Content-Type, Content-Length, the @p extra
/// fields, Connection: close unless @p keep_alive, and the body.
/// @param status the status code  @param content_type its Content-Type
/// @param body the body  @param keep_alive whether the connection stays open
/// @param extra more header fields (name, value)
std::string response(int status, std::string_view content_type, std::string_view body, bool keep_alive = true,
                     const std::vector<std::pair<std::string, std::string>>& extra = {});

/// The head of a response whose body is a stream of server-sent events: status 200,
/// Content-Type: text/event-stream, no Content-Length, Cache-Control: no-cache and
/// Connection: close (the stream ends when the connection does).
std::string event_stream_head();

/// One server-sent event carrying @p data: "data: <data>\n\n" (data without a newline).
/// @param data the payload (one line)
std::string event(std::string_view data);

/// One connection's side of a response, given to a Server's handler.
class Responder {
public:
    /// @param fd the connection's socket (the Server's)  @param keep_alive whether the request
    /// lets the connection stay open after a whole response (Request::keep_alive())
    Responder(int fd, bool keep_alive) : fd_(fd), closes_(!keep_alive) {}
    /// Sends a whole response (response()). @return false if the client has gone
    /// @param status the status  @param content_type its Content-Type  @param body the body
    /// @param extra more header fields
    bool send(int status, std::string_view content_type, std::string_view body,
              const std::vector<std::pair<std::string, std::string>>& extra = {});
    /// Starts a stream of server-sent events (event_stream_head()); the connection closes after
    /// it. @return false if the client has gone
    bool start_events();
    /// Sends one event (event()) at once. @param data its payload @return false if the client has gone
    bool send_event(std::string_view data);
    /// True once the client has gone: a write failed, or the connection was closed or reset by
    /// the client (asked of the socket without waiting), so a handler streaming to no one stops.
    bool gone();
    /// True once a response (or the head of a stream) was sent.
    bool responded() const { return responded_; }
    /// True when the connection must close after the response (a stream, or a failed write).
    bool closes() const { return closes_; }

private:
    bool write_all(std::string_view bytes);
    int fd_;
    bool closes_, responded_ = false, gone_ = false;
};

/// A small HTTP/1.1 server on a socket of its own: an acceptor thread and a fixed pool of
/// workers, each serving one connection at a time (its requests one after another while the
/// client keeps it open), so a pool as large as the requests served at once never makes a
/// stream wait for a worker. A connection that arrives when every worker is busy gets 503 with
/// Retry-After; one whose client sends nothing (or too slowly) for read_timeout_s gets 408; a
/// request the parser refuses gets its status; each closes the connection, never the server.
class Server {
public:
    /// Its options.
    struct Options {
        std::string host = "127.0.0.1";  ///< the address to bind (loopback unless told otherwise)
        int port = 0;                    ///< the port (0: a free one, port() says which)
        int workers = 8;                 ///< connections served at once (>= 1)
        double read_timeout_s = 10;      ///< the most a request may take to arrive, and an idle keep-alive wait
        Limits limits;                   ///< what a request may be
        /// The body of an error response the server makes (its status and reason): text by
        /// default; the OpenAI-compatible server makes OpenAI's error object.
        std::function<std::string(int status, const std::string& message)> error_body;
        std::string error_type = "text/plain";  ///< its Content-Type
    };
    /// Called on a worker for each request; it answers through the Responder (if it sends
    /// nothing, the server answers 500).
    using Handler = std::function<void(const Request&, Responder&)>;

    /// Binds and listens. @param options the options  @param handler the requests' handler
    /// @throws std::invalid_argument naming a bad option; std::runtime_error naming the
    /// address when it cannot be bound ("127.0.0.1:8000: Address already in use")
    Server(Options options, Handler handler);
    /// Stops (stop()) and closes.
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    /// The port it listens on.
    int port() const { return port_; }
    /// Accepts and serves on its threads, from now until stop().
    void start();
    /// Stops accepting, closes idle connections, and waits for the workers' requests in
    /// progress to end (a handler streaming must see Responder::gone() or end on its own).
    /// Thread-safe; safe to call twice.
    void stop();

private:
    void accept_loop();
    void worker_loop();
    void serve(int fd);  // one connection, until it closes

    Options options_;
    Handler handler_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false};
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<int> queue_;  // accepted connections for the workers
    int busy_ = 0;           // workers serving one
    std::thread acceptor_;
    std::vector<std::thread> workers_;
};

}  // namespace pd::http
