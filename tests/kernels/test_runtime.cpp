// The runtime kernels (kernels/runtime/): the forms the model runs that no chapter's step is on
// its own, each against the CPU reference of the steps it extends and, on the same values,
// bitwise against those steps. gemm_simt_bf16 (the model's bf16 GEMM below sm_80) is chapter
// 02's v6 on bf16 inputs: on small integers it is exact, on seeded uniform inputs within the fp32
// rule of the reference of the same bf16 values, and on every shape the same bits as v6 given the
// values widened to fp32; ragged shapes, a poisoned guard past Y, both load paths (K % 4 and
// alignment) and the shape checks.
#include "gemm/gemm.hpp"
#include "guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace gemm = pd::kernels::gemm;
namespace rt = pd::kernels::runtime;
using bf16 = __nv_bfloat16;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t kSeed = 20261206;
constexpr std::size_t kGuard = 64;

/// Y of gemm_simt_bf16 (bf16 inputs) or of v6 (the same values in fp32) into a poisoned buffer
/// of T N + kGuard floats; X and W sit @p offset elements into their buffers.
template <typename In>
std::vector<float> run(const std::vector<In>& x, const std::vector<In>& w, const gemm::Shape& s,
                       std::size_t offset = 0) {
    std::vector<In> xh(offset), wh(offset);
    xh.insert(xh.end(), x.begin(), x.end());
    wh.insert(wh.end(), w.begin(), w.end());
    pd::DeviceBuffer<In> xd{std::span<const In>(xh)}, wd{std::span<const In>(wh)};
    pd::DeviceBuffer<float> y(s.y_elements() + kGuard);
    y.fill_bytes(pd::kPoisonByte);
    if constexpr (std::is_same_v<In, bf16>)
        rt::gemm_simt_bf16(xd.data() + offset, wd.data() + offset, y.data(), s);
    else
        gemm::gemm("v6", xd.data() + offset, wd.data() + offset, y.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return y.download();
}

/// One problem: the reference of the bf16 values (exact for integers), the guard, a second run's
/// bits, and v6's bits on the same values in fp32.
void check(const gemm::Shape& s, std::uint64_t seed, bool integers, std::size_t offset = 0) {
    std::ostringstream what;
    what << "gemm_simt_bf16 seed=" << seed << " T=" << s.tokens << " N=" << s.n << " K=" << s.k
         << (integers ? " small integers" : " uniform [-1, 1)") << " offset " << offset;
    INFO(what.str());
    std::vector<float> xf(s.x_elements()), wf(s.w_elements());
    if (integers) {
        pd::fill_integers<float>(xf, -3, 3, pd::derive_seed(seed, 1));
        pd::fill_integers<float>(wf, -3, 3, pd::derive_seed(seed, 2));
    } else {
        pd::fill_uniform<float>(xf, -1.f, 1.f, pd::derive_seed(seed, 1));
        pd::fill_uniform<float>(wf, -1.f, 1.f, pd::derive_seed(seed, 2));
    }
    const std::vector<bf16> x = pd::round_all<bf16>(xf), w = pd::round_all<bf16>(wf);
    const std::vector<float> xw = pd::to_float_all<bf16>(x), ww = pd::to_float_all<bf16>(w);  // the same values
    const std::vector<double> ref = pd::reference::linear(xw, ww, s.tokens, s.n, s.k);
    const std::vector<float> got = run(x, w, s, offset);
    const pd::CompareResult r = pd::compare<float, double>(std::span<const float>(got).first(ref.size()), ref,
                                                           integers ? pd::Tolerance::exact() : pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.tokens), std::size_t(s.n)};
    INFO(pd::describe(r, what.str(), dims));
    CHECK(r.passed);
    CHECK(pd::testing::guard_intact(got, s.y_elements()));
    INFO("a second run, and chapter 02's v6 on the same values in fp32, must give the same bits");
    CHECK(pd::testing::same_bits(got, run(x, w, s, offset)));
    CHECK(pd::testing::same_bits(got, run(xw, ww, s, offset)));
}

}  // namespace

TEST_CASE("runtime: gemm_simt_bf16 is v6 on bf16 inputs, over ragged shapes", "[runtime]") {
    // v6's tiles are 128 x 128, 8 deep: T, N and K of 1, 3, 17, 127, 129, 200 leave partial tiles
    // in every direction; K % 4 == 0 takes the 8-byte loads, other K the scalar ones.
    const std::vector<gemm::Shape> shapes = {{1, 1, 1},      {3, 17, 64},     {17, 64, 127},  {127, 129, 200},
                                             {129, 200, 1},  {200, 1, 3},     {1, 200, 17},   {64, 3, 127},
                                             {200, 127, 64}, {257, 260, 131}, {130, 140, 136}};
    std::uint64_t n = 0;
    for (const gemm::Shape& s : shapes) {
        check(s, pd::derive_seed(kSeed, n++), true);
        check(s, pd::derive_seed(kSeed, n++), false);
    }
}

TEST_CASE("runtime: gemm_simt_bf16 falls back to scalar loads for unaligned X and W", "[runtime]") {
    // one element into their buffers: 2 bytes past an 8-byte boundary, K a multiple of 4
    check({65, 130, 136}, pd::derive_seed(kSeed, 100), false, 1);
    check({65, 130, 136}, pd::derive_seed(kSeed, 101), false, 4);
}

TEST_CASE("runtime: gemm_simt_bf16 rejects bad shapes before any launch", "[runtime][errors]") {
    pd::DeviceBuffer<bf16> b(64);
    pd::DeviceBuffer<float> y(64);
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {0, 4, 4}),
                      Contains("tokens (T) must be >= 1, got 0"));
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {4, 4, -8}),
                      Contains("k (K) must be >= 1, got -8"));
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {65536, 4, 32768}),
                      Contains("X: tokens (T) * k (K) = 2147483648 elements exceeds 2^31 - 1"));
}
