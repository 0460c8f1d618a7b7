// Atomics under contention: 96 blocks of 256 threads (so the simulator's worker threads race on
// the same addresses) update global counters with atomicAdd (int, unsigned, unsigned long long,
// float, double), atomicSub, atomicMax, atomicMin, atomicExch, atomicCAS (a CAS-loop increment
// and a CAS-loop float maximum), atomicAnd/Or/Xor and atomicInc/Dec (with wrap-around), plus a
// shared-memory histogram merged into global memory. Integer results are exact; the order of
// float additions is not fixed, so float sums are compared within the worst-case rounding bound.
// Where a function returns the old value, the multiset of returned values is checked too.
#include "check.cuh"

#include <algorithm>
#include <cmath>
#include <vector>

constexpr int kBlocks = 96, kThreads = 256, kN = kBlocks * kThreads;
constexpr int kBins = 37;
constexpr unsigned kIncLimit = 999, kDecLimit = 700, kDecStart = 123;

struct Counters {
    int add_i, sub_i, max_i, min_i;
    unsigned add_u, sub_u, max_u, min_u, and_u, or_u, xor_u, inc_u, dec_u;
    unsigned long long add_ull;
    float add_f, max_f;
    double add_d;
    int cas_count, exch;
};

__global__ void contend(const int* vi, const unsigned* vu, const float* vf, Counters* c, unsigned* inc_old,
                        unsigned* dec_old, int* exch_old, unsigned* hist) {
    __shared__ unsigned local_hist[kBins];
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) local_hist[b] = 0;
    __syncthreads();

    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int a = vi[i];
    const unsigned u = vu[i];
    const float f = vf[i];
    atomicAdd(&c->add_i, a);
    atomicSub(&c->sub_i, a);
    atomicMax(&c->max_i, a);
    atomicMin(&c->min_i, a);
    atomicAdd(&c->add_u, u);
    atomicSub(&c->sub_u, u);
    atomicMax(&c->max_u, u);
    atomicMin(&c->min_u, u);
    atomicAnd(&c->and_u, u | (1u << (i % 32)));  // every bit is cleared by some thread, or not
    atomicOr(&c->or_u, u & (1u << (i % 29)));
    atomicXor(&c->xor_u, u);
    atomicAdd(&c->add_ull, (unsigned long long)u << 20);
    atomicAdd(&c->add_f, f);
    atomicAdd(&c->add_d, (double)f);
    inc_old[i] = atomicInc(&c->inc_u, kIncLimit);
    dec_old[i] = atomicDec(&c->dec_u, kDecLimit);
    exch_old[i] = atomicExch(&c->exch, i);

    // Increment by compare-and-swap: retry until no other thread changed the value in between.
    int old = c->cas_count, seen;
    do {
        seen = old;
        old = atomicCAS(&c->cas_count, seen, seen + 1);
    } while (old != seen);

    // Float maximum by compare-and-swap on the bits.
    int* max_bits = reinterpret_cast<int*>(&c->max_f);
    int cur = *max_bits;
    while (__int_as_float(cur) < f) {
        const int prev = atomicCAS(max_bits, cur, __float_as_int(f));
        if (prev == cur) break;
        cur = prev;
    }

    atomicAdd(&local_hist[u % kBins], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) atomicAdd(&hist[b], local_hist[b]);
}

int main() {
    conformance::Lcg rng(2024);
    std::vector<int> vi(kN);
    std::vector<unsigned> vu(kN);
    std::vector<float> vf(kN);
    for (int i = 0; i < kN; ++i) {
        vi[i] = rng.range(-1000000, 1000000);
        vu[i] = rng.next();
        vf[i] = rng.uniform(0.0f, 1.0f);
    }

    Counters init{};
    init.sub_i = 12345;
    init.max_i = -2147483647 - 1;
    init.min_i = 2147483647;
    init.sub_u = 77;
    init.max_u = 0;
    init.min_u = 0xffffffffu;
    init.and_u = 0xffffffffu;
    init.or_u = 0;
    init.xor_u = 0x5a5a5a5au;
    init.inc_u = 0;
    init.dec_u = kDecStart;
    init.add_f = 0.0f;
    init.max_f = -1.0f;
    init.exch = -1;

    // Host results.
    Counters want = init;
    double sum_f = 0.0;
    for (int i = 0; i < kN; ++i) {
        want.add_i = int(unsigned(want.add_i) + unsigned(vi[i]));  // wraps as the GPU's does
        want.sub_i = int(unsigned(want.sub_i) - unsigned(vi[i]));
        want.max_i = std::max(want.max_i, vi[i]);
        want.min_i = std::min(want.min_i, vi[i]);
        want.add_u += vu[i];
        want.sub_u -= vu[i];
        want.max_u = std::max(want.max_u, vu[i]);
        want.min_u = std::min(want.min_u, vu[i]);
        want.and_u &= vu[i] | (1u << (i % 32));
        want.or_u |= vu[i] & (1u << (i % 29));
        want.xor_u ^= vu[i];
        want.add_ull += (unsigned long long)vu[i] << 20;
        want.max_f = std::max(want.max_f, vf[i]);
        sum_f += vf[i];
    }
    want.cas_count = kN;
    // atomicInc from 0 with limit L counts 0, 1, ..., L, 0, 1, ...: kN increments leave kN % (L + 1).
    want.inc_u = kN % (kIncLimit + 1);
    // atomicDec from S with limit L counts S, S-1, ..., 0, L, L-1, ..., 0, L, ...
    std::vector<unsigned> want_dec_old(kN);
    unsigned d = kDecStart;
    for (int i = 0; i < kN; ++i) {
        want_dec_old[i] = d;
        d = (d == 0 || d > kDecLimit) ? kDecLimit : d - 1;
    }
    want.dec_u = d;
    std::vector<unsigned> want_inc_old(kN);
    for (int i = 0; i < kN; ++i) want_inc_old[i] = unsigned(i) % (kIncLimit + 1);
    std::vector<unsigned> want_hist(kBins, 0);
    for (unsigned u : vu) ++want_hist[u % kBins];

    int *d_vi, *d_exch_old;
    unsigned *d_vu, *d_inc_old, *d_dec_old, *d_hist;
    float* d_vf;
    Counters* d_c;
    CUDA_OK(cudaMalloc(&d_vi, kN * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_vu, kN * sizeof(unsigned)));
    CUDA_OK(cudaMalloc(&d_vf, kN * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_inc_old, kN * sizeof(unsigned)));
    CUDA_OK(cudaMalloc(&d_dec_old, kN * sizeof(unsigned)));
    CUDA_OK(cudaMalloc(&d_exch_old, kN * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_hist, kBins * sizeof(unsigned)));
    CUDA_OK(cudaMalloc(&d_c, sizeof(Counters)));
    CUDA_OK(cudaMemcpy(d_vi, vi.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_vu, vu.data(), kN * sizeof(unsigned), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_vf, vf.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_c, &init, sizeof(Counters), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_inc_old, 0xFF, kN * sizeof(unsigned)));
    CUDA_OK(cudaMemset(d_dec_old, 0xFF, kN * sizeof(unsigned)));
    CUDA_OK(cudaMemset(d_exch_old, 0xFF, kN * sizeof(int)));
    CUDA_OK(cudaMemset(d_hist, 0, kBins * sizeof(unsigned)));
    contend<<<kBlocks, kThreads>>>(d_vi, d_vu, d_vf, d_c, d_inc_old, d_dec_old, d_exch_old, d_hist);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());

    Counters got;
    std::vector<unsigned> inc_old(kN), dec_old(kN), hist(kBins);
    std::vector<int> exch_old(kN);
    CUDA_OK(cudaMemcpy(&got, d_c, sizeof(Counters), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(inc_old.data(), d_inc_old, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(dec_old.data(), d_dec_old, kN * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(exch_old.data(), d_exch_old, kN * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hist.data(), d_hist, kBins * sizeof(unsigned), cudaMemcpyDeviceToHost));

    CHECK(got.add_i == want.add_i);
    CHECK(got.sub_i == want.sub_i);
    CHECK(got.max_i == want.max_i);
    CHECK(got.min_i == want.min_i);
    CHECK(got.add_u == want.add_u);
    CHECK(got.sub_u == want.sub_u);
    CHECK(got.max_u == want.max_u);
    CHECK(got.min_u == want.min_u);
    CHECK(got.and_u == want.and_u);
    CHECK(got.or_u == want.or_u);
    CHECK(got.xor_u == want.xor_u);
    CHECK(got.add_ull == want.add_ull);
    CHECK(got.cas_count == want.cas_count);
    CHECK(got.max_f == want.max_f);
    CHECK(got.inc_u == want.inc_u);
    CHECK(got.dec_u == want.dec_u);
    // Any order of kN float additions is within kN * eps * sum of the exact sum (all terms >= 0).
    CHECK_MSG(std::fabs(got.add_f - sum_f) <= kN * 6e-8 * sum_f, "float sum %.9g, exact %.9g", got.add_f, sum_f);
    CHECK_MSG(std::fabs(got.add_d - sum_f) <= 1e-12 * sum_f, "double sum %.17g, exact %.17g", got.add_d, sum_f);

    // The values atomicInc/atomicDec returned, in any order, are the host's sequence.
    std::sort(inc_old.begin(), inc_old.end());
    std::sort(want_inc_old.begin(), want_inc_old.end());
    CHECK(inc_old == want_inc_old);
    std::sort(dec_old.begin(), dec_old.end());
    std::sort(want_dec_old.begin(), want_dec_old.end());
    CHECK(dec_old == want_dec_old);
    // atomicExch: the initial value and every thread's index, each seen exactly once (as a
    // returned old value or as the final value).
    exch_old.push_back(got.exch);
    std::sort(exch_old.begin(), exch_old.end());
    std::vector<int> want_exch(kN + 1);
    for (int i = 0; i <= kN; ++i) want_exch[i] = i - 1;
    CHECK(exch_old == want_exch);
    CHECK(hist == want_hist);

    for (void* p : {(void*)d_vi, (void*)d_vu, (void*)d_vf, (void*)d_inc_old, (void*)d_dec_old, (void*)d_exch_old,
                    (void*)d_hist, (void*)d_c})
        CUDA_OK(cudaFree(p));
    return conformance::finish();
}
