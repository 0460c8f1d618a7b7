// HTTP/1.1 requests and responses (http.hpp): RFC 9112's request line and header fields, a body
// of Content-Length bytes, every limit checked as the bytes arrive.
#include "pd/http.hpp"

#include <algorithm>
#include <cctype>

namespace pd::http {

namespace {

/// RFC 9110's tchar: what a method or a field name is made of.
bool is_tchar(unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

std::string lowercase(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

/// True when the comma-separated list @p value holds @p token (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
    const std::string v = lowercase(value);
    std::size_t start = 0;
    while (start <= v.size()) {
        std::size_t end = v.find(',', start);
        if (end == std::string::npos) end = v.size();
        std::string_view item = std::string_view(v).substr(start, end - start);
        while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
        while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
        if (item == token) return true;
        start = end + 1;
    }
    return false;
}

}  // namespace

const std::string* Request::header(std::string_view name) const {
    for (const auto& [n, v] : headers)
        if (n == name) return &v;
    return nullptr;
}

bool Request::keep_alive() const {
    const std::string* c = header("connection");
    if (minor == 0) return c && has_token(*c, "keep-alive");
    return !(c && has_token(*c, "close"));
}

RequestParser::State RequestParser::fail(int status, std::string why) {
    status_ = status;
    error_ = std::move(why);
    return state_ = State::error;
}

// [http_feed]
RequestParser::State RequestParser::feed(std::string_view bytes, std::size_t* used) {
    std::size_t i = 0;
    const auto done = [&](State s) {
        if (used) *used = i;
        return s;
    };
    if (state_ != State::more) return done(state_);
    // The head: bytes up to the empty line (CRLF CRLF, or a bare LF, which RFC 9112 lets a
    // server accept), never more than max_head of them.
    while (!head_done_) {
        if (i == bytes.size()) return done(state_);
        head_ += bytes[i++];
        if (head_ == "\r\n" || head_ == "\n") {  // an empty line before the request line
            head_.clear();
            continue;
        }
        if (head_.size() > limits_.max_head)
            return done(
                fail(431, "the request line and header fields pass " + std::to_string(limits_.max_head) + " bytes"));
        if (head_.back() == '\n' && (head_.ends_with("\n\n") || head_.ends_with("\n\r\n"))) {
            if (parse_head() == State::error) return done(state_);
            head_done_ = true;
        }
    }
    // The body: Content-Length bytes.
    const std::size_t take = std::min(body_ - request_.body.size(), bytes.size() - i);
    request_.body.append(bytes.substr(i, take));
    i += take;
    if (request_.body.size() == body_) state_ = State::done;
    return done(state_);
}
// [http_feed]

RequestParser::State RequestParser::parse_head() {
    std::vector<std::string_view> lines;
    std::string_view rest(head_);
    while (!rest.empty()) {
        const std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    if (lines.empty()) return fail(400, "no request line");

    // method SP request-target SP HTTP-version, single spaces
    const std::string_view line = lines[0];
    const std::size_t sp1 = line.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return fail(400, "the request line is not 'METHOD TARGET HTTP/1.1'");
    const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = line.substr(sp2 + 1);
    if (!is_token(method)) return fail(400, "the method is not a token");
    if (target.empty() || target[0] != '/' || std::any_of(target.begin(), target.end(), [](char c) {
            return static_cast<unsigned char>(c) <= 0x20 || c == 0x7F;
        }))
        return fail(400, "the request target is not a path beginning with '/'");
    if (version == "HTTP/1.1" || version == "HTTP/1.0") {
        request_.minor = version.back() - '0';
    } else if (version.size() == 8 && version.starts_with("HTTP/") &&
               std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
               std::isdigit(static_cast<unsigned char>(version[7]))) {
        return fail(505, "HTTP version " + std::string(version.substr(5)) + " is not supported (1.0 and 1.1 are)");
    } else {
        return fail(400, "the request line does not end in an HTTP version");
    }
    request_.method = method;
    request_.target = target;
    const std::size_t q = target.find('?');
    request_.path = target.substr(0, q);
    request_.query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);

    // field-name ":" OWS field-value OWS
    for (std::size_t n = 1; n < lines.size(); ++n) {
        const std::string_view f = lines[n];
        const std::string which = "header field " + std::to_string(n);
        if (f.empty() || f[0] == ' ' || f[0] == '\t') return fail(400, which + " is folded or empty (not allowed)");
        const std::size_t colon = f.find(':');
        if (colon == std::string_view::npos) return fail(400, which + " has no ':'");
        if (!is_token(f.substr(0, colon))) return fail(400, which + "'s name is not a token");
        std::string_view value = f.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
        if (std::any_of(value.begin(), value.end(), [](char c) {
                const auto u = static_cast<unsigned char>(c);
                return (u < 0x20 && u != '\t') || u == 0x7F;
            }))
            return fail(400, which + "'s value holds a control character");
        if (request_.headers.size() == limits_.max_headers)
            return fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
        request_.headers.emplace_back(lowercase(f.substr(0, colon)), std::string(value));
    }
    if (request_.minor == 1 && !request_.header("host")) return fail(400, "an HTTP/1.1 request without Host");

    // the body's length: Content-Length, the same in every field that gives it
    if (request_.header("transfer-encoding"))
        return fail(501, "Transfer-Encoding is not supported: send the body with a Content-Length");
    bool given = false;
    for (const auto& [name, value] : request_.headers) {
        if (name != "content-length") continue;
        if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), [](char c) {
                return std::isdigit(static_cast<unsigned char>(c));
            }))
            return fail(400, "Content-Length '" + value + "' is not a number of bytes");
        const std::size_t length = std::stoull(value);
        if (given && length != body_) return fail(400, "Content-Length given twice, differently");
        given = true;
        body_ = length;
    }
    if (body_ > limits_.max_body)
        return fail(413, "the body of " + std::to_string(body_) + " bytes passes the limit of " +
                             std::to_string(limits_.max_body));
    if (!given && request_.method == "POST") return fail(411, "a POST without Content-Length");
    request_.body.reserve(body_);
    return state_;
}

std::string_view reason(int status) {
    switch (status) {
        case 200:
            return "OK";
        case 400:
            return "Bad Request";
        case 404:
            return "Not Found";
        case 405:
            return "Method Not Allowed";
        case 408:
            return "Request Timeout";
        case 411:
            return "Length Required";
        case 413:
            return "Content Too Large";
        case 429:
            return "Too Many Requests";
        case 431:
            return "Request Header Fields Too Large";
        case 500:
            return "Internal Server Error";
        case 501:
            return "Not Implemented";
        case 503:
            return "Service Unavailable";
        case 505:
            return "HTTP Version Not Supported";
        default:
            return "Unknown";
    }
}

std::string response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                     const std::vector<std::pair<std::string, std::string>>& extra) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason(status)) + "\r\n";
    r += "Content-Type: " + std::string(content_type) + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& [name, value] : extra) r += name + ": " + value + "\r\n";
    if (!keep_alive) r += "Connection: close\r\n";
    r += "\r\n";
    r += body;
    return r;
}

std::string event_stream_head() {
    return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: "
           "close\r\n\r\n";
}

std::string event(std::string_view data) {
    return "data: " + std::string(data) + "\n\n";
}

}  // namespace pd::http
