// The warp-level matrix instructions of pd/warp_mma.cuh against a model of the PTX ISA's
// fragment tables written here, on the host, in a form of its own (which elements each
// register of a lane holds), on small integers so every result is exact:
//
//  * mma.sync.aligned.m16n8k16 (bf16 and f16 inputs, fp32 accumulators): each lane's A, B and C
//    registers packed by the model, D unpacked by it, compared with A B + C; also with d == c;
//  * ldmatrix x1, x2, x4, with and without .trans: 64 distinct rows of 8 elements in shared
//    memory, each lane giving the address of a different row (a seeded permutation), every
//    register of every lane compared with the model (lanes past 8 x count give addresses too,
//    which must be ignored);
//  * the two compositions a GEMM relies on: ldmatrix_x4 of a row-major 16 x 16 tile is an A
//    fragment, and ldmatrix_x2 of W's rows (B's columns) or ldmatrix_x2_trans of a row-major
//    K x N tile is a B fragment (the tile product is checked);
//  * cp.async of 16, 8 and 4 bytes with partial sources (zero fill), in three commit groups
//    waited for one at a time (wait_group 2, 1, then wait_all).
//
// The same program runs on a GPU (compute capability 8.0 or later), where it checks the model
// against the hardware; on the simulator it checks the emulation against the model.
#include "check.cuh"

#include "pd/warp_mma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

// ---- the model: which elements each register of lane l holds -----------------------------

/// An element position (row, col) in a matrix.
struct At {
    int row, col;
};

/// A fragment register of lane @p l: the positions of its low and high 16-bit halves. With
/// g = l / 4 and t = l % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
/// type"): A register j holds row g + 8 (j % 2), columns 2t + 8 (j / 2) and the next.
std::array<At, 2> a_register(int l, int j) {
    const int g = l / 4, t = l % 4, row = g + 8 * (j % 2), col = 2 * t + 8 * (j / 2);
    return {At{row, col}, At{row, col + 1}};
}
/// B register j (B is 16 x 8, k x n) holds column g, rows 2t + 8 j and the next.
std::array<At, 2> b_register(int l, int j) {
    const int g = l / 4, t = l % 4, row = 2 * t + 8 * j;
    return {At{row, g}, At{row + 1, g}};
}
/// Accumulator element i (16 x 8, fp32) of lane l: row g + 8 (i / 2), column 2t + i % 2.
At c_element(int l, int i) {
    return {l / 4 + 8 * (i / 2), 2 * (l % 4) + i % 2};
}

/// ldmatrix: register q of lane l holds, of matrix q, row g columns 2t and 2t + 1; with .trans,
/// column g rows 2t and 2t + 1 (PTX ISA, ldmatrix: "a group of four threads loads a row").
std::array<At, 2> ldmatrix_register(int l, bool trans) {
    const int g = l / 4, t = l % 4;
    if (trans) return {At{2 * t, g}, At{2 * t + 1, g}};
    return {At{g, 2 * t}, At{g, 2 * t + 1}};
}

template <typename T>
std::uint16_t bits16(float v) {
    T h;
    if constexpr (std::is_same_v<T, __half>)
        h = __float2half(v);
    else
        h = __float2bfloat16(v);
    std::uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
std::uint32_t pack(std::uint16_t lo, std::uint16_t hi) {
    return std::uint32_t(lo) | (std::uint32_t(hi) << 16);
}

// ---- kernels (one warp) ---------------------------------------------------------------------

/// Lane l: d = mma(a, b, c) with its registers from a[4 l..], b[2 l..], c[4 l..]; also
/// d_inplace, the same with the accumulator updated in place.
template <bool kF16>
__global__ void mma_kernel(const std::uint32_t* a, const std::uint32_t* b, const float* c, float* d, float* d_inplace) {
    const int l = threadIdx.x;
    std::uint32_t ra[4], rb[2];
    float rc[4], rd[4];
    for (int j = 0; j < 4; ++j) ra[j] = a[4 * l + j];
    for (int j = 0; j < 2; ++j) rb[j] = b[2 * l + j];
    for (int i = 0; i < 4; ++i) rc[i] = c[4 * l + i];
    if constexpr (kF16)
        pd::mma_m16n8k16_f16(rd, ra, rb, rc);
    else
        pd::mma_m16n8k16_bf16(rd, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[4 * l + i] = rd[i];
    if constexpr (kF16)
        pd::mma_m16n8k16_f16(rc, ra, rb, rc);
    else
        pd::mma_m16n8k16_bf16(rc, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d_inplace[4 * l + i] = rc[i];
}

constexpr int kRows = 64;  // rows of 8 16-bit elements in the ldmatrix pool

/// Copies the pool to shared memory; lane l then gives the address of pool row rows[l], and
/// the registers of ldmatrix<kCount, kTrans> go to out[4 l + q].
template <int kCount, bool kTrans>
__global__ void ldmatrix_kernel(const std::uint16_t* pool, const int* rows, std::uint32_t* out) {
    __shared__ __align__(16) std::uint16_t s[kRows * 8];
    const int l = threadIdx.x;
    for (int i = l; i < kRows * 8; i += 32) s[i] = pool[i];
    __syncthreads();
    std::uint32_t r[kCount];
    const void* row = s + rows[l] * 8;
    if constexpr (kCount == 1 && !kTrans) pd::ldmatrix_x1(r, row);
    if constexpr (kCount == 2 && !kTrans) pd::ldmatrix_x2(r, row);
    if constexpr (kCount == 4 && !kTrans) pd::ldmatrix_x4(r, row);
    if constexpr (kCount == 1 && kTrans) pd::ldmatrix_x1_trans(r, row);
    if constexpr (kCount == 2 && kTrans) pd::ldmatrix_x2_trans(r, row);
    if constexpr (kCount == 4 && kTrans) pd::ldmatrix_x4_trans(r, row);
    for (int q = 0; q < 4; ++q) out[4 * l + q] = q < kCount ? r[q] : 0u;
}

/// D (16 x 8, row-major) = A (16 x 16, row-major) B, all through ldmatrix: A by ldmatrix_x4;
/// B from bt = B^T (8 x 16, row-major: W's rows) by ldmatrix_x2, into d_from_rows, and from
/// b (16 x 8, row-major) by ldmatrix_x2_trans, into d_from_trans.
__global__ void tile_product_kernel(const __nv_bfloat16* a, const __nv_bfloat16* bt, const __nv_bfloat16* b,
                                    float* d_from_rows, float* d_from_trans) {
    __shared__ __align__(16) __nv_bfloat16 as[16 * 16], bts[8 * 16], bs[16 * 8];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) as[i] = a[i];
    for (int i = l; i < 128; i += 32) {
        bts[i] = bt[i];
        bs[i] = b[i];
    }
    __syncthreads();
    std::uint32_t ra[4], rb[2], rbt[2];
    // Matrices 0..3 of A: rows 0-7 and 8-15 at columns 0-7, then the same at columns 8-15.
    pd::ldmatrix_x4(ra, as + (l % 16) * 16 + (l / 16) * 8);
    // B^T's rows are B's columns: lanes 0-7 give rows n = 0..7 at k 0-7, lanes 8-15 at k 8-15.
    pd::ldmatrix_x2(rb, bts + (l % 8) * 16 + ((l / 8) % 2) * 8);
    // B row-major: lanes 0-7 give rows k = 0..7, lanes 8-15 rows k = 8..15; .trans turns them.
    pd::ldmatrix_x2_trans(rbt, bs + (l % 16) * 8);
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};
    float d[4];
    pd::mma_m16n8k16_bf16(d, ra, rb, zero);
    for (int i = 0; i < 4; ++i) d_from_rows[(l / 4 + 8 * (i / 2)) * 8 + 2 * (l % 4) + i % 2] = d[i];
    pd::mma_m16n8k16_bf16(d, ra, rbt, zero);
    for (int i = 0; i < 4; ++i) d_from_trans[(l / 4 + 8 * (i / 2)) * 8 + 2 * (l % 4) + i % 2] = d[i];
}

/// cp.async in three groups per thread (one warp), each waited for in turn:
/// group 0: 16 bytes from src + 16 l, of which src_bytes16[l] are read;
/// group 1: 8 bytes from src + 512 + 8 l, all read;
/// group 2: 4 bytes from src + 768 + 4 l, 0 read when l is odd (zero fill).
/// Each thread copies its own bytes out after the wait of their group.
__global__ void cp_async_kernel(const unsigned char* src, const int* src_bytes16, unsigned char* out) {
    __shared__ __align__(16) unsigned char s[512 + 256 + 128];
    const int l = threadIdx.x;
    pd::cp_async(s + 16 * l, src + 16 * l, 16, src_bytes16[l]);
    pd::cp_async_commit();
    pd::cp_async(s + 512 + 8 * l, src + 512 + 8 * l, 8, 8);
    pd::cp_async_commit();
    pd::cp_async(s + 768 + 4 * l, src + 768 + 4 * l, 4, l % 2 ? 0 : 4);
    pd::cp_async_commit();
    pd::cp_async_wait<2>();  // group 0 has landed
    for (int i = 0; i < 16; ++i) out[16 * l + i] = s[16 * l + i];
    pd::cp_async_wait<1>();  // group 1
    for (int i = 0; i < 8; ++i) out[512 + 8 * l + i] = s[512 + 8 * l + i];
    pd::cp_async_wait_all();  // group 2
    for (int i = 0; i < 4; ++i) out[768 + 4 * l + i] = s[768 + 4 * l + i];
}

// ---- host -----------------------------------------------------------------------------------

template <typename T>
struct DeviceArray {
    T* p = nullptr;
    explicit DeviceArray(const std::vector<T>& h) {
        CUDA_OK(cudaMalloc(&p, h.size() * sizeof(T)));
        CUDA_OK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit DeviceArray(std::size_t n) {
        CUDA_OK(cudaMalloc(&p, n * sizeof(T)));
        CUDA_OK(cudaMemset(p, 0xFF, n * sizeof(T)));
    }
    ~DeviceArray() { cudaFree(p); }
    std::vector<T> get(std::size_t n) const {
        std::vector<T> h(n);
        CUDA_OK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

/// mma with random integers in [-4, 4] (exact in bf16 and f16; sums exact in fp32).
template <bool kF16>
void check_mma(std::uint64_t seed) {
    using T = std::conditional_t<kF16, __half, __nv_bfloat16>;
    conformance::Lcg rng(seed);
    float A[16][16], B[16][8], C[16][8];
    for (auto& r : A)
        for (float& v : r) v = float(rng.range(-4, 4));
    for (auto& r : B)
        for (float& v : r) v = float(rng.range(-4, 4));
    for (auto& r : C)
        for (float& v : r) v = float(rng.range(-50, 50));
    std::vector<std::uint32_t> a(32 * 4), b(32 * 2);
    std::vector<float> c(32 * 4), want(32 * 4);
    for (int l = 0; l < 32; ++l) {
        for (int j = 0; j < 4; ++j) {
            const auto [lo, hi] = a_register(l, j);
            a[4 * l + j] = pack(bits16<T>(A[lo.row][lo.col]), bits16<T>(A[hi.row][hi.col]));
        }
        for (int j = 0; j < 2; ++j) {
            const auto [lo, hi] = b_register(l, j);
            b[2 * l + j] = pack(bits16<T>(B[lo.row][lo.col]), bits16<T>(B[hi.row][hi.col]));
        }
        for (int i = 0; i < 4; ++i) {
            const At e = c_element(l, i);
            c[4 * l + i] = C[e.row][e.col];
            double sum = C[e.row][e.col];
            for (int k = 0; k < 16; ++k) sum += double(A[e.row][k]) * B[k][e.col];
            want[4 * l + i] = float(sum);
        }
    }
    DeviceArray<std::uint32_t> da(a), db(b);
    DeviceArray<float> dc(c), dd(32 * 4), dd2(32 * 4);
    mma_kernel<kF16><<<1, 32>>>(da.p, db.p, dc.p, dd.p, dd2.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> d = dd.get(32 * 4), d2 = dd2.get(32 * 4);
    const char* what = kF16 ? "mma.m16n8k16 f16: d[4 lane + i]" : "mma.m16n8k16 bf16: d[4 lane + i]";
    CHECK_MSG(conformance::bit_mismatches(what, d.data(), want.data(), d.size()) == 0, "seed %llu",
              (unsigned long long)seed);
    CHECK_MSG(conformance::bit_mismatches("mma with d == c", d2.data(), want.data(), d2.size()) == 0, "seed %llu",
              (unsigned long long)seed);
}

/// ldmatrix<kCount, kTrans> from 64 distinct rows, lane l addressing row rows[l].
template <int kCount, bool kTrans>
void check_ldmatrix(std::uint64_t seed) {
    conformance::Lcg rng(seed);
    std::vector<std::uint16_t> pool(kRows * 8);
    for (int i = 0; i < kRows * 8; ++i) pool[std::size_t(i)] = std::uint16_t(0x1000 + i);  // each element distinct
    std::vector<int> order(kRows);
    for (int i = 0; i < kRows; ++i) order[std::size_t(i)] = i;
    for (int i = kRows - 1; i > 0; --i) std::swap(order[std::size_t(i)], order[std::size_t(rng.range(0, i))]);
    const std::vector<int> rows(order.begin(), order.begin() + 32);
    DeviceArray<std::uint16_t> dpool(pool);
    DeviceArray<int> drows(rows);
    DeviceArray<std::uint32_t> dout(32 * 4);
    ldmatrix_kernel<kCount, kTrans><<<1, 32>>>(dpool.p, drows.p, dout.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<std::uint32_t> got = dout.get(32 * 4);
    std::vector<std::uint32_t> want(32 * 4, 0u);
    for (int l = 0; l < 32; ++l)
        for (int q = 0; q < kCount; ++q) {
            // Row r of matrix q is the pool row whose address lane 8q + r gave.
            const auto [lo, hi] = ldmatrix_register(l, kTrans);
            auto element = [&](At e) { return pool[std::size_t(rows[std::size_t(8 * q + e.row)] * 8 + e.col)]; };
            want[std::size_t(4 * l + q)] = pack(element(lo), element(hi));
        }
    CHECK_MSG(
        conformance::bit_mismatches("ldmatrix registers out[4 lane + q]", got.data(), want.data(), got.size()) == 0,
        "ldmatrix x%d%s, seed %llu", kCount, kTrans ? ".trans" : "", (unsigned long long)seed);
}

void check_tile_product(std::uint64_t seed) {
    conformance::Lcg rng(seed);
    std::vector<float> A(256), B(128);  // A 16 x 16, B 16 x 8, row-major
    for (float& v : A) v = float(rng.range(-3, 3));
    for (float& v : B) v = float(rng.range(-3, 3));
    std::vector<__nv_bfloat16> a(256), bt(128), b(128);
    for (int i = 0; i < 256; ++i) a[std::size_t(i)] = __float2bfloat16(A[std::size_t(i)]);
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) {
            b[std::size_t(k * 8 + n)] = __float2bfloat16(B[std::size_t(k * 8 + n)]);
            bt[std::size_t(n * 16 + k)] = __float2bfloat16(B[std::size_t(k * 8 + n)]);
        }
    std::vector<float> want(128);
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
            double s = 0;
            for (int k = 0; k < 16; ++k) s += double(A[std::size_t(m * 16 + k)]) * B[std::size_t(k * 8 + n)];
            want[std::size_t(m * 8 + n)] = float(s);
        }
    DeviceArray<__nv_bfloat16> da(a), dbt(bt), db(b);
    DeviceArray<float> d1(128), d2(128);
    tile_product_kernel<<<1, 32>>>(da.p, dbt.p, db.p, d1.p, d2.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> g1 = d1.get(128), g2 = d2.get(128);
    CHECK_MSG(conformance::bit_mismatches("D from ldmatrix_x4 (A) and ldmatrix_x2 (B^T rows)", g1.data(), want.data(),
                                          128) == 0,
              "seed %llu", (unsigned long long)seed);
    CHECK_MSG(conformance::bit_mismatches("D from ldmatrix_x4 (A) and ldmatrix_x2_trans (B rows)", g2.data(),
                                          want.data(), 128) == 0,
              "seed %llu", (unsigned long long)seed);
}

void check_cp_async() {
    conformance::Lcg rng(7);
    std::vector<unsigned char> src(1024);
    for (unsigned char& v : src) v = static_cast<unsigned char>(rng.range(1, 255));  // never 0: zero fill shows
    std::vector<int> src_bytes(32);
    for (int l = 0; l < 32; ++l) src_bytes[std::size_t(l)] = l < 16 ? 16 : l - 16;  // 16, then 0 .. 15
    DeviceArray<unsigned char> dsrc(src), dout(1024);
    DeviceArray<int> dbytes(src_bytes);
    cp_async_kernel<<<1, 32>>>(dsrc.p, dbytes.p, dout.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<unsigned char> got = dout.get(512 + 256 + 128);
    std::vector<unsigned char> want(512 + 256 + 128);
    for (int l = 0; l < 32; ++l) {
        for (int i = 0; i < 16; ++i)
            want[std::size_t(16 * l + i)] = i < src_bytes[std::size_t(l)] ? src[std::size_t(16 * l + i)] : 0;
        for (int i = 0; i < 8; ++i) want[std::size_t(512 + 8 * l + i)] = src[std::size_t(512 + 8 * l + i)];
        for (int i = 0; i < 4; ++i) want[std::size_t(768 + 4 * l + i)] = l % 2 ? 0 : src[std::size_t(768 + 4 * l + i)];
    }
    CHECK(conformance::bit_mismatches("cp.async: bytes after each wait", got.data(), want.data(), got.size()) == 0);
}

int main() {
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
        std::printf("compute capability %d.%d: mma.m16n8k16 with bf16 and cp.async need 8.0; skipped\n", prop.major,
                    prop.minor);
        return 77;
    }
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        check_mma<false>(seed);
        check_mma<true>(seed);
        check_tile_product(seed);
    }
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
        check_ldmatrix<1, false>(seed);
        check_ldmatrix<2, false>(seed);
        check_ldmatrix<4, false>(seed);
        check_ldmatrix<1, true>(seed);
        check_ldmatrix<2, true>(seed);
        check_ldmatrix<4, true>(seed);
    }
    check_cp_async();
    return conformance::finish();
}
