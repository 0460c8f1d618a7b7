// Intrinsics and math functions against host-computed values. Exact where CUDA's result is
// exact: __popc, __clz, __ffs, __brev (and the 64-bit forms), __mulhi/__umulhi, bit casts,
// fmaxf, fminf, __saturatef, fmaf, sqrtf, __ldg, and the half and bf16 conversions and
// arithmetic (__float2half, __half2float, __hadd, __hmul, __half2 ops, __float2bfloat16,
// + and * on __nv_bfloat16: correctly rounded on a GPU, compared with a host rounding model of
// the exact result). Within the Programming Guide's maximum ulp errors where the GPU's function
// is approximate: expf 2, logf 1, sinf 2, tanhf 2, rsqrtf 2, __fdividef 2, __expf
// 2 + floor(|1.173 x|) ulp.
#include "check.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

constexpr int kN = 4096;

// ---- integer and bit intrinsics ------------------------------------------------------------

__global__ void bits(const unsigned* u, const unsigned long long* w, int* out, unsigned* rev, float* back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned x = u[i];
    const unsigned long long y = w[i];
    out[0 * n + i] = __popc(x);
    out[1 * n + i] = __clz(int(x));
    out[2 * n + i] = __ffs(int(x));
    out[3 * n + i] = __popcll(y);
    out[4 * n + i] = __clzll((long long)y);
    out[5 * n + i] = __ffsll((long long)y);
    out[6 * n + i] = __mulhi(int(x), int(y));
    out[7 * n + i] = int(__umulhi(x, unsigned(y >> 32)));
    out[8 * n + i] = __float_as_int(__int_as_float(int(x)));  // a round trip keeps every bit
    rev[i] = __brev(x);
    back[i] = __int_as_float(int(x) & 0x7fffffff);  // the float with these bits
}

// ---- float math ----------------------------------------------------------------------------

constexpr int kFloatOps = 13;

__global__ void float_math(const float* x, const float* y, const float* z, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = __ldg(&x[i]), b = __ldg(&y[i]), c = z[i];
    out[0 * n + i] = expf(a);
    out[1 * n + i] = __expf(a);
    out[2 * n + i] = rsqrtf(b);
    out[3 * n + i] = fmaxf(a, c);
    out[4 * n + i] = fminf(a, c);
    out[5 * n + i] = __fdividef(a, b);
    out[6 * n + i] = fmaf(a, b, c);
    out[7 * n + i] = __saturatef(c);
    out[8 * n + i] = sqrtf(b);
    out[9 * n + i] = logf(b);
    out[10 * n + i] = sinf(a);
    out[11 * n + i] = tanhf(a);
    out[12 * n + i] = a;  // __ldg
}

// ---- half and bf16 ---------------------------------------------------------------------------

__global__ void low_precision(const float* x, const float* y, unsigned short* h, float* f, unsigned short* bf, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const __half a = __float2half(x[i]), b = __float2half(y[i]);
    h[0 * n + i] = __half_as_ushort(a);
    h[1 * n + i] = __half_as_ushort(__hadd(a, b));
    h[2 * n + i] = __half_as_ushort(__hmul(a, b));
    const __half2 p = __floats2half2_rn(x[i], y[i]);
    const __half2 q = __halves2half2(b, a);
    const __half2 s = __hadd2(p, q), m = __hmul2(p, q);
    f[0 * n + i] = __half2float(a);
    f[1 * n + i] = __low2float(s);   // a + b
    f[2 * n + i] = __high2float(s);  // b + a
    f[3 * n + i] = __low2float(m);   // a * b
    f[4 * n + i] = __high2float(m);  // b * a
    const __nv_bfloat16 c = __float2bfloat16(x[i]), d = __float2bfloat16(y[i]);
    bf[0 * n + i] = __bfloat16_as_ushort(c);
    bf[1 * n + i] = __bfloat16_as_ushort(c + d);
    bf[2 * n + i] = __bfloat16_as_ushort(c * d);
    f[5 * n + i] = __bfloat162float(c);
}

// ---- host models -----------------------------------------------------------------------------

/// Rounds x to the nearest value of a binary format with `mant` stored mantissa bits and an
/// exponent bias `bias` (ties to even, subnormals, overflow to infinity); returns its bits.
unsigned round_to_format(double x, int mant, int exp_bits) {
    const int bias = (1 << (exp_bits - 1)) - 1;
    const unsigned sign = std::signbit(x) ? 1u << (mant + exp_bits) : 0u;
    const unsigned inf = ((1u << exp_bits) - 1) << mant;
    if (std::isnan(x)) return sign | inf | (1u << (mant - 1));
    x = std::fabs(x);
    if (std::isinf(x)) return sign | inf;
    const int min_exp = 1 - bias;  // exponent of the smallest normal
    int e = std::ilogb(x);
    if (x == 0.0 || e < min_exp) e = min_exp;            // subnormal: the unit is 2^(min_exp - mant)
    double q = std::nearbyint(std::ldexp(x, mant - e));  // ties to even in the default rounding mode
    if (q >= std::ldexp(1.0, mant + 1)) q /= 2, ++e;     // rounded up to the next power of two
    if (e > bias) return sign | inf;
    if (q < std::ldexp(1.0, mant)) return sign | unsigned(q);  // subnormal (or zero)
    return sign | unsigned(e + bias) << mant | (unsigned(q) - (1u << mant));
}
unsigned half_bits(double x) {
    return round_to_format(x, 10, 5);
}
unsigned bf16_bits(double x) {
    return round_to_format(x, 7, 8);
}
double from_format(unsigned bits, int mant, int exp_bits) {
    const int bias = (1 << (exp_bits - 1)) - 1;
    const unsigned e = (bits >> mant) & ((1u << exp_bits) - 1), m = bits & ((1u << mant) - 1);
    const double s = (bits >> (mant + exp_bits)) & 1 ? -1.0 : 1.0;
    if (e == (1u << exp_bits) - 1) return m ? NAN : s * INFINITY;
    if (e == 0) return s * std::ldexp(double(m), 1 - bias - mant);
    return s * std::ldexp(double(m | (1u << mant)), int(e) - bias - mant);
}
double half_value(unsigned bits) {
    return from_format(bits, 10, 5);
}
double bf16_value(unsigned bits) {
    return from_format(bits, 7, 8);
}

/// One unit in the last place of a float near x.
double ulp(double x) {
    return std::ldexp(1.0, std::max(std::ilogb(x), -126) - 23);
}

int main() {
    conformance::Lcg rng(31337);
    const dim3 block(256), grid((kN + 255) / 256);
    const auto same = [](auto a, auto b) { return a == b; };

    // Bits.
    {
        std::vector<unsigned> u(kN);
        std::vector<unsigned long long> w(kN);
        for (int i = 0; i < kN; ++i) {
            u[i] = rng.next() >> rng.range(0, 31);  // many leading-zero counts
            w[i] = rng.next64() >> rng.range(0, 63);
        }
        u[0] = 0, u[1] = 0xffffffffu, u[2] = 1, u[3] = 0x80000000u;
        w[0] = 0, w[1] = ~0ull, w[2] = 1, w[3] = 1ull << 63;
        std::vector<int> want(9 * kN);
        std::vector<unsigned> want_rev(kN);
        std::vector<float> want_back(kN);
        for (int i = 0; i < kN; ++i) {
            const unsigned x = u[i];
            const unsigned long long y = w[i];
            int clz = 32, ffs = 0, popc = 0, clzll = 64, ffsll = 0, popcll = 0;
            for (int b = 31; b >= 0; --b)
                if ((x >> b) & 1) {
                    clz = 31 - b;
                    break;
                }
            for (int b = 0; b < 32; ++b)
                if ((x >> b) & 1) {
                    ffs = b + 1;
                    break;
                }
            for (int b = 0; b < 32; ++b) popc += (x >> b) & 1;
            for (int b = 63; b >= 0; --b)
                if ((y >> b) & 1) {
                    clzll = 63 - b;
                    break;
                }
            for (int b = 0; b < 64; ++b)
                if ((y >> b) & 1) {
                    ffsll = b + 1;
                    break;
                }
            for (int b = 0; b < 64; ++b) popcll += (y >> b) & 1;
            unsigned r = 0;
            for (int b = 0; b < 32; ++b) r |= ((x >> b) & 1u) << (31 - b);
            want[0 * kN + i] = popc;
            want[1 * kN + i] = clz;
            want[2 * kN + i] = ffs;
            want[3 * kN + i] = popcll;
            want[4 * kN + i] = clzll;
            want[5 * kN + i] = ffsll;
            want[6 * kN + i] = int((std::int64_t(int(x)) * std::int64_t(int(y))) >> 32);
            want[7 * kN + i] = int((std::uint64_t(x) * std::uint64_t(unsigned(y >> 32))) >> 32);
            want[8 * kN + i] = int(x);
            want_rev[i] = r;
            const unsigned abs_bits = x & 0x7fffffffu;
            std::memcpy(&want_back[i], &abs_bits, 4);
        }
        unsigned *d_u, *d_rev;
        unsigned long long* d_w;
        int* d_out;
        float* d_back;
        CUDA_OK(cudaMalloc(&d_u, kN * sizeof(unsigned)));
        CUDA_OK(cudaMalloc(&d_w, kN * sizeof(unsigned long long)));
        CUDA_OK(cudaMalloc(&d_out, 9 * kN * sizeof(int)));
        CUDA_OK(cudaMalloc(&d_rev, kN * sizeof(unsigned)));
        CUDA_OK(cudaMalloc(&d_back, kN * sizeof(float)));
        CUDA_OK(cudaMemcpy(d_u, u.data(), kN * sizeof(unsigned), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_w, w.data(), kN * sizeof(unsigned long long), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, 0xFF, 9 * kN * sizeof(int)));
        CUDA_OK(cudaMemset(d_rev, 0xFF, kN * sizeof(unsigned)));
        CUDA_OK(cudaMemset(d_back, 0xFF, kN * sizeof(float)));
        bits<<<grid, block>>>(d_u, d_w, d_out, d_rev, d_back, kN);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<int> got(9 * kN);
        std::vector<unsigned> rev(kN);
        std::vector<float> back(kN);
        CUDA_OK(cudaMemcpy(got.data(), d_out, 9 * kN * sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(rev.data(), d_rev, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(back.data(), d_back, kN * sizeof(float), cudaMemcpyDeviceToHost));
        const char* names[] = {"__popc",   "__clz",    "__ffs",
                               "__popcll", "__clzll",  "__ffsll",
                               "__mulhi",  "__umulhi", "__float_as_int(__int_as_float)"};
        for (int k = 0; k < 9; ++k)
            CHECK_MSG(conformance::mismatches(names[k], got.data() + k * kN, want.data() + k * kN, kN, same) == 0, "%s",
                      names[k]);
        CHECK(conformance::mismatches("__brev", rev.data(), want_rev.data(), kN, same) == 0);
        CHECK(conformance::bit_mismatches("__int_as_float", back.data(), want_back.data(), kN) == 0);
        for (void* p : {(void*)d_u, (void*)d_w, (void*)d_out, (void*)d_rev, (void*)d_back}) CUDA_OK(cudaFree(p));
    }

    // Float math.
    {
        std::vector<float> x(kN), y(kN), z(kN);
        for (int i = 0; i < kN; ++i) {
            x[i] = rng.uniform(-10.0f, 10.0f);
            y[i] = std::exp2(rng.uniform(-10.0f, 10.0f));  // positive, over many binades
            z[i] = rng.uniform(-0.5f, 1.5f);               // __saturatef clamps some of these
        }
        z[0] = NAN, z[1] = -0.0f, z[2] = 1.0f, z[3] = INFINITY;  // fmaxf/fminf ignore NaN; __saturatef(NaN) = 0
        float *d_x, *d_y, *d_z, *d_out;
        CUDA_OK(cudaMalloc(&d_x, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_y, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_z, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_out, kFloatOps * kN * sizeof(float)));
        CUDA_OK(cudaMemcpy(d_x, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_y, y.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_z, z.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, 0xFF, kFloatOps * kN * sizeof(float)));
        float_math<<<grid, block>>>(d_x, d_y, d_z, d_out, kN);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(kFloatOps * kN);
        CUDA_OK(cudaMemcpy(got.data(), d_out, kFloatOps * kN * sizeof(float), cudaMemcpyDeviceToHost));
        int bad[kFloatOps] = {};
        const char* names[kFloatOps] = {"expf",        "__expf", "rsqrtf", "fmaxf", "fminf", "__fdividef", "fmaf",
                                        "__saturatef", "sqrtf",  "logf",   "sinf",  "tanhf", "__ldg"};
        for (int i = 0; i < kN; ++i) {
            const double a = x[i], b = y[i], c = z[i];
            const auto within = [&](int k, double exact, double ulps) {
                const double g = got[k * kN + i];
                const bool ok = std::fabs(g - exact) <= ulps * ulp(exact);
                if (!ok && bad[k] < 3)
                    std::printf("  %s(%.9g, %.9g): got %.9g, exact %.9g\n", names[k], a, b, g, exact);
                bad[k] += !ok;
            };
            const auto exactly = [&](int k, float want) {
                const bool ok = std::memcmp(&got[k * kN + i], &want, 4) == 0;
                if (!ok && bad[k] < 3)
                    std::printf("  %s(%.9g, %.9g, %.9g): got %.9g, want %.9g\n", names[k], a, b, c, got[k * kN + i],
                                want);
                bad[k] += !ok;
            };
            const auto equal = [&](int k, float want) {
                const bool ok = got[k * kN + i] == want;
                if (!ok && bad[k] < 3)
                    std::printf("  %s(%.9g): got %.9g, want %.9g\n", names[k], c, got[k * kN + i], want);
                bad[k] += !ok;
            };
            within(0, std::exp(a), 2);
            within(1, std::exp(a), 2 + std::floor(std::fabs(1.173 * a)));
            within(2, 1.0 / std::sqrt(b), 2);
            exactly(3, std::isnan(c) ? x[i] : (x[i] > z[i] ? x[i] : z[i]));
            exactly(4, std::isnan(c) ? x[i] : (x[i] < z[i] ? x[i] : z[i]));
            within(5, a / b, 2);
            exactly(6, std::fma(x[i], y[i], z[i]));  // the host's fma rounds once, as the GPU's does
            equal(7, std::isnan(c) ? 0.0f : (c < 0 ? 0.0f : (c > 1 ? 1.0f : z[i])));  // the sign of -0 may go
            exactly(8, float(std::sqrt(b)));  // sqrtf is correctly rounded (no -use_fast_math)
            within(9, std::log(b), 1);
            within(10, std::sin(a), 2);
            within(11, std::tanh(a), 2);
            exactly(12, x[i]);
        }
        for (int k = 0; k < kFloatOps; ++k) CHECK_MSG(bad[k] == 0, "%s: %d of %d wrong", names[k], bad[k], kN);
        for (void* p : {(void*)d_x, (void*)d_y, (void*)d_z, (void*)d_out}) CUDA_OK(cudaFree(p));
    }

    // Half and bf16.
    {
        std::vector<float> x(kN), y(kN);
        for (int i = 0; i < kN; ++i) {
            x[i] = rng.uniform(-8.0f, 8.0f) * std::exp2(float(rng.range(-8, 0)));  // products reach subnormals
            y[i] = rng.uniform(-100.0f, 100.0f);
        }
        x[0] = 65504.0f, y[0] = 65519.0f;  // the largest half; a value that rounds down to it
        x[1] = 65520.0f, y[1] = 3e-5f;     // halfway to infinity rounds to infinity; a subnormal half
        float *d_x, *d_y, *d_f;
        unsigned short *d_h, *d_bf;
        CUDA_OK(cudaMalloc(&d_x, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_y, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_h, 3 * kN * sizeof(unsigned short)));
        CUDA_OK(cudaMalloc(&d_bf, 3 * kN * sizeof(unsigned short)));
        CUDA_OK(cudaMalloc(&d_f, 6 * kN * sizeof(float)));
        CUDA_OK(cudaMemcpy(d_x, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_y, y.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_h, 0xFF, 3 * kN * sizeof(unsigned short)));
        CUDA_OK(cudaMemset(d_bf, 0xFF, 3 * kN * sizeof(unsigned short)));
        CUDA_OK(cudaMemset(d_f, 0xFF, 6 * kN * sizeof(float)));
        low_precision<<<grid, block>>>(d_x, d_y, d_h, d_f, d_bf, kN);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned short> h(3 * kN), bf(3 * kN);
        std::vector<float> f(6 * kN);
        CUDA_OK(cudaMemcpy(h.data(), d_h, 3 * kN * sizeof(unsigned short), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(bf.data(), d_bf, 3 * kN * sizeof(unsigned short), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(f.data(), d_f, 6 * kN * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<unsigned short> want_h(3 * kN), want_bf(3 * kN);
        std::vector<float> want_f(6 * kN);
        for (int i = 0; i < kN; ++i) {
            const unsigned a = half_bits(x[i]), b = half_bits(y[i]);
            const double av = half_value(a), bv = half_value(b);  // sums and products of halves are exact in double
            want_h[0 * kN + i] = (unsigned short)a;
            want_h[1 * kN + i] = (unsigned short)half_bits(av + bv);
            want_h[2 * kN + i] = (unsigned short)half_bits(av * bv);
            const unsigned pa = half_bits(x[i]), pb = half_bits(y[i]);  // __floats2half2_rn(x, y)
            want_f[0 * kN + i] = float(av);
            want_f[1 * kN + i] = float(half_value(half_bits(half_value(pa) + bv)));
            want_f[2 * kN + i] = float(half_value(half_bits(half_value(pb) + av)));
            want_f[3 * kN + i] = float(half_value(half_bits(half_value(pa) * bv)));
            want_f[4 * kN + i] = float(half_value(half_bits(half_value(pb) * av)));
            const unsigned c = bf16_bits(x[i]), d = bf16_bits(y[i]);
            const double cv = bf16_value(c), dv = bf16_value(d);  // exponents close enough for exact double sums
            want_bf[0 * kN + i] = (unsigned short)c;
            want_bf[1 * kN + i] = (unsigned short)bf16_bits(cv + dv);
            want_bf[2 * kN + i] = (unsigned short)bf16_bits(cv * dv);
            want_f[5 * kN + i] = float(cv);
        }
        const char* hnames[] = {"__float2half", "__hadd", "__hmul"};
        const char* bnames[] = {"__float2bfloat16", "bf16 +", "bf16 *"};
        const char* fnames[] = {"__half2float", "__hadd2 low",  "__hadd2 high",
                                "__hmul2 low",  "__hmul2 high", "__bfloat162float"};
        for (int k = 0; k < 3; ++k) {
            CHECK(conformance::mismatches(hnames[k], h.data() + k * kN, want_h.data() + k * kN, kN, same) == 0);
            CHECK(conformance::mismatches(bnames[k], bf.data() + k * kN, want_bf.data() + k * kN, kN, same) == 0);
        }
        for (int k = 0; k < 6; ++k)
            CHECK(conformance::bit_mismatches(fnames[k], f.data() + k * kN, want_f.data() + k * kN, kN) == 0);
        for (void* p : {(void*)d_x, (void*)d_y, (void*)d_h, (void*)d_bf, (void*)d_f}) CUDA_OK(cudaFree(p));
    }
    return conformance::finish();
}
