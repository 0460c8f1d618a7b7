// NumPy .npy format version 1.0: magic, header length, a Python dict literal, raw data.
#include "pd/npy.hpp"

#include "pd/files.hpp"

#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace pd {

namespace {

template <typename T>
constexpr const char* npy_descr() {
    if constexpr (std::is_same_v<T, float>)
        return "<f4";
    else if constexpr (std::is_same_v<T, double>)
        return "<f8";
    else if constexpr (std::is_same_v<T, __half>)
        return "<f2";
    else if constexpr (std::is_same_v<T, std::int32_t>)
        return "<i4";
    else if constexpr (std::is_same_v<T, std::int64_t>)
        return "<i8";
    else if constexpr (std::is_same_v<T, std::uint8_t>)
        return "|u1";
    else
        static_assert(sizeof(T) == 0, "write_npy: unsupported element type");
}

std::size_t product(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (std::size_t s : shape) n *= s;
    return n;
}

}  // namespace

template <typename T>
void write_npy(const std::string& path, std::span<const T> data, std::vector<std::size_t> shape) {
    static_assert(std::endian::native == std::endian::little, "write_npy assumes little-endian");
    if (product(shape) != data.size())
        throw std::invalid_argument("write_npy(" + path + "): shape does not match " + std::to_string(data.size()) +
                                    " elements");
    std::ostringstream dict;
    dict << "{'descr': '" << npy_descr<T>() << "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i)
        dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    dict << "), }";
    std::string header = dict.str();
    // Magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
    const std::size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header.push_back('\n');

    write_file_atomically(path, [&](std::ostream& f) {
        const unsigned char preamble[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
        f.write(reinterpret_cast<const char*>(preamble), 8);
        const std::uint16_t len = static_cast<std::uint16_t>(header.size());
        const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xFF), static_cast<unsigned char>(len >> 8)};
        f.write(reinterpret_cast<const char*>(len_le), 2);
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size_bytes()));
    });
}

template void write_npy<float>(const std::string&, std::span<const float>, std::vector<std::size_t>);
template void write_npy<double>(const std::string&, std::span<const double>, std::vector<std::size_t>);
template void write_npy<__half>(const std::string&, std::span<const __half>, std::vector<std::size_t>);
template void write_npy<std::int32_t>(const std::string&, std::span<const std::int32_t>, std::vector<std::size_t>);
template void write_npy<std::int64_t>(const std::string&, std::span<const std::int64_t>, std::vector<std::size_t>);
template void write_npy<std::uint8_t>(const std::string&, std::span<const std::uint8_t>, std::vector<std::size_t>);

std::size_t NpyArray::size() const {
    return product(shape);
}

std::vector<float> NpyArray::as_float() const {
    if (descr != "<f4") throw std::runtime_error("NpyArray::as_float: dtype is " + descr + ", not <f4");
    std::vector<float> out(size());
    if (bytes.size() != out.size() * sizeof(float)) throw std::runtime_error("NpyArray: data size mismatch");
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

NpyArray read_npy(const std::string& path) {
    try {
        require_regular_file(path);  // (a pipe would block the open)
    } catch (const std::invalid_argument& e) {
        throw std::runtime_error(e.what());  // read_npy's I/O errors are runtime errors
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    const auto bad = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
    unsigned char pre[10];
    f.read(reinterpret_cast<char*>(pre), 10);
    if (!f || pre[0] != 0x93 || std::memcmp(pre + 1, "NUMPY", 5) != 0 || pre[6] != 1)
        bad("not a version 1.0 .npy file");
    const std::size_t len = pre[8] | (std::size_t(pre[9]) << 8);
    std::string header(len, '\0');
    f.read(header.data(), static_cast<std::streamsize>(len));
    if (!f) bad("truncated header");

    // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
    NpyArray a;
    const auto value_after = [&](const std::string& key) {
        const std::size_t k = header.find("'" + key + "'");
        const std::size_t colon = k == std::string::npos ? k : header.find(':', k);
        if (colon == std::string::npos) bad("header lacks '" + key + "'");
        const std::size_t v = header.find_first_not_of(' ', colon + 1);
        if (v == std::string::npos) bad("header has no value for '" + key + "'");
        return v;
    };
    std::size_t p = value_after("descr");
    const std::size_t q = header[p] == '\'' ? header.find('\'', p + 1) : std::string::npos;
    if (q == std::string::npos) bad("descr is not a quoted string");
    a.descr = header.substr(p + 1, q - p - 1);
    p = value_after("fortran_order");
    if (header.compare(p, 4, "True") == 0)
        a.fortran_order = true;
    else if (header.compare(p, 5, "False") != 0)
        bad("fortran_order is neither True nor False");
    p = value_after("shape");
    const std::size_t end = header[p] == '(' ? header.find(')', p) : std::string::npos;
    if (end == std::string::npos) bad("shape is not a tuple");
    std::istringstream dims(header.substr(p + 1, end - p - 1));
    for (std::string item; std::getline(dims, item, ',');) {
        const std::size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
        if (b == std::string::npos) continue;  // the empty item after a trailing comma
        std::uint64_t d = 0;
        const auto [last, ec] = std::from_chars(item.data() + b, item.data() + e + 1, d);
        if (ec != std::errc() || last != item.data() + e + 1) bad("shape has a bad dimension '" + item + "'");
        a.shape.push_back(std::size_t(d));
    }

    // descr: byte order ('<' little, '|' not applicable, '=' native), kind letter, item bytes.
    std::size_t elem = 0;
    if (a.descr.size() >= 3 && std::string_view("<|=").find(a.descr[0]) != std::string_view::npos) {
        const auto [last, ec] = std::from_chars(a.descr.data() + 2, a.descr.data() + a.descr.size(), elem);
        if (ec != std::errc() || last != a.descr.data() + a.descr.size() || elem > 16) elem = 0;
    }
    if (elem == 0) bad("unsupported dtype " + a.descr);
    // The data's size, without overflow, against what the file holds, before allocating it.
    std::uint64_t bytes = elem;
    for (std::size_t d : a.shape)
        if (d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / d)
            bad("the shape's size overflows");
        else
            bytes *= d;
    const std::streamoff here = f.tellg();
    f.seekg(0, std::ios::end);
    const std::uint64_t left = std::uint64_t(f.tellg() - here);
    f.seekg(here);
    if (bytes > left)
        bad("truncated data: the shape needs " + std::to_string(bytes) + " bytes, the file has " +
            std::to_string(left) + " after the header");
    a.bytes.resize(std::size_t(bytes));
    f.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(a.bytes.size()));
    if (!f) bad("truncated data");
    return a;
}

std::vector<float> to_float_vector(std::span<const __nv_bfloat16> values) {
    std::vector<float> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
    return out;
}

}  // namespace pd
