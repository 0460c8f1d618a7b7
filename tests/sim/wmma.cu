// nvcuda::wmma (tensor cores): single tiles of __half and __nv_bfloat16 in every layout of A
// and B, the 16x16x16, 32x8x16 and 8x32x16 shapes, float, __half and mixed accumulators, an
// accumulator loaded from memory and stored col-major, element-wise scaling of a fragment through
// num_elements and x[], and a multi-tile GEMM (one warp per 16x16 tile of D, looping over K).
// Results are compared with a host reference in double precision of the same rounded inputs.
// Every matrix has padding between its rows (or columns): NaN in the inputs, so that reading
// outside a tile spoils the result, and untouched poison bytes in the outputs, so that writing
// outside one shows.
#include "check.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

using namespace nvcuda;

// bf16 fragments need sm_80: a device pass for an older architecture compiles the bf16 kernels
// empty, and the host skips them on a device older than 8.0.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <typename T>
constexpr bool kSupported = !std::is_same_v<T, __nv_bfloat16>;
#else
template <typename T>
constexpr bool kSupported = true;
#endif

/// Multiplies every element of the fragment by alpha, element-wise as the CUDA guide shows.
template <typename Frag>
__device__ void scale(Frag& f, float alpha) {
    for (int i = 0; i < f.num_elements; ++i) {
        if constexpr (std::is_same_v<typename Frag::element_type, float>)
            f.x[i] *= alpha;
        else
            f.x[i] = __float2half(__half2float(f.x[i]) * alpha);
    }
}

/// One warp: d = alpha * (a * b + c), with c loaded from memory or, when c is null, filled with 0.
template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB, typename TC, typename TD>
__global__ void tile_mma(const T* a, unsigned lda, const T* b, unsigned ldb, const TC* c, unsigned ldc,
                         wmma::layout_t c_layout, TD* d, unsigned ldd, wmma::layout_t d_layout, float alpha) {
    if constexpr (kSupported<T>) {
        wmma::fragment<wmma::matrix_a, M, N, K, T, LayoutA> fa;
        wmma::fragment<wmma::matrix_b, M, N, K, T, LayoutB> fb;
        wmma::fragment<wmma::accumulator, M, N, K, TC> fc;
        wmma::fragment<wmma::accumulator, M, N, K, TD> fd;
        wmma::load_matrix_sync(fa, a, lda);
        wmma::load_matrix_sync(fb, b, ldb);
        if (c != nullptr)
            wmma::load_matrix_sync(fc, c, ldc, c_layout);
        else
            wmma::fill_fragment(fc, TC(0.0f));
        wmma::mma_sync(fd, fa, fb, fc);
        if (alpha != 1.0f) scale(fd, alpha);
        wmma::store_matrix_sync(d, fd, ldd, d_layout);
    }
}

/// D (m x n, row-major) = A (m x k, row-major) * B (k x n, LayoutB): one warp per 16x16 tile of D,
/// looping over k 16 at a time. Warps beyond the last tile leave at once (whole warps).
template <typename T, typename LayoutB>
__global__ void gemm(const T* a, const T* b, float* d, int m, int n, int k) {
    if constexpr (kSupported<T>) {
        constexpr bool b_row = std::is_same_v<LayoutB, wmma::row_major>;
        const int warp = int((blockIdx.x * blockDim.x + threadIdx.x) / warpSize);
        const int tiles_n = n / 16;
        if (warp >= (m / 16) * tiles_n) return;
        const int tm = warp / tiles_n, tn = warp % tiles_n;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < k; k0 += 16) {
            wmma::load_matrix_sync(fa, a + tm * 16 * k + k0, k);
            if constexpr (b_row)
                wmma::load_matrix_sync(fb, b + k0 * n + tn * 16, n);
            else
                wmma::load_matrix_sync(fb, b + k0 + tn * 16 * k, k);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(d + tm * 16 * n + tn * 16, acc, n, wmma::mem_row_major);
    }
}

// ---- host side --------------------------------------------------------------------------------

template <typename T>
T to_t(float v) {
    if constexpr (std::is_same_v<T, float>)
        return v;
    else if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(v);
    else
        return __float2bfloat16_rn(v);
}

template <typename T>
float from_t(T v) {
    if constexpr (std::is_same_v<T, float>)
        return v;
    else if constexpr (std::is_same_v<T, __half>)
        return __half2float(v);
    else
        return __bfloat162float(v);
}

/// Padding, in elements, added to each leading dimension: 16 bytes keeps ldm legal for WMMA.
template <typename T>
constexpr int kPad = int(16 / sizeof(T));

/// A rows x cols matrix (row after row) of values exactly representable in T: integers in
/// [-range, range], or uniform in [-1, 1] rounded to T when range is 0.
template <typename T>
std::vector<float> random_matrix(conformance::Lcg& rng, int rows, int cols, int range) {
    std::vector<float> v(std::size_t(rows) * cols);
    for (float& x : v) x = range > 0 ? float(rng.range(-range, range)) : from_t(to_t<T>(rng.uniform(-1.0f, 1.0f)));
    return v;
}

/// The matrix v in memory with leading dimension ld, column after column when col; the padding
/// is NaN.
template <typename T>
std::vector<T> pack(const std::vector<float>& v, int rows, int cols, bool col, int ld) {
    std::vector<T> mem(std::size_t(ld) * (col ? cols : rows), to_t<T>(NAN));
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            mem[col ? r + std::size_t(c) * ld : std::size_t(r) * ld + c] = to_t<T>(v[r * cols + c]);
    return mem;
}

template <typename T>
T* to_device(const std::vector<T>& host) {
    T* p;
    CUDA_OK(cudaMalloc(&p, host.size() * sizeof(T)));
    CUDA_OK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

/// Compares the rows x cols result in `mem` (leading dimension ld, column after column when col)
/// with ref: exactly when tol is empty, else within tol; every other byte of mem must still hold
/// the 0xFF poison. Returns the number of wrong elements and prints the first few.
template <typename T>
int compare(const char* what, const std::vector<T>& mem, int rows, int cols, bool col, int ld,
            const std::vector<double>& ref, const std::vector<double>& tol) {
    int wrong = 0;
    std::vector<bool> in_tile(mem.size(), false);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const std::size_t at = col ? r + std::size_t(c) * ld : std::size_t(r) * ld + c;
            in_tile[at] = true;
            const double got = from_t(mem[at]), want = ref[r * cols + c];
            const bool ok = tol.empty() ? got == want : std::fabs(got - want) <= tol[r * cols + c];
            if (!ok && wrong++ < 4) std::printf("  %s: (%d, %d) = %.9g, expected %.9g\n", what, r, c, got, want);
        }
    T poison;
    std::memset(&poison, 0xFF, sizeof poison);
    for (std::size_t i = 0; i < mem.size(); ++i)
        if (!in_tile[i] && std::memcmp(&mem[i], &poison, sizeof poison) != 0 && wrong++ < 4)
            std::printf("  %s: element %zu, outside the result, was written\n", what, i);
    return wrong;
}

/// Bound on |fp32 result - exact result| for a sum of `terms` exact products and c whose
/// magnitudes add up to mag. Each fp32 addition errs by at most 2^-24 of the partial sum, so
/// round-to-nearest in any order stays within terms * 2^-24 * mag; twice that leaves room for
/// hardware whose adder truncates (2^-23) and for the rounding of the scaling by alpha.
double fp32_bound(int terms, double mag) {
    return 2.0 * (terms + 1) * std::ldexp(1.0, -24) * mag;
}

/// What one tile test does.
struct Case {
    bool integers = false;  ///< small integers (every sum exact: compared exactly), else random reals
    bool with_c = false;    ///< c loaded from memory (else filled with 0)
    wmma::layout_t c_layout = wmma::mem_row_major;
    wmma::layout_t d_layout = wmma::mem_row_major;
    float alpha = 1.0f;  ///< element-wise scaling of the result fragment before it is stored
};

/// Runs tile_mma on one M x N x K tile; returns the number of wrong elements.
template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB, typename TC = float, typename TD = float>
int tile(conformance::Lcg& rng, const Case& cs) {
    constexpr bool a_col = std::is_same_v<LayoutA, wmma::col_major>, b_col = std::is_same_v<LayoutB, wmma::col_major>;
    const bool c_col = cs.c_layout == wmma::mem_col_major, d_col = cs.d_layout == wmma::mem_col_major;
    const int lda = (a_col ? M : K) + kPad<T>, ldb = (b_col ? K : N) + kPad<T>;
    const int ldc = (c_col ? M : N) + kPad<TC>, ldd = (d_col ? M : N) + kPad<TD>;
    // Integers: |a|, |b| <= 4 and |c| <= 64, so |a * b + c| <= 16 * 16 + 64 and, scaled by 0.5 or
    // -2, every partial sum is an integer or half-integer below 2^10: exact in fp32 and in __half.
    const std::vector<float> a = random_matrix<T>(rng, M, K, cs.integers ? 4 : 0);
    const std::vector<float> b = random_matrix<T>(rng, K, N, cs.integers ? 4 : 0);
    const std::vector<float> c =
        cs.with_c ? random_matrix<TC>(rng, M, N, cs.integers ? 64 : 0) : std::vector<float>(std::size_t(M) * N, 0.0f);
    T* da = to_device(pack<T>(a, M, K, a_col, lda));
    T* db = to_device(pack<T>(b, K, N, b_col, ldb));
    TC* dc = to_device(pack<TC>(c, M, N, c_col, ldc));
    const std::size_t d_elems = std::size_t(ldd) * (d_col ? N : M);
    TD* dd;
    CUDA_OK(cudaMalloc(&dd, d_elems * sizeof(TD)));
    CUDA_OK(cudaMemset(dd, 0xFF, d_elems * sizeof(TD)));  // poison: NaN
    tile_mma<M, N, K, T, LayoutA, LayoutB, TC, TD>
        <<<1, 32>>>(da, lda, db, ldb, cs.with_c ? dc : nullptr, ldc, cs.c_layout, dd, ldd, cs.d_layout, cs.alpha);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<TD> d(d_elems);
    CUDA_OK(cudaMemcpy(d.data(), dd, d_elems * sizeof(TD), cudaMemcpyDeviceToHost));
    std::vector<double> ref(M * N), tol;
    if (!cs.integers) tol.resize(ref.size());
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double sum = c[i * N + j], mag = std::fabs(c[i * N + j]);
            for (int k = 0; k < K; ++k) {
                sum += double(a[i * K + k]) * b[k * N + j];
                mag += std::fabs(double(a[i * K + k]) * b[k * N + j]);
            }
            ref[i * N + j] = cs.alpha * sum;
            if (!cs.integers)  // a __half result also carries its final rounding, 2^-11 relative
                tol[i * N + j] = std::fabs(cs.alpha) * fp32_bound(K, mag) +
                                 (std::is_same_v<TD, __half> ? std::ldexp(std::fabs(cs.alpha * sum), -11) : 0.0);
        }
    const int wrong = compare("tile", d, M, N, d_col, ldd, ref, tol);
    CUDA_OK(cudaFree(da));
    CUDA_OK(cudaFree(db));
    CUDA_OK(cudaFree(dc));
    CUDA_OK(cudaFree(dd));
    return wrong;
}

/// The multi-tile GEMM, M = 48, N = 32, K = 64 (6 tiles of D, 8 warps: 2 leave at once); returns
/// the number of wrong elements.
template <typename T, typename LayoutB>
int gemm_test(conformance::Lcg& rng, bool integers) {
    constexpr int M = 48, N = 32, K = 64;
    constexpr bool b_col = std::is_same_v<LayoutB, wmma::col_major>;
    // Integers: |a|, |b| <= 4, so every partial sum is an integer of at most 64 * 16 = 1024:
    // exact in fp32 whatever the order of the additions.
    const std::vector<float> a = random_matrix<T>(rng, M, K, integers ? 4 : 0);
    const std::vector<float> b = random_matrix<T>(rng, K, N, integers ? 4 : 0);
    T* da = to_device(pack<T>(a, M, K, false, K));
    T* db = to_device(pack<T>(b, K, N, b_col, b_col ? K : N));
    float* dd;
    CUDA_OK(cudaMalloc(&dd, M * N * sizeof(float)));
    CUDA_OK(cudaMemset(dd, 0xFF, M * N * sizeof(float)));  // poison: NaN
    gemm<T, LayoutB><<<2, 128>>>(da, db, dd, M, N, K);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> d(M * N);
    CUDA_OK(cudaMemcpy(d.data(), dd, M * N * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<double> ref(M * N), tol;
    if (!integers) tol.resize(ref.size());
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
                sum += double(a[i * K + k]) * b[k * N + j];
                mag += std::fabs(double(a[i * K + k]) * b[k * N + j]);
            }
            ref[i * N + j] = sum;
            if (!integers) tol[i * N + j] = fp32_bound(K, mag);
        }
    const int wrong = compare("gemm", d, M, N, false, N, ref, tol);
    CUDA_OK(cudaFree(da));
    CUDA_OK(cudaFree(db));
    CUDA_OK(cudaFree(dd));
    return wrong;
}

int main() {
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const bool bf16 = prop.major >= 8;  // bf16 fragments need compute capability 8.0
    conformance::Lcg rng(20240611);
    using row = wmma::row_major;
    using col = wmma::col_major;
    using bf = __nv_bfloat16;
    const Case random{}, exact{.integers = true};

    // 16x16x16 tiles of random reals, A and B in every layout.
    CHECK((tile<16, 16, 16, half, row, col>(rng, random) == 0));
    CHECK((tile<16, 16, 16, half, row, row>(rng, random) == 0));
    CHECK((tile<16, 16, 16, half, col, col>(rng, random) == 0));
    CHECK((tile<16, 16, 16, half, col, row>(rng, random) == 0));
    // Small integers: every sum is exact, so the result must be too.
    CHECK((tile<16, 16, 16, half, row, col>(rng, exact) == 0));
    CHECK((tile<16, 16, 16, half, row, row>(rng, exact) == 0));
    // c loaded from memory (row- and col-major), d stored col-major (and row-major), d scaled
    // element-wise through num_elements and x[].
    CHECK((tile<16, 16, 16, half, row, col>(rng, {.integers = true, .with_c = true, .d_layout = wmma::mem_col_major}) ==
           0));
    CHECK((tile<16, 16, 16, half, row, row>(
               rng, {.integers = true, .with_c = true, .d_layout = wmma::mem_col_major, .alpha = 0.5f}) == 0));
    CHECK((tile<16, 16, 16, half, col, col>(
               rng, {.integers = true, .with_c = true, .c_layout = wmma::mem_col_major, .alpha = -2.0f}) == 0));
    CHECK(
        (tile<16, 16, 16, half, row, col>(rng, {.with_c = true, .d_layout = wmma::mem_col_major, .alpha = 0.5f}) == 0));
    // __half accumulators, and a mix of __half and float for c and d: small integers only, as a
    // GPU may round a __half accumulator along the way (here it is rounded once, at the end).
    CHECK((tile<16, 16, 16, half, row, col, half, half>(rng, {.integers = true, .with_c = true, .alpha = 0.5f}) == 0));
    CHECK((tile<16, 16, 16, half, row, row, half, float>(rng, {.integers = true, .with_c = true}) == 0));
    CHECK((tile<16, 16, 16, half, col, col, float, half>(
               rng,
               {.integers = true, .with_c = true, .c_layout = wmma::mem_col_major, .d_layout = wmma::mem_col_major}) ==
           0));
    // The 32x8x16 and 8x32x16 shapes.
    CHECK((tile<32, 8, 16, half, row, col>(rng, {.integers = true, .with_c = true}) == 0));
    CHECK((tile<32, 8, 16, half, col, row>(rng, {.with_c = true, .d_layout = wmma::mem_col_major}) == 0));
    CHECK((tile<32, 8, 16, half, row, row, half, half>(rng, {.integers = true, .with_c = true, .alpha = 0.5f}) == 0));
    CHECK((tile<8, 32, 16, half, row, col>(rng, {.integers = true, .with_c = true, .c_layout = wmma::mem_col_major}) ==
           0));
    CHECK((tile<8, 32, 16, half, col, col>(rng, {.with_c = true, .d_layout = wmma::mem_col_major}) == 0));
    // Multi-tile GEMM, 48x32x64.
    CHECK((gemm_test<half, col>(rng, false) == 0));
    CHECK((gemm_test<half, row>(rng, false) == 0));
    CHECK((gemm_test<half, col>(rng, true) == 0));

    if (bf16) {
        CHECK((tile<16, 16, 16, bf, row, col>(rng, random) == 0));
        CHECK((tile<16, 16, 16, bf, row, row>(rng, random) == 0));
        CHECK((tile<16, 16, 16, bf, col, col>(rng, random) == 0));
        CHECK((tile<16, 16, 16, bf, col, row>(rng, random) == 0));
        CHECK((tile<16, 16, 16, bf, row, col>(rng, exact) == 0));
        CHECK((tile<16, 16, 16, bf, row, row>(
                   rng, {.integers = true, .with_c = true, .d_layout = wmma::mem_col_major, .alpha = 0.5f}) == 0));
        CHECK((tile<16, 16, 16, bf, row, col>(rng, {.with_c = true,
                                                    .c_layout = wmma::mem_col_major,
                                                    .d_layout = wmma::mem_col_major,
                                                    .alpha = -2.0f}) == 0));
        CHECK((tile<32, 8, 16, bf, row, col>(rng, {.integers = true, .with_c = true}) == 0));
        CHECK((tile<8, 32, 16, bf, col, row>(rng, {.with_c = true, .d_layout = wmma::mem_col_major}) == 0));
        CHECK((gemm_test<bf, col>(rng, false) == 0));
        CHECK((gemm_test<bf, row>(rng, false) == 0));
        CHECK((gemm_test<bf, row>(rng, true) == 0));
    } else {
        std::printf("bf16 tests skipped: the device has compute capability %d.%d, bf16 WMMA needs 8.0\n", prop.major,
                    prop.minor);
    }
    return conformance::finish();
}
