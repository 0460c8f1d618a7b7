/// @file compare.hpp
/// @brief Checking a kernel's output against its CPU reference, with the tolerances of the
/// project (fp32: 1e-4 + 1e-4 |ref|, plus a rounding bound that grows like sqrt(K) for a sum of
/// K products; bf16: FlashAttention's low-precision rule), NaN and all-zero guards, and a report
/// of the first mismatches.
#pragma once

#include "pd/half.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pd {

/// Element-wise tolerance: passes when |out - ref| <= atol + rtol * |ref|.
struct Tolerance {
    /// Absolute tolerance.
    double atol = 0;
    /// Tolerance relative to |ref|.
    double rtol = 0;
    /// fp32 kernels against a double-accumulated reference: 1e-4 + 1e-4 * |ref|.
    static constexpr Tolerance fp32() { return {1e-4, 1e-4}; }
    /// Bitwise-exact results (copies, small-integer GEMMs, FMA chains done the same way).
    static constexpr Tolerance exact() { return {0, 0}; }
};

/// One element outside the tolerance.
struct Mismatch {
    std::size_t index = 0;  ///< flat index into the output
    /// The kernel's value.
    double out = 0;
    /// The reference value.
    double ref = 0;
};

/// Outcome of a comparison. `passed` is false on any NaN/inf in the output, on an all-zero
/// output where the reference is not all zero, or on any element out of tolerance.
struct CompareResult {
    /// The verdict: true when the output passed.
    bool passed = false;
    std::size_t count = 0;         ///< elements compared
    std::size_t bad = 0;           ///< elements out of tolerance (non-finite included)
    std::size_t non_finite = 0;    ///< NaN or inf in the output
    bool all_zero_output = false;  ///< output all zero while the reference is not
    double max_abs_err = 0;        ///< max |out - ref| over finite outputs
    double max_rel_err = 0;        ///< max |out - ref| / |ref| over elements with |ref| > atol
    double rel_l2_err = 0;         ///< ||out - ref||_2 / ||ref||_2 (0 when ref is all zero)
    std::vector<Mismatch> first;   ///< the first few mismatches, in index order
    std::string rule;              ///< the rule applied, for messages
};

/// Compares @p out with @p ref element by element under @p tol. Keeps up to @p max_report
/// mismatches. @pre out.size() == ref.size()
template <typename T, typename R>
CompareResult compare(std::span<const T> out, std::span<const R> ref, Tolerance tol, std::size_t max_report = 8);

/// The unit roundoff of fp32, u = 2^-24: the largest relative error of one rounding to nearest.
inline constexpr double kFp32UnitRoundoff = 0x1p-24;

/// The fp32 rule for outputs that are sums of @p terms products (a GEMM or GEMV of reduction
/// length K): passes when
///     |out - ref| <= atol + rtol |ref| + sqrt(K) u sum_k |x_k w_k|
/// with u = 2^-24 and @p magnitude[i] = sum_k |x_k w_k| of element i. The last term is the
/// probabilistic bound of Higham and Mary (SIAM J. Sci. Comput. 41(5), 2019) with lambda = 1:
/// rounding errors that are independent and of mean zero grow like sqrt(K), not like the
/// worst-case K u sum|x w|, which at K = 65,536 is as large as the result itself. For short
/// sums the fixed rule dominates; for long ones this term does, and a wrong index (an output
/// uncorrelated with the reference) still misses it by orders of magnitude.
/// @pre out, ref and magnitude have the same size
template <typename T, typename R>
CompareResult compare_sums(std::span<const T> out, std::span<const R> ref, std::span<const double> magnitude,
                           std::size_t terms, Tolerance tol = Tolerance::fp32(), std::size_t max_report = 8);

/// Low-precision rule: passes when
/// max|out - ref| <= factor * max|ref_lp - ref| (plus 1e-6 * max|ref| so that an exact
/// low-precision reference does not demand bit-exactness), where @p ref is the reference of the
/// unrounded inputs and @p ref_lp the same reference computed on the inputs rounded as the
/// kernel's are: a kernel may err by @p factor times what rounding the inputs alone costs.
/// NaN and all-zero guards apply. The factor 2 is FlashAttention's (test_flash_attn.py of
/// Dao-AILab/flash-attention); its yardstick differs: inputs already in fp16 or bf16, and the
/// error of a PyTorch attention computed in that precision, both measured against an fp32
/// computation of the same inputs. That rule bounds the arithmetic's rounding, this one the
/// inputs'.
template <typename T, typename R>
CompareResult compare_to_lowp_reference(std::span<const T> out, std::span<const R> ref, std::span<const R> ref_lp,
                                        double factor = 2.0, std::size_t max_report = 8);

/// Norm-wise rule for fp16/bf16 outputs: passes when ||out - ref|| / ||ref|| <= @p bound.
template <typename T, typename R>
CompareResult compare_rel_l2(std::span<const T> out, std::span<const R> ref, double bound = 1e-2,
                             std::size_t max_report = 8);

/// A readable report: the rule, the counts, the errors and the first mismatches. When
/// @p shape is given, indices are printed as multi-dimensional coordinates. @p context should
/// name the kernel, the seed and the shape, e.g. "v1 seed=42 B=2 H=3 S=17 d=64".
std::string describe(const CompareResult& r, std::string_view context, std::span<const std::size_t> shape = {});

/// What a kernel's output is checked against: the reference of every element, or of some rows
/// (a large problem's double-precision reference would take minutes). Rows are runs of
/// @p row_length consecutive elements of the output.
struct Expected {
    std::vector<double> values;               ///< the reference: [rows.size(), row_length], or every element
    std::vector<std::size_t> rows;            ///< the output rows that are checked; empty: every element
    std::size_t row_length = 0;               ///< elements per row (needed with rows)
    Tolerance tolerance = Tolerance::fp32();  ///< element-wise rule (when values_lowp is empty)
    /// When not empty: sum_k |x_k w_k| of each checked element, in the order of `values`, and
    /// the rule is compare_sums() with `tolerance` and `sum_length` terms (fp32 sums over K).
    std::vector<double> magnitudes;
    std::size_t sum_length = 0;  ///< K, the number of products in each sum (with magnitudes)
    /// When not empty: the low-precision rule of compare_to_lowp_reference(), with `values` as
    /// the reference of the unrounded inputs and this as the reference of the rounded ones.
    std::vector<double> values_lowp;
    std::vector<std::size_t> dims;  ///< the output's shape, for the coordinates in messages

    /// True when only some rows are checked.
    bool sampled() const { return !rows.empty(); }
};

/// Checks @p out against @p e: the checked elements by e's rule, and every element of @p out
/// (checked or not) for NaN and inf, so an output that was never written (poisoned with NaN)
/// fails. Mismatch indices are indices into @p out.
CompareResult check(const Expected& e, std::span<const float> out);

/// Sets every element of a host buffer to NaN (quiet NaN; for 16-bit types, their NaN).
template <typename T>
void poison(std::span<T> values) {
    for (T& v : values) v = from_float<T>(std::numeric_limits<float>::quiet_NaN());
}

// ---- implementation -------------------------------------------------------------------------

namespace detail {

template <typename T>
double as_double(T v) {
    if constexpr (std::is_same_v<T, double>) {
        return v;
    } else {
        return static_cast<double>(to_float(v));
    }
}

/// The failed result of comparing buffers of different sizes.
inline CompareResult size_mismatch(std::size_t out, std::size_t ref) {
    CompareResult r;
    r.rule = "size mismatch: out has " + std::to_string(out) + " elements, ref has " + std::to_string(ref);
    return r;
}

/// Shared scan (sizes already equal): fills counts, errors and guards; `bad_fn(i, err, ref)` says if element i fails.
template <typename T, typename R, typename BadFn>
CompareResult scan(std::span<const T> out, std::span<const R> ref, double atol_for_rel, std::size_t max_report,
                   BadFn&& bad_fn) {
    CompareResult r;
    r.count = out.size();
    bool out_all_zero = true, ref_all_zero = true;
    double err2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        const double o = as_double(out[i]);
        const double f = as_double(ref[i]);
        if (f != 0) ref_all_zero = false;
        ref2 += f * f;
        bool is_bad;
        if (!std::isfinite(o)) {
            ++r.non_finite;
            is_bad = true;
        } else {
            if (o != 0) out_all_zero = false;
            const double e = std::fabs(o - f);
            err2 += e * e;
            if (e > r.max_abs_err) r.max_abs_err = e;
            if (std::fabs(f) > atol_for_rel && e / std::fabs(f) > r.max_rel_err) r.max_rel_err = e / std::fabs(f);
            is_bad = bad_fn(i, e, f);
        }
        if (is_bad) {
            ++r.bad;
            if (r.first.size() < max_report) r.first.push_back({i, o, f});
        }
    }
    r.all_zero_output = r.count > 0 && out_all_zero && r.non_finite == 0 && !ref_all_zero;
    r.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    r.passed = r.bad == 0 && !r.all_zero_output;
    return r;
}

}  // namespace detail

template <typename T, typename R>
CompareResult compare(std::span<const T> out, std::span<const R> ref, Tolerance tol, std::size_t max_report) {
    if (out.size() != ref.size()) return detail::size_mismatch(out.size(), ref.size());
    CompareResult r = detail::scan(out, ref, tol.atol, max_report, [&](std::size_t, double e, double f) {
        return !(e <= tol.atol + tol.rtol * std::fabs(f));
    });
    r.rule = "|out - ref| <= " + std::to_string(tol.atol) + " + " + std::to_string(tol.rtol) + " * |ref|";
    return r;
}

template <typename T, typename R>
CompareResult compare_sums(std::span<const T> out, std::span<const R> ref, std::span<const double> magnitude,
                           std::size_t terms, Tolerance tol, std::size_t max_report) {
    if (out.size() != ref.size()) return detail::size_mismatch(out.size(), ref.size());
    if (magnitude.size() != ref.size()) return detail::size_mismatch(magnitude.size(), ref.size());
    const double growth = std::sqrt(double(terms)) * kFp32UnitRoundoff;
    double max_rounding = 0;
    for (double m : magnitude) max_rounding = std::max(max_rounding, growth * m);
    CompareResult r = detail::scan(out, ref, tol.atol, max_report, [&](std::size_t i, double e, double f) {
        return !(e <= tol.atol + tol.rtol * std::fabs(f) + growth * magnitude[i]);
    });
    r.rule = "|out - ref| <= " + std::to_string(tol.atol) + " + " + std::to_string(tol.rtol) +
             " * |ref| + sqrt(K) * 2^-24 * sum|x w| (K = " + std::to_string(terms) + ", largest rounding term " +
             std::to_string(max_rounding) + ")";
    return r;
}

template <typename T, typename R>
CompareResult compare_to_lowp_reference(std::span<const T> out, std::span<const R> ref, std::span<const R> ref_lp,
                                        double factor, std::size_t max_report) {
    if (out.size() != ref.size()) return detail::size_mismatch(out.size(), ref.size());
    if (ref_lp.size() != ref.size()) return detail::size_mismatch(ref_lp.size(), ref.size());
    double lp_err = 0, ref_max = 0;
    for (std::size_t i = 0; i < ref.size() && i < ref_lp.size(); ++i) {
        const double f = detail::as_double(ref[i]);
        lp_err = std::max(lp_err, std::fabs(detail::as_double(ref_lp[i]) - f));
        ref_max = std::max(ref_max, std::fabs(f));
    }
    const double bound = factor * lp_err + 1e-6 * ref_max;
    CompareResult r =
        detail::scan(out, ref, 0.0, max_report, [&](std::size_t, double e, double) { return !(e <= bound); });
    r.rule = "max|out - ref| <= " + std::to_string(factor) +
             " * max|ref_lp - ref| + 1e-6 * max|ref| = " + std::to_string(bound);
    return r;
}

template <typename T, typename R>
CompareResult compare_rel_l2(std::span<const T> out, std::span<const R> ref, double bound, std::size_t max_report) {
    if (out.size() != ref.size()) return detail::size_mismatch(out.size(), ref.size());
    // Element-wise: report the elements that contribute most, i.e. those beyond bound*|ref|max.
    double ref_max = 0;
    for (const R& v : ref) ref_max = std::max(ref_max, std::fabs(detail::as_double(v)));
    CompareResult r =
        detail::scan(out, ref, 0.0, max_report, [&](std::size_t, double e, double) { return !(e <= bound * ref_max); });
    // The pass criterion is norm-wise; element flags above only point at where to look.
    const bool norm_ok = r.non_finite == 0 && r.rel_l2_err <= bound;
    r.passed = norm_ok && !r.all_zero_output;
    if (r.passed) {
        r.bad = 0;
        r.first.clear();
    }
    r.rule = "||out - ref||_2 / ||ref||_2 <= " + std::to_string(bound);
    return r;
}

}  // namespace pd
