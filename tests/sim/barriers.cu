// Block-wide barriers: __syncthreads_count/_and/_or return the same block-wide reduction of the
// predicate to every thread (checked against host counts in 1D, 2D and 3D blocks, including
// blocks that are not whole warps); barriers in loops: a Hillis-Steele inclusive scan (two
// barriers per step) over ragged sizes, and a loop whose trip count is decided by
// __syncthreads_or (propagate the block maximum until nothing changes).
#include "check.cuh"

#include <algorithm>
#include <cstdlib>
#include <vector>

// Every thread writes the three reductions of its predicate (pred[] holds 0/1 per thread).
__global__ void vote_block(const int* pred, int* count, int* all, int* any) {
    const int t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int g = blockIdx.x * threads + t;
    const int p = pred[g];
    count[g] = __syncthreads_count(p);
    all[g] = __syncthreads_and(p);
    any[g] = __syncthreads_or(p);
}

// Inclusive prefix sums of each block's slice (Hillis-Steele, in place in shared memory).
__global__ void block_scan(const int* in, int* out, int n) {
    __shared__ int s[512];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        const int add = t >= offset ? s[t - offset] : 0;
        __syncthreads();  // every read of this step before any write
        s[t] += add;
        __syncthreads();  // every write of this step before the next step's reads
    }
    if (i < n) out[i] = s[t];
}

__device__ int larger(int a, int b) {
    return a > b ? a : b;
}

// Each thread repeatedly takes the maximum of itself and its two neighbours until no value
// changes anywhere in the block; then every slot holds the block maximum. rounds[] records
// how many rounds each block took (the same for all its threads).
__global__ void spread_max(const int* in, int* out, int* rounds, int n) {
    __shared__ int s[256];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : -2147483647;
    __syncthreads();
    int round = 0;
    bool changed = true;
    while (__syncthreads_or(changed)) {
        const int left = t > 0 ? s[t - 1] : s[t];
        const int right = t + 1 < blockDim.x ? s[t + 1] : s[t];
        const int m = larger(s[t], larger(left, right));
        __syncthreads();
        changed = m != s[t];
        s[t] = m;
        ++round;
    }
    if (i < n) out[i] = s[t];
    if (t == 0) rounds[blockIdx.x] = round;
}

void check_votes(dim3 block, int blocks, int percent_true) {
    const int threads = int(block.x * block.y * block.z), total = threads * blocks;
    conformance::Lcg rng(std::uint64_t(threads) * 31 + percent_true);
    std::vector<int> pred(total);
    for (int& p : pred) p = rng.range(0, 99) < percent_true ? 1 + rng.range(0, 5) : 0;  // any non-zero is true
    std::vector<int> count(total), all(total), any(total);
    std::vector<int> want_count(total), want_all(total), want_any(total);
    for (int b = 0; b < blocks; ++b) {
        int c = 0;
        for (int t = 0; t < threads; ++t) c += pred[b * threads + t] != 0;
        for (int t = 0; t < threads; ++t) {
            want_count[b * threads + t] = c;
            want_all[b * threads + t] = c == threads;
            want_any[b * threads + t] = c > 0;
        }
    }
    int *d_pred, *d_count, *d_all, *d_any;
    const std::size_t bytes = total * sizeof(int);
    CUDA_OK(cudaMalloc(&d_pred, bytes));
    CUDA_OK(cudaMalloc(&d_count, bytes));
    CUDA_OK(cudaMalloc(&d_all, bytes));
    CUDA_OK(cudaMalloc(&d_any, bytes));
    CUDA_OK(cudaMemcpy(d_pred, pred.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_count, 0xFF, bytes));
    CUDA_OK(cudaMemset(d_all, 0xFF, bytes));
    CUDA_OK(cudaMemset(d_any, 0xFF, bytes));
    vote_block<<<blocks, block>>>(d_pred, d_count, d_all, d_any);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(count.data(), d_count, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(all.data(), d_all, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(any.data(), d_any, bytes, cudaMemcpyDeviceToHost));
    // _and/_or return non-zero for true: compare as booleans; _count exactly.
    const auto same = [](int a, int b) { return a == b; };
    const auto same_truth = [](int a, int b) { return (a != 0) == (b != 0); };
    CHECK_MSG(conformance::mismatches("count", count.data(), want_count.data(), total, same) == 0,
              "block (%u,%u,%u) x %d, %d%% true", block.x, block.y, block.z, blocks, percent_true);
    CHECK_MSG(conformance::mismatches("and", all.data(), want_all.data(), total, same_truth) == 0,
              "block (%u,%u,%u) x %d, %d%% true", block.x, block.y, block.z, blocks, percent_true);
    CHECK_MSG(conformance::mismatches("or", any.data(), want_any.data(), total, same_truth) == 0,
              "block (%u,%u,%u) x %d, %d%% true", block.x, block.y, block.z, blocks, percent_true);
    CUDA_OK(cudaFree(d_pred));
    CUDA_OK(cudaFree(d_count));
    CUDA_OK(cudaFree(d_all));
    CUDA_OK(cudaFree(d_any));
}

void check_scan(int n, int threads) {
    conformance::Lcg rng(std::uint64_t(n) * 13 + threads);
    std::vector<int> in(n), got(n), want(n);
    for (int& x : in) x = rng.range(-1000, 1000);
    for (int i = 0; i < n; ++i) want[i] = in[i] + (i % threads == 0 ? 0 : want[i - 1]);
    int *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, n * sizeof(int)));
    block_scan<<<(n + threads - 1) / threads, threads>>>(d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_MSG(conformance::mismatches("scan", got.data(), want.data(), n, [](int a, int b) { return a == b; }) == 0,
              "scan n=%d threads=%d", n, threads);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

void check_spread_max(int n, int threads) {
    conformance::Lcg rng(std::uint64_t(n) * 17 + threads);
    std::vector<int> in(n), got(n), want(n);
    for (int& x : in) x = rng.range(-1000000, 1000000);
    const int blocks = (n + threads - 1) / threads;
    std::vector<int> rounds(blocks), want_rounds(blocks);
    for (int b = 0; b < blocks; ++b) {
        const int lo = b * threads, hi = std::min(n, lo + threads);
        const int m = *std::max_element(in.begin() + lo, in.begin() + hi);
        for (int i = lo; i < hi; ++i) want[i] = m;
        // After r rounds slot t holds the maximum of the slots within distance r, so values change
        // in every round until the maximum has reached the slot farthest from every copy of it
        // (padding slots past n included), and one more round sees no change.
        int spread = 0;
        for (int t = 0; t < threads; ++t) {
            int nearest = threads;
            for (int k = lo; k < hi; ++k)
                if (in[k] == m) nearest = std::min(nearest, std::abs(t - (k - lo)));
            spread = std::max(spread, nearest);
        }
        want_rounds[b] = spread + 1;
    }
    int *d_in, *d_out, *d_rounds;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_rounds, blocks * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, n * sizeof(int)));
    CUDA_OK(cudaMemset(d_rounds, 0xFF, blocks * sizeof(int)));
    spread_max<<<blocks, threads>>>(d_in, d_out, d_rounds, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(rounds.data(), d_rounds, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    const auto same = [](int a, int b) { return a == b; };
    CHECK_MSG(conformance::mismatches("spread_max", got.data(), want.data(), n, same) == 0, "n=%d threads=%d", n,
              threads);
    CHECK_MSG(conformance::mismatches("rounds", rounds.data(), want_rounds.data(), blocks, same) == 0,
              "n=%d threads=%d", n, threads);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_rounds));
}

int main() {
    for (int percent : {0, 3, 50, 97, 100}) {
        check_votes(dim3(256), 7, percent);
        check_votes(dim3(100), 5, percent);      // the last warp has 4 threads
        check_votes(dim3(16, 4), 9, percent);    // 2D
        check_votes(dim3(8, 4, 3), 6, percent);  // 3D, 96 threads
        check_votes(dim3(1), 3, percent);        // one thread
    }
    check_votes(dim3(1024), 2, 50);
    for (int n : {1, 31, 33, 512, 1000, 4097}) check_scan(n, 512);
    for (int n : {1, 97, 1000}) check_scan(n, 64);
    for (int n : {1, 31, 33, 1000}) check_spread_max(n, 256);
    check_spread_max(200, 32);
    return conformance::finish();
}
