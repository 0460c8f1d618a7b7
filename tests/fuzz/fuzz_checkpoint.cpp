// llama2.c checkpoints (pd::llama2c::read_checkpoint): any file is either read into a config
// and weights of matching sizes, or refused with std::invalid_argument; nothing else escapes
// (no other exception, no crash, no allocation the file's size does not justify).
#include "fuzz_input.hpp"
#include "pd/llama2c.hpp"

#include <optional>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = pd::fuzz::input_file("model.bin", data, size);
    std::optional<pd::llama2c::Checkpoint> c;
    try {
        c = pd::llama2c::read_checkpoint(path);
    } catch (const std::invalid_argument&) {
        return 0;
    }
    bool sized = true;  // every tensor sized for the header's shape
    try {
        c->weights.check(c->config, "fuzzed checkpoint");
    } catch (const std::invalid_argument&) {
        sized = false;
    }
    pd::fuzz::require(sized, "the weights read have the sizes of the header's shape");
    pd::fuzz::require(c->config.d_model == c->config.heads * c->config.head_dim, "head_dim * heads == dim");
    return 0;
}
