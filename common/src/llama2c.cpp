// llama2.c checkpoints (a 28-byte int32 header, then fp32 tensors) and tokenizers (scored pieces).
#include "pd/llama2c.hpp"

#include "pd/cli.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace pd::llama2c {

static_assert(std::endian::native == std::endian::little, "llama2.c files are little-endian");

namespace {

constexpr std::uint64_t kHeaderBytes = 7 * sizeof(std::int32_t);
/// The largest checkpoint accepted (1 TiB): a header with absurd sizes is rejected before any
/// product of sizes can overflow or any memory is allocated.
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 40;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::invalid_argument(path + ": " + what);
}

/// The size of the file at @p path, or an error naming the path (missing, a directory, ...).
std::uint64_t file_size_or_fail(const std::string& path) {
    std::error_code ec;
    const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (ec) fail(path, "cannot open: " + ec.message());
    return bytes;
}

std::ifstream open_or_fail(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) fail(path, "cannot open for reading");
    return file;
}

template <typename T>
T read_value(std::ifstream& file) {
    T v{};
    file.read(reinterpret_cast<char*>(&v), sizeof(T));
    return v;
}

template <typename T>
void write_value(std::ofstream& file, T v) {
    file.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

void write_floats(std::ofstream& file, const std::vector<float>& v) {
    file.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

/// The tensors stored before the RoPE tables, in the file's order, with their shapes from
/// ModelWeights::tensors(). llama2.c names the FFN matrices w1 (gate), w2 (down), w3 (up), and
/// stores them in that order.
std::vector<ModelWeights::Tensor> stored_tensors(ModelWeights& w, const ModelConfig& c) {
    static constexpr std::string_view order[] = {"embed",    "attn_norm", "wq",     "wk",   "wv",        "wo",
                                                 "ffn_norm", "w_gate",    "w_down", "w_up", "final_norm"};
    const std::vector<ModelWeights::Tensor> all = w.tensors(c);
    std::vector<ModelWeights::Tensor> out;
    for (std::string_view name : order)
        for (const ModelWeights::Tensor& t : all)
            if (t.name == name) out.push_back(t);
    return out;
}

/// The element count of @p shape, or nullopt when it exceeds kMaxBytes of floats (each factor is
/// checked before it multiplies, so nothing overflows).
std::optional<std::uint64_t> checked_elements(const std::vector<std::size_t>& shape) {
    constexpr std::uint64_t limit = kMaxBytes / sizeof(float);
    std::uint64_t n = 1;
    for (std::size_t e : shape) {
        if (e != 0 && n > limit / e) return std::nullopt;
        n *= e;
    }
    return n;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& path, bool weights) {
    const std::uint64_t file_bytes = file_size_or_fail(path);
    std::ifstream file = open_or_fail(path);
    if (file_bytes < kHeaderBytes)
        fail(path, "the file has " + std::to_string(file_bytes) + " bytes, shorter than the " +
                       std::to_string(kHeaderBytes) + "-byte llama2.c header");

    // The header: seven int32 sizes. A negative vocab_size flags a separate classifier.
    static constexpr const char* names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                             "n_kv_heads", "vocab_size", "seq_len"};
    std::int32_t h[7];
    for (std::int32_t& v : h) v = read_value<std::int32_t>(file);
    for (int i = 0; i < 7; ++i) {
        const bool is_vocab = i == 5;
        if (is_vocab ? h[i] == 0 : h[i] < 1)
            fail(path, std::string("header: ") + names[i] + " = " + std::to_string(h[i]) +
                           (is_vocab ? ", must be non-zero (negative: separate classifier)" : ", must be positive"));
    }
    if (h[5] == std::numeric_limits<std::int32_t>::min()) fail(path, "header: vocab_size is out of range");
    const int dim = h[0], n_heads = h[3], n_kv_heads = h[4];
    if (dim % n_heads != 0)
        fail(path,
             "header: dim (" + std::to_string(dim) + ") is not divisible by n_heads (" + std::to_string(n_heads) + ")");
    if (n_heads % n_kv_heads != 0)
        fail(path, "header: n_heads (" + std::to_string(n_heads) + ") is not a multiple of n_kv_heads (" +
                       std::to_string(n_kv_heads) + ")");
    const int head_dim = dim / n_heads;
    if (head_dim % 2 != 0)
        fail(path, "header: head_dim = dim / n_heads = " + std::to_string(head_dim) + " is odd (RoPE rotates pairs)");

    const bool shared = h[5] > 0;
    Checkpoint ck;
    ModelConfig& c = ck.config;
    c.name = std::filesystem::path(path).stem().string();
    c.vocab = std::abs(h[5]);
    c.d_model = dim;
    c.layers = h[2];
    c.heads = n_heads;
    c.kv_heads = n_kv_heads;
    c.head_dim = head_dim;
    c.ffn_dim = h[1];
    c.max_seq = h[6];
    c.rope_theta = 10000;
    c.norm_eps = 1e-5;
    c.tied_embeddings = shared;
    c.source = path;

    // The file size the header implies, computed without overflow before allocating anything.
    ModelWeights& w = ck.weights;
    std::vector<ModelWeights::Tensor> stored = stored_tensors(w, c);
    const std::size_t rope_floats = std::size_t(c.max_seq) * std::size_t(head_dim);  // cos and sin, [seq, d/2] each
    const std::size_t V = std::size_t(c.vocab), D = std::size_t(dim);
    std::vector<std::vector<std::size_t>> shapes;
    for (const ModelWeights::Tensor& t : stored) shapes.push_back(t.shape);
    shapes.push_back({rope_floats});
    if (!shared) shapes.push_back({V, D});
    std::uint64_t floats = 0;
    for (const std::vector<std::size_t>& shape : shapes) {
        const std::optional<std::uint64_t> n = checked_elements(shape);
        if (!n || floats + *n > kMaxBytes / sizeof(float))
            fail(path, "header: the weights would be larger than 2^40 bytes; these sizes are not a real model");
        floats += *n;
    }
    const std::uint64_t expected = kHeaderBytes + floats * sizeof(float);
    if (file_bytes != expected) {
        std::string header;
        for (int i = 0; i < 7; ++i) header += std::string(i ? ", " : "") + names[i] + " " + std::to_string(h[i]);
        fail(path, "file size " + std::to_string(file_bytes) + " bytes does not match the header (" + header +
                       "): expected " + std::to_string(expected) + " bytes, " +
                       (file_bytes < expected ? "truncated, " + std::to_string(expected - file_bytes) + " bytes missing"
                                              : std::to_string(file_bytes - expected) + " trailing bytes"));
    }
    if (!weights) {  // the shape alone (a program that only counts bytes): nothing more is read
        c.check(path);
        return ck;
    }
    // what the weights will hold in host memory (the RoPE tables are skipped; a shared classifier
    // is a copy of the embedding), against the budget before anything is allocated
    const double host_bytes = double(floats - rope_floats + (shared ? V * D : 0)) * sizeof(float);
    require_within(kHostMemoryBudget, host_bytes, path + ": its weights in host memory",
                   "use a smaller checkpoint, or raise the budget for a larger one");

    // The size matches, so every read below is within the file.
    const auto read_floats = [&](std::vector<float>& v, std::uint64_t n) {
        v.resize(n);
        file.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    };
    // A NaN or an infinity in any weight makes every logit NaN (and the argmax meaningless):
    // refused here, naming the tensor, rather than as a wrong token much later.
    const auto check_finite = [&](const std::string& name, const std::vector<float>& v) {
        std::size_t bad = 0, first = 0;
        for (std::size_t i = 0; i < v.size(); ++i)
            if (!std::isfinite(v[i]) && bad++ == 0) first = i;
        if (bad > 0)
            fail(path, "tensor " + name + " holds " + std::to_string(bad) +
                           " non-finite values (NaN or inf), the first at element " + std::to_string(first) +
                           ": a model with them computes NaN logits");
    };
    for (const ModelWeights::Tensor& t : stored) {
        read_floats(*t.data, *checked_elements(t.shape));
        if (file) check_finite(t.name, *t.data);
    }
    file.seekg(static_cast<std::streamoff>(rope_floats * sizeof(float)), std::ios::cur);  // run.c computes RoPE itself
    if (shared) {
        w.lm_head = w.embed;
    } else {
        read_floats(w.lm_head, V * D);
        if (file) check_finite("lm_head", w.lm_head);
    }
    if (!file) fail(path, "read error");
    c.check(path);
    return ck;
}

void write_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& weights) {
    config.check(path);
    weights.check(config, path);
    if (std::int64_t(config.head_dim) * config.heads != config.d_model)
        fail(path, "head_dim (" + std::to_string(config.head_dim) + ") * heads (" + std::to_string(config.heads) +
                       ") must equal d_model (" + std::to_string(config.d_model) +
                       "): the llama2.c format derives head_dim = dim / n_heads");

    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    if (!file) fail(path, "cannot open for writing");
    const std::int32_t header[7] = {config.d_model,  config.ffn_dim,
                                    config.layers,   config.heads,
                                    config.kv_heads, config.tied_embeddings ? config.vocab : -config.vocab,
                                    config.max_seq};
    for (std::int32_t v : header) write_value(file, v);

    // stored_tensors() hands out views of the tensors; they are only read here.
    for (const ModelWeights::Tensor& t : stored_tensors(const_cast<ModelWeights&>(weights), config))
        write_floats(file, *t.data);

    // The RoPE tables of the old format: cos, then sin, of pos * theta^(-2i/d), each [max_seq, d/2].
    const int half = config.head_dim / 2;
    std::vector<float> cos_table, sin_table;
    for (int pos = 0; pos < config.max_seq; ++pos)
        for (int i = 0; i < half; ++i) {
            const double angle = pos * std::pow(config.rope_theta, -2.0 * i / config.head_dim);
            cos_table.push_back(static_cast<float>(std::cos(angle)));
            sin_table.push_back(static_cast<float>(std::sin(angle)));
        }
    write_floats(file, cos_table);
    write_floats(file, sin_table);

    if (!config.tied_embeddings) write_floats(file, weights.lm_head);
    file.flush();
    if (!file) fail(path, "write failed");
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

namespace {

bool is_utf8_continuation(char byte) {
    return (static_cast<unsigned char>(byte) & 0xC0) == 0x80;
}

/// The piece that stands for a raw byte: "<0x0A>" for '\n'.
std::string byte_piece(char byte) {
    static constexpr char hex[] = "0123456789ABCDEF";
    const unsigned char b = static_cast<unsigned char>(byte);
    return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

/// The byte of a byte piece "<0xXX>" (two hex digits), or nullopt for any other piece.
std::optional<unsigned char> byte_of_piece(std::string_view piece) {
    if (piece.size() != 6 || !piece.starts_with("<0x") || piece.back() != '>') return std::nullopt;
    unsigned value = 0;
    const char* first = piece.data() + 3;
    const auto [end, ec] = std::from_chars(first, first + 2, value, 16);
    if (ec != std::errc() || end != first + 2) return std::nullopt;
    return static_cast<unsigned char>(value);
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores)
    : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    if (pieces_.size() != scores_.size())
        throw std::invalid_argument("Tokenizer: " + std::to_string(pieces_.size()) + " pieces but " +
                                    std::to_string(scores_.size()) + " scores");
    if (pieces_.empty()) throw std::invalid_argument("Tokenizer: the vocabulary is empty");
    if (pieces_.size() > std::size_t(std::numeric_limits<int>::max()))
        throw std::invalid_argument("Tokenizer: too many pieces");
    for (std::size_t id = 0; id < scores_.size(); ++id)  // (the merges rank pairs by score)
        if (!std::isfinite(scores_[id]))
            throw std::invalid_argument("Tokenizer: the score of piece " + std::to_string(id) + " is not finite");
    ids_.reserve(pieces_.size());
    for (int id = 0; id < vocab_size(); ++id) ids_.try_emplace(pieces_[id], id);  // keeps the first (lowest) id
}

Tokenizer Tokenizer::read(const std::string& path, int vocab_size) {
    if (vocab_size < 1) fail(path, "vocab_size must be >= 1, got " + std::to_string(vocab_size));
    const std::uint64_t file_bytes = file_size_or_fail(path);
    std::ifstream file = open_or_fail(path);
    if (file_bytes < sizeof(std::int32_t)) fail(path, "truncated: no max_token_length");
    const std::int32_t max_len = read_value<std::int32_t>(file);
    if (max_len < 0) fail(path, "max_token_length = " + std::to_string(max_len) + " is negative");

    // Every length is checked against the bytes left before it is allocated.
    std::uint64_t left = file_bytes - sizeof(std::int32_t);
    std::vector<std::string> pieces(vocab_size);
    std::vector<float> scores(vocab_size);
    for (int id = 0; id < vocab_size; ++id) {
        const std::string where = "token " + std::to_string(id) + " of " + std::to_string(vocab_size);
        if (left < 8) fail(path, "truncated: the file ends at " + where);
        scores[id] = read_value<float>(file);
        const std::int32_t len = read_value<std::int32_t>(file);
        left -= 8;
        if (len < 0) fail(path, where + " has a negative length " + std::to_string(len));
        if (len > max_len)
            fail(path, where + " has length " + std::to_string(len) + " > max_token_length " + std::to_string(max_len));
        if (std::uint64_t(len) > left)
            fail(path, "truncated: " + where + " has length " + std::to_string(len) + " but only " +
                           std::to_string(left) + " bytes are left");
        pieces[id].resize(std::size_t(len));
        file.read(pieces[id].data(), len);
        left -= std::uint64_t(len);
    }
    if (left > 0)
        fail(path, std::to_string(left) + " trailing bytes after " + std::to_string(vocab_size) +
                       " tokens (is vocab_size the checkpoint's?)");
    if (!file) fail(path, "read error");
    return Tokenizer(std::move(pieces), std::move(scores));
}

void Tokenizer::write(const std::string& path) const {
    std::size_t max_len = 0;
    for (const std::string& p : pieces_) max_len = std::max(max_len, p.size());
    if (max_len > std::size_t(std::numeric_limits<std::int32_t>::max())) fail(path, "a piece is too long");
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    if (!file) fail(path, "cannot open for writing");
    write_value(file, static_cast<std::int32_t>(max_len));
    for (int id = 0; id < vocab_size(); ++id) {
        write_value(file, scores_[id]);
        write_value(file, static_cast<std::int32_t>(pieces_[id].size()));
        file.write(pieces_[id].data(), static_cast<std::streamsize>(pieces_[id].size()));
    }
    file.flush();
    if (!file) fail(path, "write failed");
}

const std::string& Tokenizer::piece(int id) const {
    if (id < 0 || id >= vocab_size())
        throw std::invalid_argument("Tokenizer: token id " + std::to_string(id) + " is not in [0, " +
                                    std::to_string(vocab_size()) + ")");
    return pieces_[id];
}

std::size_t Tokenizer::longest_piece() const {
    std::size_t longest = 1;
    for (const std::string& p : pieces_) longest = std::max(longest, p.size());
    return longest;
}

float Tokenizer::score(int id) const {
    piece(id);  // range check
    return scores_[id];
}

int Tokenizer::id_of(const std::string& bytes) const {
    const auto it = ids_.find(bytes);
    return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(const std::string& text, bool bos, bool eos) const {
    if ((bos && bos_id >= vocab_size()) || (eos && eos_id >= vocab_size()))
        throw std::invalid_argument("Tokenizer::encode: BOS/EOS need a vocabulary of at least 3 tokens, this one has " +
                                    std::to_string(vocab_size()));
    std::vector<int> tokens;

    // 1. The dummy prefix, then one token per UTF-8 code point: a lead byte and the continuation
    //    bytes (10xxxxxx) after it, at most 4 bytes. A code point that is not a piece becomes one
    //    byte token per byte.
    const std::string s = text.empty() ? text : " " + text;
    for (std::size_t i = 0; i < s.size();) {
        std::size_t j = i + 1;
        while (j < s.size() && j - i < 4 && is_utf8_continuation(s[j])) ++j;
        const std::string code_point = s.substr(i, j - i);
        if (const auto it = ids_.find(code_point); it != ids_.end()) {
            tokens.push_back(it->second);
        } else {
            for (char byte : code_point) {
                const int id = static_cast<unsigned char>(byte) + 3;  // after <unk>, BOS and EOS
                if (id >= vocab_size())
                    throw std::invalid_argument(
                        "Tokenizer::encode: byte " + byte_piece(byte) + " is needed but the vocabulary has only " +
                        std::to_string(vocab_size()) + " of the 259 tokens that hold all bytes");
                tokens.push_back(id);
            }
        }
        i = j;
    }

    // 2. Byte-pair merges: each round replaces the best-scoring adjacent pair that is itself a
    //    piece (the leftmost of equal scores), until no pair is: llama2.c's rule. Instead of
    //    scanning every pair each round (quadratic in the text), the candidate pairs wait in a
    //    heap, best first, and a merge adds only its two new neighbours' pairs; a pair whose
    //    tokens have changed since it was queued is skipped when it comes up. The same merges, in
    //    the same order, in O(n log n).
    struct Node {
        int token, prev, next, version = 0;
    };
    struct Pair {
        float score;
        int left, right, left_version, right_version, merged;
    };
    const auto worse = [](const Pair& a, const Pair& b) {  // the heap's top: highest score, then leftmost
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::vector<Node> nodes;
    nodes.reserve(tokens.size());
    for (std::size_t k = 0; k < tokens.size(); ++k) nodes.push_back({tokens[k], int(k) - 1, int(k) + 1});
    std::vector<Pair> heap;
    const auto queue = [&](int left) {
        const int right = left < 0 ? -1 : nodes[std::size_t(left)].next;
        if (left < 0 || right >= int(nodes.size())) return;
        const Node &l = nodes[std::size_t(left)], &r = nodes[std::size_t(right)];
        if (const auto it = ids_.find(pieces_[l.token] + pieces_[r.token]); it != ids_.end()) {
            heap.push_back({scores_[it->second], left, right, l.version, r.version, it->second});
            std::push_heap(heap.begin(), heap.end(), worse);
        }
    };
    for (int k = 0; k + 1 < int(nodes.size()); ++k) queue(k);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), worse);
        const Pair p = heap.back();
        heap.pop_back();
        Node &l = nodes[std::size_t(p.left)], &r = nodes[std::size_t(p.right)];
        if (l.next != p.right || l.version != p.left_version || r.version != p.right_version) continue;  // stale
        l.token = p.merged;
        ++l.version;
        r.version = -1;  // gone
        l.next = r.next;
        if (r.next < int(nodes.size())) nodes[std::size_t(r.next)].prev = p.left;
        queue(l.prev);
        queue(p.left);
    }
    tokens.clear();
    for (int k = nodes.empty() ? int(nodes.size()) : 0; k < int(nodes.size()); k = nodes[std::size_t(k)].next)
        tokens.push_back(nodes[std::size_t(k)].token);

    if (bos) tokens.insert(tokens.begin(), bos_id);
    if (eos) tokens.push_back(eos_id);
    return tokens;
}

std::string Tokenizer::decode(int prev, int id) const {
    std::string_view text = piece(id);
    if (id == bos_id || id == eos_id) return {};
    if (prev == bos_id && text.starts_with(' ')) text.remove_prefix(1);  // the dummy prefix
    if (const std::optional<unsigned char> byte = byte_of_piece(text)) return std::string(1, static_cast<char>(*byte));
    return std::string(text);
}

std::string Tokenizer::decode_all(std::span<const int> ids) const {
    std::string out;
    int prev = -1;
    for (int id : ids) {
        out += decode(prev, id);
        prev = id;
    }
    return out;
}

}  // namespace pd::llama2c
