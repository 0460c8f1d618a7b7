// .npy files (pd::read_npy, what --dump writes): any file is read or refused with
// std::runtime_error; and an array made from the input (its first bytes the shape, the rest the
// values) written by write_npy reads back with the same shape and bytes.
#include "fuzz_input.hpp"
#include "pd/npy.hpp"

#include <cstring>
#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const pd::NpyArray a = pd::read_npy(pd::fuzz::input_file("in.npy", data, size));
        std::size_t elements = 1;
        for (std::size_t d : a.shape) elements *= d;
        pd::fuzz::require(a.size() == elements, "size() is the product of the shape");
    } catch (const std::runtime_error&) {
    }

    pd::fuzz::FuzzedBytes in{data, size};
    const int dims = in.byte() % 4;
    std::vector<std::size_t> shape;
    std::size_t elements = 1;
    for (int d = 0; d < dims; ++d) {
        shape.push_back(in.byte() % 9);
        elements *= shape.back();
    }
    std::vector<float> values(elements);
    for (float& v : values) {
        const std::uint32_t bits = in.u32();
        std::memcpy(&v, &bits, sizeof v);  // any bit pattern: NaNs and infinities included
    }
    const std::string path = pd::fuzz::input_file("round_trip.npy", nullptr, 0);
    pd::write_npy<float>(path, values, shape);
    const pd::NpyArray back = pd::read_npy(path);
    pd::fuzz::require(back.descr == "<f4" && back.shape == shape && !back.fortran_order, "the header reads back");
    pd::fuzz::require(back.bytes.size() == values.size() * sizeof(float) &&
                          (values.empty() || std::memcmp(back.bytes.data(), values.data(), back.bytes.size()) == 0),
                      "the values read back bit for bit");
    return 0;
}
