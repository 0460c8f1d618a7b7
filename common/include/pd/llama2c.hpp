/// @file llama2c.hpp
/// @brief Checkpoints and tokenizers in the binary format of llama2.c (`run.c`), so that the
/// course's model can run a small story model for learners who have one (no weights ship here).
///
/// **Checkpoint** (`model.bin`, the version-0 "legacy" export), little-endian throughout:
///
/// 1. header, 28 bytes: int32 `dim` (D), `hidden_dim` (F), `n_layers` (L), `n_heads` (Hq),
///    `n_kv_heads` (Hkv), `vocab_size` (V; negative when the classifier is stored separately),
///    `seq_len`;
/// 2. weights, fp32: embed [V, D], attention RMSNorm [L, D], wq [L, Hq d, D], wk [L, Hkv d, D],
///    wv [L, Hkv d, D], wo [L, D, Hq d], FFN RMSNorm [L, D], w1 = gate [L, F, D],
///    w2 = down [L, D, F], w3 = up [L, F, D], final RMSNorm [D];
/// 3. RoPE tables, fp32: cos and sin of pos * theta^(-2i/d), each [seq_len, d/2] (old readers
///    used them; run.c skips them);
/// 4. classifier, fp32: lm_head [V, D], only when `vocab_size` < 0 (otherwise the embedding is
///    reused);
///
/// with d = D / Hq. RoPE rotates adjacent pairs (x[2i], x[2i+1]) of each head.
///
/// **Tokenizer** (`tokenizer.bin`): int32 `max_token_length`, then for each of the V tokens a
/// float32 merge score, an int32 byte length and the piece's bytes (no terminator). The
/// vocabulary count is not stored: it is the checkpoint's V. Id 0 is `<unk>`, 1 is BOS, 2 is EOS,
/// and ids 3..258 are the byte pieces `<0x00>`..`<0xFF>` used when a character has no piece.
#pragma once

#include "pd/model_config.hpp"

#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pd::llama2c {

/// A checkpoint read from disk: the shape and the weights (fp32, host memory).
struct Checkpoint {
    ModelConfig config;    ///< shape from the header; name = file stem, source = the path
    ModelWeights weights;  ///< all twelve tensors; lm_head is a copy of embed when shared
};

/// Reads a llama2.c checkpoint (version-0 header, fp32 weights; the layout is in the file comment).
///
/// The header does not store everything a ModelConfig holds, so: head_dim = dim / n_heads,
/// rope_theta = 10000, norm_eps = 1e-5 (the values llama2.c uses), tied_embeddings = (vocab_size
/// > 0), name = the file's stem ("stories15M" for ".../stories15M.bin"), source = @p path.
/// @param path the checkpoint file
/// @return the config and the weights
/// @throws std::invalid_argument `"<path>: <what is wrong>"` when the file cannot be opened, is
///   shorter than the 28-byte header, has a size below 1 in the header (vocab_size: 0), dim not
///   divisible by n_heads, n_heads not a multiple of n_kv_heads, an odd head_dim, weights larger
///   than 2^40 bytes (checked before anything is allocated), a file size different from the
///   one the header implies (truncated, or trailing bytes; both sizes are in the message), weights
///   whose host memory passes pd::kHostMemoryBudget (`PD_HOST_MEMORY_GIB`; checked from the header
///   before anything is allocated), or a NaN or infinite weight (the tensor, the count and the
///   first element are in the message).
/// @param weights false: check the header and the file's size and return the config alone
///   (empty weights), reading nothing more (a program that only counts bytes)
Checkpoint read_checkpoint(const std::string& path, bool weights = true);

/// Writes @p weights in the llama2.c checkpoint format that read_checkpoint() reads back.
///
/// The classifier is stored separately (negative vocab_size) unless config.tied_embeddings, in
/// which case weights.lm_head is not written (readers use embed). rope_theta and norm_eps are not
/// part of the format; the RoPE tables are computed with config.rope_theta.
/// @param path the file to create or overwrite
/// @param config the shape; head_dim must equal d_model / heads, as the format derives it
/// @param weights one vector per tensor, sized for @p config
/// @throws std::invalid_argument naming @p path when the config is invalid (ModelConfig::check),
///   a tensor has the wrong size (ModelWeights::check), head_dim * heads != d_model, or the file
///   cannot be opened or written.
void write_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& weights);

/// A llama2.c (SentencePiece-style BPE) vocabulary: pieces with merge scores, encode and decode.
class Tokenizer {
public:
    static constexpr int bos_id = 1;  ///< the beginning-of-sequence token
    static constexpr int eos_id = 2;  ///< the end-of-sequence token

    /// Reads `tokenizer.bin`.
    /// @param path the tokenizer file
    /// @param vocab_size the number of tokens in it (the checkpoint's vocab; the file has no count)
    /// @return the vocabulary
    /// @throws std::invalid_argument `"<path>: ..."` when the file cannot be opened, @p vocab_size is
    ///   below 1, max_token_length is negative, a length is negative or above max_token_length,
    ///   the file ends before the last token (also for a length larger than what is left, checked
    ///   before allocating), or bytes follow the last token (usually a wrong @p vocab_size).
    static Tokenizer read(const std::string& path, int vocab_size);

    /// A vocabulary from its pieces and scores (id = index).
    /// @param pieces the bytes of each token; for duplicates, lookups find the lowest id
    /// @param scores the merge score of each token (higher merges first)
    /// @throws std::invalid_argument when the sizes differ, the vocabulary is empty or a score is
    ///   not finite (the merges rank pairs by score)
    Tokenizer(std::vector<std::string> pieces, std::vector<float> scores);

    /// Writes the vocabulary as `tokenizer.bin` (max_token_length = the longest piece).
    /// @param path the file to create or overwrite
    /// @throws std::invalid_argument naming @p path when it cannot be opened or written
    void write(const std::string& path) const;

    /// The number of tokens.
    int vocab_size() const { return static_cast<int>(pieces_.size()); }

    /// The bytes of token @p id, as stored.
    /// @throws std::invalid_argument when @p id is not in [0, vocab_size())
    const std::string& piece(int id) const;

    /// The bytes of the longest piece: encode() of n bytes of text gives at least
    /// n / longest_piece() tokens (each token covers at most that many), which bounds a prompt's
    /// length before it is encoded.
    std::size_t longest_piece() const;

    /// The merge score of token @p id.
    /// @throws std::invalid_argument when @p id is not in [0, vocab_size())
    float score(int id) const;

    /// The id of the piece @p bytes (the lowest one for duplicates), or -1 when no token has it.
    int id_of(const std::string& bytes) const;

    /// Encodes @p text to token ids with byte-pair merges, as llama2.c does:
    /// 1. BOS first if @p bos;
    /// 2. a space in front of non-empty text (the "dummy prefix": a word at the start is then
    ///    encoded like the same word after a space);
    /// 3. each UTF-8 code point becomes its piece, or, when it has none, one byte token per byte
    ///    (id byte + 3, the `<0xXX>` pieces);
    /// 4. while some adjacent pair concatenates to a piece, the pair whose piece has the highest
    ///    score (the first such pair on ties) becomes that piece (the candidate pairs kept in a
    ///    heap: O(n log n) in the text's length, where llama2.c's scans are quadratic);
    /// 5. EOS last if @p eos.
    /// @param text UTF-8 text (invalid UTF-8 falls back to byte tokens)
    /// @param bos prepend BOS (id 1)
    /// @param eos append EOS (id 2)
    /// @return the token ids
    /// @throws std::invalid_argument when a byte token is needed but the vocabulary has fewer than
    ///   259 tokens, or BOS/EOS is asked of a vocabulary too small to hold it
    std::vector<int> encode(const std::string& text, bool bos = true, bool eos = false) const;

    /// The text of token @p id when it follows token @p prev: the piece, except that BOS and
    /// EOS have no text, a leading space is dropped after BOS (the dummy prefix of encode()),
    /// and a byte piece `<0xXX>` becomes that one raw byte.
    /// @param prev the previous token, or -1 when there is none
    /// @param id the token to decode
    /// @return the bytes to print
    /// @throws std::invalid_argument when @p id is not in [0, vocab_size())
    std::string decode(int prev, int id) const;

    /// The text of a token sequence: decode() of each token after the one before it (-1 before
    /// the first). decode_all(encode(text)) == text (BOS on) whenever " " and every byte token are in
    /// the vocabulary.
    /// @param ids the tokens
    /// @return the concatenated text
    /// @throws std::invalid_argument when an id is out of range
    std::string decode_all(std::span<const int> ids) const;

private:
    std::vector<std::string> pieces_;           // token id -> bytes
    std::vector<float> scores_;                 // token id -> merge score
    std::unordered_map<std::string, int> ids_;  // bytes -> lowest token id with those bytes
};

}  // namespace pd::llama2c
