// Shared by the fuzz targets: the readers take a path, so each input is written to a file of
// this process's own scratch directory first (removed at exit), and the bytes of an input are
// taken apart with FuzzedBytes.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace pd::fuzz {

/// Writes @p size bytes at @p data to `<scratch dir>/<name>` and returns its path.
inline std::string input_file(const char* name, const std::uint8_t* data, std::size_t size) {
    static const std::filesystem::path dir = [] {
        const std::filesystem::path d =
            std::filesystem::temp_directory_path() / ("pd_fuzz_" + std::to_string(getpid()));
        std::filesystem::create_directories(d);
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(
                std::filesystem::temp_directory_path() / ("pd_fuzz_" + std::to_string(getpid())), ec);
        });
        return d;
    }();
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data), std::streamsize(size));
    return path;
}

/// Stops the fuzzer with a message when a property of the reader does not hold (libFuzzer
/// reports the abort as a crash and keeps the input).
inline void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "property violated: %s\n", what);
        std::abort();
    }
}

/// Reads values off the front of an input; past its end, zeros.
struct FuzzedBytes {
    const std::uint8_t* data;
    std::size_t size;
    std::uint8_t byte() {
        if (size == 0) return 0;
        --size;
        return *data++;
    }
    std::uint32_t u32() {
        std::uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v = v << 8 | byte();
        return v;
    }
};

}  // namespace pd::fuzz
