// llama2.c tokenizers (pd::llama2c::Tokenizer::read), then encode and decode with what was
// read: the first two bytes of an input give the vocabulary size (1 to 600, so that the 259
// tokens byte fallback needs are reachable), the rest is the file. A file is read or refused
// with std::invalid_argument; encode and decode of any text give ids in range or refuse the
// same way.
#include "fuzz_input.hpp"
#include "pd/llama2c.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    pd::fuzz::FuzzedBytes in{data, size};
    const int vocab = 1 + int((in.byte() << 8 | in.byte()) % 600);
    const std::string path = pd::fuzz::input_file("tokenizer.bin", in.data, in.size);
    try {
        const pd::llama2c::Tokenizer t = pd::llama2c::Tokenizer::read(path, vocab);
        pd::fuzz::require(t.vocab_size() == vocab, "the vocabulary has the size asked for");
        // Text from the file's last bytes (at most 48: encoding is quadratic in the length).
        const std::size_t n = in.size < 48 ? in.size : 48;
        const std::string text(reinterpret_cast<const char*>(in.data + in.size - n), n);
        for (const std::string& s : {text, std::string("Once upon a time"), std::string()}) {
            try {
                const std::vector<int> ids = t.encode(s, true, true);
                for (int id : ids) pd::fuzz::require(id >= 0 && id < vocab, "encode gives ids in the vocabulary");
                (void)t.decode_all(ids);
            } catch (const std::invalid_argument&) {  // a byte token needed, or BOS/EOS, in too small a vocabulary
            }
        }
    } catch (const std::invalid_argument&) {
    }
    return 0;
}
