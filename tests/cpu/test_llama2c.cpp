// llama2.c checkpoints and tokenizers: exact round trips, the byte layout of the format, BPE
// encoding worked out by hand, decoding, and an error message for each kind of bad file.
#include "pd/llama2c.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using pd::llama2c::Tokenizer;

/// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
public:
    TempDir() {
        std::random_device rd;  // only names the directory (parallel test runs); the data is seeded
        do {
            dir_ = std::filesystem::temp_directory_path() / ("pd_test_llama2c_" + std::to_string(rd()));
        } while (!std::filesystem::create_directory(dir_));
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (dir_ / name).string(); }

private:
    std::filesystem::path dir_;
};

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void append(std::string& bytes, T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

/// A checkpoint header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
std::string header(std::vector<std::int32_t> fields) {
    std::string bytes;
    for (std::int32_t v : fields) append(bytes, v);
    return bytes;
}

pd::ModelConfig small_config(bool tied) {
    return {.name = "small",
            .vocab = 37,
            .d_model = 24,
            .layers = 2,
            .heads = 4,
            .kv_heads = 2,
            .head_dim = 6,
            .ffn_dim = 40,
            .max_seq = 16,
            .rope_theta = 10000,
            .norm_eps = 1e-5,
            .tied_embeddings = tied,
            .source = "test"};
}

/// Seeded normal weights for @p c, a different stream per tensor; lm_head = embed when tied.
pd::ModelWeights random_weights(const pd::ModelConfig& c, std::uint64_t seed) {
    pd::ModelWeights w;
    std::uint64_t stream = 0;
    for (const pd::ModelWeights::Tensor& t : w.tensors(c)) {
        std::size_t n = 1;
        for (std::size_t e : t.shape) n *= e;
        t.data->resize(n);
        pd::fill_normal<float>(*t.data, 0.f, 1.f, pd::derive_seed(seed, stream++));
    }
    if (c.tied_embeddings) w.lm_head = w.embed;
    return w;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string byte_piece(int b) {
    static constexpr char hex[] = "0123456789ABCDEF";
    return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

/// The hand-built vocabulary of the encode tests: <unk>, BOS, EOS, the 256 byte tokens
/// (ids 3..258), then these pieces with their merge scores (higher merges first).
Tokenizer hand_vocab() {
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    for (int b = 0; b < 256; ++b) {
        pieces.push_back(byte_piece(b));
        scores.push_back(0);
    }
    const std::pair<const char*, float> extra[] = {
        {" ", -10},                 // 259
        {"h", -10},                 // 260
        {"e", -10},                 // 261
        {"l", -10},                 // 262
        {"o", -10},                 // 263
        {"he", -3},                 // 264
        {"ll", -2},                 // 265
        {"llo", -4},                // 266
        {" he", -1},                // 267
        {"hell", -5},               // 268
        {"é", -10},                 // 269, two bytes C3 A9
        {"lo", -1.5},               // 270
        {"he", 100},                // 271, a duplicate: lookups must find 264
        {"\xC3\xA9\x80\x80", -10},  // 272, "é" and two stray continuation bytes
    };
    for (const auto& [p, s] : extra) {
        pieces.push_back(p);
        scores.push_back(s);
    }
    return Tokenizer(pieces, scores);
}

}  // namespace

TEST_CASE("llama2.c checkpoints round-trip bit for bit, shared and separate classifier", "[llama2c]") {
    TempDir tmp;
    for (const bool tied : {false, true}) {
        CAPTURE(tied);
        const pd::ModelConfig c = small_config(tied);
        const pd::ModelWeights w = random_weights(c, 2024);
        const std::string path = tmp.file(tied ? "small_shared.bin" : "small_separate.bin");
        pd::llama2c::write_checkpoint(path, c, w);

        pd::llama2c::Checkpoint ck = pd::llama2c::read_checkpoint(path);
        const pd::ModelConfig& r = ck.config;
        CHECK(r.name == (tied ? "small_shared" : "small_separate"));
        CHECK(r.source == path);
        CHECK(r.vocab == 37);
        CHECK(r.d_model == 24);
        CHECK(r.layers == 2);
        CHECK(r.heads == 4);
        CHECK(r.kv_heads == 2);
        CHECK(r.head_dim == 6);
        CHECK(r.ffn_dim == 40);
        CHECK(r.max_seq == 16);
        CHECK(r.rope_theta == 10000);
        CHECK(r.norm_eps == 1e-5);
        CHECK(r.tied_embeddings == tied);

        pd::ModelWeights expected = w;
        const auto want = expected.tensors(c);
        const auto got = ck.weights.tensors(r);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            CAPTURE(got[i].name);
            CHECK(same_bits(*got[i].data, *want[i].data));
        }
    }
}

TEST_CASE("llama2.c checkpoint bytes follow run.c's layout", "[llama2c]") {
    TempDir tmp;
    const pd::ModelConfig c = small_config(false);
    const pd::ModelWeights w = random_weights(c, 7);
    const std::string path = tmp.file("layout.bin");
    pd::llama2c::write_checkpoint(path, c, w);
    const std::string raw = read_bytes(path);

    // Header with a negative vocab_size (separate classifier), then the tensors in run.c's
    // order: w1 (gate), w2 (down), w3 (up) -- not the order of ModelWeights.
    std::string expected = header({24, 40, 2, 4, 2, -37, 16});
    for (const std::vector<float>* t : {&w.embed, &w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate,
                                        &w.w_down, &w.w_up, &w.final_norm})
        expected.append(reinterpret_cast<const char*>(t->data()), t->size() * sizeof(float));
    const std::size_t rope = 16 * 3;  // seq_len x head_dim / 2, for cos and again for sin
    const std::size_t classifier = 37 * 24;
    REQUIRE(raw.size() == expected.size() + (2 * rope + classifier) * sizeof(float));
    CHECK(raw.compare(0, expected.size(), expected) == 0);

    std::vector<float> tail((raw.size() - expected.size()) / sizeof(float));
    std::memcpy(tail.data(), raw.data() + expected.size(), tail.size() * sizeof(float));
    for (int i = 0; i < 3; ++i) {
        CHECK(tail[i] == 1.f);         // cos(0)
        CHECK(tail[rope + i] == 0.f);  // sin(0)
    }
    // Position 1: pair i turns by theta^(-2i/d) = 10000^(-i/3).
    CHECK(tail[3 + 0] == Approx(std::cos(1.0)));
    CHECK(tail[3 + 1] == Approx(std::cos(std::pow(10000.0, -1.0 / 3))));
    CHECK(tail[rope + 3 + 2] == Approx(std::sin(std::pow(10000.0, -2.0 / 3))));
    CHECK(std::vector<float>(tail.begin() + 2 * rope, tail.end()) == w.lm_head);

    // With a shared classifier: positive vocab_size and no classifier at the end.
    const pd::ModelConfig tied = small_config(true);
    pd::llama2c::write_checkpoint(tmp.file("tied.bin"), tied, random_weights(tied, 7));
    const std::string raw_tied = read_bytes(tmp.file("tied.bin"));
    CHECK(raw_tied.compare(0, 28, header({24, 40, 2, 4, 2, 37, 16})) == 0);
    CHECK(raw_tied.size() == raw.size() - classifier * sizeof(float));
}

TEST_CASE("bad llama2.c checkpoints are rejected with the path and the problem", "[llama2c][errors]") {
    TempDir tmp;
    const pd::ModelConfig c = small_config(false);
    const std::string good = tmp.file("good.bin");
    pd::llama2c::write_checkpoint(good, c, random_weights(c, 1));
    const std::string raw = read_bytes(good);
    using pd::llama2c::read_checkpoint;

    SECTION("truncated and trailing bytes") {
        const std::string cut = tmp.file("cut.bin");
        write_bytes(cut, raw.substr(0, raw.size() - 4));
        REQUIRE_THROWS_WITH(read_checkpoint(cut), Contains(cut) && Contains("truncated") &&
                                                      Contains("expected " + std::to_string(raw.size())) &&
                                                      Contains(std::to_string(raw.size() - 4) + " bytes"));
        const std::string longer = tmp.file("longer.bin");
        write_bytes(longer, raw + "abcd");
        REQUIRE_THROWS_WITH(read_checkpoint(longer), Contains(longer) && Contains("4 trailing bytes"));
    }
    SECTION("header sizes that make no model") {
        const std::string p = tmp.file("header.bin");
        write_bytes(p, header({26, 40, 2, 4, 2, -37, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("dim (26) is not divisible by n_heads (4)"));
        write_bytes(p, header({24, 40, 2, 4, 3, -37, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p),
                            Contains(p) && Contains("n_heads (4) is not a multiple of n_kv_heads (3)"));
        write_bytes(p, header({12, 40, 2, 4, 2, -37, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("head_dim") && Contains("3 is odd"));
        write_bytes(p, header({24, 40, 0, 4, 2, -37, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("n_layers = 0"));
        write_bytes(p, header({24, -40, 2, 4, 2, -37, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("hidden_dim = -40"));
        write_bytes(p, header({24, 40, 2, 4, 2, 0, 16}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("vocab_size = 0"));
        write_bytes(p, header({24, 40, 2, 4, 2, 37, -1}));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("seq_len = -1"));
    }
    SECTION("non-finite weights are named by tensor, not found later as a wrong token") {
        pd::ModelWeights w = random_weights(c, 1);
        w.wk[5] = std::numeric_limits<float>::quiet_NaN();
        w.wk[9] = std::numeric_limits<float>::infinity();
        const std::string p = tmp.file("nan.bin");
        pd::llama2c::write_checkpoint(p, c, w);
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("tensor wk holds 2 non-finite values") &&
                                                    Contains("the first at element 5"));
        w = random_weights(c, 1);
        w.lm_head.back() = -std::numeric_limits<float>::infinity();
        pd::llama2c::write_checkpoint(p, c, w);
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains("tensor lm_head holds 1 non-finite values"));
    }
    SECTION("sizes too large to be real are rejected before allocating") {
        const std::string p = tmp.file("huge.bin");
        write_bytes(p, header({1 << 20, 1 << 30, 1 << 30, 1 << 10, 1 << 10, -(1 << 30), 1 << 30}) + raw.substr(28));
        REQUIRE_THROWS_WITH(read_checkpoint(p), Contains(p) && Contains("larger than 2^40 bytes"));
    }
    SECTION("missing, short and unreadable files") {
        const std::string missing = tmp.file("missing.bin");
        REQUIRE_THROWS_WITH(read_checkpoint(missing), Contains(missing) && Contains("cannot open"));
        const std::string short_file = tmp.file("short.bin");
        write_bytes(short_file, raw.substr(0, 10));
        REQUIRE_THROWS_WITH(read_checkpoint(short_file),
                            Contains(short_file) && Contains("10 bytes") && Contains("28-byte"));
        REQUIRE_THROWS_WITH(read_checkpoint(tmp.file("")), Contains("cannot open"));  // a directory
    }
    SECTION("write_checkpoint checks its inputs") {
        pd::ModelWeights w = random_weights(c, 1);
        w.wq.pop_back();
        const std::string p = tmp.file("out.bin");
        REQUIRE_THROWS_WITH(pd::llama2c::write_checkpoint(p, c, w), Contains(p) && Contains("wq"));
        pd::ModelConfig wide = c;
        wide.head_dim = 8;  // 4 heads of 8 != d_model 24: the format cannot say this
        REQUIRE_THROWS_WITH(pd::llama2c::write_checkpoint(p, wide, random_weights(wide, 1)),
                            Contains(p) && Contains("head_dim"));
        const std::string bad_dir = tmp.file("no-such-dir/out.bin");
        REQUIRE_THROWS_WITH(pd::llama2c::write_checkpoint(bad_dir, c, random_weights(c, 1)),
                            Contains(bad_dir) && Contains("cannot open"));
    }
}

TEST_CASE("llama2.c tokenizers round-trip and keep the file layout", "[llama2c][tokenizer]") {
    TempDir tmp;
    const Tokenizer t = hand_vocab();
    const std::string path = tmp.file("tokenizer.bin");
    t.write(path);
    const Tokenizer back = Tokenizer::read(path, t.vocab_size());
    REQUIRE(back.vocab_size() == 273);
    for (int id = 0; id < t.vocab_size(); ++id) {
        CAPTURE(id);
        CHECK(back.piece(id) == t.piece(id));
        CHECK(back.score(id) == t.score(id));
    }

    // int32 max_token_length (the longest piece, "<0x00>"), then score, length, bytes per token.
    const std::string raw = read_bytes(path);
    std::string start;
    append<std::int32_t>(start, 6);
    append<float>(start, 0.f);
    append<std::int32_t>(start, 5);
    start += "<unk>";
    CHECK(raw.compare(0, start.size(), start) == 0);

    // Pieces may hold any bytes, NUL included, and be empty.
    const Tokenizer odd({std::string("a\0b", 3), "", "\xff"}, {1.5f, -2.f, 0.25f});
    odd.write(tmp.file("odd.bin"));
    const Tokenizer odd_back = Tokenizer::read(tmp.file("odd.bin"), 3);
    CHECK(odd_back.piece(0) == std::string("a\0b", 3));
    CHECK(odd_back.piece(1).empty());
    CHECK(odd_back.score(2) == 0.25f);
}

TEST_CASE("BPE encoding matches merges worked out by hand", "[llama2c][tokenizer]") {
    const Tokenizer t = hand_vocab();

    // "hello" -> " hello" (dummy prefix) -> " " h e l l o = 259 260 261 262 262 263.
    // Round 1: pairs that are pieces: he (-3), ll (-2), lo (-1.5); lo scores best, though ll
    //          comes first -> 259 260 261 262 270.
    // Round 2: he (-3), llo (-4) -> he: 259 264 262 270.
    // Round 3: " he" (-1), llo (-4) -> " he": 267 262 270.
    // Round 4: llo (-4) -> 267 266. " hello" is no piece: done. BOS (1) first.
    CHECK(t.encode("hello") == std::vector<int>{1, 267, 266});

    // " lll": "ll" at positions 1 and 2 score the same; the first wins -> " " ll l.
    CHECK(t.encode("lll", false) == std::vector<int>{259, 265, 262});

    // 'x' is no piece: byte 0x78 -> id 0x78 + 3 = 123. "he" is found as 264, the lower of the two
    // ids with that piece (271 would have been chosen by its score of 100).
    CHECK(t.encode("xhe", false) == std::vector<int>{259, 123, 264});

    // "é" (C3 A9) is a piece, 269; "ü" (C3 BC) is not: bytes 0xC3 + 3 = 198, 0xBC + 3 = 191;
    // '\n' -> 0x0A + 3 = 13. EOS (2) last.
    CHECK(t.encode("éü\n", true, true) == std::vector<int>{1, 259, 269, 198, 191, 13, 2});

    // A group is a lead byte and at most 3 continuation bytes, so "é" + three stray continuation
    // bytes (C3 A9 80 80 80) splits into C3 A9 80 80, a piece (272), and 80 -> 0x80 + 3 = 131.
    CHECK(t.encode("\xC3\xA9\x80\x80\x80", false) == std::vector<int>{259, 272, 131});

    // Empty text gets no dummy prefix.
    CHECK(t.encode("") == std::vector<int>{1});
    CHECK(t.encode("", false).empty());
    CHECK(t.encode("", false, true) == std::vector<int>{2});

    // Without the byte tokens a character that is no piece cannot be encoded.
    const Tokenizer small({"<unk>", "<s>", "</s>", " ", "a"}, {0, 0, 0, 0, 0});
    CHECK(small.encode("aa", false) == std::vector<int>{3, 4, 4});
    CHECK_THROWS_WITH(small.encode("b"), Contains("<0x62>") && Contains("259"));
}

TEST_CASE("decoding strips the dummy prefix after BOS and turns byte pieces into bytes", "[llama2c][tokenizer]") {
    const Tokenizer t = hand_vocab();
    CHECK(t.decode(1, 267) == "he");    // " he" right after BOS
    CHECK(t.decode(-1, 267) == " he");  // no previous token
    CHECK(t.decode(266, 267) == " he");
    CHECK(t.decode(1, 259).empty());      // " " after BOS
    CHECK(t.decode(260, 13) == "\n");     // <0x0A>
    CHECK(t.decode(1, 3 + 0x20) == " ");  // <0x20> is a byte, not a leading space
    CHECK(t.decode(5, 3 + 0xC3) == "\xC3");
    CHECK(t.decode(0, 1).empty());  // BOS and EOS have no text
    CHECK(t.decode(7, 2).empty());
    CHECK(t.decode(-1, 0) == "<unk>");
    CHECK_THROWS_AS(t.decode(0, -1), std::invalid_argument);
    CHECK_THROWS_AS(t.decode(0, 273), std::invalid_argument);
    CHECK_THROWS_AS(t.piece(273), std::invalid_argument);

    const std::vector<int> ids = {1, 267, 266, 13, 3 + 0x21};
    CHECK(t.decode_all(ids) == "hello\n!");

    for (const std::string text : {"hello", "hello hello world", " two  spaces ", "line\nbreak\n", "lll lo",
                                   "h\xC3\xA9llo \xC3\xBC \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82",
                                   "\xff\xfe not utf-8 \x80\x80\x80\x80\x80 \xC3"}) {
        CAPTURE(text);
        CHECK(t.decode_all(t.encode(text)) == text);
        CHECK(t.decode_all(t.encode(text, true, true)) == text);
    }
}

TEST_CASE("bad tokenizer files are rejected with the path and the problem", "[llama2c][tokenizer][errors]") {
    TempDir tmp;
    const Tokenizer t = hand_vocab();
    const std::string good = tmp.file("good.bin");
    t.write(good);
    const std::string raw = read_bytes(good);

    const std::string cut = tmp.file("cut.bin");
    write_bytes(cut, raw.substr(0, raw.size() - 2));
    REQUIRE_THROWS_WITH(Tokenizer::read(cut, 273), Contains(cut) && Contains("truncated") && Contains("token 272"));
    write_bytes(cut, raw.substr(0, 2));
    REQUIRE_THROWS_WITH(Tokenizer::read(cut, 273), Contains(cut) && Contains("truncated"));

    REQUIRE_THROWS_WITH(Tokenizer::read(good, 272), Contains(good) && Contains("trailing bytes"));
    REQUIRE_THROWS_WITH(Tokenizer::read(good, 0), Contains(good) && Contains("vocab_size"));
    const std::string missing = tmp.file("missing.bin");
    REQUIRE_THROWS_WITH(Tokenizer::read(missing, 273), Contains(missing) && Contains("cannot open"));

    const auto one_token = [](std::int32_t max_len, std::int32_t len, const std::string& bytes) {
        std::string s;
        append(s, max_len);
        append(s, 0.5f);
        append(s, len);
        return s + bytes;
    };
    const std::string p = tmp.file("bad.bin");
    write_bytes(p, one_token(3, 5, "abcde"));
    REQUIRE_THROWS_WITH(Tokenizer::read(p, 1), Contains(p) && Contains("length 5 > max_token_length 3"));
    write_bytes(p, one_token(3, -1, ""));
    REQUIRE_THROWS_WITH(Tokenizer::read(p, 1), Contains(p) && Contains("negative length"));
    write_bytes(p, one_token(-3, 1, "a"));
    REQUIRE_THROWS_WITH(Tokenizer::read(p, 1), Contains(p) && Contains("max_token_length = -3"));
    write_bytes(p, one_token(0x7fffffff, 1 << 30, "abc"));  // checked against the file before allocating
    REQUIRE_THROWS_WITH(Tokenizer::read(p, 1), Contains(p) && Contains("truncated") && Contains("only 3 bytes"));
    write_bytes(p, one_token(3, 3, "abc"));
    CHECK(Tokenizer::read(p, 1).piece(0) == "abc");

    CHECK_THROWS_AS(Tokenizer({"a", "b"}, {0.f}), std::invalid_argument);
    CHECK_THROWS_AS(Tokenizer({}, {}), std::invalid_argument);
}

namespace {

/// llama2.c's merge loop as written there, every round a scan of every pair (quadratic): the
/// reference the tokenizer's heap of pairs must agree with, merge for merge.
std::vector<int> encode_by_scans(const Tokenizer& t, std::vector<int> tokens) {
    while (true) {
        int best_id = -1;
        std::size_t best_at = 0;
        for (std::size_t k = 0; k + 1 < tokens.size(); ++k) {
            const int id = t.id_of(std::string(t.piece(tokens[k])) + std::string(t.piece(tokens[k + 1])));
            if (id >= 0 && (best_id < 0 || t.score(id) > t.score(best_id))) {
                best_id = id;
                best_at = k;
            }
        }
        if (best_id < 0) return tokens;
        tokens[best_at] = best_id;
        tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
}

}  // namespace

TEST_CASE("llama2.c tokenizer: the merges are llama2.c's on seeded texts, and long texts take linear time",
          "[llama2c]") {
    // texts of the hand vocabulary's letters and spaces, where many pairs merge and compete (equal
    // scores among them): the heap must merge what the scans merge, in the same order
    const Tokenizer t = hand_vocab();
    std::mt19937_64 rng(20261206);
    const std::string letters = " helo";
    for (int n : {1, 2, 3, 7, 31, 200, 1000}) {
        std::string text;
        for (int i = 0; i < n; ++i) text += letters[rng() % letters.size()];
        INFO("text '" << text << "'");
        std::vector<int> singles;  // " " + text, one token per letter before any merge
        for (char c : " " + text) singles.push_back(t.id_of(std::string(1, c)));
        CHECK(t.encode(text, false) == encode_by_scans(t, singles));
    }
    // 100,000 characters: quadratic merging took minutes; the heap, milliseconds (the suite's
    // timeout fails a return of the quadratic loop)
    std::string big;
    for (int i = 0; i < 100000; ++i) big += letters[rng() % letters.size()];
    const std::vector<int> ids = t.encode(big, false);
    CHECK(t.decode_all(ids) == " " + big);
    // a score that is not a number has no order: refused when the vocabulary is built
    CHECK_THROWS_WITH(Tokenizer({"<unk>", "<s>", "</s>", "a"}, {0, 0, 0, std::nanf("")}), Contains("not finite"));
}
