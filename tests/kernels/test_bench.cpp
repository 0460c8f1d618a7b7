// The chapter harness, pd::Bench::measure and finish(), with a trivial kernel of the library
// (chapter 00's copy_grid_stride) as the launch: the output is poisoned before every validation,
// so a launch that writes nothing fails even when the buffer held the right answer before; a
// correct launch passes; only a passing version is timed, and only without --check-only; the
// row carries the cost, point and baseline (vs_baseline from the baseline row's time); and
// finish() returns exit code 1 once any measurement failed, 0 otherwise. Built per backend.
#include "guard_check.hpp"
#include "pd/bench.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/rng.hpp"
#include "roofline/roofline.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace k = pd::kernels::roofline;

namespace {

constexpr std::uint64_t kSeed = 20250404;
constexpr std::size_t kN = std::size_t(1) << 16;  // floats copied: large enough to take measurable time

/// A Bench as a chapter program makes one, with chapter 00's versions (it is neither copied
/// nor moved: its command line points into its own options). @p check_only as `--check-only`
/// would set it; timing uses 1 warm-up and 2 timed runs.
struct TestBench : pd::Bench {
    explicit TestBench(bool check_only)
        : pd::Bench("00_roofline", "harness test", "pd::Bench under test", k::versions()) {
        options.check_only = check_only;
        options.warmup = 1;
        options.iters = 2;
    }
};

/// A copy problem: seeded input on the device, the output buffer, the expected output (the input
/// itself, compared exactly) and a launch that counts its calls.
struct CopyProblem {
    std::vector<float> host;
    pd::DeviceBuffer<float> in, out;
    pd::Expected expected;
    int launches = 0;

    CopyProblem() : host(kN), out(kN) {
        pd::fill_uniform<float>(host, -1.f, 1.f, kSeed);
        in = pd::DeviceBuffer<float>{std::span<const float>(host)};
        expected.values.assign(host.begin(), host.end());
        expected.tolerance = pd::Tolerance::exact();
        expected.dims = {kN};
    }
    /// The correct launch: copies in to out.
    pd::Launch copy() {
        return [this] {
            ++launches;
            k::copy_grid_stride(in.data(), out.data(), kN);
        };
    }
    /// A launch that writes nothing.
    pd::Launch nothing() {
        return [this] { ++launches; };
    }
    /// What a copy costs: every float read once and written once, no FLOPs.
    static pd::Cost cost() { return {0, k::copy_bytes_moved(double(kN) * sizeof(float))}; }
};

/// The measured kernel: "copy_kernel", fp32, the copy's cost, compared with @p baseline if given.
/// (Filled field by field: designated initializers that leave members out draw
/// -Wmissing-field-initializers from GCC 12 under -Wextra.)
pd::Kernel copy_kernel(const pd::Row* baseline = nullptr) {
    pd::Kernel kernel;
    kernel.name = "copy_kernel";
    kernel.dtype = pd::DType::fp32;
    kernel.cost = CopyProblem::cost();
    kernel.baseline = baseline;
    return kernel;
}

}  // namespace

TEST_CASE("bench: the output is poisoned before the launch, so a launch that writes nothing fails", "[bench]") {
    // The buffer already holds the right answer (a correct copy ran first). A launch that writes
    // nothing must still fail: measure() fills the output with NaN bytes before launching.
    TestBench bench(false);
    CopyProblem p;
    k::copy_grid_stride(p.in.data(), p.out.data(), kN);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    REQUIRE(pd::check(p.expected, p.out.download()).passed);  // the stale answer would pass

    const pd::Row row = bench.measure(copy_kernel(), p.nothing(), p.out, p.expected);
    CHECK_FALSE(row.result.passed);
    INFO("measure() must poison the output: afterwards every float holds the poison bytes");
    CHECK(pd::testing::guard_written(p.out.download(), 0) == 0);
    // A failed version is never timed: the launch ran once (the validation), no time, no rates.
    CHECK(p.launches == 1);
    CHECK_FALSE(row.result.time_ms);
    CHECK_FALSE(row.result.gbps);
    CHECK_FALSE(row.result.vs_baseline);
    CHECK(bench.finish(bench.report({{"n", kN}}, {row})) == 1);
}

TEST_CASE("bench: a correct launch passes and is timed, with the row filled from the kernel", "[bench]") {
    TestBench bench(false);
    CopyProblem p;
    pd::Kernel kernel = copy_kernel();
    kernel.tokens = 4;  // made up: 4 tokens per run, for tokens/s
    kernel.point = {{"n", kN}};
    const pd::Row row = bench.measure(kernel, p.copy(), p.out, p.expected);
    INFO("copy_grid_stride of " << kN << " floats, seed " << kSeed);
    CHECK(row.result.passed);
    CHECK(row.result.kernel == "copy_kernel");
    CHECK(row.result.max_abs_err == 0.0);
    CHECK(row.dtype == pd::DType::fp32);
    CHECK(row.cost.bytes == 8.0 * kN);
    CHECK(row.point == nlohmann::json{{"n", kN}});
    CHECK(row.tokens == 4);
    // Timed: validation, 1 warm-up, 2 timed runs.
    CHECK(p.launches == 1 + 1 + 2);
    REQUIRE(row.result.time_ms);
    CHECK(*row.result.time_ms > 0);
    // GB/s from the cost's bytes; no FLOPs, so no TFLOP/s.
    REQUIRE(row.result.gbps);
    CHECK(*row.result.gbps == Approx(8.0 * kN / (*row.result.time_ms * 1e-3) / 1e9));
    CHECK_FALSE(row.result.tflops);
    REQUIRE(row.tokens_per_s());
    CHECK(*row.tokens_per_s() == Approx(4 / (*row.result.time_ms * 1e-3)));
    // No roofs on the simulator, or before measure_roofs() on a GPU: no floor, no fraction.
    CHECK_FALSE(row.floor_ms);
    CHECK_FALSE(row.result.roofline_fraction);
    // No baseline given: none in the row.
    CHECK(row.baseline.empty());
    CHECK_FALSE(row.result.vs_baseline);
    // The output is the copy, and nothing failed: exit code 0.
    CHECK(pd::testing::same_bits(p.out.download(), p.host));
    CHECK(bench.finish(bench.report({{"n", kN}}, {row})) == 0);
}

TEST_CASE("bench: with --check-only a passing version is validated but not timed", "[bench]") {
    TestBench bench(true);
    REQUIRE_FALSE(bench.timing());
    CopyProblem p;
    const pd::Row row = bench.measure(copy_kernel(), p.copy(), p.out, p.expected);
    CHECK(row.result.passed);
    CHECK(p.launches == 1);
    CHECK_FALSE(row.result.time_ms);
    CHECK_FALSE(row.result.gbps);
    CHECK(bench.finish(bench.report({}, {row})) == 0);
}

TEST_CASE("bench: vs_baseline is the baseline row's time over this one's", "[bench]") {
    TestBench bench(false);
    CopyProblem p;
    // A made-up baseline that took 1000 ms: vs_baseline = 1000 / this time (> 1: faster).
    pd::Row baseline;
    baseline.result.kernel = "copy_memcpy";
    baseline.result.time_ms = 1000.0;
    baseline.result.passed = true;
    const pd::Row row = bench.measure(copy_kernel(&baseline), p.copy(), p.out, p.expected);
    REQUIRE(row.result.passed);
    CHECK(row.baseline == "copy_memcpy");
    REQUIRE(row.result.time_ms);
    REQUIRE(row.result.vs_baseline);
    CHECK(*row.result.vs_baseline == Approx(1000.0 / *row.result.time_ms));
    // The JSON names the baseline and repeats vs_baseline under the chapter's alias.
    bench.baseline_alias = "vs_memcpy";
    const nlohmann::json j = bench.json({row});
    CHECK(j[0]["baseline"] == "copy_memcpy");
    CHECK(j[0]["vs_memcpy"] == *row.result.vs_baseline);

    // A baseline that was not timed (it failed, or --check-only): named, but no ratio.
    pd::Row untimed;
    untimed.result.kernel = "copy_memcpy";
    const pd::Row row2 = bench.measure(copy_kernel(&untimed), p.copy(), p.out, p.expected);
    CHECK(row2.result.passed);
    CHECK(row2.baseline == "copy_memcpy");
    CHECK_FALSE(row2.result.vs_baseline);
    CHECK(bench.finish(bench.report({}, {row, row2})) == 0);
}

TEST_CASE("bench: finish() returns 1 after any failed measure, even when later ones pass", "[bench]") {
    // A launch that writes half the output fails (the other half keeps the NaN poison), then a
    // correct one passes: the run as a whole still failed. The report's "passed" says so too.
    TestBench bench(true);
    CopyProblem p;
    const pd::Launch half = [&] { k::copy_grid_stride(p.in.data(), p.out.data(), kN / 2); };
    const pd::Row bad = bench.measure(copy_kernel(), half, p.out, p.expected);
    CHECK_FALSE(bad.result.passed);
    const pd::Row good = bench.measure(copy_kernel(), p.copy(), p.out, p.expected);
    CHECK(good.result.passed);
    // finish() covers every measurement, even one left out of the rows it is given.
    nlohmann::json report = bench.report({}, {good});
    CHECK(report["passed"] == true);
    CHECK(bench.finish(report) == 1);

    // A sampled check (rows 0 and 1 of 256 rows of 256) still fails a launch that leaves NaN in
    // rows it does not check: every output must be finite.
    TestBench sampled(true);
    pd::Expected e;
    e.rows = {0, 1};
    e.row_length = 256;
    e.values.assign(p.host.begin(), p.host.begin() + 512);
    e.tolerance = pd::Tolerance::exact();
    const pd::Launch first_rows = [&] { k::copy_grid_stride(p.in.data(), p.out.data(), 512); };
    CHECK_FALSE(sampled.measure(copy_kernel(), first_rows, p.out, e).result.passed);
    CHECK(sampled.finish(sampled.report({}, {})) == 1);
    // And a fresh bench where everything passed returns 0.
    TestBench fine(true);
    CHECK(fine.measure(copy_kernel(), p.copy(), p.out, e).result.passed);
    CHECK(fine.finish(fine.report({}, {})) == 0);
}
