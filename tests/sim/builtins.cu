// Device built-ins and C++ API forms that ordinary kernels use, each checked exactly against the
// host: min/max (int, unsigned, long long, float); float/int conversions with explicit rounding
// (__float2int_rn/_rz/_rd/_ru, __float2uint_rn, __int2float_rn, __uint2float_rn) and __fsub_rn;
// __mul64hi/__umul64hi; the sm_80 warp reductions __reduce_add/min/max/and/or/xor_sync and
// __match_all_sync; atomicAdd with an argument of another type than the pointee (an int literal
// on unsigned and unsigned long long counters, a float on a double), on __half and
// __nv_bfloat16, and atomicAdd_block; __hfma and a __half2 shuffle; a template kernel launched
// with explicit template arguments (deduced ones: deduced_templates.cu); and the C++ template forms
// of the runtime API: cudaFuncSetAttribute(kernel, attribute, value), and cudaMemcpyToSymbol /
// cudaMemcpyFromSymbol on scalar __constant__ and __device__ variables.
//
// Built for a GPU older than sm_80 (a T4 is sm_75), the warp reductions are left out of the
// kernel and their checks are skipped, with a line that says so; everything else runs.
#include "check.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

constexpr int kN = 1024;
constexpr int kIntOps = 12, kFloatOps = 3;

__global__ void conversions_and_minmax(const float* x, const int* a, const int* b, int* out, float* fout,
                                       unsigned long long* wide, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    out[0 * n + i] = __float2int_rn(v);
    out[1 * n + i] = __float2int_rz(v);
    out[2 * n + i] = __float2int_rd(v);
    out[3 * n + i] = __float2int_ru(v);
    out[4 * n + i] = int(__float2uint_rn(fabsf(v)));
    out[5 * n + i] = min(a[i], b[i]);
    out[6 * n + i] = max(a[i], b[i]);
    out[7 * n + i] = int(min(unsigned(a[i]), unsigned(b[i])));
    out[8 * n + i] = int(max(unsigned(a[i]), unsigned(b[i])));
    out[9 * n + i] = int(min((long long)a[i] * 3, (long long)b[i] * 5) >> 2);
    out[10 * n + i] = int(max((long long)a[i] * 3, (long long)b[i] * 5) >> 2);
    out[11 * n + i] = int(min(v, float(a[i] % 100)) * 16.0f);
    fout[0 * n + i] = __int2float_rn(a[i]);
    fout[1 * n + i] = __uint2float_rn(unsigned(b[i]));
    fout[2 * n + i] = __fsub_rn(v, float(b[i] % 1000));
    wide[0 * n + i] = __umul64hi((unsigned long long)a[i] << 20, (unsigned long long)b[i] << 23);
    wide[1 * n + i] = (unsigned long long)__mul64hi((long long)a[i] << 20, (long long)b[i] << 23);
}

// Per thread: the warp's add/min/max/and/or/xor reductions, and __match_all_sync on a value
// shared by the whole warp (warp 0) or not (warp 1).
__global__ void warp_reductions(const unsigned* in, unsigned* out, int* pred_out) {
    const int t = threadIdx.x, warp = t / 32;
    const unsigned full = 0xffffffffu, v = in[t];
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // __reduce_*_sync need sm_80
    out[0 * 64 + t] = __reduce_add_sync(full, v);
    out[1 * 64 + t] = __reduce_min_sync(full, v);
    out[2 * 64 + t] = __reduce_max_sync(full, v);
    out[3 * 64 + t] = unsigned(__reduce_min_sync(full, int(v)));
    out[4 * 64 + t] = unsigned(__reduce_max_sync(full, int(v)));
    out[5 * 64 + t] = __reduce_and_sync(full, v | 0x0f0f0000u);
    out[6 * 64 + t] = __reduce_or_sync(full, v & 0x00ff00ffu);
    out[7 * 64 + t] = __reduce_xor_sync(full, v);
#endif
    int pred = -1;
    out[8 * 64 + t] = __match_all_sync(full, warp == 0 ? 42u : v, &pred);
    pred_out[t] = pred;
}

struct Totals {
    unsigned u;
    unsigned long long ull;
    double d;
    __half h;
    __nv_bfloat16 b;
};

__global__ void mixed_atomics(Totals* totals, int* per_block) {
    atomicAdd(&totals->u, 1);     // an int literal on an unsigned counter
    atomicAdd(&totals->ull, 1);   // and on an unsigned long long one
    atomicAdd(&totals->d, 0.5f);  // a float added to a double
    atomicAdd(&totals->h, __float2half(1.0f));
    atomicAdd(&totals->b, __float2bfloat16(1.0f));
    atomicAdd_block(&per_block[blockIdx.x], 1);
}

__global__ void half_ops(const __half* x, __half* fma_out, float* shuffled) {
    const int t = threadIdx.x;
    fma_out[t] = __hfma(x[t], x[(t + 1) % 32], x[(t + 2) % 32]);
    const __half2 pair = __halves2half2(x[t], x[(t + 5) % 32]);
    const __half2 other = __shfl_xor_sync(0xffffffffu, pair, 1);
    shuffled[2 * t] = __low2float(other);
    shuffled[2 * t + 1] = __high2float(other);
}

template <typename T>
__global__ void scale(T* p, T factor, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= factor;
}

__global__ void big_shared(int* out) {
    extern __shared__ int staged[];
    const int count = 64 * 1024 / sizeof(int);
    for (int j = threadIdx.x; j < count; j += blockDim.x) staged[j] = j;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = staged[count - 1] + staged[1];
}

__constant__ float coeffs[4];
__constant__ float scale_factor;
__device__ int launch_count;

__global__ void use_symbols(float* out) {
    if (threadIdx.x == 0) atomicAdd(&launch_count, 1);
    out[blockIdx.x * blockDim.x + threadIdx.x] = coeffs[threadIdx.x % 4] * scale_factor;
}

int main() {
    conformance::Lcg rng(606);
    const auto same = [](auto p, auto q) { return p == q; };

    {
        std::vector<float> x(kN);
        std::vector<int> a(kN), b(kN);
        for (int i = 0; i < kN; ++i) {
            x[i] = rng.range(-4000, 4000) / 8.0f;  // many exact halves: ties to even matter
            a[i] = int(rng.next());
            b[i] = int(rng.next());
        }
        std::vector<int> want(kIntOps * kN);
        std::vector<float> want_f(kFloatOps * kN);
        std::vector<unsigned long long> want_w(2 * kN);
        for (int i = 0; i < kN; ++i) {
            const float v = x[i];
            want[0 * kN + i] = int(std::nearbyint(v));
            want[1 * kN + i] = int(std::trunc(v));
            want[2 * kN + i] = int(std::floor(v));
            want[3 * kN + i] = int(std::ceil(v));
            want[4 * kN + i] = int(std::nearbyint(std::fabs(v)));
            want[5 * kN + i] = std::min(a[i], b[i]);
            want[6 * kN + i] = std::max(a[i], b[i]);
            want[7 * kN + i] = int(std::min(unsigned(a[i]), unsigned(b[i])));
            want[8 * kN + i] = int(std::max(unsigned(a[i]), unsigned(b[i])));
            want[9 * kN + i] = int(std::min((long long)a[i] * 3, (long long)b[i] * 5) >> 2);
            want[10 * kN + i] = int(std::max((long long)a[i] * 3, (long long)b[i] * 5) >> 2);
            want[11 * kN + i] = int(std::min(v, float(a[i] % 100)) * 16.0f);
            want_f[0 * kN + i] = float(a[i]);
            want_f[1 * kN + i] = float(unsigned(b[i]));
            want_f[2 * kN + i] = v - float(b[i] % 1000);
            const unsigned __int128 uw =
                (unsigned __int128)((unsigned long long)a[i] << 20) * ((unsigned long long)b[i] << 23);
            const __int128 sw = (__int128)((long long)a[i] << 20) * ((long long)b[i] << 23);
            want_w[0 * kN + i] = (unsigned long long)(uw >> 64);
            want_w[1 * kN + i] = (unsigned long long)(long long)(sw >> 64);
        }
        float *d_x, *d_f;
        int *d_a, *d_b, *d_out;
        unsigned long long* d_w;
        CUDA_OK(cudaMalloc(&d_x, kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_a, kN * sizeof(int)));
        CUDA_OK(cudaMalloc(&d_b, kN * sizeof(int)));
        CUDA_OK(cudaMalloc(&d_out, kIntOps * kN * sizeof(int)));
        CUDA_OK(cudaMalloc(&d_f, kFloatOps * kN * sizeof(float)));
        CUDA_OK(cudaMalloc(&d_w, 2 * kN * sizeof(unsigned long long)));
        CUDA_OK(cudaMemcpy(d_x, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_a, a.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_b, b.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, 0xFF, kIntOps * kN * sizeof(int)));
        CUDA_OK(cudaMemset(d_f, 0xFF, kFloatOps * kN * sizeof(float)));
        CUDA_OK(cudaMemset(d_w, 0xFF, 2 * kN * sizeof(unsigned long long)));
        conversions_and_minmax<<<(kN + 127) / 128, 128>>>(d_x, d_a, d_b, d_out, d_f, d_w, kN);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<int> got(kIntOps * kN);
        std::vector<float> got_f(kFloatOps * kN);
        std::vector<unsigned long long> got_w(2 * kN);
        CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got_f.data(), d_f, got_f.size() * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got_w.data(), d_w, got_w.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        const char* names[kIntOps] = {"__float2int_rn",  "__float2int_rz", "__float2int_rd", "__float2int_ru",
                                      "__float2uint_rn", "min(int)",       "max(int)",       "min(unsigned)",
                                      "max(unsigned)",   "min(long long)", "max(long long)", "min(float)"};
        for (int k = 0; k < kIntOps; ++k)
            CHECK_MSG(conformance::mismatches(names[k], got.data() + k * kN, want.data() + k * kN, kN, same) == 0, "%s",
                      names[k]);
        const char* fnames[kFloatOps] = {"__int2float_rn", "__uint2float_rn", "__fsub_rn"};
        for (int k = 0; k < kFloatOps; ++k)
            CHECK_MSG(conformance::bit_mismatches(fnames[k], got_f.data() + k * kN, want_f.data() + k * kN, kN) == 0,
                      "%s", fnames[k]);
        CHECK(conformance::mismatches("__umul64hi", got_w.data(), want_w.data(), kN, same) == 0);
        CHECK(conformance::mismatches("__mul64hi", got_w.data() + kN, want_w.data() + kN, kN, same) == 0);
        for (void* p : {(void*)d_x, (void*)d_a, (void*)d_b, (void*)d_out, (void*)d_f, (void*)d_w}) CUDA_OK(cudaFree(p));
    }

    {
        std::vector<unsigned> in(64);
        for (unsigned& v : in) v = rng.next() >> rng.range(0, 8);
        std::vector<unsigned> want(9 * 64);
        std::vector<int> want_pred(64);
        for (int w = 0; w < 2; ++w) {
            unsigned add = 0, umin = ~0u, umax = 0, andv = ~0u, orv = 0, xorv = 0;
            int imin = 2147483647, imax = -2147483647 - 1;
            for (int l = 0; l < 32; ++l) {
                const unsigned v = in[w * 32 + l];
                add += v, umin = std::min(umin, v), umax = std::max(umax, v);
                imin = std::min(imin, int(v)), imax = std::max(imax, int(v));
                andv &= v | 0x0f0f0000u, orv |= v & 0x00ff00ffu, xorv ^= v;
            }
            for (int l = 0; l < 32; ++l) {
                const int t = w * 32 + l;
                const unsigned r[8] = {add, umin, umax, unsigned(imin), unsigned(imax), andv, orv, xorv};
                for (int k = 0; k < 8; ++k) want[k * 64 + t] = r[k];
                want[8 * 64 + t] = w == 0 ? 0xffffffffu : 0u;  // the warp-1 values all differ (checked below)
                want_pred[t] = w == 0;
            }
        }
        std::vector<unsigned> sorted(in.begin() + 32, in.end());
        std::sort(sorted.begin(), sorted.end());
        CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        unsigned *d_in, *d_out;
        int* d_pred;
        CUDA_OK(cudaMalloc(&d_in, 64 * sizeof(unsigned)));
        CUDA_OK(cudaMalloc(&d_out, 9 * 64 * sizeof(unsigned)));
        CUDA_OK(cudaMalloc(&d_pred, 64 * sizeof(int)));
        CUDA_OK(cudaMemcpy(d_in, in.data(), 64 * sizeof(unsigned), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_out, 0xA5, 9 * 64 * sizeof(unsigned)));
        CUDA_OK(cudaMemset(d_pred, 0xA5, 64 * sizeof(int)));
        warp_reductions<<<1, 64>>>(d_in, d_out, d_pred);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned> got(9 * 64);
        std::vector<int> got_pred(64);
        CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got_pred.data(), d_pred, 64 * sizeof(int), cudaMemcpyDeviceToHost));
        const char* names[9] = {"__reduce_add_sync",      "__reduce_min_sync(unsigned)", "__reduce_max_sync(unsigned)",
                                "__reduce_min_sync(int)", "__reduce_max_sync(int)",      "__reduce_and_sync",
                                "__reduce_or_sync",       "__reduce_xor_sync",           "__match_all_sync"};
        cudaDeviceProp prop{};
        CUDA_OK(cudaGetDeviceProperties(&prop, 0));
        const bool reductions = prop.major >= 8;
        if (!reductions)
            std::printf("__reduce_*_sync skipped: the device has compute capability %d.%d, they need 8.0\n", prop.major,
                        prop.minor);
        for (int k = reductions ? 0 : 8; k < 9; ++k)
            CHECK_MSG(conformance::mismatches(names[k], got.data() + k * 64, want.data() + k * 64, 64, same) == 0, "%s",
                      names[k]);
        CHECK(conformance::mismatches("__match_all_sync pred", got_pred.data(), want_pred.data(), 64,
                                      [](int g, int w) { return (g != 0) == (w != 0); }) == 0);
        CUDA_OK(cudaFree(d_in));
        CUDA_OK(cudaFree(d_out));
        CUDA_OK(cudaFree(d_pred));
    }

    {
        const int blocks = 6, threads = 64;  // at most 64 additions of 1 on one half or bf16: exact
        Totals zero{};
        zero.h = __float2half(0.0f);
        zero.b = __float2bfloat16(0.0f);
        Totals* d_totals;
        int* d_per_block;
        CUDA_OK(cudaMalloc(&d_totals, sizeof(Totals)));
        CUDA_OK(cudaMalloc(&d_per_block, blocks * sizeof(int)));
        CUDA_OK(cudaMemcpy(d_totals, &zero, sizeof(Totals), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_per_block, 0, blocks * sizeof(int)));
        mixed_atomics<<<1, threads>>>(d_totals, d_per_block);
        mixed_atomics<<<blocks, 1>>>(d_totals, d_per_block);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        Totals got;
        std::vector<int> per_block(blocks);
        CUDA_OK(cudaMemcpy(&got, d_totals, sizeof(Totals), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(per_block.data(), d_per_block, blocks * sizeof(int), cudaMemcpyDeviceToHost));
        const unsigned total = threads + blocks;
        CHECK(got.u == total);
        CHECK(got.ull == total);
        CHECK(got.d == 0.5 * total);
        CHECK(__half2float(got.h) == float(total));
        CHECK(__bfloat162float(got.b) == float(total));
        std::vector<int> want_per_block(blocks, 1);
        want_per_block[0] += threads;
        CHECK(per_block == want_per_block);
        CUDA_OK(cudaFree(d_totals));
        CUDA_OK(cudaFree(d_per_block));
    }

    {
        std::vector<__half> x(32);
        for (__half& h : x) h = __float2half(rng.range(-64, 64) / 16.0f);
        std::vector<unsigned short> want_fma(32), got_fma(32);
        std::vector<float> want_shuffled(64), got_shuffled(64);
        for (int t = 0; t < 32; ++t) {
            const double r = double(__half2float(x[t])) * __half2float(x[(t + 1) % 32]) + __half2float(x[(t + 2) % 32]);
            want_fma[t] = __half_as_ushort(__float2half_rn(float(r)));  // exact product and sum: one rounding
            want_shuffled[2 * t] = __half2float(x[t ^ 1]);
            want_shuffled[2 * t + 1] = __half2float(x[((t ^ 1) + 5) % 32]);
        }
        __half *d_x, *d_fma;
        float* d_sh;
        CUDA_OK(cudaMalloc(&d_x, 32 * sizeof(__half)));
        CUDA_OK(cudaMalloc(&d_fma, 32 * sizeof(__half)));
        CUDA_OK(cudaMalloc(&d_sh, 64 * sizeof(float)));
        CUDA_OK(cudaMemcpy(d_x, x.data(), 32 * sizeof(__half), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(d_fma, 0xFF, 32 * sizeof(__half)));
        CUDA_OK(cudaMemset(d_sh, 0xFF, 64 * sizeof(float)));
        half_ops<<<1, 32>>>(d_x, d_fma, d_sh);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(got_fma.data(), d_fma, 32 * sizeof(__half), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got_shuffled.data(), d_sh, 64 * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(conformance::mismatches("__hfma", got_fma.data(), want_fma.data(), 32, same) == 0);
        CHECK(conformance::bit_mismatches("__half2 shuffle", got_shuffled.data(), want_shuffled.data(), 64) == 0);
        CUDA_OK(cudaFree(d_x));
        CUDA_OK(cudaFree(d_fma));
        CUDA_OK(cudaFree(d_sh));
    }

    {
        const int n = 100;
        std::vector<float> v(n), want(n);
        for (int i = 0; i < n; ++i) v[i] = rng.uniform(-1.0f, 1.0f), want[i] = v[i] * 4.0f;
        float* d_v;
        CUDA_OK(cudaMalloc(&d_v, n * sizeof(float)));
        CUDA_OK(cudaMemcpy(d_v, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        scale<float><<<(n + 31) / 32, 32>>>(d_v, 4.0f, n);  // T named explicitly
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(v.data(), d_v, n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(conformance::bit_mismatches("template launch", v.data(), want.data(), n) == 0);
        CUDA_OK(cudaFree(d_v));
    }

    {
        int* d_out;
        CUDA_OK(cudaMalloc(&d_out, sizeof(int)));
        CUDA_OK(cudaMemset(d_out, 0xFF, sizeof(int)));
        CUDA_OK(cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
        big_shared<<<1, 256, 64 * 1024>>>(d_out);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        int got = 0;
        CUDA_OK(cudaMemcpy(&got, d_out, sizeof(int), cudaMemcpyDeviceToHost));
        CHECK(got == 64 * 1024 / 4 - 1 + 1);
        CUDA_OK(cudaFree(d_out));
    }
    {
        const float h_coeffs[4] = {1.5f, -2.0f, 0.25f, 8.0f}, h_scale = 3.0f;
        const int zero = 0;
        CUDA_OK(cudaMemcpyToSymbol(coeffs, h_coeffs, sizeof h_coeffs));
        CUDA_OK(cudaMemcpyToSymbol(scale_factor, &h_scale, sizeof h_scale));
        CUDA_OK(cudaMemcpyToSymbol(launch_count, &zero, sizeof zero));
        float* d_out;
        CUDA_OK(cudaMalloc(&d_out, 3 * 32 * sizeof(float)));
        CUDA_OK(cudaMemset(d_out, 0xFF, 3 * 32 * sizeof(float)));
        use_symbols<<<3, 32>>>(d_out);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(3 * 32), want(3 * 32);
        for (int i = 0; i < 3 * 32; ++i) want[i] = h_coeffs[i % 4] * h_scale;
        CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        int count = -1;
        CUDA_OK(cudaMemcpyFromSymbol(&count, launch_count, sizeof count));
        CHECK(conformance::bit_mismatches("__constant__", got.data(), want.data(), got.size()) == 0);
        CHECK(count == 3);
        CUDA_OK(cudaFree(d_out));
    }
    return conformance::finish();
}
