/// @file sampling.cu
/// @brief Chapter 09: the next token drawn from a row of logits with temperature, top-k and
/// top-p, one block per row (sampling.hpp). Greedy decoding is layers.cu's argmax.
#include "layers/layers.hpp"
#include "layers/sampling.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"
#include "pd/philox.hpp"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pd::kernels::layers {

namespace {

/// Threads per block: eight warps.
constexpr int kThreads = 256;
/// Warps per block, for block_reduce().
constexpr int kWarps = kThreads / kWarpSize;

/// The bits of a non-negative float, whose order as integers is the order of the values.
__device__ __forceinline__ unsigned bits_of(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
__device__ __forceinline__ float float_of(unsigned u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/// What the tokens whose weight is >= @p at hold together: their number (@p mass false) or their
/// weight (true). Every thread gets the block's total.
__device__ float kept(const float* w, int V, float at, bool mass, float* red) {
    float s = 0.f;
    for (int j = threadIdx.x; j < V; j += kThreads)
        if (w[j] >= at) s += mass ? w[j] : 1.f;
    return block_reduce<kWarps>(s, red, SumOp{}, 0.f);
}

// [sampling_threshold]
/// The largest threshold t >= @p from for which the tokens of weight >= t still hold @p need
/// (a count, or a mass): the k-th largest weight for top-k, the nucleus's edge for top-p. A
/// bisection on the float's bits: kept() falls as t rises, kept(from) >= need, and no token
/// reaches +inf, so 31 halvings of [bits(from), bits(+inf)] end on the threshold exactly,
/// with no sort of the vocabulary. Every thread computes the same bounds (the block's sums).
__device__ float threshold(const float* w, int V, float from, float need, bool mass, float* red) {
    unsigned lo = bits_of(from), hi = 0x7F800000u;  // kept(lo) >= need > kept(hi)
    while (hi - lo > 1) {
        const unsigned mid = lo + (hi - lo) / 2;
        if (kept(w, V, float_of(mid), mass, red) >= need)
            lo = mid;
        else
            hi = mid;
    }
    return float_of(lo);
}
// [sampling_threshold]

// [sample_kernel]
/// Block r samples row r: w = exp((logits - max) / temperature) into probs (the unnormalized
/// softmax), the top-k and top-p thresholds on w, then the draw. The draw walks the kept weights
/// in vocabulary order: thread t sums its contiguous chunk, thread 0 turns the chunks' sums into
/// running starts, and the one thread whose interval [start, start + sum) holds u x total finds
/// the token inside its chunk. Last, probs becomes the kept weights over their total.
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, float* __restrict__ probs, int* __restrict__ tokens,
                  const int* __restrict__ streams, const int* __restrict__ positions, int V, float temperature,
                  int top_k, float top_p, unsigned long long seed) {
    __shared__ float red[kWarps];
    __shared__ float start[kThreads + 1];  // running starts of the chunks; start[kThreads] = the total
    __shared__ int last_chunk;             // the last chunk holding any weight
    const std::size_t r = blockIdx.x;
    const float* x = logits + r * V;
    float* w = probs + r * V;
    const int t = threadIdx.x;

    float m = -INFINITY;
    for (int j = t; j < V; j += kThreads) m = fmaxf(m, x[j]);
    m = block_reduce<kWarps>(m, red, MaxOp{}, -INFINITY);
    for (int j = t; j < V; j += kThreads) w[j] = expf((x[j] - m) / temperature);  // the largest is 1
    __syncthreads();  // the thresholds' sums and the chunks read what other threads wrote

    float cut = 0.f;  // the kept tokens: w >= cut
    if (top_k > 0 && top_k < V) cut = threshold(w, V, cut, float(top_k), false, red);
    if (top_p < 1.f) cut = threshold(w, V, cut, top_p * kept(w, V, cut, true, red), true, red);

    const int chunk = (V + kThreads - 1) / kThreads, begin = min(V, t * chunk), end = min(V, begin + chunk);
    float sum = 0.f;
    for (int j = begin; j < end; ++j)
        if (w[j] >= cut) sum += w[j];
    start[t + 1] = sum;
    __syncthreads();
    if (t == 0) {  // a serial scan of 256 sums: the intervals tile [0, total) with the same roundings
        start[0] = 0.f;
        last_chunk = 0;
        for (int i = 1; i <= kThreads; ++i) {
            if (start[i] > 0.f) last_chunk = i - 1;
            start[i] += start[i - 1];
        }
    }
    __syncthreads();
    const float total = start[kThreads];
    const float target = philox_uniform(seed, std::uint64_t(streams[r]), std::uint64_t(positions[r])) * total;
    // target < total; if its rounding reaches the total, the last chunk with weight takes it
    if ((start[t] <= target && target < start[t + 1]) || (target >= total && t == last_chunk)) {
        float acc = start[t];
        int pick = -1;
        for (int j = begin; j < end && pick < 0; ++j) {
            if (w[j] < cut) continue;
            acc += w[j];
            if (target < acc || j == end - 1) pick = j;
        }
        for (int j = end - 1; pick < 0 && j >= begin; --j)  // the rounding of acc fell short: the last kept
            if (w[j] >= cut) pick = j;
        tokens[r] = pick;
    }
    __syncthreads();  // every thread has read w: normalize it
    for (int j = t; j < V; j += kThreads) w[j] = w[j] >= cut ? w[j] / total : 0.f;
}
// [sample_kernel]

/// probs[r][:] = the one-hot row of tokens[r]: what greedy decoding draws from.
__global__ void one_hot_kernel(const int* __restrict__ tokens, float* __restrict__ probs, int V) {
    const std::size_t r = blockIdx.x;
    for (int j = threadIdx.x; j < V; j += blockDim.x) probs[r * V + j] = j == tokens[r] ? 1.f : 0.f;
}

}  // namespace

void check_sampling(const SamplingParams& p, int V) {
    const auto reject = [](const std::string& field, const std::string& value, const std::string& rule) {
        throw std::invalid_argument("SamplingParams." + field + " = " + value + " " + rule);
    };
    if (!(p.temperature >= 0.f && p.temperature <= 100.f))
        reject("temperature", std::to_string(p.temperature), "must be in [0, 100] (0: greedy)");
    if (p.top_k < 0 || p.top_k > V)
        reject("top_k", std::to_string(p.top_k), "must be in 0 .. V = " + std::to_string(V) + " (0: all)");
    if (!(p.top_p > 0.f && p.top_p <= 1.f)) reject("top_p", std::to_string(p.top_p), "must be in (0, 1] (1: all)");
}

std::string describe(const SamplingParams& p) {
    if (p.greedy()) return "greedy";
    std::ostringstream s;
    s << "temperature " << p.temperature;
    if (p.top_k > 0) s << ", top-k " << p.top_k;
    if (p.top_p < 1.f) s << ", top-p " << p.top_p;
    return s.str();
}

void sample(const float* logits, float* probs, int* tokens, const int* streams, const int* positions, int R, int V,
            const SamplingParams& p, cudaStream_t stream) {
    if (R < 1) throw std::invalid_argument("sample: R (rows) must be >= 1, got " + std::to_string(R));
    if (V < 1) throw std::invalid_argument("sample: V (vocabulary) must be >= 1, got " + std::to_string(V));
    check_sampling(p, V);
    if (p.greedy()) {
        argmax(logits, tokens, R, V, stream);
        one_hot_kernel<<<unsigned(R), kThreads, 0, stream>>>(tokens, probs, V);
    } else {
        sample_kernel<<<unsigned(R), kThreads, 0, stream>>>(logits, probs, tokens, streams, positions, V, p.temperature,
                                                            p.top_k, p.top_p, p.seed);
    }
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::layers
