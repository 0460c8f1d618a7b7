// .npy files: header layout of format 1.0, data read back unchanged.
#include "pd/npy.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace {

std::string temp_path(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / "pd_test_npy";
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

std::string raw_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a float32 tensor round-trips with its shape", "[npy]") {
    std::vector<float> v(2 * 3 * 5);
    pd::fill_uniform<float>(v, -1.f, 1.f, 3);
    const std::string path = temp_path("f32.npy");
    pd::write_npy<float>(path, v, {2, 3, 5});
    const pd::NpyArray a = pd::read_npy(path);
    CHECK(a.descr == "<f4");
    CHECK(a.shape == std::vector<std::size_t>{2, 3, 5});
    CHECK_FALSE(a.fortran_order);
    CHECK(a.as_float() == v);

    // Format 1.0: magic, version 1.0, then a header padded so the data starts at a multiple of 64.
    const std::string raw = raw_file(path);
    REQUIRE(raw.size() > 10);
    CHECK(raw.substr(1, 5) == "NUMPY");
    CHECK(raw[0] == '\x93');
    CHECK(raw[6] == 1);
    CHECK(raw[7] == 0);
    const std::size_t header_len = std::size_t(std::uint8_t(raw[8])) | (std::size_t(std::uint8_t(raw[9])) << 8);
    CHECK((10 + header_len) % 64 == 0);
    CHECK(raw[10 + header_len - 1] == '\n');
    CHECK(raw.size() == 10 + header_len + v.size() * sizeof(float));
    CHECK(raw.find("'shape': (2,3,5)") != std::string::npos);
}

TEST_CASE("one-dimensional shapes are written as Python 1-tuples", "[npy]") {
    const std::vector<std::int32_t> v = {1, -2, 3, 40000, -5};
    const std::string path = temp_path("i32.npy");
    pd::write_npy<std::int32_t>(path, v, {5});
    CHECK(raw_file(path).find("'shape': (5,)") != std::string::npos);
    const pd::NpyArray a = pd::read_npy(path);
    CHECK(a.descr == "<i4");
    REQUIRE(a.bytes.size() == 20);
    std::vector<std::int32_t> back(5);
    std::memcpy(back.data(), a.bytes.data(), 20);
    CHECK(back == v);
}

TEST_CASE("double, half and bf16-as-float tensors keep their values", "[npy]") {
    const std::vector<double> d = {0.1, -1e300, 3.0};
    pd::write_npy<double>(temp_path("f64.npy"), d, {3});
    const pd::NpyArray ad = pd::read_npy(temp_path("f64.npy"));
    CHECK(ad.descr == "<f8");
    CHECK(std::memcmp(ad.bytes.data(), d.data(), 24) == 0);

    std::vector<__half> h(4);
    pd::fill_uniform<__half>(h, -2.f, 2.f, 8);
    pd::write_npy<__half>(temp_path("f16.npy"), h, {2, 2});
    const pd::NpyArray ah = pd::read_npy(temp_path("f16.npy"));
    CHECK(ah.descr == "<f2");
    CHECK(std::memcmp(ah.bytes.data(), h.data(), 8) == 0);

    std::vector<__nv_bfloat16> bf(3);
    pd::fill_uniform<__nv_bfloat16>(bf, -2.f, 2.f, 9);
    const std::vector<float> f = pd::to_float_vector(bf);
    pd::write_npy<float>(temp_path("bf16.npy"), f, {3});
    const std::vector<float> back = pd::read_npy(temp_path("bf16.npy")).as_float();
    for (int i = 0; i < 3; ++i) CHECK(back[i] == pd::to_float(bf[i]));
}

TEST_CASE("bad shapes, paths and files are errors", "[npy][errors]") {
    const std::vector<float> v(6);
    CHECK_THROWS_AS(pd::write_npy<float>(temp_path("bad.npy"), v, {4, 2}), std::invalid_argument);
    CHECK_THROWS_AS(pd::write_npy<float>("/nonexistent-dir/x.npy", v, {6}), std::runtime_error);
    {
        std::ofstream f(temp_path("junk.npy"));
        f << "not numpy";
    }
    CHECK_THROWS_AS(pd::read_npy(temp_path("junk.npy")), std::runtime_error);
    CHECK_THROWS_AS(pd::read_npy(temp_path("missing.npy")), std::runtime_error);
}

TEST_CASE("malformed .npy headers are refused with std::runtime_error, before allocating", "[npy][errors]") {
    // Each header (padded to a 64-byte multiple as NumPy does), with 24 bytes of data.
    const auto file_with = [](const std::string& name, std::string dict) {
        while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
        dict += '\n';
        std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
        bytes += char(dict.size() & 0xFF);
        bytes += char(dict.size() >> 8);
        bytes += dict + std::string(24, '\0');
        const std::string path = temp_path(name);
        std::ofstream(path, std::ios::binary) << bytes;
        return path;
    };
    CHECK(pd::read_npy(file_with("ok.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }")).size() == 6);
    struct Case {
        const char* dict;
        const char* what;
    };
    const Case cases[] = {
        // found by tests/fuzz/fuzz_npy.cpp: a dimension that is not a number escaped as std::invalid_argument
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (lse, 'shape': (), } ), }", "bad dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", "bad dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", "shape is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }", "shape is not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, }", "header lacks 'shape'"},
        {"{'descr': <f4, 'fortran_order': False, 'shape': (6,), }", "descr is not a quoted string"},
        {"{'descr': '<f4', 'fortran_order': maybe, 'shape': (6,), }", "fortran_order is neither"},
        {"{'descr': '<fx', 'fortran_order': False, 'shape': (6,), }", "unsupported dtype <fx"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", "unsupported dtype >f4"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", "the shape needs 28 bytes, the file has 24"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", "truncated data"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "overflows"},
    };
    int i = 0;
    for (const Case& c : cases) {
        INFO(c.dict);
        CHECK_THROWS_WITH(pd::read_npy(file_with("bad" + std::to_string(i++) + ".npy", c.dict)),
                          Catch::Matchers::Contains(c.what));
        try {
            pd::read_npy(temp_path("bad" + std::to_string(i - 1) + ".npy"));
        } catch (const std::runtime_error&) {  // the documented type, nothing else
        }
    }
}
