// pd_sim_rewrite IN OUT: rewrites a CUDA source so that a host C++ compiler accepts it with
// the simulator's header force-included. Only four things change, each within its lines so
// that line numbers stay the same (a #line directive names the original file):
//
//   k<<<grid, block, shared, stream>>>(args)  ->  k << ::pd::sim::launch_config(grid, block, shared, stream)(args)
//   extern __shared__ T name[];               ->  static thread_local T* const name = <this block's dynamic shared memory>;
//   __shared__ T a[N], b;  (in a function)    ->  the same, then ::pd::sim::detail::shared_variable(&a, sizeof(a), "a");
//                                                 and the same for b, on the declaration's last line
//   asm(...) / asm volatile(...)              ->  a static_assert saying inline PTX does not run on the simulator
//
// shared_variable() poisons the variable at the start of each block and checks the 48 KiB limit
// of static shared memory. A `__shared__` variable at namespace scope is left as it is (a call
// cannot follow it there). Comments, string and character literals (raw strings included) are
// left alone, and only a `>>>` that closes a `<<<` is rewritten (`>>>` also ends nested
// templates).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// If a comment or literal starts at @p i, returns the index just past it; else returns @p i.
std::size_t skip_non_code(const std::string& s, std::size_t i) {
    const std::size_t n = s.size();
    if (s.compare(i, 2, "//") == 0) {
        while (i < n && s[i] != '\n') ++i;
        return i;
    }
    if (s.compare(i, 2, "/*") == 0) {
        const std::size_t end = s.find("*/", i + 2);
        return end == std::string::npos ? n : end + 2;
    }
    // Raw string: R"delim( ... )delim", possibly with an encoding prefix (u8R, LR, ...).
    if (s[i] == 'R' && i + 1 < n && s[i + 1] == '"' && (i == 0 || !ident_char(s[i - 1]) || s[i - 1] == '8' ||
                                                         s[i - 1] == 'u' || s[i - 1] == 'U' || s[i - 1] == 'L')) {
        const std::size_t open = s.find('(', i + 2);
        if (open == std::string::npos) return i;
        const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
        const std::size_t end = s.find(close, open);
        return end == std::string::npos ? n : end + close.size();
    }
    if (s[i] == '"' || (s[i] == '\'' && (i == 0 || !std::isxdigit(static_cast<unsigned char>(s[i - 1]))))) {
        // A quote after a hex digit is a digit separator (1'000'000), not a character literal.
        const char q = s[i];
        for (++i; i < n && s[i] != q; ++i)
            if (s[i] == '\\') ++i;
        return i < n ? i + 1 : n;
    }
    return i;
}

/// Index of the `>>>` closing the `<<<` whose contents start at @p i, or npos.
std::size_t find_launch_close(const std::string& s, std::size_t i) {
    int depth = 0;
    while (i < s.size()) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            i = j;
            continue;
        }
        const char c = s[i];
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        if (depth == 0 && s.compare(i, 3, ">>>") == 0) return i;
        ++i;
    }
    return std::string::npos;
}

/// Index just past the `)` matching the `(` at @p open, or npos.
std::size_t match_paren(const std::string& s, std::size_t open) {
    int depth = 0;
    for (std::size_t i = open; i < s.size();) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            i = j;
            continue;
        }
        if (s[i] == '(') ++depth;
        if (s[i] == ')' && --depth == 0) return i + 1;
        ++i;
    }
    return std::string::npos;
}

std::string newlines_of(const std::string& text) {
    std::string nl;
    for (char c : text)
        if (c == '\n') nl.push_back('\n');
    return nl;
}

std::string trim(const std::string& s) {
    const std::size_t b = s.find_first_not_of(" \t\r\n");
    const std::size_t e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// Removes `__align__(...)` and `alignas(...)` from a declaration's type.
std::string strip_alignment(std::string t) {
    for (const char* kw : {"__align__", "alignas"}) {
        for (std::size_t p; (p = t.find(kw)) != std::string::npos;) {
            const std::size_t open = t.find('(', p);
            const std::size_t close = open == std::string::npos ? std::string::npos : match_paren(t, open);
            if (close == std::string::npos) break;
            t.erase(p, close - p);
        }
    }
    return trim(t);
}

/// Rewrites `extern __shared__ TYPE NAME[];` starting at @p i (the `extern`); returns the
/// replacement and sets @p end, or returns "" when the text is not such a declaration.
std::string rewrite_extern_shared(const std::string& s, std::size_t i, std::size_t& end) {
    std::size_t p = i + 6;
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    if (s.compare(p, 10, "__shared__") != 0 || (p + 10 < s.size() && ident_char(s[p + 10]))) return "";
    const std::size_t semi = s.find(';', p);
    if (semi == std::string::npos) return "";
    const std::string decl = s.substr(p + 10, semi - p - 10);  // " TYPE NAME[]"
    const std::size_t bracket = decl.rfind('[');
    if (bracket == std::string::npos || trim(decl.substr(bracket)) != "[]") return "";
    std::string head = trim(decl.substr(0, bracket));
    std::size_t name_start = head.size();
    while (name_start > 0 && ident_char(head[name_start - 1])) --name_start;
    const std::string name = head.substr(name_start);
    const std::string type = strip_alignment(head.substr(0, name_start));
    if (name.empty() || type.empty()) return "";
    end = semi + 1;
    return "static thread_local " + type + "* const " + name + " = reinterpret_cast<" + type +
           "*>(::pd::sim::detail::dynamic_shared_memory());" + newlines_of(s.substr(i, end - i));
}

/// The names declared by the declarator list @p decls of a `__shared__` declaration (the text
/// between `__shared__` and its `;`): for each declarator at depth 0, the identifier just before
/// its first `[`, `=` or `{`. A declarator with a `(` (a function or a pointer to an array) is
/// skipped: only plain variables and arrays are tracked.
std::vector<std::string> declared_names(const std::string& decls) {
    std::vector<std::string> parts;
    std::string part;
    int depth = 0, angles = 0;  // angle brackets count only outside (), [] and {} (templates)
    for (std::size_t i = 0; i < decls.size(); ++i) {
        const char c = decls[i];
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        if (depth == 0 && c == '<') ++angles;
        if (depth == 0 && c == '>') --angles;
        if (c == ',' && depth == 0 && angles == 0) {
            parts.push_back(part);
            part.clear();
            continue;
        }
        part.push_back(c);
    }
    parts.push_back(part);
    std::vector<std::string> names;
    for (const std::string& p : parts) {
        if (p.find('(') != std::string::npos && p.find("__align__") == std::string::npos &&
            p.find("alignas") == std::string::npos)
            continue;
        std::string head = strip_alignment(p.substr(0, p.find_first_of("[={")));
        std::size_t b = head.size();
        while (b > 0 && ident_char(head[b - 1])) --b;
        const std::string name = head.substr(b);
        if (!name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]))) names.push_back(name);
    }
    return names;
}

/// Index of the `;` that ends the declaration starting at @p i (depth 0, outside comments and
/// literals), or npos.
std::size_t find_statement_end(const std::string& s, std::size_t i) {
    int depth = 0;
    while (i < s.size()) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            i = j;
            continue;
        }
        const char c = s[i];
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        if (depth < 0) return std::string::npos;
        if (c == ';' && depth == 0) return i;
        ++i;
    }
    return std::string::npos;
}

/// True when the `{` at @p open opens a namespace (`namespace`, `namespace a::b`, `extern "C"`):
/// a `__shared__` inside only such braces is at namespace scope.
bool opens_namespace(const std::string& s, std::size_t open) {
    std::size_t e = open;
    while (e > 0 && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    if (e > 0 && s[e - 1] == '"') {  // extern "C" { or extern "C++" {
        const std::size_t q = s.rfind('"', e - 2);
        if (q == std::string::npos) return false;
        std::size_t k = q;
        while (k > 0 && std::isspace(static_cast<unsigned char>(s[k - 1]))) --k;
        return k >= 6 && s.compare(k - 6, 6, "extern") == 0;
    }
    // The word (or a::b::c) before the brace, then possibly `namespace` before that.
    std::size_t b = e;
    while (b > 0 && (ident_char(s[b - 1]) || s[b - 1] == ':')) --b;
    const std::string last = s.substr(b, e - b);
    if (last == "namespace") return true;
    if (last.empty()) return false;
    std::size_t k = b;
    while (k > 0 && std::isspace(static_cast<unsigned char>(s[k - 1]))) --k;
    return k >= 9 && s.compare(k - 9, 9, "namespace") == 0 && (k == 9 || !ident_char(s[k - 10]));
}

std::string rewrite(const std::string& s) {
    std::string out;
    out.reserve(s.size() + 256);
    std::size_t i = 0;
    bool line_start = true;  // only whitespace since the last newline: a directive may start here
    std::vector<bool> braces;  // the open braces: true for a namespace's
    std::string last_word;     // the identifier before the current one
    while (i < s.size()) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            out.append(s, i, j - i);
            i = j;
            line_start = false;
            continue;
        }
        const char c = s[i];
        if (c == '{') braces.push_back(opens_namespace(s, i));
        if (c == '}' && !braces.empty()) braces.pop_back();
        if (s.compare(i, 3, "<<<") == 0) {
            const std::size_t close = find_launch_close(s, i + 3);
            if (close != std::string::npos) {
                out += " << ::pd::sim::launch_config(";
                out.append(s, i + 3, close - i - 3);
                out += ")";
                i = close + 3;
                continue;
            }
        }
        if (ident_char(c) && (i == 0 || !ident_char(s[i - 1]))) {
            std::size_t e = i;
            while (e < s.size() && ident_char(s[e])) ++e;
            const std::string word = s.substr(i, e - i);
            if (word == "extern") {
                std::size_t end = 0;
                const std::string repl = rewrite_extern_shared(s, i, end);
                if (!repl.empty()) {
                    out += repl;
                    i = end;
                    continue;
                }
            }
            const bool in_function = std::find(braces.begin(), braces.end(), false) != braces.end();
            if (word == "__shared__" && last_word != "extern" && in_function) {
                // Keep the declaration as written; after its `;`, on the same line, register
                // each variable it declares with the simulator.
                const std::size_t semi = find_statement_end(s, e);
                if (semi != std::string::npos) {
                    out.append(s, i, semi + 1 - i);
                    for (const std::string& name : declared_names(s.substr(e, semi - e)))
                        out += " ::pd::sim::detail::shared_variable(&" + name + ", sizeof(" + name + "), \"" +
                               name + "\");";
                    last_word = word;
                    i = semi + 1;
                    continue;
                }
            }
            if (word == "asm" || word == "__asm__" || word == "__asm") {
                const std::size_t open = s.find('(', e);
                const std::size_t close = open == std::string::npos ? std::string::npos : match_paren(s, open);
                if (close != std::string::npos) {
                    out += "static_assert(::pd::sim::kUnsupported<>, \"inline PTX (asm) does not run on the "
                           "simulator: this kernel is a CUDA-only variant (mma.sync, ldmatrix and cp.async run "
                           "through the functions of pd/warp_mma.cuh)\")" +
                           newlines_of(s.substr(i, close - i));
                    i = close;
                    continue;
                }
            }
            out += word;
            last_word = word;
            i = e;
            line_start = false;
            continue;
        }
        out.push_back(c);
        if (c == '\n') line_start = true;
        else if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
        ++i;
    }
    (void)line_start;
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: pd_sim_rewrite IN.cu OUT.cpp\n";
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        std::cerr << "pd_sim_rewrite: cannot read " << argv[1] << "\n";
        return 1;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string path = std::filesystem::absolute(argv[1]).lexically_normal().string();
    std::string text = "#line 1 \"" + path + "\"\n" + rewrite(buf.str());
    const std::filesystem::path out_dir = std::filesystem::path(argv[2]).parent_path();
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    std::ofstream out(argv[2], std::ios::binary);
    out << text;
    if (!out) {
        std::cerr << "pd_sim_rewrite: cannot write " << argv[2] << "\n";
        return 1;
    }
    return 0;
}
