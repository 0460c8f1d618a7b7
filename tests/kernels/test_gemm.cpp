// Chapter 02's prefill GEMM, Y = X W^T, against the CPU reference (double accumulation): every
// version of versions(), through the dispatch by name, on small-integer inputs (compared exactly)
// and seeded random inputs (fp32 rule) over ragged shapes that are not multiples of any tile;
// poisoned outputs with guard floats past the end, bitwise repeatability, the scalar fallbacks of
// the vectorized versions (K not a multiple of 4 or 8, unaligned X and W), and the rejection of
// bad shapes, unknown names and the wrong dtype with a message naming the parameter. Every
// version runs on both backends: v8's mma.sync, ldmatrix and cp.async run on the simulator
// through the emulation behind pd/warp_mma.cuh (its fragment layouts are pinned by
// tests/sim/warp_matrix.cu).
#include "gemm/gemm.hpp"
#include "guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace gemm = pd::kernels::gemm;
using Catch::Matchers::Contains;
using pd::DType;

namespace {

using pd::testing::guard_intact;
using pd::testing::same_bits;

constexpr std::uint64_t kSeed = 20250202;
constexpr std::size_t kGuard = 64;  // poisoned floats after Y that must stay untouched

/// How the inputs of a problem are drawn.
enum class Fill {
    integers,  ///< integers in [-3, 3]: every product and partial sum is exact, compare exactly
    uniform    ///< uniform in [-1, 1): compare with the fp32 rule
};

/// The input type of version @p v: every GEMM version takes exactly one (fp32 or bf16).
DType input_type(const pd::Version& v) {
    REQUIRE(v.dtypes.size() == 1);
    return v.dtypes.front();
}

/// True when the device has bf16 tensor cores (compute capability 8.0 or newer; the simulated
/// device is 8.0): v7 and v8 run there, and throw elsewhere.
bool bf16_tensor_cores() {
    int device = 0, major = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 8;
}

/// The versions that run on this backend, in the order of versions(); on a GPU without bf16
/// tensor cores the bf16 ones are left out (tested to throw in their own case).
std::vector<pd::Version> runnable_versions() {
    std::vector<pd::Version> out;
    for (const pd::Version& v : gemm::versions()) {
        if (!v.runs_here()) continue;
        if (input_type(v) == DType::bf16 && !bf16_tensor_cores()) continue;
        out.push_back(v);
    }
    return out;
}

/// "v5 fp32 seed=... T=... N=... K=... integers": the context of every failure message.
std::string context(const pd::Version& v, const gemm::Shape& s, std::uint64_t seed, Fill fill) {
    std::ostringstream os;
    os << v.name << " " << pd::to_string(input_type(v)) << " seed=" << seed << " T=" << s.tokens << " N=" << s.n
       << " K=" << s.k << (fill == Fill::integers ? " small integers" : " uniform [-1, 1)");
    return os.str();
}

/// Seeded X [T, K] and W [N, K] of element type In.
template <typename In>
struct Inputs {
    std::vector<In> x, w;
};

template <typename In>
Inputs<In> make_inputs(const gemm::Shape& s, std::uint64_t seed, Fill fill) {
    Inputs<In> in{std::vector<In>(s.x_elements()), std::vector<In>(s.w_elements())};
    if (fill == Fill::integers) {
        pd::fill_integers<In>(in.x, -3, 3, pd::derive_seed(seed, 1));
        pd::fill_integers<In>(in.w, -3, 3, pd::derive_seed(seed, 2));
    } else {
        pd::fill_uniform<In>(in.x, -1.f, 1.f, pd::derive_seed(seed, 1));
        pd::fill_uniform<In>(in.w, -1.f, 1.f, pd::derive_seed(seed, 2));
    }
    return in;
}

/// Y from version @p version on @p in, written into a poisoned buffer of T*N + kGuard floats.
/// @p offset shifts X and W by that many elements inside their buffers (unaligned pointers).
template <typename In>
std::vector<float> run(const std::string& version, const Inputs<In>& in, const gemm::Shape& s, std::size_t offset = 0) {
    std::vector<In> xh(offset), wh(offset);
    xh.insert(xh.end(), in.x.begin(), in.x.end());
    wh.insert(wh.end(), in.w.begin(), in.w.end());
    pd::DeviceBuffer<In> x{std::span<const In>(xh)}, w{std::span<const In>(wh)};
    pd::DeviceBuffer<float> y(s.y_elements() + kGuard);
    y.fill_bytes(pd::kPoisonByte);
    gemm::gemm(version, x.data() + offset, w.data() + offset, y.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return y.download();
}

/// Full check of one version on one problem: Y against the reference (exact for small integers,
/// the fp32 rule otherwise; the bf16 reference uses the rounded inputs, so only the kernel's own
/// arithmetic differs), the guard untouched, and a second run giving the same bits.
template <typename In>
void check_version(const pd::Version& v, const gemm::Shape& s, std::uint64_t seed, Fill fill, std::size_t offset = 0) {
    std::string what = context(v, s, seed, fill);
    if (offset > 0) what += " X and W offset by " + std::to_string(offset) + " elements";
    INFO(what);
    const Inputs<In> in = make_inputs<In>(s, seed, fill);
    const std::vector<double> ref = pd::reference::linear(in.x, in.w, s.tokens, s.n, s.k);
    const std::vector<float> got = run(v.name, in, s, offset);
    const pd::Tolerance tol = fill == Fill::integers ? pd::Tolerance::exact() : pd::Tolerance::fp32();
    const pd::CompareResult r =
        pd::compare<float, double>(std::span<const float>(got).first(ref.size()), std::span<const double>(ref), tol);
    const std::size_t dims[] = {std::size_t(s.tokens), std::size_t(s.n)};
    INFO(pd::describe(r, what, dims));
    CHECK(r.passed);
    INFO("the " << kGuard << " floats after Y must keep their poison: nothing may be written past the matrix");
    CHECK(guard_intact(got, s.y_elements()));
    const std::vector<float> again = run(v.name, in, s, offset);
    INFO("a second run on the same input must give the same bits");
    CHECK(same_bits(got, again));
}

void check(const pd::Version& v, const gemm::Shape& s, std::uint64_t seed, Fill fill, std::size_t offset = 0) {
    if (input_type(v) == DType::fp32)
        check_version<float>(v, s, seed, fill, offset);
    else
        check_version<__nv_bfloat16>(v, s, seed, fill, offset);
}

/// The ragged shapes (T, N, K): each of 1, 3, 17, 64, 127, 129, 200 appears in each position
/// (12 mixed combinations, not the full cross product of 343), none a multiple of every tile.
/// The tiles are 32 (v1 to v3), 64 (v4) and 128 (v5 to v8) on a side, 8 (v4 to v6) or 32 (v7,
/// v8) deep: 127, 129 and 200 end in partial tiles, 1 and 3 leave most of a tile empty, and K
/// takes values that are and are not multiples of 4 and 8 (the vector loads of v6 to v8).
const std::vector<gemm::Shape> kRagged = {
    {1, 1, 1},   {3, 17, 64},  {17, 64, 127}, {64, 127, 129}, {127, 129, 200}, {129, 200, 1},
    {200, 1, 3}, {1, 200, 17}, {3, 129, 200}, {17, 1, 129},   {64, 3, 127},    {200, 127, 64},
};

/// One shape larger than the largest block tile (128 x 128) in every dimension, K a multiple of 4
/// but not of 8 (v6 takes its float4 path, v7 and v8 their scalar one).
constexpr gemm::Shape kLarge{257, 260, 131};

/// The shapes version @p v is checked on. WMMA on the simulator runs each 16x16x16 product on
/// all 32 lanes, so there v7 gets the larger ragged shapes only (each still covering partial
/// tiles in T, N and K); v8's mma.sync runs once per warp there, and every other version gets
/// every shape on both backends.
std::vector<gemm::Shape> shapes_for(const pd::Version& v) {
    std::vector<gemm::Shape> out = kRagged;
#if defined(PD_BACKEND_SIM)
    if (v.name == "v7") out = {{3, 17, 64}, {127, 129, 200}, {200, 1, 3}, {1, 200, 17}, {64, 3, 127}};
#endif
    out.push_back(kLarge);
    return out;
}

}  // namespace

TEST_CASE("gemm: versions() lists v1 to v8 in order, all on both backends", "[gemm]") {
    // The registry is the same on both backends (the page's table and the program read it).
    const std::vector<pd::Version>& vs = gemm::versions();
    CHECK(pd::names_of(vs) == std::vector<std::string>{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"});
    for (const pd::Version& v : vs) {
        INFO(v.name);
        const bool tensor_cores = v.name == "v7" || v.name == "v8";
        CHECK(v.dtypes == std::vector<DType>{tensor_cores ? DType::bf16 : DType::fp32});
        CHECK(v.takes(tensor_cores ? DType::bf16 : DType::fp32));
        CHECK_FALSE(v.takes(tensor_cores ? DType::fp32 : DType::bf16));
        CHECK(v.backends == pd::Backends::all);
        CHECK(!v.change.empty());
    }
#if defined(PD_BACKEND_SIM)
    CHECK(pd::names_of(runnable_versions()) ==
          std::vector<std::string>{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"});
#endif
    CHECK(std::string(pd::to_string(DType::fp32)) == "fp32");
    CHECK(std::string(pd::to_string(DType::bf16)) == "bf16");
}

TEST_CASE("gemm: the dispatch runs every version of this backend with its dtype and rejects the other", "[gemm]") {
    // versions() and the dispatch cannot drift apart: each runnable name runs (and is right), and
    // the same name with the other input type is refused with a message naming --kernel.
    const gemm::Shape s{5, 6, 7};
    pd::DeviceBuffer<float> xf(s.x_elements()), wf(s.w_elements()), y(s.y_elements());
    pd::DeviceBuffer<__nv_bfloat16> xb(s.x_elements()), wb(s.w_elements());
    for (const pd::Version& v : runnable_versions()) {
        INFO(v.name);
        check(v, s, pd::derive_seed(kSeed, 99), Fill::integers);
        if (input_type(v) == DType::fp32) {
            CHECK_THROWS_AS(gemm::gemm(v.name, xb.data(), wb.data(), y.data(), s), std::invalid_argument);
            CHECK_THROWS_WITH(gemm::gemm(v.name, xb.data(), wb.data(), y.data(), s),
                              Contains("gemm: version " + v.name + " takes fp32 inputs, not bf16"));
        } else {
            CHECK_THROWS_AS(gemm::gemm(v.name, xf.data(), wf.data(), y.data(), s), std::invalid_argument);
            CHECK_THROWS_WITH(gemm::gemm(v.name, xf.data(), wf.data(), y.data(), s),
                              Contains("gemm: version " + v.name + " takes bf16 inputs, not fp32") &&
                                  Contains("fp32 versions: v1, v2, v3, v4, v5, v6)"));
        }
    }
}

TEST_CASE("gemm: small-integer inputs give exactly the reference product", "[gemm]") {
    // Integers in [-3, 3]: every product and every partial sum (|sum| <= 9 K) is an exact fp32
    // integer, whatever the order of the additions, so any difference is an indexing bug.
    std::uint64_t n = 0;
    for (const pd::Version& v : runnable_versions())
        for (const gemm::Shape& s : shapes_for(v)) check(v, s, pd::derive_seed(kSeed + 1, n++), Fill::integers);
}

TEST_CASE("gemm: seeded uniform inputs within the fp32 rule over ragged shapes", "[gemm]") {
    // Dot products of up to 200 terms in [-1, 1): |y| is a few units, and the fp32 rounding of
    // the accumulation (about sqrt(K) * 6e-8 * |y|) stays far inside 1e-4 + 1e-4 |ref|.
    std::uint64_t n = 0;
    for (const pd::Version& v : runnable_versions())
        for (const gemm::Shape& s : shapes_for(v)) check(v, s, pd::derive_seed(kSeed + 2, n++), Fill::uniform);
}

TEST_CASE("gemm: the vector loads fall back to scalar loads for unaligned X and W", "[gemm]") {
    // X and W one element into their buffers: v6's float4 and v7/v8's 16-byte loads would be
    // misaligned (K is a multiple of 8 here, so only the pointers force the fallback).
    const gemm::Shape s{65, 130, 136};
    std::uint64_t n = 0;
    for (const pd::Version& v : runnable_versions()) {
        if (v.name != "v6" && input_type(v) != DType::bf16) continue;
        check(v, s, pd::derive_seed(kSeed + 3, n++), Fill::uniform, 1);
        check(v, s, pd::derive_seed(kSeed + 3, n++), Fill::uniform, 0);
    }
}

TEST_CASE("gemm: bad shapes are rejected before any launch, naming the parameter", "[gemm][errors]") {
    struct Bad {
        gemm::Shape shape;
        const char* message;
    };
    const Bad bad[] = {
        {{0, 4, 4}, "tokens (T) must be >= 1, got 0"},
        {{-3, 4, 4}, "tokens (T) must be >= 1, got -3"},
        {{4, -1, 4}, "n (N) must be >= 1, got -1"},
        {{4, 0, 4}, "n (N) must be >= 1, got 0"},
        {{4, 4, 0}, "k (K) must be >= 1, got 0"},
        {{4, 4, -8}, "k (K) must be >= 1, got -8"},
        {{65536, 4, 32768}, "X: tokens (T) * k (K) = 2147483648 elements exceeds 2^31 - 1"},
        {{4, 65536, 32768}, "W: n (N) * k (K) = 2147483648 elements exceeds 2^31 - 1"},
        {{65536, 65536, 1}, "Y: tokens (T) * n (N) = 4294967296 elements exceeds 2^31 - 1"},
        {{2097121, 1, 1}, "tokens (T) = 2097121 exceeds 2097120"},
        {{1, 2097121, 1}, "n (N) = 2097121 exceeds 2097120"},
    };
    // Every pointer is a small buffer: a launcher that missed a check would write out of bounds,
    // so check_shape is REQUIRED to throw first.
    pd::DeviceBuffer<float> f(64);
    pd::DeviceBuffer<__nv_bfloat16> b(64);
    float* pf = f.data();
    __nv_bfloat16* pb = b.data();
    std::vector<std::pair<std::string, std::function<void(const gemm::Shape&)>>> launchers = {
        {"gemm_naive", [&](const gemm::Shape& s) { gemm::gemm_naive(pf, pf, pf, s); }},
        {"gemm_coalesced", [&](const gemm::Shape& s) { gemm::gemm_coalesced(pf, pf, pf, s); }},
        {"gemm_smem_tiled", [&](const gemm::Shape& s) { gemm::gemm_smem_tiled(pf, pf, pf, s); }},
        {"gemm_blocktile_1d", [&](const gemm::Shape& s) { gemm::gemm_blocktile_1d(pf, pf, pf, s); }},
        {"gemm_blocktile_2d", [&](const gemm::Shape& s) { gemm::gemm_blocktile_2d(pf, pf, pf, s); }},
        {"gemm_vectorized", [&](const gemm::Shape& s) { gemm::gemm_vectorized(pf, pf, pf, s); }},
        {"gemm_wmma", [&](const gemm::Shape& s) { gemm::gemm_wmma(pb, pb, pf, s); }},
        {"gemm_mma_pipelined", [&](const gemm::Shape& s) { gemm::gemm_mma_pipelined(pb, pb, pf, s); }}};
    for (const pd::Version& v : gemm::versions()) {
        if (!v.runs_here()) continue;
        if (input_type(v) == DType::fp32)
            launchers.push_back(
                {"gemm " + v.name, [&, name = v.name](const gemm::Shape& s) { gemm::gemm(name, pf, pf, pf, s); }});
        else
            launchers.push_back(
                {"gemm " + v.name, [&, name = v.name](const gemm::Shape& s) { gemm::gemm(name, pb, pb, pf, s); }});
    }
    for (const Bad& bad_shape : bad) {
        const gemm::Shape& s = bad_shape.shape;
        INFO("T=" << s.tokens << " N=" << s.n << " K=" << s.k);
        REQUIRE_THROWS_AS(gemm::check_shape(s), std::invalid_argument);
        REQUIRE_THROWS_WITH(gemm::check_shape(s), Contains(bad_shape.message));
        for (const auto& [name, launch] : launchers) {
            INFO(name);
            CHECK_THROWS_AS(launch(s), std::invalid_argument);
            CHECK_THROWS_WITH(launch(s), Contains(bad_shape.message));
        }
    }
    // The largest accepted sizes pass the check (nothing is launched here).
    CHECK_NOTHROW(gemm::check_shape({2097120, 1, 1024}));
    CHECK_NOTHROW(gemm::check_shape({1, 2097120, 1024}));
    CHECK_NOTHROW(gemm::check_shape({46340, 46340, 46340}));
}

TEST_CASE("gemm: the dispatch rejects unknown names, listing the valid ones", "[gemm][errors]") {
    const gemm::Shape s{2, 2, 2};
    pd::DeviceBuffer<float> f(16);
    pd::DeviceBuffer<__nv_bfloat16> b(16);
    for (const std::string name : {"v0", "v9", "V1", "naive", "", "v1 "}) {
        INFO("name '" << name << "'");
        CHECK_THROWS_AS(gemm::gemm(name, f.data(), f.data(), f.data(), s), std::invalid_argument);
        CHECK_THROWS_WITH(gemm::gemm(name, f.data(), f.data(), f.data(), s),
                          Contains("gemm: version " + name + ": unknown version") &&
                              Contains("(fp32 versions: v1, v2, v3, v4, v5, v6)"));
        CHECK_THROWS_AS(gemm::gemm(name, b.data(), b.data(), f.data(), s), std::invalid_argument);
        CHECK_THROWS_WITH(gemm::gemm(name, b.data(), b.data(), f.data(), s), Contains("(bf16 versions: v7, v8)"));
    }
}

TEST_CASE("gemm: v8 (mma.sync, ldmatrix, cp.async) by name, on both of its load paths", "[gemm]") {
    // K % 8 == 0 with aligned X and W takes the cp.async pipeline; K = 44 takes the synchronous
    // scalar loads. Both run on the simulator (the instructions emulated with the PTX ISA's
    // fragment layouts) and on a GPU of compute capability 8.0 or later; an older GPU refuses
    // v8 (and v7) with the reason.
    const pd::Version& v8 = gemm::versions().back();
    REQUIRE(v8.name == "v8");
    if (bf16_tensor_cores()) {
        std::uint64_t n = 0;
        for (const gemm::Shape& s : {gemm::Shape{33, 40, 48}, gemm::Shape{33, 40, 44}}) {
            check(v8, s, pd::derive_seed(kSeed + 4, n++), Fill::integers);
            check(v8, s, pd::derive_seed(kSeed + 4, n++), Fill::uniform);
        }
    } else {
        const gemm::Shape s{33, 40, 48};
        pd::DeviceBuffer<__nv_bfloat16> b(s.x_elements() + s.w_elements());
        pd::DeviceBuffer<float> y(s.y_elements());
        CHECK_THROWS_WITH(gemm::gemm("v8", b.data(), b.data(), y.data(), s), Contains("needs bf16 tensor cores"));
        CHECK_THROWS_WITH(gemm::gemm("v7", b.data(), b.data(), y.data(), s), Contains("needs bf16 tensor cores"));
    }
}
