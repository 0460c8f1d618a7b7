// Lab 03: v2 of the decode GEMV, one warp per row (gemv_warp_per_row, in
// <lab tree>/03_decode_gemv/gemv_warp_per_row.cu), against the CPU reference: ragged N and K
// (shorter and longer than a warp, odd), one token and several, fp32 and bf16, poisoned
// output with guard floats past the end.
#include "../kernels/guard_check.hpp"
#include "gemv/gemv.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace gv = pd::kernels::gemv;
using bf16 = __nv_bfloat16;

namespace {

constexpr const char* kWhere = "lab 03: gemv_warp_per_row in <lab tree>/03_decode_gemv/gemv_warp_per_row.cu";
constexpr std::size_t kGuard = 32;  // poisoned floats after Y that must stay untouched

/// Runs gemv_warp_per_row on seeded W [N, K] and X [B, K] (uniform in [-1, 1), rounded to T)
/// and checks Y [B, N]: fp32 within 1e-4 + 1e-4 |ref|; bf16 within twice the error of the
/// reference computed from the bf16-rounded inputs; nothing written past Y.
template <typename T>
void check_lab(const gv::Shape& s, std::uint64_t seed) {
    INFO(kWhere);
    INFO(pd::dtype_name<T>() << " seed=" << seed << " B=" << s.batch << " N=" << s.n << " K=" << s.k);
    std::vector<float> w(s.w_elements()), x(s.x_elements());
    pd::fill_uniform<float>(w, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(x, -1.f, 1.f, pd::derive_seed(seed, 2));
    std::vector<T> w_t(w.size()), x_t(x.size());
    for (std::size_t i = 0; i < w.size(); ++i) w_t[i] = pd::from_float<T>(w[i]);
    for (std::size_t i = 0; i < x.size(); ++i) x_t[i] = pd::from_float<T>(x[i]);

    pd::DeviceBuffer<T> dw{std::span<const T>(w_t)}, dx{std::span<const T>(x_t)};
    pd::DeviceBuffer<float> dy(s.y_elements() + kGuard);
    dy.fill_bytes(pd::kPoisonByte);
    gv::gemv_warp_per_row(dw.data(), dx.data(), dy.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = dy.download();
    const std::span<const float> y(all.data(), s.y_elements());

    const std::vector<double> ref = pd::reference::linear(x, w, s.batch, s.n, s.k);
    pd::CompareResult r;
    if constexpr (std::is_same_v<T, float>) {
        r = pd::compare<float, double>(y, ref, pd::Tolerance::fp32());
    } else {
        const std::vector<double> ref_lp = pd::reference::linear(x_t, w_t, s.batch, s.n, s.k);
        r = pd::compare_to_lowp_reference<float, double>(y, ref, ref_lp, 2.0);
    }
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.n)};
    INFO(pd::describe(r, "gemv_warp_per_row (NaN: an element of Y never written)", dims));
    CHECK(r.passed);
    const std::size_t past = pd::testing::guard_written(all, s.y_elements());
    INFO(past << " of the " << kGuard
              << " floats after Y were written: nothing may be written past Y [B, N], "
                 "check the row n < N before storing");
    CHECK(past == 0);
}

}  // namespace

TEST_CASE("lab03: one token, rows shorter than, equal to and longer than a warp", "[lab03]") {
    for (int k : {1, 5, 31, 32, 33, 100, 1027}) {
        check_lab<float>({1, 7, k}, 300 + k);
        check_lab<bf16>({1, 7, k}, 400 + k);
    }
}

TEST_CASE("lab03: ragged N, more rows than one block", "[lab03]") {
    for (int n : {1, 3, 4, 5, 33, 257}) {
        check_lab<float>({1, n, 129}, 500 + n);
        check_lab<bf16>({1, n, 129}, 600 + n);
    }
}

TEST_CASE("lab03: several tokens (B > 1): one pass over W per token", "[lab03]") {
    check_lab<float>({2, 33, 65}, 701);
    check_lab<float>({17, 9, 300}, 702);
    check_lab<bf16>({3, 33, 65}, 703);
    check_lab<bf16>({64, 5, 40}, 704);
}

TEST_CASE("lab03: a case the grader gives", "[.][lab03-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    gv::Shape s{};
    s.batch = c.integer("batch");
    s.n = c.integer("n");
    s.k = c.integer("k");
    if (c.word("dtype", "fp32") == "bf16")
        check_lab<__nv_bfloat16>(s, c.seed());
    else
        check_lab<float>(s, c.seed());
}
