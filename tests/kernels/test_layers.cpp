// Chapter 04's small kernels (kernels/layers/layers.hpp) against their CPU references (double
// precision, kernels/reference/layers_reference.hpp): embedding (fp32 and bf16 tables, ids out
// of range), RMSNorm and SwiGLU (fp32 and bf16 outputs), RoPE (positions up to 8191), the
// residual add, fp32 -> bf16, the two permutes, and the greedy argmax (ties, the maximum at the
// last index); over ragged sizes, with poisoned outputs and guard elements past the end, bf16
// outputs within one bf16 ulp of the reference rounded to bf16, bitwise repeatability, and the
// launchers' rejection of bad sizes naming the parameter. Then the references themselves: the
// CPU model (ModelReference) fed all at once, one token at a time and in chunks gives the same
// logits; two tiny models whose logits are computed here by hand; decode attention against
// chapter 01's attention reference.
#include "attention_reference.hpp"
#include "guard_check.hpp"
#include "layers/layers.hpp"
#include "layers_reference.hpp"
#include "model_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/model_config.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace ly = pd::kernels::layers;
namespace ref = pd::reference;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;

namespace {

using pd::testing::guard_intact;
using pd::testing::same_bits;

constexpr std::uint64_t kSeed = 20250404;
constexpr std::size_t kGuard = 32;  // poisoned elements after each output that must stay untouched

constexpr int kWidths[] = {1, 31, 32, 33, 257, 4099};  // D: around a warp, a block and several blocks
constexpr int kTokens[] = {1, 3, 8};                   // T

/// True when elements @p n ... of @p values (bf16 or int outputs) still hold pd::kPoisonByte in
/// every byte; guard_intact() of guard_check.hpp does the same for floats.
template <typename T>
bool guard_intact(const std::vector<T>& values, std::size_t n) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = n * sizeof(T); i < values.size() * sizeof(T); ++i)
        if (bytes[i] != pd::kPoisonByte) return false;
    return true;
}

/// Runs @p launch on a device output of @p n elements of type T followed by kGuard more, all
/// poisoned first, and returns the n + kGuard elements.
template <typename T, typename Launch>
std::vector<T> run_poisoned(std::size_t n, Launch&& launch) {
    pd::DeviceBuffer<T> out(n + kGuard);
    out.fill_bytes(pd::kPoisonByte);
    launch(out.data());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return out.download();
}

/// Seeded floats uniform in [lo, hi) (never zeros or constants).
std::vector<float> uniform(std::size_t n, float lo, float hi, std::uint64_t seed) {
    std::vector<float> v(n);
    pd::fill_uniform<float>(v, lo, hi, seed);
    return v;
}

/// The first ref.size() floats of @p got against @p ref under @p tol; on failure prints @p what
/// (kernel, seed, sizes), the rule and the first mismatches at their coordinates in @p dims.
void check_fp32(const std::vector<float>& got, const std::vector<double>& ref, pd::Tolerance tol,
                const std::string& what, std::span<const std::size_t> dims) {
    const pd::CompareResult r =
        pd::compare<float, double>(std::span<const float>(got).first(ref.size()), std::span<const double>(ref), tol);
    INFO(pd::describe(r, what, dims));
    CHECK(r.passed);
}

/// A bf16's place on the number line in units of its last place: consecutive bf16 values of
/// the same sign differ by 1, and -0 and +0 are both 0.
int ulp_position(bf16 v) {
    std::uint16_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const int magnitude = bits & 0x7FFF;
    return (bits & 0x8000) ? -magnitude : magnitude;
}

/// The first ref.size() bf16 values of @p got: each finite and within one bf16 ulp of the
/// reference rounded to bf16 (the kernel rounds its fp32 result once; the reference's value
/// rounds to the same bf16 or, near a rounding boundary, to its neighbour).
void check_bf16(const std::vector<bf16>& got, const std::vector<double>& ref, const std::string& what) {
    std::size_t bad = 0;
    std::ostringstream first;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const bf16 expected = pd::from_float<bf16>(float(ref[i]));
        const float g = pd::to_float(got[i]);
        if (std::isfinite(g) && std::abs(ulp_position(got[i]) - ulp_position(expected)) <= 1) continue;
        if (++bad <= 8)
            first << "\n  [" << i << "] got " << g << ", reference " << ref[i] << " (as bf16 " << pd::to_float(expected)
                  << ")";
    }
    INFO(what << ": " << bad << " of " << ref.size()
              << " elements are not within one bf16 ulp of the reference rounded to bf16" << first.str());
    CHECK(bad == 0);
}

/// "seed=... T=... D=...": the context of a failure message.
std::string context(std::uint64_t seed, std::initializer_list<std::pair<const char*, long long>> sizes) {
    std::ostringstream os;
    os << "seed=" << seed;
    for (const auto& [name, v] : sizes) os << " " << name << "=" << v;
    return os.str();
}

}  // namespace

// ---- embedding ------------------------------------------------------------------------------

TEST_CASE("layers: embedding gathers table rows, fp32 and bf16 tables, zeros for ids out of range",
          "[model][embedding]") {
    std::uint64_t n = 0;
    for (int T : kTokens) {
        for (int D : kWidths) {
            const int V = 50;
            const std::uint64_t seed = pd::derive_seed(kSeed, n++);
            const std::vector<float> table = uniform(std::size_t(V) * D, -1.f, 1.f, pd::derive_seed(seed, 1));
            const std::vector<bf16> table16 = pd::round_all<bf16>(table);
            // Random ids, with rows 1 and 2 (when present) out of range on either side.
            pd::Rng rng(pd::derive_seed(seed, 2));
            std::vector<int> tokens(static_cast<std::size_t>(T));
            for (int& t : tokens) t = rng.integer(0, V - 1);
            const int invalid[] = {-1, V, INT_MIN, INT_MAX, V + 1000};
            if (T > 1) tokens[1] = invalid[n % 5];
            if (T > 2) tokens[2] = invalid[(n + 1) % 5];
            std::vector<double> expected(std::size_t(T) * D, 0.0), expected16(expected.size(), 0.0);
            for (int t = 0; t < T; ++t) {
                const int id = tokens[std::size_t(t)];
                if (id < 0 || id >= V) continue;
                for (int c = 0; c < D; ++c) {
                    expected[std::size_t(t) * D + c] = table[std::size_t(id) * D + c];
                    expected16[std::size_t(t) * D + c] = pd::to_float(table16[std::size_t(id) * D + c]);
                }
            }
            const std::string what = "embedding " + context(seed, {{"T", T}, {"D", D}, {"V", V}});
            INFO(what);
            const std::size_t dims[] = {std::size_t(T), std::size_t(D)};
            pd::DeviceBuffer<int> d_tokens{std::span<const int>(tokens)};
            pd::DeviceBuffer<float> d_table{std::span<const float>(table)};
            pd::DeviceBuffer<bf16> d_table16{std::span<const bf16>(table16)};
            const auto got = run_poisoned<float>(
                expected.size(), [&](float* x) { ly::embedding(d_tokens.data(), d_table.data(), x, T, D, V); });
            check_fp32(got, expected, pd::Tolerance::exact(), what + " fp32 table", dims);
            CHECK(guard_intact(got, expected.size()));
            const auto got16 = run_poisoned<float>(
                expected.size(), [&](float* x) { ly::embedding(d_tokens.data(), d_table16.data(), x, T, D, V); });
            check_fp32(got16, expected16, pd::Tolerance::exact(), what + " bf16 table", dims);
            CHECK(guard_intact(got16, expected.size()));
        }
    }
}

TEST_CASE("layers: a rank's shard of the embedding gives its rows and zeros for the others' tokens (chapter 10)",
          "[model][embedding][tp]") {
    std::uint64_t n = 100;
    for (int shards : {2, 3, 8})
        for (int T : {1, 7, 33}) {
            const int V = 168, rows = V / shards, D = 40;  // every rank's rows, in turn
            const std::uint64_t seed = pd::derive_seed(kSeed, n++);
            pd::Rng rng(pd::derive_seed(seed, 2));
            std::vector<int> tokens(static_cast<std::size_t>(T));
            for (int& t : tokens) t = rng.integer(0, V - 1);
            for (int r = 0; r < shards; ++r) {
                const int first = r * rows;
                const std::vector<float> table =
                    uniform(std::size_t(rows) * D, -1.f, 1.f, pd::derive_seed(seed, 10 + r));
                std::vector<double> expected(std::size_t(T) * D, 0.0);
                for (int t = 0; t < T; ++t) {
                    const int id = tokens[std::size_t(t)] - first;
                    if (id < 0 || id >= rows) continue;
                    for (int c = 0; c < D; ++c) expected[std::size_t(t) * D + c] = table[std::size_t(id) * D + c];
                }
                const std::string what =
                    "embedding_shard " + context(seed, {{"T", T}, {"first", first}, {"rows", rows}});
                INFO(what);
                const std::size_t dims[] = {std::size_t(T), std::size_t(D)};
                pd::DeviceBuffer<int> d_tokens{std::span<const int>(tokens)};
                pd::DeviceBuffer<float> d_table{std::span<const float>(table)};
                const auto got = run_poisoned<float>(expected.size(), [&](float* x) {
                    ly::embedding_shard(d_tokens.data(), d_table.data(), x, T, D, first, rows);
                });
                check_fp32(got, expected, pd::Tolerance::exact(), what, dims);
                CHECK(guard_intact(got, expected.size()));
            }
        }
}

TEST_CASE("layers: interleave_shards puts each row's vocabulary in order after an all-gather (chapter 10)",
          "[model][tp]") {
    for (int shards : {1, 2, 3, 8})
        for (int rows : {1, 5, 64})
            for (int cols : {1, 7, 300}) {
                const std::uint64_t seed = pd::derive_seed(kSeed, std::uint64_t(shards * 100000 + rows * 1000 + cols));
                const std::vector<float> gathered = uniform(std::size_t(shards) * rows * cols, -5.f, 5.f, seed);
                std::vector<double> expected(gathered.size());
                for (int s = 0; s < shards; ++s)
                    for (int r = 0; r < rows; ++r)
                        for (int c = 0; c < cols; ++c)
                            expected[(std::size_t(r) * shards + s) * cols + c] =
                                gathered[(std::size_t(s) * rows + r) * cols + c];
                const std::string what =
                    "interleave_shards " + context(seed, {{"shards", shards}, {"rows", rows}, {"cols", cols}});
                INFO(what);
                const std::size_t dims[] = {std::size_t(rows), std::size_t(shards) * cols};
                pd::DeviceBuffer<float> d_in{std::span<const float>(gathered)};
                const auto got = run_poisoned<float>(
                    expected.size(), [&](float* x) { ly::interleave_shards(d_in.data(), x, shards, rows, cols); });
                check_fp32(got, expected, pd::Tolerance::exact(), what, dims);
                CHECK(guard_intact(got, expected.size()));
            }
    float* p = nullptr;
    CHECK_THROWS_WITH(ly::interleave_shards(p, p, 0, 1, 1), Contains("interleave_shards: shards must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::interleave_shards(p, p, 2, 1, 0), Contains("interleave_shards: cols must be >= 1, got 0"));
    const int* id = nullptr;
    CHECK_THROWS_WITH(ly::embedding_shard(id, p, p, 2, 4, -1, 4), Contains("embedding: first = -1 must be >= 0"));
}

// ---- RMSNorm --------------------------------------------------------------------------------

TEST_CASE("layers: rmsnorm matches the reference over ragged widths, fp32 and bf16 outputs", "[model][rmsnorm]") {
    std::uint64_t n = 0;
    for (int T : kTokens) {
        for (int D : kWidths) {
            const std::uint64_t seed = pd::derive_seed(kSeed + 1, n++);
            std::vector<float> x = uniform(std::size_t(T) * D, -2.f, 2.f, pd::derive_seed(seed, 1));
            const std::vector<float> w = uniform(std::size_t(D), 0.5f, 1.5f, pd::derive_seed(seed, 2));
            if (T == 8) {  // rows of very different scales: the norm must be per row
                for (int c = 0; c < D; ++c) x[std::size_t(3) * D + c] *= 1000.f;
                for (int c = 0; c < D; ++c) x[std::size_t(5) * D + c] *= 1e-3f;
            }
            const float eps = 1e-5f;
            const std::vector<double> expected = ref::rmsnorm(x, w, T, D, eps);
            const std::string what = "rmsnorm " + context(seed, {{"T", T}, {"D", D}});
            INFO(what);
            const std::size_t dims[] = {std::size_t(T), std::size_t(D)};
            pd::DeviceBuffer<float> d_x{std::span<const float>(x)}, d_w{std::span<const float>(w)};
            const auto got = run_poisoned<float>(expected.size(),
                                                 [&](float* y) { ly::rmsnorm(d_x.data(), d_w.data(), y, T, D, eps); });
            check_fp32(got, expected, pd::Tolerance::fp32(), what + " fp32", dims);
            CHECK(guard_intact(got, expected.size()));
            const auto got16 = run_poisoned<bf16>(expected.size(),
                                                  [&](bf16* y) { ly::rmsnorm(d_x.data(), d_w.data(), y, T, D, eps); });
            check_bf16(got16, expected, what + " bf16");
            CHECK(guard_intact(got16, expected.size()));
        }
    }
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST_CASE("layers: rope matches the reference for positions up to 8191", "[model][rope]") {
    // Tolerance 1e-6: with the angle and its sine and cosine in double, only the fp32 rotation
    // rounds (~1e-7). An angle computed in fp32 is off by up to ~4e-4 rad at position 8191
    // (theta^(-2i/d) rounded to fp32, times the position) and fails here.
    const pd::Tolerance tol{1e-6, 1e-6};
    std::uint64_t n = 0;
    for (int T : kTokens) {
        for (int H : {1, 4, 8}) {
            for (int d : {2, 64, 128}) {
                const std::uint64_t seed = pd::derive_seed(kSeed + 2, n++);
                const std::size_t count = std::size_t(T) * H * d;
                const std::vector<float> x = uniform(count, -1.f, 1.f, pd::derive_seed(seed, 1));
                pd::Rng rng(pd::derive_seed(seed, 2));
                std::vector<int> positions(static_cast<std::size_t>(T));
                for (int& p : positions) p = rng.integer(0, 8191);
                positions[0] = 8191;
                if (T > 1) positions[1] = 0;  // position 0: no turn
                const std::vector<double> expected = ref::rope(x, positions, T, H, d, 10000.0);
                const std::string what = "rope " + context(seed, {{"T", T}, {"H", H}, {"d", d}});
                INFO(what);
                const std::size_t dims[] = {std::size_t(T), std::size_t(H), std::size_t(d)};
                pd::DeviceBuffer<int> d_pos{std::span<const int>(positions)};
                const auto got = run_poisoned<float>(count, [&](float* buf) {
                    PD_CHECK_CUDA(cudaMemcpy(buf, x.data(), count * sizeof(float), cudaMemcpyHostToDevice));
                    ly::rope(buf, d_pos.data(), T, H, d, 10000.0);
                });
                check_fp32(got, expected, tol, what, dims);
                CHECK(guard_intact(got, count));
            }
        }
    }
}

TEST_CASE("layers: rope with another theta (500000, Llama 3) and head dim 2", "[model][rope]") {
    // d = 2 has one pair per head, turned by pos * theta^0 = pos whatever theta: (cos pos, sin
    // pos) for the input (1, 0), checked against std::cos and std::sin directly.
    const int T = 3, H = 2, d = 2;
    const std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    const std::vector<int> positions = {0, 1, 8191};
    std::vector<double> expected;
    for (int p : positions)
        for (int h = 0; h < H; ++h) expected.insert(expected.end(), {std::cos(double(p)), std::sin(double(p))});
    pd::DeviceBuffer<int> d_pos{std::span<const int>(positions)};
    const auto got = run_poisoned<float>(x.size(), [&](float* buf) {
        PD_CHECK_CUDA(cudaMemcpy(buf, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
        ly::rope(buf, d_pos.data(), T, H, d, 500000.0);
    });
    const std::size_t dims[] = {std::size_t(T), std::size_t(H), std::size_t(d)};
    check_fp32(got, expected, pd::Tolerance{1e-7, 0}, "rope d=2 theta=500000", dims);
    // And a wider head under theta = 500000 against the reference.
    const int H2 = 4, d2 = 128;
    const std::vector<float> x2 = uniform(std::size_t(T) * H2 * d2, -1.f, 1.f, kSeed + 3);
    const std::vector<double> expected2 = ref::rope(x2, positions, T, H2, d2, 500000.0);
    const auto got2 = run_poisoned<float>(x2.size(), [&](float* buf) {
        PD_CHECK_CUDA(cudaMemcpy(buf, x2.data(), x2.size() * sizeof(float), cudaMemcpyHostToDevice));
        ly::rope(buf, d_pos.data(), T, H2, d2, 500000.0);
    });
    const std::size_t dims2[] = {std::size_t(T), std::size_t(H2), std::size_t(d2)};
    check_fp32(got2, expected2, pd::Tolerance{1e-6, 1e-6}, "rope d=128 theta=500000", dims2);
    CHECK(guard_intact(got2, x2.size()));
}

// ---- element-wise ---------------------------------------------------------------------------

namespace {

/// Element counts for the element-wise kernels: the widths, and T x D for T = 3 and 8 at the
/// widest (several dozen blocks).
std::vector<std::size_t> elementwise_sizes() {
    std::vector<std::size_t> sizes(std::begin(kWidths), std::end(kWidths));
    sizes.push_back(3 * 4099);
    sizes.push_back(8 * 4099);
    return sizes;
}

}  // namespace

TEST_CASE("layers: swiglu matches the reference, fp32 and bf16 outputs, including saturated gates", "[model][swiglu]") {
    std::uint64_t c = 0;
    for (std::size_t n : elementwise_sizes()) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 4, c++);
        std::vector<float> gate = uniform(n, -8.f, 8.f, pd::derive_seed(seed, 1));
        const std::vector<float> up = uniform(n, -2.f, 2.f, pd::derive_seed(seed, 2));
        // Saturated gates: silu(-100) underflows to (-)0 without NaN; silu(100) = 100.
        if (n > 40) {
            gate[7] = -100.f;
            gate[n - 1] = 100.f;
            gate[n / 2] = -30.f;
        }
        const std::vector<double> expected = ref::swiglu(gate, up);
        const std::string what = "swiglu " + context(seed, {{"n", (long long)n}});
        INFO(what);
        const std::size_t dims[] = {n};
        pd::DeviceBuffer<float> d_gate{std::span<const float>(gate)}, d_up{std::span<const float>(up)};
        const auto got = run_poisoned<float>(n, [&](float* out) { ly::swiglu(d_gate.data(), d_up.data(), out, n); });
        check_fp32(got, expected, pd::Tolerance::fp32(), what + " fp32", dims);
        CHECK(guard_intact(got, n));
        const auto got16 = run_poisoned<bf16>(n, [&](bf16* out) { ly::swiglu(d_gate.data(), d_up.data(), out, n); });
        check_bf16(got16, expected, what + " bf16");
        CHECK(guard_intact(got16, n));
    }
}

TEST_CASE("layers: add, to_bf16 and round_to_bf16 are exact", "[model][add][to_bf16]") {
    std::uint64_t c = 0;
    for (std::size_t n : elementwise_sizes()) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 5, c++);
        std::vector<float> x = uniform(n, -4.f, 4.f, pd::derive_seed(seed, 1));
        const std::vector<float> y = uniform(n, -4.f, 4.f, pd::derive_seed(seed, 2));
        const std::string what = context(seed, {{"n", (long long)n}});
        INFO(what);
        const std::size_t dims[] = {n};
        // add: one fp32 rounding of x + y, the same on the host.
        std::vector<double> sum(n);
        for (std::size_t i = 0; i < n; ++i) sum[i] = double(x[i] + y[i]);
        pd::DeviceBuffer<float> d_y{std::span<const float>(y)};
        const auto got = run_poisoned<float>(n, [&](float* buf) {
            PD_CHECK_CUDA(cudaMemcpy(buf, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
            ly::add(buf, d_y.data(), n);
        });
        check_fp32(got, sum, pd::Tolerance::exact(), "add " + what, dims);
        CHECK(guard_intact(got, n));
        // to_bf16: round to nearest even, bit for bit as the host's conversion; with ties (1 +
        // 2^-8 rounds down to 1, 1 + 3 * 2^-8 up to 1 + 2^-6), the largest float (rounds to
        // inf), infinities and -0.
        if (n > 40) {
            const float special[] = {1.f + 0x1p-8f,
                                     1.f + 3 * 0x1p-8f,
                                     -(1.f + 0x1p-8f),
                                     std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     -0.f,
                                     0x1p-130f};
            std::copy(std::begin(special), std::end(special), x.begin() + 3);
        }
        pd::DeviceBuffer<float> d_x{std::span<const float>(x)};
        const auto got16 = run_poisoned<bf16>(n, [&](bf16* out) { ly::to_bf16(d_x.data(), out, n); });
        const std::vector<bf16> expected16 = pd::round_all<bf16>(x);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) bad += std::memcmp(&got16[i], &expected16[i], sizeof(bf16)) != 0;
        INFO("to_bf16 " << what << ": " << bad << " elements differ from the host's round to nearest even");
        CHECK(bad == 0);
        CHECK(guard_intact(got16, n));
        // round_to_bf16: the same rounding in place, widened back exactly
        const auto rounded = run_poisoned<float>(n, [&](float* buf) {
            PD_CHECK_CUDA(cudaMemcpy(buf, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
            ly::round_to_bf16(buf, n);
        });
        const std::vector<float> want = pd::to_float_all<bf16>(expected16);
        std::size_t off = 0;
        for (std::size_t i = 0; i < n; ++i) off += std::memcmp(&rounded[i], &want[i], sizeof(float)) != 0;
        INFO("round_to_bf16 " << what << ": " << off << " elements differ from the host's bf16(x) widened back");
        CHECK(off == 0);
        CHECK(guard_intact(rounded, n));
    }
}

// ---- permutes -------------------------------------------------------------------------------

TEST_CASE("layers: tokens_to_heads and heads_to_tokens permute exactly and invert each other", "[model][permute]") {
    const std::array<std::array<int, 4>, 8> shapes = {{{1, 1, 1, 1},
                                                       {1, 3, 4, 64},
                                                       {2, 8, 1, 31},
                                                       {3, 1, 8, 33},
                                                       {2, 3, 8, 128},
                                                       {1, 8, 4, 2},
                                                       {3, 8, 4, 1},
                                                       {2, 33, 2, 32}}};
    std::uint64_t c = 0;
    for (const auto& [B, S, H, d] : shapes) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 6, c++);
        const std::size_t n = std::size_t(B) * S * H * d;
        const std::vector<float> x = uniform(n, -1.f, 1.f, seed);
        std::vector<double> heads(n), tokens(n);  // x read as [B, S, H, d], resp. as [B, H, S, d]
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s)
                for (int h = 0; h < H; ++h)
                    for (int e = 0; e < d; ++e) {
                        const std::size_t bshd = ((std::size_t(b) * S + s) * H + h) * d + e;
                        const std::size_t bhsd = ((std::size_t(b) * H + h) * S + s) * d + e;
                        heads[bhsd] = x[bshd];
                        tokens[bshd] = x[bhsd];
                    }
        const std::string what = context(seed, {{"B", B}, {"S", S}, {"H", H}, {"d", d}});
        INFO(what);
        pd::DeviceBuffer<float> d_x{std::span<const float>(x)};
        const auto to_heads =
            run_poisoned<float>(n, [&](float* out) { ly::tokens_to_heads(d_x.data(), out, B, S, H, d); });
        const std::size_t hd[] = {std::size_t(B), std::size_t(H), std::size_t(S), std::size_t(d)};
        check_fp32(to_heads, heads, pd::Tolerance::exact(), "tokens_to_heads " + what, hd);
        CHECK(guard_intact(to_heads, n));
        const auto to_tokens =
            run_poisoned<float>(n, [&](float* out) { ly::heads_to_tokens(d_x.data(), out, B, S, H, d); });
        const std::size_t td[] = {std::size_t(B), std::size_t(S), std::size_t(H), std::size_t(d)};
        check_fp32(to_tokens, tokens, pd::Tolerance::exact(), "heads_to_tokens " + what, td);
        CHECK(guard_intact(to_tokens, n));
        // The round trip gives x back.
        pd::DeviceBuffer<float> d_heads{std::span<const float>(to_heads).first(n)};
        const auto back =
            run_poisoned<float>(n, [&](float* out) { ly::heads_to_tokens(d_heads.data(), out, B, S, H, d); });
        INFO("heads_to_tokens(tokens_to_heads(x)) must be x");
        CHECK(std::memcmp(back.data(), x.data(), n * sizeof(float)) == 0);
    }
}

// ---- argmax ---------------------------------------------------------------------------------

TEST_CASE("layers: argmax finds the lowest index of the maximum, ties and the last index included", "[model][argmax]") {
    std::uint64_t c = 0;
    for (int B : {1, 3, 8}) {
        for (int V : {1, 33, 4099}) {
            const std::uint64_t seed = pd::derive_seed(kSeed + 7, c++);
            std::vector<float> logits = uniform(std::size_t(B) * V, -10.f, 10.f, seed);
            auto row = [&](int b) { return logits.data() + std::size_t(b) * V; };
            // Row 0 keeps its random maximum. Then, in turn: the maximum at the last index; a
            // tie of the maximum at several indices (in other threads' slices and in the same
            // thread's slice), the lowest of which must win; every value equal (index 0 wins);
            // every value -inf; a tie between index 0 and the last index.
            for (int b = 1; b < B; ++b) {
                float* r = row(b);
                switch (b % 6) {
                    case 1:
                        r[V - 1] = 20.f;
                        break;
                    case 2:
                        for (int j : {V - 1, V / 2, V / 3, 2 * V / 3}) r[j] = 20.f;
                        if (V > 300) r[44] = r[300] = 20.f;  // 44 and 300 = 44 + 256: the same thread
                        break;
                    case 3:
                        for (int j = 0; j < V; ++j) r[j] = 1.5f;
                        break;
                    case 4:
                        for (int j = 0; j < V; ++j) r[j] = -std::numeric_limits<float>::infinity();
                        break;
                    case 5:
                        r[0] = r[V - 1] = 20.f;
                        break;
                    default:
                        break;
                }
            }
            const std::vector<int> expected = ref::argmax_rows(logits, B, V);
            const std::string what = "argmax " + context(seed, {{"B", B}, {"V", V}});
            INFO(what);
            if (B == 8 && V == 4099) {  // the expected answers of the special rows, by hand
                CHECK(expected[1] == V - 1);
                CHECK(expected[2] == 44);
                CHECK(expected[3] == 0);
                CHECK(expected[4] == 0);
                CHECK(expected[5] == 0);
                CHECK(expected[7] == V - 1);
            }
            pd::DeviceBuffer<float> d_logits{std::span<const float>(logits)};
            const auto got =
                run_poisoned<int>(std::size_t(B), [&](int* out) { ly::argmax(d_logits.data(), out, B, V); });
            for (int b = 0; b < B; ++b) {
                INFO("row " << b);
                CHECK(got[std::size_t(b)] == expected[std::size_t(b)]);
            }
            CHECK(guard_intact(got, std::size_t(B)));
        }
    }
}

// ---- repeatability and rejection of bad sizes -----------------------------------------------

TEST_CASE("layers: a second run on the same input gives the same bits", "[model][rmsnorm][rope][swiglu]") {
    const int T = 8, D = 4099, H = 8, d = 128;
    const std::vector<float> x = uniform(std::size_t(T) * D, -2.f, 2.f, kSeed + 8);
    const std::vector<float> w = uniform(std::size_t(D), 0.5f, 1.5f, kSeed + 9);
    const std::vector<float> q = uniform(std::size_t(T) * H * d, -1.f, 1.f, kSeed + 10);
    const std::vector<int> positions = {8191, 0, 1, 17, 4000, 63, 2047, 5};
    pd::DeviceBuffer<float> d_x{std::span<const float>(x)}, d_w{std::span<const float>(w)};
    pd::DeviceBuffer<int> d_pos{std::span<const int>(positions)};
    const std::size_t n = x.size();
    auto norm = [&] {
        return run_poisoned<float>(n, [&](float* y) { ly::rmsnorm(d_x.data(), d_w.data(), y, T, D, 1e-5f); });
    };
    auto rope = [&] {
        return run_poisoned<float>(q.size(), [&](float* buf) {
            PD_CHECK_CUDA(cudaMemcpy(buf, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice));
            ly::rope(buf, d_pos.data(), T, H, d, 10000.0);
        });
    };
    auto silu = [&] { return run_poisoned<float>(n, [&](float* y) { ly::swiglu(d_x.data(), d_x.data(), y, n); }); };
    CHECK(same_bits(norm(), norm()));
    CHECK(same_bits(rope(), rope()));
    CHECK(same_bits(silu(), silu()));
}

TEST_CASE("layers: launchers reject bad sizes, naming the parameter", "[model][errors]") {
    pd::DeviceBuffer<float> f(64);
    pd::DeviceBuffer<bf16> h(64);
    pd::DeviceBuffer<int> ids(64);
    f.fill_bytes(pd::kPoisonByte);
    h.fill_bytes(pd::kPoisonByte);
    float* p = f.data();
    bf16* p16 = h.data();
    int* id = ids.data();
    REQUIRE_THROWS_WITH(ly::embedding(id, p, p, 0, 4, 4), Contains("embedding: T (tokens) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::embedding(id, p, p, 2, -1, 4), Contains("embedding: D (width) must be >= 1, got -1"));
    CHECK_THROWS_WITH(ly::embedding(id, p16, p, 2, 4, 0),
                      Contains("embedding: V (rows of the table) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::rmsnorm(p, p, p, 0, 4, 1e-5f), Contains("rmsnorm: T (rows) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::rmsnorm(p, p, p16, 2, 0, 1e-5f), Contains("rmsnorm: D (width) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::rmsnorm(p, p, p, 2, 4, -1.f), Contains("rmsnorm: eps must be >= 0"));
    CHECK_THROWS_WITH(ly::rope(p, id, 0, 1, 2, 1e4), Contains("rope: T (tokens) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::rope(p, id, 1, 0, 2, 1e4), Contains("rope: H (heads) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::rope(p, id, 1, 1, 3, 1e4), Contains("rope: d (head dim) must be even and >= 2, got 3"));
    CHECK_THROWS_WITH(ly::rope(p, id, 1, 1, 0, 1e4), Contains("rope: d (head dim) must be even and >= 2, got 0"));
    CHECK_THROWS_WITH(ly::rope(p, id, 1, 1, 2, 0.0), Contains("rope: theta must be > 0"));
    CHECK_THROWS_WITH(ly::swiglu(p, p, p, 0), Contains("swiglu: n (elements) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::swiglu(p, p, p16, 0), Contains("swiglu: n (elements) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::swiglu(p, p, p, std::size_t(1) << 40),
                      Contains("swiglu: n (elements) = 1099511627776 exceeds"));
    CHECK_THROWS_WITH(ly::add(p, p, 0), Contains("add: n (elements) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::to_bf16(p, p16, 0), Contains("to_bf16: n (elements) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::tokens_to_heads(p, p, 0, 1, 1, 1),
                      Contains("tokens_to_heads: B (batch) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::tokens_to_heads(p, p, 1, 0, 1, 1),
                      Contains("tokens_to_heads: S (tokens per sequence) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::heads_to_tokens(p, p, 1, 1, 0, 1),
                      Contains("heads_to_tokens: H (heads) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::heads_to_tokens(p, p, 1, 1, 1, -2),
                      Contains("heads_to_tokens: d (head dim) must be >= 1, got -2"));
    CHECK_THROWS_WITH(ly::argmax(p, id, 0, 4), Contains("argmax: B (rows) must be >= 1, got 0"));
    CHECK_THROWS_WITH(ly::argmax(p, id, 1, 0), Contains("argmax: V (vocabulary) must be >= 1, got 0"));
    CHECK_THROWS_AS(ly::argmax(p, id, 1, 0), std::invalid_argument);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    INFO("a rejected call launches nothing: the buffers keep their poison");
    CHECK(guard_intact(f.download(), 0));
    CHECK(guard_intact(h.download(), 0));
}

// ---- the references -------------------------------------------------------------------------

namespace {

/// A tiny random model: GQA (2 query heads per KV head), Hq d = 32 != D = 24 (so a mixed-up
/// layout cannot pass), 2 layers. Weights uniform in [-0.5, 0.5), norms in [0.5, 1.5).
struct TinyModel {
    pd::ModelConfig config;
    pd::ModelWeights weights;
};

TinyModel tiny_model(std::uint64_t seed) {
    TinyModel m;
    m.config = {.name = "test",
                .vocab = 37,
                .d_model = 24,
                .layers = 2,
                .heads = 4,
                .kv_heads = 2,
                .head_dim = 8,
                .ffn_dim = 40,
                .max_seq = 12,
                .rope_theta = 10000,
                .norm_eps = 1e-5};
    std::uint64_t stream = 0;
    for (pd::ModelWeights::Tensor& t : m.weights.tensors(m.config)) {
        std::size_t n = 1;
        for (std::size_t e : t.shape) n *= e;
        const bool norm = t.name.find("norm") != std::string::npos;
        *t.data = uniform(n, norm ? 0.5f : -0.5f, norm ? 1.5f : 0.5f, pd::derive_seed(seed, stream++));
    }
    return m;
}

/// The largest |a - b| over two [n][V] logit sets (infinity when their shapes differ).
double max_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
    if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
    double m = 0;
    for (std::size_t t = 0; t < a.size(); ++t) {
        if (a[t].size() != b[t].size()) return std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < a[t].size(); ++i) m = std::max(m, std::abs(a[t][i] - b[t][i]));
    }
    return m;
}

/// The [B, Hkv, S, d] tensor @p kv repeated to [B, H, S, d]: head h is KV head h / (H / Hkv).
std::vector<float> expand_heads(const std::vector<float>& kv, int B, int H, int Hkv, int S, int d) {
    std::vector<float> out(std::size_t(B) * H * S * d);
    const std::size_t head = std::size_t(S) * d;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
            std::copy_n(kv.begin() + std::ptrdiff_t((std::size_t(b) * Hkv + h / (H / Hkv)) * head), head,
                        out.begin() + std::ptrdiff_t((std::size_t(b) * H + h) * head));
    return out;
}

}  // namespace

TEST_CASE("reference: the CPU model gives the same logits fed at once, token by token and in chunks",
          "[model][reference]") {
    const TinyModel m = tiny_model(kSeed + 20);
    const std::vector<int> tokens = {3, 36, 0, 17, 17, 5, 29};
    ref::ModelReference all(m.config, m.weights), one(m.config, m.weights), chunks(m.config, m.weights);
    const auto at_once = all.forward(tokens);
    REQUIRE(at_once.size() == tokens.size());
    CHECK(at_once[0].size() == std::size_t(m.config.vocab));
    CHECK(all.length() == 7);
    std::vector<std::vector<double>> by_one, by_chunks;
    for (int t : tokens) by_one.push_back(one.forward(std::span<const int>(&t, 1))[0]);
    for (const auto& part : {std::span<const int>(tokens).first(3), std::span<const int>(tokens).subspan(3)})
        for (auto& l : chunks.forward(part)) by_chunks.push_back(std::move(l));
    CHECK(one.length() == 7);
    CHECK(chunks.length() == 7);
    INFO("largest difference, one by one: " << max_difference(at_once, by_one)
                                            << ", in chunks of 3 and 4: " << max_difference(at_once, by_chunks));
    CHECK(max_difference(at_once, by_one) <= 1e-12);
    CHECK(max_difference(at_once, by_chunks) <= 1e-12);
    // The context matters: token 17 at positions 3 and 4 gives different logits.
    CHECK(max_difference({at_once[3]}, {at_once[4]}) > 1e-3);
    // A fresh model fed the last token alone does not see the history: different logits.
    ref::ModelReference fresh(m.config, m.weights);
    CHECK(max_difference({fresh.forward(std::span<const int>(tokens).last(1))[0]}, {at_once.back()}) > 1e-3);

    // 7 + 5 = max_seq positions fit; one more is refused and changes nothing.
    const std::vector<int> more = {1, 2, 3, 4, 5};
    CHECK(all.forward(more).size() == 5);
    CHECK(all.length() == 12);
    CHECK_THROWS_WITH(all.forward(std::span<const int>(more).first(1)), Contains("exceed max_seq = 12"));
    CHECK(all.length() == 12);
    CHECK_THROWS_WITH(one.forward(std::vector<int>{4, 37}), Contains("token 37 is outside 0 .. vocab - 1 = 36"));
    CHECK_THROWS_WITH(one.forward(std::vector<int>{-1}), Contains("token -1 is outside"));
    CHECK(one.length() == 7);
    pd::ModelConfig odd = m.config;
    odd.heads = 3;
    CHECK_THROWS_WITH(ref::ModelReference(odd, m.weights), Contains("heads"));
    pd::ModelWeights short_weights = m.weights;
    short_weights.wq.pop_back();
    CHECK_THROWS_WITH(ref::ModelReference(m.config, short_weights), Contains("wq has"));
}

TEST_CASE("reference: hand-checkable tiny models", "[model][reference]") {
    // 1 layer, 1 head, D = d = 4. Logits computed here without the reference's code.
    pd::ModelConfig c{.name = "hand",
                      .vocab = 5,
                      .d_model = 4,
                      .layers = 1,
                      .heads = 1,
                      .kv_heads = 1,
                      .head_dim = 4,
                      .ffn_dim = 3,
                      .max_seq = 6,
                      .rope_theta = 10000,
                      .norm_eps = 1e-5};
    pd::ModelWeights w;
    for (pd::ModelWeights::Tensor& t : w.tensors(c)) {
        std::size_t n = 1;
        for (std::size_t e : t.shape) n *= e;
        t.data->assign(n, 0.f);
    }
    w.embed = uniform(20, -1.f, 1.f, kSeed + 21);
    w.lm_head = uniform(20, -1.f, 1.f, kSeed + 22);
    w.attn_norm = uniform(4, 0.5f, 1.5f, kSeed + 23);
    w.final_norm = uniform(4, 0.5f, 1.5f, kSeed + 24);
    auto norm = [&](const std::vector<double>& x, const std::vector<float>& g) {
        double ms = 0;
        for (double v : x) ms += v * v / 4;
        std::vector<double> y(4);
        for (int i = 0; i < 4; ++i) y[i] = g[i] * x[i] / std::sqrt(ms + 1e-5);
        return y;
    };
    auto logits_of = [&](const std::vector<double>& x) {
        const std::vector<double> h = norm(x, w.final_norm);
        std::vector<double> l(5, 0.0);
        for (int v = 0; v < 5; ++v)
            for (int i = 0; i < 4; ++i) l[v] += double(w.lm_head[std::size_t(v) * 4 + i]) * h[i];
        return l;
    };
    auto embed = [&](int tok) { return std::vector<double>(w.embed.begin() + 4 * tok, w.embed.begin() + 4 * tok + 4); };
    const std::vector<int> tokens = {2, 4, 0, 2};

    SECTION("every block weight zero: logits = lm_head rmsnorm(embed[token])") {
        // q, k, v = 0, so attention adds 0; gate = 0 and silu(0) = 0, so the FFN adds 0.
        ref::ModelReference model(c, w);
        const auto got = model.forward(tokens);
        std::vector<std::vector<double>> expected;
        for (int t : tokens) expected.push_back(logits_of(embed(t)));
        INFO("largest difference " << max_difference(got, expected));
        CHECK(max_difference(got, expected) <= 1e-12);
    }
    SECTION("Wq = 0, Wv = Wo = identity: attention is the mean of the normed embeddings so far") {
        // With q = 0 every score is 0 whatever K and RoPE: the softmax is uniform over positions
        // 0 .. pos, so x = embed[t] + mean over j <= pos of rmsnorm(embed[token j], attn_norm).
        w.wk = uniform(16, -1.f, 1.f, kSeed + 25);  // any K: it must not matter
        for (int i = 0; i < 4; ++i) w.wv[std::size_t(i) * 5] = w.wo[std::size_t(i) * 5] = 1.f;
        ref::ModelReference model(c, w);
        std::vector<std::vector<double>> got;
        for (int t : tokens) got.push_back(model.forward(std::span<const int>(&t, 1))[0]);
        std::vector<std::vector<double>> expected;
        std::vector<double> sum(4, 0.0);
        for (std::size_t p = 0; p < tokens.size(); ++p) {
            const std::vector<double> h = norm(embed(tokens[p]), w.attn_norm);
            std::vector<double> x = embed(tokens[p]);
            for (int i = 0; i < 4; ++i) {
                sum[i] += h[i];
                x[i] += sum[i] / double(p + 1);
            }
            expected.push_back(logits_of(x));
        }
        INFO("largest difference " << max_difference(got, expected));
        CHECK(max_difference(got, expected) <= 1e-12);
    }
}

TEST_CASE("reference: the small references on hand-computed values", "[model][reference]") {
    // rmsnorm([3, 4]), eps 0: mean square 12.5, so y = w x / sqrt(12.5).
    const std::vector<double> y = ref::rmsnorm(std::vector<float>{3, 4}, std::vector<float>{1, 2}, 1, 2, 0.0);
    CHECK(y[0] == Approx(3 / std::sqrt(12.5)).epsilon(1e-15));
    CHECK(y[1] == Approx(8 / std::sqrt(12.5)).epsilon(1e-15));
    // rope, d = 4, theta 100, position 3: pair 0 turns by 3 rad, pair 1 by 3 / 100^(2/4) = 0.3.
    const std::vector<double> r = ref::rope(std::vector<float>{1, 0, 0, 1}, std::vector<int>{3}, 1, 1, 4, 100.0);
    CHECK(r[0] == Approx(std::cos(3.0)));
    CHECK(r[1] == Approx(std::sin(3.0)));
    CHECK(r[2] == Approx(-std::sin(0.3)));
    CHECK(r[3] == Approx(std::cos(0.3)));
    // silu(0) = 0, silu(x) -> x for large x, silu(-x) = silu(x) - x.
    const std::vector<double> s = ref::swiglu(std::vector<float>{0, 40, 2, -2}, std::vector<float>{5, 1, 1, 1});
    CHECK(s[0] == 0.0);
    CHECK(s[1] == Approx(40.0));
    CHECK(s[3] == Approx(s[2] - 2.0));
    CHECK(ref::argmax_rows(std::vector<float>{1, 3, 3, 2, 7, 7}, 2, 3) == std::vector<int>{1, 1});
    CHECK_THROWS_WITH(ref::rmsnorm(std::vector<float>{1, 2}, std::vector<float>{1}, 1, 2, 0.0), Contains("w holds 1"));
    CHECK_THROWS_WITH(ref::rope(std::vector<float>{1, 2, 3}, std::vector<int>{0}, 1, 1, 3, 1e4),
                      Contains("d must be even"));
}

TEST_CASE("reference: decode attention equals chapter 01's attention with one query and K, V repeated per group",
          "[model][reference]") {
    // B = 3, Hq = 4, Hkv = 2 (then 1 and 4), d = 16, S_max = 9, kv_len {1, 9, 5}: the cache
    // beyond kv_len holds NaN, which must not be read. The query of decode is the last of the
    // kv_len positions, so chapter 01's causal attention with Sq = 1 and Sk = kv_len is the same.
    const int B = 3, H = 4, d = 16, S = 9;
    const std::vector<int> kv_len = {1, 9, 5};
    for (int Hkv : {1, 2, 4}) {
        const std::uint64_t seed = pd::derive_seed(kSeed + 30, std::uint64_t(Hkv));
        const std::vector<float> q = uniform(std::size_t(B) * H * d, -1.f, 1.f, pd::derive_seed(seed, 1));
        std::vector<float> k = uniform(std::size_t(B) * Hkv * S * d, -1.f, 1.f, pd::derive_seed(seed, 2));
        std::vector<float> v = uniform(k.size(), -1.f, 1.f, pd::derive_seed(seed, 3));
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < Hkv; ++h)
                for (int p = kv_len[std::size_t(b)]; p < S; ++p)
                    for (int e = 0; e < d; ++e)
                        k[((std::size_t(b) * Hkv + h) * S + p) * d + e] =
                            v[((std::size_t(b) * Hkv + h) * S + p) * d + e] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<double> got = ref::decode_attention(q, k, v, kv_len, B, H, Hkv, d, S);
        const std::vector<float> kx = expand_heads(k, B, H, Hkv, S, d), vx = expand_heads(v, B, H, Hkv, S, d);
        double worst = 0;
        for (int b = 0; b < B; ++b) {
            const int len = kv_len[std::size_t(b)];
            const std::size_t qs = std::size_t(H) * d, ks = std::size_t(H) * S * d;
            // Sequence b alone, its cache cut to [H, len, d].
            std::vector<float> kb, vb;
            for (int h = 0; h < H; ++h) {
                const auto from = std::ptrdiff_t(std::size_t(b) * ks + std::size_t(h) * S * d);
                kb.insert(kb.end(), kx.begin() + from, kx.begin() + from + len * d);
                vb.insert(vb.end(), vx.begin() + from, vx.begin() + from + len * d);
            }
            const std::vector<double> expected =
                ref::attention(std::span<const float>(q).subspan(b * qs, qs), kb, vb, 1, H, 1, len, d, true);
            for (std::size_t i = 0; i < qs; ++i) worst = std::max(worst, std::abs(got[b * qs + i] - expected[i]));
        }
        INFO("Hkv=" << Hkv << " largest difference " << worst);
        CHECK(worst <= 1e-12);
    }
    const std::vector<float> q(8), kv(2 * 3 * 4);
    CHECK_THROWS_WITH(ref::decode_attention(q, kv, kv, std::vector<int>{4}, 1, 2, 2, 4, 3),
                      Contains("kv_len[0] = 4 must be in 1 .. max_seq = 3"));
    CHECK_THROWS_WITH(ref::decode_attention(q, kv, kv, std::vector<int>{1}, 1, 2, 3, 4, 3),
                      Contains("heads = 2 must be a multiple of kv_heads = 3"));
}
