// Chapter 03's decode GEMV against the CPU reference (double accumulation): every version of
// gemv() that runs on this backend, for each input type it takes (fp32 and bf16 W and X; v6,
// tensor cores, bf16 only), over ragged N, K and B; small-integer inputs compared exactly; v5
// (SIMT) at every batch size and v6 (WMMA) at batch sizes around its 16-token tiles; W and X at
// addresses that are not 16-byte aligned and K not a multiple of the vector width; poisoned
// outputs with guard floats past the end; bitwise repeatability; the rejection of bad shapes,
// names, the wrong input type and the CUDA-only v4 on the simulator with a message naming the
// parameter; and versions() against the dispatch.
#include "gemv/gemv.hpp"
#include "guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace gv = pd::kernels::gemv;
using Catch::Matchers::Contains;
using pd::DType;
using bf16 = __nv_bfloat16;

namespace {

using pd::testing::guard_intact;
using pd::testing::same_bits;

constexpr std::uint64_t kSeed = 20250303;
constexpr std::size_t kGuard = 32;  // poisoned floats after Y that must stay untouched

/// "seed=... B=... N=... K=...": the context of every failure message.
std::string context(const gv::Shape& s, std::uint64_t seed) {
    std::ostringstream os;
    os << "seed=" << seed << " B=" << s.batch << " N=" << s.n << " K=" << s.k;
    return os.str();
}

/// The ragged shapes (N, K, B): every N in {1, 7, 32, 33, 1000}, every K in {1, 3, 4, 5, 127,
/// 128, 129, 4099} and every B in {1, 2, 3, 8, 17, 64} appears, in combinations that cover
/// the paths of each version (not the full cross product, which is too slow on the simulator):
/// K a multiple of 8 (whole 16-byte vectors for fp32 and bf16) or of 4 only or neither; one or
/// several steps of v5 and v6; v5's SIMT passes of 1 to 64 tokens and v6's tensor-core tiles of
/// 1 to 4 x 16 tokens; more rows than one block of every version.
std::vector<gv::Shape> ragged_shapes() {
    const std::array<std::array<int, 3>, 16> nkb = {{{1, 1, 1},
                                                     {7, 3, 2},
                                                     {32, 4, 3},
                                                     {33, 5, 8},
                                                     {1000, 127, 1},
                                                     {33, 128, 17},
                                                     {7, 129, 64},
                                                     {32, 4099, 1},
                                                     {1, 4099, 3},
                                                     {1000, 5, 2},
                                                     {7, 4099, 17},
                                                     {1000, 129, 3},
                                                     {32, 1, 64},
                                                     {33, 256, 2},
                                                     {32, 1024, 40},
                                                     {1000, 64, 1}}};
    std::vector<gv::Shape> shapes;
    for (const auto& [n, k, b] : nkb) shapes.push_back(gv::Shape{b, n, k});
    return shapes;
}

/// The fp32 inputs of one problem (never zeros or constants) and the same values rounded to bf16.
struct Inputs {
    std::vector<float> w, x;
    std::vector<bf16> w_lp, x_lp;
};

std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = pd::from_float<bf16>(v[i]);
    return out;
}

/// Seeded inputs of one problem: uniform in [-1, 1), or with @p integers small integers in
/// [-3, 3], whose products and partial sums are integers below 2^24, exact in fp32 whatever the
/// order of the additions (and exact in bf16 too).
Inputs make_inputs(const gv::Shape& s, std::uint64_t seed, bool integers = false) {
    Inputs in{std::vector<float>(s.w_elements()), std::vector<float>(s.x_elements()), {}, {}};
    for (auto [v, stream] : {std::pair{&in.w, 1}, std::pair{&in.x, 2}}) {
        if (integers)
            pd::fill_integers<float>(*v, -3, 3, pd::derive_seed(seed, stream));
        else
            pd::fill_uniform<float>(*v, -1.f, 1.f, pd::derive_seed(seed, stream));
    }
    in.w_lp = to_bf16(in.w);
    in.x_lp = to_bf16(in.x);
    return in;
}

/// Copies @p host to @p dev starting @p offset elements in.
template <typename T>
void upload_at(pd::DeviceBuffer<T>& dev, const std::vector<T>& host, std::size_t offset) {
    PD_CHECK_CUDA(cudaMemcpy(dev.data() + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

/// Runs gemv(@p version) on a poisoned Y followed by kGuard poisoned floats. W and X start
/// @p offset elements past their (256-byte aligned) allocations: 0, or 1 to test unaligned rows.
template <typename T>
std::vector<float> run(const std::string& version, const std::vector<T>& w, const std::vector<T>& x, const gv::Shape& s,
                       std::size_t offset = 0) {
    pd::DeviceBuffer<T> dw(w.size() + offset), dx(x.size() + offset);
    upload_at(dw, w, offset);
    upload_at(dx, x, offset);
    pd::DeviceBuffer<float> y(s.y_elements() + kGuard);
    y.fill_bytes(pd::kPoisonByte);
    gv::gemv(version, dw.data() + offset, dx.data() + offset, y.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return y.download();
}

/// The references of one problem: of the fp32 inputs, and of their bf16 roundings.
struct References {
    std::vector<double> fp32, lp;
};

References references(const Inputs& in, const gv::Shape& s) {
    return {pd::reference::linear(in.x, in.w, s.batch, s.n, s.k),
            pd::reference::linear(in.x_lp, in.w_lp, s.batch, s.n, s.k)};
}

/// Which rule a check applies.
enum class Rule {
    close,  ///< fp32: Tolerance::fp32(); bf16: the low-precision rule (2 x the bf16-input reference's error)
    exact   ///< bitwise equal to the reference (small-integer inputs)
};

/// Full check of gemv(@p version) with element type T on one problem: Y against the reference
/// under @p rule, the guard untouched, and a second run giving the same bits.
template <typename T>
void check_version(const std::string& version, const Inputs& in, const References& ref, const gv::Shape& s,
                   std::uint64_t seed, Rule rule, std::size_t offset = 0) {
    constexpr bool kBf16 = std::is_same_v<T, bf16>;
    const std::string what = "gemv " + version + " " + pd::dtype_name<T>() + " " + context(s, seed) +
                             (offset ? " (W and X 1 element past a 16-byte boundary)" : "");
    INFO(what);
    const std::vector<T>* w;
    const std::vector<T>* x;
    if constexpr (kBf16) {
        w = &in.w_lp;
        x = &in.x_lp;
    } else {
        w = &in.w;
        x = &in.x;
    }
    const std::vector<float> got = run(version, *w, *x, s, offset);
    const std::span<const float> y = std::span<const float>(got).first(s.y_elements());
    pd::CompareResult r;
    if (rule == Rule::exact)
        r = pd::compare<float, double>(y, ref.lp, pd::Tolerance::exact());
    else if (kBf16)
        r = pd::compare_to_lowp_reference<float, double>(y, ref.fp32, ref.lp, 2.0);
    else
        r = pd::compare<float, double>(y, ref.fp32, pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.n)};
    INFO(pd::describe(r, what, dims));
    CHECK(r.passed);
    INFO("nothing may be written past Y [B, N]");
    CHECK(guard_intact(got, s.y_elements()));
    INFO("a second run on the same input must give the same bits");
    CHECK(same_bits(got, run(version, *w, *x, s, offset)));
}

/// True when the device has bf16 tensor cores (compute capability 8.0 or newer; the simulated
/// device is 8.0): v6 runs there, and throws elsewhere.
bool bf16_tensor_cores() {
    int device = 0, major = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 8;
}

/// The names of the versions that run on this backend and take inputs of type @p d, in the order
/// of versions() (on a GPU without bf16 tensor cores v6 is left out: tested to throw below).
std::vector<std::string> version_names(DType d) {
    std::vector<std::string> names;
    for (const pd::Version& v : gv::versions()) {
        if (!v.runs_here() || !v.takes(d)) continue;
        if (v.name == "v6" && !bf16_tensor_cores()) continue;
        names.push_back(v.name);
    }
    return names;
}

/// version_names() for the element type T (float or bf16).
template <typename T>
std::vector<std::string> version_names() {
    return version_names(std::is_same_v<T, float> ? DType::fp32 : DType::bf16);
}

/// Runs check_version() on every version of this backend for both input types (v6 for bf16 only).
void check_all_versions(const Inputs& in, const References& ref, const gv::Shape& s, std::uint64_t seed, Rule rule,
                        std::size_t offset = 0) {
    for (const std::string& version : version_names<float>())
        check_version<float>(version, in, ref, s, seed, rule, offset);
    for (const std::string& version : version_names<bf16>())
        check_version<bf16>(version, in, ref, s, seed, rule, offset);
}

}  // namespace

TEST_CASE("gemv: versions() lists v1 to v6 in order, v4 CUDA only, v6 bf16 only, and each one dispatches", "[gemv]") {
    // The registry is the same on both backends (the page's table and the program read it);
    // runs_here() and takes() tell which versions a call may use.
    const std::vector<pd::Version>& vs = gv::versions();
    CHECK(pd::names_of(vs) == std::vector<std::string>{"v1", "v2", "v3", "v4", "v5", "v6"});
    for (const pd::Version& v : vs) {
        INFO("version " << v.name);
        CHECK(!v.change.empty());
        CHECK(v.backends == (v.name == "v4" ? pd::Backends::cuda_only : pd::Backends::all));
        CHECK(v.takes(DType::bf16));
        CHECK(v.takes(DType::fp32) == (v.name != "v6"));
    }
#if defined(PD_BACKEND_SIM)
    CHECK(version_names(DType::fp32) == std::vector<std::string>{"v1", "v2", "v3", "v5"});
    CHECK(version_names(DType::bf16) == std::vector<std::string>{"v1", "v2", "v3", "v5", "v6"});
#endif
    // Every runnable name runs through gemv() with each type it takes (the sweeps check the results).
    const gv::Shape s{2, 5, 9};
    const Inputs in = make_inputs(s, kSeed);
    for (const std::string& name : version_names(DType::fp32)) {
        INFO("gemv(\"" << name << "\") fp32");
        CHECK_NOTHROW(run(name, in.w, in.x, s));
    }
    for (const std::string& name : version_names(DType::bf16)) {
        INFO("gemv(\"" << name << "\") bf16");
        CHECK_NOTHROW(run(name, in.w_lp, in.x_lp, s));
    }
}

TEST_CASE("gemv: every version matches the reference over ragged shapes, fp32", "[gemv]") {
    std::uint64_t c = 0;
    for (const gv::Shape& s : ragged_shapes()) {
        const std::uint64_t seed = pd::derive_seed(kSeed, c++);
        const Inputs in = make_inputs(s, seed);
        const References ref = references(in, s);
        for (const std::string& version : version_names<float>())
            check_version<float>(version, in, ref, s, seed, Rule::close);
    }
}

TEST_CASE("gemv: every version matches the reference over ragged shapes, bf16", "[gemv]") {
    // bf16 W and X, fp32 accumulation: compared with the reference of the unrounded fp32 inputs,
    // the error may be at most twice that of the reference computed from the rounded inputs.
    // v6 (tensor cores) included.
    std::uint64_t c = 0;
    for (const gv::Shape& s : ragged_shapes()) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 1, c++);
        const Inputs in = make_inputs(s, seed);
        const References ref = references(in, s);
        for (const std::string& version : version_names<bf16>())
            check_version<bf16>(version, in, ref, s, seed, Rule::close);
    }
}

TEST_CASE("gemv: small-integer inputs give exact results in fp32 and bf16", "[gemv]") {
    // Integers in [-3, 3]: every partial sum is exact, so any order of the additions (lanes,
    // shuffles, tensor-core tiles, the splits of v5 and v6) must give the reference's value exactly.
    const gv::Shape shapes[] = {{3, 33, 4099}, {17, 7, 129}, {64, 32, 128}, {8, 100, 5}, {1, 1, 1}, {33, 40, 264}};
    std::uint64_t c = 0;
    for (const gv::Shape& s : shapes) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 2, c++);
        const Inputs in = make_inputs(s, seed, true);
        const References ref = references(in, s);
        check_all_versions(in, ref, s, seed, Rule::exact);
    }
}

TEST_CASE("gemv: W and X one element past a 16-byte boundary", "[gemv]") {
    // Every row then starts unaligned, whatever K: v3 reads a prologue of 3 floats or 7 bf16
    // one by one, and v5 and v6 fall back to element loads.
    const gv::Shape shapes[] = {{3, 33, 128}, {17, 7, 256}, {1, 32, 4096}, {40, 19, 136}};
    std::uint64_t c = 0;
    for (const gv::Shape& s : shapes) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 3, c++);
        const Inputs in = make_inputs(s, seed);
        const References ref = references(in, s);
        check_all_versions(in, ref, s, seed, Rule::close, 1);
    }
}

TEST_CASE("gemv: v5 (batched, SIMT) at every batch size from 1 to 64, fp32 and bf16", "[gemv]") {
    // Every pass size of the SIMT path (1, 2, 4 ... 64 tokens, B rounded up to a power of two, so
    // tokens past B are padding): each B from 1 to 64, K a multiple of 8 (128-bit loads) for
    // even B and not (element loads) for odd B.
    for (int b = 1; b <= gv::kMaxBatch; ++b) {
        const gv::Shape s{b, 19, b % 2 == 0 ? 72 : 75};
        const std::uint64_t seed = pd::derive_seed(kSeed + 4, std::uint64_t(b));
        const Inputs in = make_inputs(s, seed);
        const References ref = references(in, s);
        check_version<float>("v5", in, ref, s, seed, Rule::close);
        check_version<bf16>("v5", in, ref, s, seed, Rule::close);
    }
}

TEST_CASE("gemv: v6 (batched, tensor cores) around its 16-token tiles, ragged N and K", "[gemv]") {
    // B = 1, 2, 5, 16, 17, 33, 64: one to four 16-token tiles, full and nearly empty, each B on
    // three shapes: N not a multiple of the 32-row block with K a multiple of 8 (16-byte loads);
    // K not a multiple of 8 (element loads); and W and X one element past a 16-byte boundary.
    // Small-integer inputs compare exactly, whatever the order of the tile products.
    if (!bf16_tensor_cores()) {  // a GPU below sm_80: the launcher must refuse, saying why
        const gv::Shape s{2, 16, 16};
        pd::DeviceBuffer<bf16> w(s.w_elements()), x(s.x_elements());
        pd::DeviceBuffer<float> y(s.y_elements());
        CHECK_THROWS_WITH(gv::gemv("v6", w.data(), x.data(), y.data(), s), Contains("needs bf16 tensor cores"));
        return;
    }
    struct Layout {
        int n, k;
        std::size_t offset;
    };
    const Layout layouts[] = {{33, 136, 0}, {19, 131, 0}, {47, 264, 1}};
    std::uint64_t c = 0;
    for (int b : {1, 2, 5, 16, 17, 33, 64}) {
        for (const Layout& l : layouts) {
            const gv::Shape s{b, l.n, l.k};
            const std::uint64_t seed = pd::derive_seed(kSeed + 6, c++);
            const Inputs in = make_inputs(s, seed);
            check_version<bf16>("v6", in, references(in, s), s, seed, Rule::close, l.offset);
            const Inputs ints = make_inputs(s, seed, true);
            check_version<bf16>("v6", ints, references(ints, s), s, seed, Rule::exact, l.offset);
        }
    }
}

TEST_CASE("gemv: v6 takes bf16 only: the dispatch refuses fp32 inputs, naming --kernel", "[gemv][errors]") {
    const gv::Shape s{4, 16, 16};
    pd::DeviceBuffer<float> w(s.w_elements()), x(s.x_elements()), y(s.y_elements());
    y.fill_bytes(pd::kPoisonByte);
    CHECK_THROWS_AS(gv::gemv("v6", w.data(), x.data(), y.data(), s), std::invalid_argument);
#if defined(PD_BACKEND_SIM)
    CHECK_THROWS_WITH(
        gv::gemv("v6", w.data(), x.data(), y.data(), s),
        Contains("gemv: version v6 takes bf16 inputs, not fp32") && Contains("(fp32 versions: v1, v2, v3, v5)"));
#else
    CHECK_THROWS_WITH(
        gv::gemv("v6", w.data(), x.data(), y.data(), s),
        Contains("gemv: version v6 takes bf16 inputs, not fp32") && Contains("(fp32 versions: v1, v2, v3, v4, v5)"));
#endif
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    INFO("nothing may be launched: Y keeps its poison");
    CHECK(guard_intact(y.download(), 0));
}

TEST_CASE("gemv: launchers reject bad shapes and names, naming the parameter", "[gemv][errors]") {
    struct Bad {
        gv::Shape shape;
        const char* message;
    };
    const Bad bad[] = {
        {{1, 0, 8}, "N (rows of W) must be >= 1, got 0"},
        {{1, -3, 8}, "N (rows of W) must be >= 1, got -3"},
        {{1, 8, 0}, "K (columns of W) must be >= 1, got 0"},
        {{0, 8, 8}, "B (batch) must be in 1 ... kMaxBatch = 64, got 0"},
        {{65, 8, 8}, "B (batch) must be in 1 ... kMaxBatch = 64, got 65"},
        {{1, 65536, 32768}, "N * K = 2147483648 exceeds 2^31 - 1 elements of W"},
    };
    // A launcher that missed a check would touch these small buffers out of bounds: a CHECK
    // fails instead (check_shape is REQUIRED first, every launcher relies on it).
    pd::DeviceBuffer<float> f(64);
    pd::DeviceBuffer<bf16> h(64);
    std::vector<std::pair<std::string, std::function<void(const gv::Shape&)>>> launchers = {
        {"gemv_batched_wmma", [&](const gv::Shape& s) { gv::gemv_batched_wmma(h.data(), h.data(), f.data(), s); }},
    };
    for (const std::string& version : version_names(DType::fp32))
        launchers.push_back({"gemv " + version + " fp32",
                             [&, version](const gv::Shape& s) { gv::gemv(version, f.data(), f.data(), f.data(), s); }});
    for (const std::string& version : version_names(DType::bf16))
        launchers.push_back({"gemv " + version + " bf16",
                             [&, version](const gv::Shape& s) { gv::gemv(version, h.data(), h.data(), f.data(), s); }});
    for (const Bad& b : bad) {
        REQUIRE_THROWS_WITH(gv::check_shape(b.shape), Contains(b.message));
        for (const auto& [name, launch] : launchers) {
            INFO(name << " with " << context(b.shape, 0));
            CHECK_THROWS_AS(launch(b.shape), std::invalid_argument);
            CHECK_THROWS_WITH(launch(b.shape), Contains(b.message));
        }
    }
    CHECK_NOTHROW(gv::check_shape({gv::kMaxBatch, 65535, 32768}));  // 2^31 - 32768 elements: allowed

    // Unknown names: refused naming --kernel, listing the versions of that input type that run here.
#if defined(PD_BACKEND_SIM)
    const std::string fp32_valid = "(fp32 versions: v1, v2, v3, v5)",
                      bf16_valid = "(bf16 versions: v1, v2, v3, v5, v6)";
#else
    const std::string fp32_valid = "(fp32 versions: v1, v2, v3, v4, v5)",
                      bf16_valid = "(bf16 versions: v1, v2, v3, v4, v5, v6)";
#endif
    const gv::Shape ok{1, 4, 4};
    for (const std::string name : {"v9", "", "V1", "v5 ", "v0"}) {
        INFO("version name '" << name << "'");
        CHECK_THROWS_AS(gv::gemv(name, f.data(), f.data(), f.data(), ok), std::invalid_argument);
        CHECK_THROWS_WITH(gv::gemv(name, f.data(), f.data(), f.data(), ok),
                          Contains("gemv: version " + name + ": unknown version") && Contains(fp32_valid));
        CHECK_THROWS_AS(gv::gemv(name, h.data(), h.data(), f.data(), ok), std::invalid_argument);
        CHECK_THROWS_WITH(gv::gemv(name, h.data(), h.data(), f.data(), ok),
                          Contains("gemv: version " + name + ": unknown version") && Contains(bf16_valid));
    }
}

TEST_CASE("gemv: v4 uses CUB, so it is CUDA-only", "[gemv]") {
    const gv::Shape s{3, 33, 129};
#if defined(PD_BACKEND_SIM)
    // Listed in versions() but not run here: its launchers and the dispatch say why instead of
    // launching, the dispatch naming --kernel v4 and the versions that do run.
    pd::DeviceBuffer<float> w(s.w_elements()), x(s.x_elements()), y(s.y_elements());
    pd::DeviceBuffer<bf16> wh(s.w_elements()), xh(s.x_elements());
    y.fill_bytes(pd::kPoisonByte);
    CHECK_THROWS_WITH(gv::gemv_cub(w.data(), x.data(), y.data(), s), Contains("CUDA-only"));
    CHECK_THROWS_WITH(gv::gemv_cub(wh.data(), xh.data(), y.data(), s), Contains("CUDA-only"));
    CHECK_THROWS_AS(gv::gemv("v4", w.data(), x.data(), y.data(), s), std::invalid_argument);
    CHECK_THROWS_WITH(
        gv::gemv("v4", w.data(), x.data(), y.data(), s),
        Contains("gemv: version v4 runs on CUDA only") && Contains("(fp32 versions here: v1, v2, v3, v5)"));
    CHECK_THROWS_AS(gv::gemv("v4", wh.data(), xh.data(), y.data(), s), std::invalid_argument);
    CHECK_THROWS_WITH(
        gv::gemv("v4", wh.data(), xh.data(), y.data(), s),
        Contains("gemv: version v4 runs on CUDA only") && Contains("(bf16 versions here: v1, v2, v3, v5, v6)"));
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    INFO("nothing may be launched: Y keeps its poison");
    CHECK(guard_intact(y.download(), 0));
#else
    // On CUDA v4 is one of the runnable versions (the sweeps test it); here once more by name.
    const std::uint64_t seed = pd::derive_seed(kSeed + 5, 0);
    const Inputs in = make_inputs(s, seed);
    const References ref = references(in, s);
    check_version<float>("v4", in, ref, s, seed, Rule::close);
    check_version<bf16>("v4", in, ref, s, seed, Rule::close);
#endif
}
