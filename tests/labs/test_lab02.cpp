// Lab 02: the shared-memory tiled GEMM (gemm_smem_tiled, v3, in
// <lab tree>/02_prefill_gemm/gemm_smem_tiled.cu) against the CPU reference: shapes smaller than,
// equal to and larger than a 32 x 32 tile, ragged in T, N and K; small-integer inputs compared
// exactly and uniform inputs within the fp32 rule; a poisoned output whose guard must survive.
#include "../kernels/guard_check.hpp"
#include "gemm/gemm.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/rng.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace gemm = pd::kernels::gemm;

namespace {

constexpr const char* kWhere = "lab 02: gemm_smem_tiled in <lab tree>/02_prefill_gemm/gemm_smem_tiled.cu";
constexpr std::size_t kGuard = 64;  // poisoned floats after Y

void check_tiled(const gemm::Shape& s, std::uint64_t seed, bool integers) {
    INFO(kWhere);
    INFO("seed=" << seed << " T=" << s.tokens << " N=" << s.n << " K=" << s.k
                 << (integers ? " small integers in [-3, 3], compared exactly" : " uniform [-1, 1)"));
    std::vector<float> x(s.x_elements()), w(s.w_elements());
    if (integers) {
        pd::fill_integers<float>(x, -3, 3, pd::derive_seed(seed, 1));
        pd::fill_integers<float>(w, -3, 3, pd::derive_seed(seed, 2));
    } else {
        pd::fill_uniform<float>(x, -1.f, 1.f, pd::derive_seed(seed, 1));
        pd::fill_uniform<float>(w, -1.f, 1.f, pd::derive_seed(seed, 2));
    }
    const std::vector<double> ref = pd::reference::linear(x, w, s.tokens, s.n, s.k);
    pd::DeviceBuffer<float> dx{std::span<const float>(x)}, dw{std::span<const float>(w)}, dy(s.y_elements() + kGuard);
    dy.fill_bytes(pd::kPoisonByte);
    gemm::gemm_smem_tiled(dx.data(), dw.data(), dy.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = dy.download();
    const std::span<const float> y(all.data(), s.y_elements());
    const pd::CompareResult r =
        pd::compare<float, double>(y, ref, integers ? pd::Tolerance::exact() : pd::Tolerance::fp32());
    const std::size_t shape[] = {std::size_t(s.tokens), std::size_t(s.n)};
    INFO(pd::describe(r, "gemm_smem_tiled", shape));
    INFO("NaN in Y: an output never written (the buffer starts as NaN); all zeros: the dot products never accumulated");
    CHECK(r.passed);
    const std::size_t past = pd::testing::guard_written(all, s.y_elements());
    INFO(past << " of the " << kGuard
              << " floats after Y were written: nothing may be written past Y, "
                 "check t < T and n < N before storing");
    CHECK(past == 0);
}

}  // namespace

TEST_CASE("lab02: one tile or less: T, N, K up to 32", "[lab02]") {
    check_tiled({1, 1, 1}, 201, false);
    check_tiled({32, 32, 32}, 202, true);
    check_tiled({5, 17, 3}, 203, false);
}

TEST_CASE("lab02: ragged shapes, several tiles in every dimension", "[lab02]") {
    check_tiled({33, 31, 65}, 211, true);
    check_tiled({100, 70, 129}, 212, true);
    check_tiled({97, 129, 200}, 213, false);
    check_tiled({64, 96, 33}, 214, false);
}

TEST_CASE("lab02: K longer than many tiles, one token and one feature", "[lab02]") {
    check_tiled({1, 129, 1000}, 221, false);
    check_tiled({129, 1, 1000}, 222, true);
}

TEST_CASE("lab02: a case the grader gives", "[.][lab02-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    gemm::Shape s{};
    s.tokens = c.integer("tokens");
    s.n = c.integer("n");
    s.k = c.integer("k");
    check_tiled(s, c.seed(), c.flag("integers", false));
}
