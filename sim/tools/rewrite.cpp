// pd_sim_rewrite IN OUT: rewrites a CUDA source so that a host C++ compiler accepts it with
// the simulator's header force-included. Only these things change, each within its lines so
// that line numbers stay the same (a #line directive names the original file):
//
//   k<<<grid, block, shared, stream>>>(args)  ->  select(k) << ::pd::sim::launch_config(grid, block, shared,
//   stream)(args) template <HEAD> __global__ void k(PARAMS) {...}
//                                             ->  the same, then a declaration that launches deduce HEAD with
//   __CUDA_ARCH__ (in a __global__ or __device__ function)  ->  PD_SIM_CUDA_ARCH
//   extern __shared__ T name[];               ->  static thread_local T* const name = <this block's dynamic shared
//   memory>;
//   __shared__ T a[N], b;  (in a function)    ->  __shared__ T PD_SIM_SHARED_NAME(a)[N], PD_SIM_SHARED_NAME(b);
//                                                 PD_SIM_SHARED_BIND(a) PD_SIM_SHARED_BIND(b), on the
//                                                 declaration's last line (cuda_sim.hpp: the plain simulator
//                                                 keeps the names and registers each variable with
//                                                 shared_variable(); the profiler reaches it through a
//                                                 reference, so every access is counted) (a
//                                                 `const` in the declaration becomes spaces: C++ refuses a
//                                                 const variable without an initializer)
//   asm(...) / asm volatile(...)              ->  a static_assert saying inline PTX does not run on the simulator
//
// select(k) is a ::pd::sim::detail::kernel_at_launch() whose lambda, given the types of the
// launch's arguments, returns the kernel the launch calls: `k` itself when it is one function
// or a function pointer, else the specialization that deduction from the arguments picks
// (through the declaration that follows each kernel template: `template <DeductionKey,
// HEAD> auto k(DeductionTag<...>, PARAMS) -> KernelSignature<void(PARAMS)>;`, never defined).
// See cuda_sim.hpp. __CUDA_ARCH__ is defined where nvcc's device pass defines it, in the bodies
// of device functions (not __host__ __device__ ones), and left undefined elsewhere, as in the
// host pass: the rewriter follows the braces of function bodies and the execution-space
// qualifiers written before them, counting the branches of a preprocessor conditional once.
//
// shared_variable() poisons the variable at the start of each block and checks the 48 KiB limit
// of static shared memory. A `__shared__` variable at namespace scope is only followed by
// PD_SIM_SHARED_LIMIT(), the compile-time check of that limit (a call cannot follow it there). Comments, string and
// character literals (raw strings included) are left alone, and only a `>>>` that closes a `<<<` is rewritten (`>>>`
// also ends nested templates).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

bool ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

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
    if (s[i] == 'R' && i + 1 < n && s[i + 1] == '"' &&
        (i == 0 || !ident_char(s[i - 1]) || s[i - 1] == '8' || s[i - 1] == 'u' || s[i - 1] == 'U' || s[i - 1] == 'L')) {
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

/// Replaces each whole word @p word of @p text outside parentheses and brackets with spaces
/// (so that columns and lines stay where they were).
void blank_words(std::string& text, const std::string& word) {
    int depth = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '(' || c == '[') ++depth;
        if (c == ')' || c == ']') --depth;
        if (depth == 0 && text.compare(i, word.size(), word) == 0 && (i == 0 || !ident_char(text[i - 1])) &&
            (i + word.size() == text.size() || !ident_char(text[i + word.size()]))) {
            text.replace(i, word.size(), std::string(word.size(), ' '));
            i += word.size() - 1;
        }
    }
}

/// Replaces the last occurrence of the whole word @p word in @p out with spaces.
void blank_last_word(std::string& out, const std::string& word) {
    for (std::size_t at = out.rfind(word); at != std::string::npos; at = out.rfind(word, at - 1)) {
        if ((at == 0 || !ident_char(out[at - 1])) &&
            (at + word.size() == out.size() || !ident_char(out[at + word.size()]))) {
            out.replace(at, word.size(), std::string(word.size(), ' '));
            return;
        }
        if (at == 0) return;
    }
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

/// The positions of the commas of @p decls that separate its declarators: outside (), [] and
/// {}, and outside a template's angle brackets.
std::vector<std::size_t> top_level_commas(const std::string& decls) {
    std::vector<std::size_t> commas;
    int depth = 0, angles = 0;  // angle brackets count only outside (), [] and {} (templates)
    for (std::size_t i = 0; i < decls.size(); ++i) {
        const char c = decls[i];
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        if (depth == 0 && c == '<') ++angles;
        if (depth == 0 && c == '>') --angles;
        if (c == ',' && depth == 0 && angles == 0) commas.push_back(i);
    }
    return commas;
}

/// The names declared by the declarator list @p decls of a `__shared__` declaration (the text
/// between `__shared__` and its `;`): for each declarator at depth 0, the identifier just before
/// its first `[`, `=` or `{`. A declarator with a `(` (a function or a pointer to an array) is
/// skipped: only plain variables and arrays are tracked.
std::vector<std::string> declared_names(const std::string& decls) {
    std::vector<std::string> parts;
    std::size_t from = 0;
    for (std::size_t comma : top_level_commas(decls)) {
        parts.push_back(decls.substr(from, comma - from));
        from = comma + 1;
    }
    parts.push_back(decls.substr(from));
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

/// True when @p name is one of @p names (a declarator the simulator tracks).
bool next_name_matches(const std::string& name, const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

/// @p decls (the declarator list of a `__shared__` declaration) with each declared name N
/// written `PD_SIM_SHARED_NAME(N)`: the plain simulator keeps N, the profiler names the variable
/// apart and reaches it through a reference (cuda_sim.hpp). The names are those of
/// declared_names(), in order.
std::string rename_declarators(const std::string& decls, const std::vector<std::string>& names) {
    std::string out;
    std::size_t next = 0, part_start = 0;
    auto rename_part = [&](std::size_t from, std::size_t to) {
        // the last identifier at depth 0 before the first `[`, `=` or `{`, not followed by `(`
        std::size_t cut = to, d = 0;
        for (std::size_t k = from; k < to; ++k) {
            const char c = decls[k];
            if (d == 0 && (c == '[' || c == '=' || c == '{')) {
                cut = k;
                break;
            }
            if (c == '(') ++d;
            if (c == ')') --d;
        }
        std::size_t best = std::string::npos, best_end = 0;
        d = 0;
        for (std::size_t k = from; k < cut; ++k) {
            const char c = decls[k];
            if (c == '(') ++d;
            if (c == ')') --d;
            if (d != 0 || !ident_char(c) || (k > from && ident_char(decls[k - 1]))) continue;
            std::size_t e = k;
            while (e < cut && ident_char(decls[e])) ++e;
            std::size_t after = e;
            while (after < cut && std::isspace(static_cast<unsigned char>(decls[after]))) ++after;
            if (after < cut && decls[after] == '(') continue;  // __align__(16), alignas(16)
            best = k;
            best_end = e;
        }
        out += decls.substr(next, (best == std::string::npos ? to : best) - next);
        if (best != std::string::npos && next_name_matches(decls.substr(best, best_end - best), names)) {
            out += "PD_SIM_SHARED_NAME(" + decls.substr(best, best_end - best) + ")";
            out += decls.substr(best_end, to - best_end);
        } else if (best != std::string::npos) {
            out += decls.substr(best, to - best);
        }
        next = to;
    };
    for (std::size_t comma : top_level_commas(decls)) {
        rename_part(part_start, comma);
        part_start = comma;
    }
    rename_part(part_start, decls.size());
    return out + decls.substr(next);
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

/// @p text with each comment replaced by a space and each newline by a space: a copy of source
/// text that fits on one line (string and character literals are kept).
std::string one_line(const std::string& text) {
    std::string r;
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t j = skip_non_code(text, i);
        if (j != i) {
            if (text[i] == '/')
                r.push_back(' ');
            else
                r.append(text, i, j - i);
            i = j;
            continue;
        }
        r.push_back(text[i] == '\n' || text[i] == '\r' ? ' ' : text[i]);
        ++i;
    }
    return trim(r);
}

bool is_keyword(const std::string& w) {
    static const char* const words[] = {"return",   "else",   "do",     "case",   "throw",    "co_await", "co_return",
                                        "co_yield", "sizeof", "new",    "delete", "typename", "const",    "if",
                                        "while",    "for",    "switch", "goto",   "default",  "alignof",  "noexcept"};
    return std::find_if(std::begin(words), std::end(words), [&](const char* k) { return w == k; }) != std::end(words);
}

/// Index of the bracket that opens the group closed by the bracket at @p close (`)`, `]` or
/// `>`) in @p t, or npos. Parentheses and square brackets nest inside angle brackets.
std::size_t match_backward(const std::string& t, std::size_t close) {
    const char c = t[close];
    const char open = c == ')' ? '(' : c == ']' ? '[' : '<';
    int depth = 0;
    for (std::size_t k = close + 1; k-- > 0;) {
        const char d = t[k];
        if (d == '"' || d == '\'') return std::string::npos;  // literals: give up
        if (open == '<' && (d == ')' || d == ']')) {
            k = match_backward(t, k);
            if (k == std::string::npos) return k;
            continue;
        }
        if (d == c) ++depth;
        if (d == open && --depth == 0) return k;
        if (open != '<' && (d == ';' || d == '{' || d == '}')) return std::string::npos;
        if (open == '<' && (d == ';' || d == '{' || d == '}')) return std::string::npos;
    }
    return std::string::npos;
}

/// kernel_expression_start() within the one line @p out.
std::size_t kernel_expression_start_in_line(const std::string& out) {
    std::size_t e = out.size();
    while (e > 0 && (out[e - 1] == ' ' || out[e - 1] == '\t')) --e;
    if (e == 0) return std::string::npos;
    std::size_t start = std::string::npos;
    std::size_t k = e;         // the expression is out[k, e) so far
    bool need_operand = true;  // the next thing to the left must be an operand
    bool after_scope = false;  // that operand would be the left side of a `::`
    while (k > 0) {
        std::size_t b = k;
        while (b > 0 && std::isspace(static_cast<unsigned char>(out[b - 1]))) --b;
        if (b == 0) break;
        const char c = out[b - 1];
        if (need_operand) {
            if (ident_char(c)) {
                std::size_t w = b;
                while (w > 0 && ident_char(out[w - 1])) --w;
                const std::string word = out.substr(w, b - w);
                if (std::isdigit(static_cast<unsigned char>(word[0]))) return std::string::npos;
                if (is_keyword(word)) {
                    if (!after_scope) return std::string::npos;
                    need_operand = false;  // `return ::k`: the `::` was a leading one
                    break;
                }
                after_scope = false;
                k = w;
                start = w;
                need_operand = false;
                continue;
            }
            if (c == '>' || c == ')' || c == ']') {
                const std::size_t open = match_backward(out, b - 1);
                if (open == std::string::npos) return std::string::npos;
                k = open;
                start = open;
                // `(...)` alone is a parenthesized expression; after a name it is a call, and
                // `<...>` and `[...]` always follow an operand.
                if (c == ')') {
                    std::size_t p = open;
                    while (p > 0 && std::isspace(static_cast<unsigned char>(out[p - 1]))) --p;
                    bool operand_before = p > 0 && (ident_char(out[p - 1]) || out[p - 1] == '>' || out[p - 1] == ')' ||
                                                    out[p - 1] == ']');
                    if (operand_before && ident_char(out[p - 1])) {
                        std::size_t w = p;
                        while (w > 0 && ident_char(out[w - 1])) --w;
                        if (is_keyword(out.substr(w, p - w))) operand_before = false;
                    }
                    if (!operand_before) {
                        need_operand = false;  // a parenthesized expression
                        break;
                    }
                }
                after_scope = false;
                continue;
            }
            return std::string::npos;
        }
        // An operand is complete: continue only through `::`, `.`, `->` or `template`.
        if (c == ':' && b >= 2 && out[b - 2] == ':') {
            k = b - 2;
            start = k;
            std::size_t p = k;
            while (p > 0 && std::isspace(static_cast<unsigned char>(out[p - 1]))) --p;
            need_operand = p > 0 && (ident_char(out[p - 1]) || out[p - 1] == '>');  // else a leading `::`
            if (!need_operand) break;
            after_scope = true;
            continue;
        }
        if (c == '.' || (c == '>' && b >= 2 && out[b - 2] == '-')) {
            k = c == '.' ? b - 1 : b - 2;
            need_operand = true;
            continue;
        }
        if (ident_char(c)) {
            std::size_t w = b;
            while (w > 0 && ident_char(out[w - 1])) --w;
            if (out.substr(w, b - w) == "template") {
                k = w;
                start = w;
                continue;
            }
        }
        break;
    }
    if (need_operand || start == std::string::npos) return std::string::npos;
    // A unary `*` or `&` before it belongs to it (`(*table)[i]` needs no such care).
    std::size_t u = start;
    while (u > 0 && std::isspace(static_cast<unsigned char>(out[u - 1]))) --u;
    if (u > 0 && (out[u - 1] == '*' || out[u - 1] == '&')) {
        std::size_t v = u - 1;
        while (v > 0 && std::isspace(static_cast<unsigned char>(out[v - 1]))) --v;
        if (v == 0 || std::strchr("(,;={}:?!", out[v - 1])) return u - 1;
    }
    return start;
}

/// The start, in the rewritten text @p text, of the kernel expression that ends where @p text
/// ends (the text before a `<<<`): a name, possibly qualified, with template arguments,
/// member accesses, subscripts and calls (`ns::k<float, 64>`, `table[i]`, `l.kernel`), or a
/// parenthesized expression, all on the last line (so never in a comment). npos when it cannot
/// tell.
std::size_t kernel_expression_start(const std::string& text) {
    const std::size_t line = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    const std::string out = text.substr(line);
    const std::size_t start = kernel_expression_start_in_line(out);
    return start == std::string::npos ? start : line + start;
}

/// For a kernel expression that is a name (`k`, `ns::k`, `k<256>`), the name to call for
/// deduction through the declarations that follow kernel templates (see kernel_companion()):
/// the name itself, with the key as the first template argument when it has template
/// arguments. "" for any other expression.
std::string deduction_callee(const std::string& expr) {
    std::size_t last = expr.size();
    std::string args;
    if (!expr.empty() && expr.back() == '>') {
        const std::size_t open = match_backward(expr, expr.size() - 1);
        if (open == std::string::npos) return "";
        args = trim(expr.substr(open + 1, expr.size() - open - 2));
        last = open;
    }
    const std::string name = trim(expr.substr(0, last));
    for (char c : name)
        if (!(ident_char(c) || c == ':' || c == ' ')) return "";
    if (name.empty() || !ident_char(name.back())) return "";
    if (last == expr.size()) return name;
    return name + "<::pd::sim::detail::DeductionKey::key" + (args.empty() ? "" : ", " + args) + ">";
}

/// What a launch's kernel expression @p expr becomes: a selector that returns the kernel the
/// launch calls, given the types of the launch's arguments (see pd::sim::detail::kernel_at_launch
/// in cuda_sim.hpp for the three ways it selects one).
std::string kernel_selector(const std::string& expr, bool at_block_scope) {
    const std::string e = one_line(expr);
    const std::string callee = deduction_callee(e);
    const std::string ns = "::pd::sim::detail::";
    std::string r = ns + "kernel_at_launch(" + (at_block_scope ? "[&]" : "[]") +
                    "<typename... PdSimA>([[maybe_unused]] " + ns +
                    "ArgTypes<PdSimA...> pd_sim_args) { if constexpr (requires { " + ns + "kernel_pointer(" + e +
                    ", pd_sim_args); }) return " + ns + "kernel_pointer(" + e + ", pd_sim_args); ";
    if (!callee.empty()) {
        const std::string deduced = ns + "kernel_of<decltype(" + callee + "(" + ns + "deduction_tag, " + ns +
                                    "launch_arg<PdSimA>()...))>(" + e + ")";
        r += "else if constexpr (requires { " + deduced + "; }) return " + deduced + "; ";
    }
    const std::string exact = ns + "kernel_of<" + ns + "KernelSignature<void(PdSimA...)>>(" + e + ")";
    r += "else if constexpr (requires { " + exact + "; }) return " + exact + "; ";
    r += "else return " + ns + "no_matching_kernel<PdSimA...>(); })";
    return r;
}

/// Splits @p params at the commas outside brackets (angle brackets counted outside (), [], {}).
std::vector<std::string> split_params(const std::string& params) {
    std::vector<std::string> parts;
    std::string part;
    int depth = 0, angles = 0;
    for (char c : params) {
        if (c == '(' || c == '[' || c == '{') ++depth;
        if (c == ')' || c == ']' || c == '}') --depth;
        if (depth == 0 && c == '<') ++angles;
        if (depth == 0 && c == '>' && angles > 0) --angles;
        if (c == ',' && depth == 0 && angles == 0) {
            parts.push_back(part);
            part.clear();
            continue;
        }
        part.push_back(c);
    }
    parts.push_back(part);
    return parts;
}

/// @p params without default arguments (for a function type).
std::string without_defaults(const std::string& params) {
    std::string r;
    for (const std::string& p : split_params(params)) {
        std::size_t cut = std::string::npos;
        int depth = 0;
        for (std::size_t i = 0; i < p.size() && cut == std::string::npos; ++i) {
            const char c = p[i];
            if (c == '(' || c == '[' || c == '{' || c == '<') ++depth;
            if (c == ')' || c == ']' || c == '}' || c == '>') --depth;
            const bool compare = (i + 1 < p.size() && p[i + 1] == '=') || (i > 0 && std::strchr("=!<>", p[i - 1]));
            if (c == '=' && depth == 0 && !compare) cut = i;
        }
        if (!r.empty()) r += ", ";
        r += trim(p.substr(0, cut));
    }
    return r;
}

/// Index just past the `}` matching the `{` at @p open, or npos.
std::size_t match_brace(const std::string& s, std::size_t open) {
    int depth = 0;
    for (std::size_t i = open; i < s.size();) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            i = j;
            continue;
        }
        if (s[i] == '{') ++depth;
        if (s[i] == '}' && --depth == 0) return i + 1;
        ++i;
    }
    return std::string::npos;
}

/// For the declaration of a kernel template whose `__global__` ends at @p e, with template
/// parameters @p head: a declaration of the same name that launches use to deduce its template
/// arguments (see pd::sim::detail::kernel_at_launch in cuda_sim.hpp), which goes just past the
/// kernel's declaration (its `;` or the `}` of its body). "" when the declaration is not one it
/// handles (a specialization, a qualified name, no parameters, no `;` or body after them).
std::string kernel_companion(const std::string& s, std::size_t e, const std::string& head) {
    std::size_t p = e;
    std::string name;
    while (p < s.size()) {
        const std::size_t j = skip_non_code(s, p);
        if (j != p || std::isspace(static_cast<unsigned char>(s[p]))) {
            p = j != p ? j : p + 1;
            continue;
        }
        if (s.compare(p, 2, "[[") == 0) {
            const std::size_t close = s.find("]]", p);
            if (close == std::string::npos) return "";
            p = close + 2;
            continue;
        }
        if (!ident_char(s[p])) return "";
        std::size_t w = p;
        while (w < s.size() && ident_char(s[w])) ++w;
        const std::string word = s.substr(p, w - p);
        std::size_t next = w;
        while (next < s.size() && std::isspace(static_cast<unsigned char>(s[next]))) ++next;
        const bool with_args = next < s.size() && s[next] == '(';
        if (with_args && (word == "__launch_bounds__" || word == "__cluster_dims__" || word == "__maxnreg__" ||
                          word == "__attribute__" || word == "alignas" || word == "__declspec")) {
            p = match_paren(s, next);
            if (p == std::string::npos) return "";
            continue;
        }
        if (with_args) {
            name = word;
            p = next;
            break;
        }
        if (next < s.size() && (s[next] == '<' || s[next] == ':')) return "";  // a specialization or a qualified name
        p = w;
    }
    if (name.empty() || p >= s.size()) return "";
    const std::size_t close = match_paren(s, p);
    if (close == std::string::npos) return "";
    const std::string params = one_line(s.substr(p + 1, close - p - 2));
    if (params.empty() || params == "void" || params.find('#') != std::string::npos ||
        s.substr(p, close - p).find('#') != std::string::npos)
        return "";
    std::size_t q = close;
    while (q < s.size() && std::isspace(static_cast<unsigned char>(s[q]))) ++q;
    if (s.compare(q, 8, "noexcept") == 0) q += 8;
    while (q < s.size() && std::isspace(static_cast<unsigned char>(s[q]))) ++q;
    if (q >= s.size() || (s[q] != ';' && s[q] != '{')) return "";
    return " template <::pd::sim::detail::DeductionKey PdSimKey, " + head + "> auto " + name +
           "(::pd::sim::detail::DeductionTag<PdSimKey>, " + params + ") -> ::pd::sim::detail::KernelSignature<void(" +
           without_defaults(params) + ")>;";
}

/// The text between the angle brackets of the template parameter list that starts at @p lt
/// (a `<`), or npos in @p end when it does not close.
std::string template_parameters(const std::string& s, std::size_t lt, std::size_t& end) {
    int depth = 0;
    for (std::size_t i = lt; i < s.size();) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            i = j;
            continue;
        }
        const char c = s[i];
        if (c == '(' || c == '[' || c == '{') {
            const std::size_t close = c == '(' ? match_paren(s, i) : c == '{' ? match_brace(s, i) : s.find(']', i);
            if (close == std::string::npos) break;
            i = c == '[' ? close + 1 : close;
            continue;
        }
        if (c == ';') break;
        if (c == '<') ++depth;
        if (c == '>' && --depth == 0) {
            end = i + 1;
            return s.substr(lt + 1, i - lt - 1);
        }
        ++i;
    }
    end = std::string::npos;
    return "";
}

std::string rewrite(const std::string& s) {
    std::string out;
    out.reserve(s.size() + 256);
    std::size_t i = 0;
    bool line_start = true;     // only whitespace since the last newline: a directive may start here
    bool in_directive = false;  // in a preprocessing directive (to its last line)
    struct Scope {
        bool ns;                // a namespace's braces (or extern "C")
        bool device;            // in the body of a __global__ or __device__ function (not __host__ __device__)
        std::string companion;  // for a kernel template's body: the declaration to add after it
    };
    std::vector<Scope> braces;  // the open braces
    int parens = 0;             // open parentheses
    // Execution-space qualifiers seen in the current declaration, and at which parenthesis depth.
    bool q_global = false, q_device = false, q_host = false;
    int q_parens = -1;
    std::string head;  // the template parameters of the current declaration, if it has them
    bool head_valid = false;
    // The brace and parenthesis state at each open #if, restored at its #elif and #else, so that
    // the branches of a conditional (which may each open a brace) count once.
    std::vector<std::pair<std::vector<Scope>, int>> conditionals;
    // The declaration to add after the kernel template being declared, with the brace and
    // parenthesis depths of its `__global__`.
    std::string companion;
    std::size_t companion_depth = 0;
    int companion_parens = 0;
    std::string last_word;  // the identifier before the current one
    auto reset_declaration = [&] {
        q_global = q_device = q_host = false;
        q_parens = -1;
        head_valid = false;
    };
    while (i < s.size()) {
        const std::size_t j = skip_non_code(s, i);
        if (j != i) {
            out.append(s, i, j - i);
            i = j;
            line_start = false;
            continue;
        }
        const char c = s[i];
        const bool device = !braces.empty() && braces.back().device;
        if (c == '#' && line_start) {
            in_directive = true;
            std::size_t d = i + 1;
            while (d < s.size() && (s[d] == ' ' || s[d] == '\t')) ++d;
            std::size_t de = d;
            while (de < s.size() && ident_char(s[de])) ++de;
            const std::string directive = s.substr(d, de - d);
            if (directive == "if" || directive == "ifdef" || directive == "ifndef") {
                conditionals.emplace_back(braces, parens);
            } else if ((directive == "elif" || directive == "else" || directive == "elifdef" ||
                        directive == "elifndef") &&
                       !conditionals.empty()) {
                braces = conditionals.back().first;
                parens = conditionals.back().second;
            } else if (directive == "endif" && !conditionals.empty()) {
                conditionals.pop_back();
            }
        }
        std::string after;  // text to add after this character
        if (!in_directive) {
            const bool ends_kernel_declaration =
                !companion.empty() && braces.size() == companion_depth && parens == companion_parens;
            if (c == '{') {
                const bool qualified = (q_global || q_device || q_host) && q_parens == parens;
                const bool body_device = qualified ? (q_global || (q_device && !q_host)) : device;
                braces.push_back({opens_namespace(s, i), body_device, ends_kernel_declaration ? companion : ""});
                if (ends_kernel_declaration) companion.clear();
                if (qualified || parens == 0) reset_declaration();
            }
            if (c == '}') {
                if (!braces.empty()) {
                    after = braces.back().companion;
                    braces.pop_back();
                }
                if (parens == 0) reset_declaration();  // not after a `{}` default argument
            }
            if (c == ';') {
                if (ends_kernel_declaration) {
                    after = companion;
                    companion.clear();
                }
                reset_declaration();
            }
            if (c == '(') ++parens;
            if (c == ')' && parens > 0) --parens;
        }
        if (s.compare(i, 3, "<<<") == 0) {
            const std::size_t close = find_launch_close(s, i + 3);
            if (close != std::string::npos) {
                // The kernel expression before the `<<<` becomes a selector of the kernel to
                // launch (which deduces template arguments); its line breaks are kept after it.
                const std::size_t start = kernel_expression_start(out);
                const std::string expr = start == std::string::npos ? "" : out.substr(start);
                if (!expr.empty() && expr.find("//") == std::string::npos && expr.find("/*") == std::string::npos) {
                    const bool at_block_scope = std::find_if(braces.begin(), braces.end(),
                                                             [](const Scope& b) { return !b.ns; }) != braces.end();
                    out.erase(start);
                    out += kernel_selector(expr, at_block_scope) + newlines_of(expr);
                }
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
            const bool in_function =
                std::find_if(braces.begin(), braces.end(), [](const Scope& b) { return !b.ns; }) != braces.end();
            if (word == "extern") {
                std::size_t end = 0;
                const std::string repl = rewrite_extern_shared(s, i, end);
                if (!repl.empty()) {
                    out += repl;
                    i = end;
                    continue;
                }
            }
            if (word == "__shared__" && last_word != "extern" && in_function) {
                // Keep the declaration as written; after its `;`, on the same line, register
                // each variable it declares with the simulator. A `const` in it is dropped: a
                // shared variable has no initializer, which C++ refuses for a const one (nvcc
                // accepts it), and code that nvcc compiled never writes to it. `volatile` stays.
                const std::size_t semi = find_statement_end(s, e);
                if (semi != std::string::npos) {
                    if (last_word == "const") blank_last_word(out, "const");
                    std::string decl = s.substr(i, semi + 1 - i);
                    blank_words(decl, "const");
                    const std::vector<std::string> names = declared_names(s.substr(e, semi - e));
                    const std::size_t list = e - i;  // the declarators start after `__shared__`
                    out += decl.substr(0, list) + rename_declarators(decl.substr(list, semi - e), names) + ";";
                    for (const std::string& name : names) out += " PD_SIM_SHARED_BIND(" + name + ")";
                    last_word = word;
                    i = semi + 1;
                    continue;
                }
            }
            if (word == "__shared__" && last_word != "extern" && !in_function) {
                // At namespace scope no call may follow, but a static_assert may: the 48 KiB
                // limit is checked when the program is compiled (a 2 GiB array failed to link).
                const std::size_t semi = find_statement_end(s, e);
                if (semi != std::string::npos) {
                    out += s.substr(i, semi + 1 - i);
                    for (const std::string& name : declared_names(s.substr(e, semi - e)))
                        out += " PD_SIM_SHARED_LIMIT(" + name + ")";
                    last_word = word;
                    i = semi + 1;
                    continue;
                }
            }
            if (word == "asm" || word == "__asm__" || word == "__asm") {
                const std::size_t open = s.find('(', e);
                const std::size_t close = open == std::string::npos ? std::string::npos : match_paren(s, open);
                if (close != std::string::npos) {
                    out +=
                        "static_assert(::pd::sim::kUnsupported<>, \"inline PTX (asm) does not run on the "
                        "simulator: this kernel is a CUDA-only variant (mma.sync, ldmatrix and cp.async run "
                        "through the functions of pd/warp_mma.cuh)\")" +
                        newlines_of(s.substr(i, close - i));
                    i = close;
                    continue;
                }
            }
            if (!in_directive) {
                if (word == "__global__" || word == "__device__" || word == "__host__") {
                    q_global |= word == "__global__";
                    q_device |= word == "__device__";
                    q_host |= word == "__host__";
                    q_parens = parens;
                }
                if (word == "template" && !in_function) {
                    std::size_t lt = e;
                    while (lt < s.size() && std::isspace(static_cast<unsigned char>(s[lt]))) ++lt;
                    std::size_t end = std::string::npos;
                    head = lt < s.size() && s[lt] == '<' ? one_line(template_parameters(s, lt, end)) : "";
                    head_valid = end != std::string::npos && !head.empty() && head.find('#') == std::string::npos;
                }
                if (word == "__global__" && !in_function && head_valid) {
                    // A kernel template: after its declaration, the declaration launches deduce with.
                    companion = kernel_companion(s, e, head);
                    companion_depth = braces.size();
                    companion_parens = parens;
                }
            }
            // nvcc defines __CUDA_ARCH__ in its device pass only: here it is the modelled
            // architecture in the bodies of device functions, and undefined elsewhere.
            out += word == "__CUDA_ARCH__" && device ? "PD_SIM_CUDA_ARCH" : word;
            last_word = word;
            i = e;
            line_start = false;
            continue;
        }
        out.push_back(c);
        out += after;
        if (c == '\n') {
            std::size_t b = i;
            while (b > 0 && s[b - 1] == '\r') --b;
            if (!(b > 0 && s[b - 1] == '\\')) in_directive = false;
            line_start = true;
        } else if (!std::isspace(static_cast<unsigned char>(c))) {
            line_start = false;
        }
        ++i;
    }
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
