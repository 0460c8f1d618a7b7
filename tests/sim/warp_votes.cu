// Warp votes and synchronization against host-computed masks: __ballot_sync, __any_sync and
// __all_sync over whole warps, partial warps (blocks of 40 and 8x2x3 threads, whose last warp's
// mask names only the lanes that exist) and a partial mask (every third lane); __match_any_sync
// on int, unsigned long long and double keys; __syncwarp with partial masks (two half-warps,
// each with its own mask, exchanging values through shared memory) and, as allowed since Volta,
// the lanes of one mask meeting at two different __syncwarp calls in the two sides of a branch.
// (__activemask is checked in warp_activemask.cu.)
#include "check.cuh"

#include <algorithm>
#include <vector>

// The mask of the lanes that exist in thread t's warp (the last warp of a block may be partial).
__device__ unsigned warp_mask(int t, int threads) {
    const int lanes = threads - t / 32 * 32;
    return lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1;
}

__device__ int linear_thread() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

// Per thread: ballot, any, all over its warp, then the same over every third lane only.
__global__ void votes(const int* pred, unsigned* ballot, int* any, int* all, unsigned* ballot3, int* any3, int* all3) {
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int t = linear_thread(), g = blockIdx.x * threads + t, lane = t % 32;
    const unsigned mask = warp_mask(t, threads);
    const int p = pred[g];
    ballot[g] = __ballot_sync(mask, p);
    any[g] = __any_sync(mask, p);
    all[g] = __all_sync(mask, p);
    if (lane % 3 == 0) {
        const unsigned thirds = 0x49249249u & mask;  // lanes 0, 3, 6, ..., 30 that exist
        ballot3[g] = __ballot_sync(thirds, p);
        any3[g] = __any_sync(thirds, p);
        all3[g] = __all_sync(thirds, p);
    }
}

// Masks of the lanes holding the same key as this lane.
template <typename K>
__global__ void match(const K* keys, unsigned* out) {
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int t = linear_thread(), g = blockIdx.x * threads + t;
    out[g] = __match_any_sync(warp_mask(t, threads), keys[g]);
}

// Two half-warps, each synchronizing with its own mask: write, sync, read a partner's slot,
// sync, overwrite, sync, read another partner's new value.
__global__ void half_warps(const int* in, int* first, int* second) {
    __shared__ int s[128];
    const int t = threadIdx.x, lane = t % 32;
    const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    s[t] = in[t];
    __syncwarp(half);
    const int a = s[t ^ 5];  // a partner in the same half (5 < 16)
    __syncwarp(half);        // every read of this half done before its slots change
    s[t] = a * 3 + lane;
    __syncwarp(half);
    first[t] = a;
    second[t] = s[t ^ 9];
}

// Even and odd lanes reach two different __syncwarp() calls; since Volta both are one barrier
// of the full mask, so each lane sees its partner's write.
__global__ void branch_sync(const int* in, int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    if (t % 2 == 0) {
        s[t] = in[t] + 1;
        __syncwarp();
        out[t] = s[t ^ 1];
    } else {
        s[t] = in[t] * 2;
        __syncwarp();
        out[t] = s[t ^ 1];
    }
}

const auto same_u = [](unsigned a, unsigned b) { return a == b; };
const auto same_truth = [](int a, int b) { return (a != 0) == (b != 0); };

template <typename T>
T* to_device(const std::vector<T>& v) {
    T* d;
    CUDA_OK(cudaMalloc(&d, v.size() * sizeof(T)));
    CUDA_OK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
T* poisoned(std::size_t n) {
    T* d;
    CUDA_OK(cudaMalloc(&d, n * sizeof(T)));
    CUDA_OK(cudaMemset(d, 0xFF, n * sizeof(T)));
    return d;
}
template <typename T>
std::vector<T> to_host(const T* d, std::size_t n) {
    std::vector<T> v(n);
    CUDA_OK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

void check_votes(dim3 block, int blocks, int percent_true) {
    const int threads = int(block.x * block.y * block.z), total = threads * blocks;
    conformance::Lcg rng(std::uint64_t(threads) * 101 + percent_true);
    std::vector<int> pred(total);
    for (int& p : pred) p = rng.range(0, 99) < percent_true ? rng.range(1, 9) : 0;
    std::vector<unsigned> want_ballot(total), want_ballot3(total, 0xffffffffu);
    std::vector<int> want_any(total), want_all(total), want_any3(total, -1), want_all3(total, -1);
    for (int b = 0; b < blocks; ++b) {
        for (int t = 0; t < threads; ++t) {
            const int base = b * threads + t / 32 * 32, lanes = std::min(32, threads - t / 32 * 32);
            unsigned ballot = 0, ballot3 = 0;
            int lanes3 = 0;
            for (int l = 0; l < lanes; ++l) {
                ballot |= unsigned(pred[base + l] != 0) << l;
                if (l % 3 == 0) ballot3 |= unsigned(pred[base + l] != 0) << l, ++lanes3;
            }
            const int g = b * threads + t;
            want_ballot[g] = ballot;
            want_any[g] = ballot != 0;
            want_all[g] = __builtin_popcount(ballot) == lanes;
            if (t % 32 % 3 == 0) {
                want_ballot3[g] = ballot3;
                want_any3[g] = ballot3 != 0;
                want_all3[g] = __builtin_popcount(ballot3) == lanes3;
            }
        }
    }
    int* d_pred = to_device(pred);
    unsigned *d_ballot = poisoned<unsigned>(total), *d_ballot3 = poisoned<unsigned>(total);
    int *d_any = poisoned<int>(total), *d_all = poisoned<int>(total);
    int *d_any3 = poisoned<int>(total), *d_all3 = poisoned<int>(total);
    votes<<<blocks, block>>>(d_pred, d_ballot, d_any, d_all, d_ballot3, d_any3, d_all3);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const auto ballot = to_host(d_ballot, total), ballot3 = to_host(d_ballot3, total);
    const auto any = to_host(d_any, total), all = to_host(d_all, total);
    const auto any3 = to_host(d_any3, total), all3 = to_host(d_all3, total);
    char shape[96];
    std::snprintf(shape, sizeof shape, "block (%u,%u,%u) x %d, %d%% true", block.x, block.y, block.z, blocks,
                  percent_true);
    CHECK_MSG(conformance::mismatches("ballot", ballot.data(), want_ballot.data(), total, same_u) == 0, "%s", shape);
    CHECK_MSG(conformance::mismatches("any", any.data(), want_any.data(), total, same_truth) == 0, "%s", shape);
    CHECK_MSG(conformance::mismatches("all", all.data(), want_all.data(), total, same_truth) == 0, "%s", shape);
    CHECK_MSG(conformance::mismatches("ballot3", ballot3.data(), want_ballot3.data(), total, same_u) == 0, "%s", shape);
    // Lanes that did not vote by thirds must keep the poison (-1); the others compare as booleans.
    const auto vote_or_poison = [](int got, int want) { return want == -1 ? got == -1 : (got != 0) == (want != 0); };
    CHECK_MSG(conformance::mismatches("any3", any3.data(), want_any3.data(), total, vote_or_poison) == 0, "%s", shape);
    CHECK_MSG(conformance::mismatches("all3", all3.data(), want_all3.data(), total, vote_or_poison) == 0, "%s", shape);
    for (void* p :
         {(void*)d_pred, (void*)d_ballot, (void*)d_ballot3, (void*)d_any, (void*)d_all, (void*)d_any3, (void*)d_all3})
        CUDA_OK(cudaFree(p));
}

template <typename K>
void check_match(const char* type, dim3 block, int blocks, const std::vector<K>& choices) {
    const int threads = int(block.x * block.y * block.z), total = threads * blocks;
    conformance::Lcg rng(std::uint64_t(threads) * 7 + choices.size());
    std::vector<K> keys(total);
    for (K& k : keys) k = choices[rng.next() % choices.size()];
    std::vector<unsigned> want(total);
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) {
            const int base = b * threads + t / 32 * 32, lanes = std::min(32, threads - t / 32 * 32);
            unsigned m = 0;
            for (int l = 0; l < lanes; ++l) m |= unsigned(keys[base + l] == keys[b * threads + t]) << l;
            want[b * threads + t] = m;
        }
    K* d_keys = to_device(keys);
    unsigned* d_out = poisoned<unsigned>(total);
    match<K><<<blocks, block>>>(d_keys, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = to_host(d_out, total);
    CHECK_MSG(conformance::mismatches("match", got.data(), want.data(), total, same_u) == 0,
              "%s keys, block (%u,%u,%u) x %d", type, block.x, block.y, block.z, blocks);
    CUDA_OK(cudaFree(d_keys));
    CUDA_OK(cudaFree(d_out));
}

void check_syncwarp() {
    const int n = 128;
    conformance::Lcg rng(99);
    std::vector<int> in(n), want_first(n), want_second(n), want_branch(64);
    for (int& x : in) x = rng.range(-5000, 5000);
    for (int t = 0; t < n; ++t) want_first[t] = in[t ^ 5];
    for (int t = 0; t < n; ++t) want_second[t] = want_first[t ^ 9] * 3 + (t ^ 9) % 32;
    for (int t = 0; t < 64; ++t) want_branch[t] = (t ^ 1) % 2 == 0 ? in[t ^ 1] + 1 : in[t ^ 1] * 2;
    int* d_in = to_device(in);
    int *d_first = poisoned<int>(n), *d_second = poisoned<int>(n), *d_branch = poisoned<int>(64);
    half_warps<<<1, n>>>(d_in, d_first, d_second);
    CUDA_OK(cudaGetLastError());
    branch_sync<<<1, 64>>>(d_in, d_branch);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const auto same = [](int a, int b) { return a == b; };
    CHECK(conformance::mismatches("half_warps first", to_host(d_first, n).data(), want_first.data(), n, same) == 0);
    CHECK(conformance::mismatches("half_warps second", to_host(d_second, n).data(), want_second.data(), n, same) == 0);
    CHECK(conformance::mismatches("branch_sync", to_host(d_branch, 64).data(), want_branch.data(), 64, same) == 0);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_first));
    CUDA_OK(cudaFree(d_second));
    CUDA_OK(cudaFree(d_branch));
}

int main() {
    const dim3 blocks[] = {dim3(64), dim3(16, 4), dim3(40), dim3(8, 2, 3), dim3(1)};
    for (const dim3& b : blocks)
        for (int percent : {0, 10, 50, 90, 100}) check_votes(b, 5, percent);
    for (const dim3& b : blocks) {
        check_match<int>("int", b, 4, {0, 1, 2, 3});
        check_match<unsigned long long>("unsigned long long", b, 4, {1ull << 40, (1ull << 40) + 1, 7, 1ull << 63});
        check_match<double>("double", b, 4, {0.5, -0.5, 1e300, 3.0});
    }
    check_syncwarp();
    return conformance::finish();
}
