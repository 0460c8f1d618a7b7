// Schedules expose races (simulator only: pd::sim::set_schedule). Two kernels that forget a
// __syncthreads give a wrong result under at least one schedule, while the correct kernels give
// bitwise identical results under the round-robin schedule and 24 random ones:
//  * read-after-write: each thread writes its shared slot and reads its neighbour's without a
//    barrier in between (wrong even under round-robin, where thread 0 runs to the end first);
//  * write-after-read: an in-place smoothing loop lacks the barrier between reading the
//    neighbour's slot and overwriting its own. Round-robin runs the threads in index order, so
//    every read happens before the neighbour's write and the result is right; only a random
//    order shows the race. The same seed gives the same result twice.
// The correct kernels include a float tree reduction, whose bits would change with the order.
#include "check.cuh"

#include <vector>

constexpr int kBlock = 128, kSteps = 4, kSeeds = 24;

__global__ void neighbour_sum(const float* in, float* out, int n, bool with_barrier) {
    __shared__ float s[kBlock];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    if (with_barrier) __syncthreads();
    if (i < n) out[i] = s[t] + 2.0f * s[(t + 1) % kBlock];
}

__global__ void smooth(const float* in, float* out, int n, bool with_barrier) {
    __shared__ float s[kBlock];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int step = 0; step < kSteps; ++step) {
        const float v = 0.5f * s[t] + 0.25f * s[t + 1 < kBlock ? t + 1 : t];
        if (with_barrier) __syncthreads();  // every read of this step before any write
        s[t] = v;
        __syncthreads();
    }
    if (i < n) out[i] = s[t];
}

__global__ void block_sum(const float* in, float* out, int n) {
    __shared__ float s[kBlock];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

const int n = 1000;  // 8 blocks, the last one partial
const int blocks = (n + kBlock - 1) / kBlock;
float *d_in, *d_out;
std::vector<float> in(n);

enum class Kernel { NeighbourSum, Smooth, BlockSum };

std::vector<float> run(Kernel k, bool with_barrier) {
    CUDA_OK(cudaMemset(d_out, 0xFF, n * sizeof(float)));
    switch (k) {
        case Kernel::NeighbourSum:
            neighbour_sum<<<blocks, kBlock>>>(d_in, d_out, n, with_barrier);
            break;
        case Kernel::Smooth:
            smooth<<<blocks, kBlock>>>(d_in, d_out, n, with_barrier);
            break;
        case Kernel::BlockSum:
            block_sum<<<blocks, kBlock>>>(d_in, d_out, n);
            break;
    }
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> out(k == Kernel::BlockSum ? blocks : n);
    CUDA_OK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int main() {
    conformance::Lcg rng(12);
    for (float& x : in) x = rng.uniform(-1.0f, 1.0f);
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(float)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    // Host results of the correct kernels.
    std::vector<float> want_neighbour(n), want_smooth(n), want_sum(blocks);
    for (int b = 0; b < blocks; ++b) {
        float s[kBlock];
        for (int t = 0; t < kBlock; ++t) s[t] = b * kBlock + t < n ? in[b * kBlock + t] : 0.0f;
        for (int t = 0; t < kBlock && b * kBlock + t < n; ++t)
            want_neighbour[b * kBlock + t] = s[t] + 2.0f * s[(t + 1) % kBlock];
        float r[kBlock];
        std::memcpy(r, s, sizeof r);
        for (int step = 0; step < kSteps; ++step) {
            float next[kBlock];
            for (int t = 0; t < kBlock; ++t) next[t] = 0.5f * r[t] + 0.25f * r[t + 1 < kBlock ? t + 1 : t];
            std::memcpy(r, next, sizeof r);
        }
        for (int t = 0; t < kBlock && b * kBlock + t < n; ++t) want_smooth[b * kBlock + t] = r[t];
        for (int stride = kBlock / 2; stride > 0; stride /= 2)
            for (int t = 0; t < stride; ++t) s[t] += s[t + stride];
        want_sum[b] = s[0];
    }

    pd::sim::set_schedule(false, 0);  // round-robin
    CHECK(same_bits(run(Kernel::NeighbourSum, true), want_neighbour));
    CHECK(same_bits(run(Kernel::Smooth, true), want_smooth));
    CHECK(same_bits(run(Kernel::BlockSum, true), want_sum));
    const bool raw_wrong_round_robin = !same_bits(run(Kernel::NeighbourSum, false), want_neighbour);
    CHECK(raw_wrong_round_robin);
    CHECK(same_bits(run(Kernel::Smooth, false), want_smooth));  // the deterministic order hides this race

    int raw_wrong = raw_wrong_round_robin, war_wrong = 0, correct_differs = 0;
    for (int seed = 1; seed <= kSeeds; ++seed) {
        pd::sim::set_schedule(true, std::uint64_t(seed) * 7919);
        correct_differs += !same_bits(run(Kernel::NeighbourSum, true), want_neighbour);
        correct_differs += !same_bits(run(Kernel::Smooth, true), want_smooth);
        correct_differs += !same_bits(run(Kernel::BlockSum, true), want_sum);
        raw_wrong += !same_bits(run(Kernel::NeighbourSum, false), want_neighbour);
        const std::vector<float> first = run(Kernel::Smooth, false);
        war_wrong += !same_bits(first, want_smooth);
        CHECK_MSG(same_bits(run(Kernel::Smooth, false), first), "seed %d: the same seed gave another result",
                  seed * 7919);
    }
    CHECK_MSG(correct_differs == 0, "%d runs of the correct kernels differed from the host result", correct_differs);
    CHECK_MSG(raw_wrong > 0, "the read-after-write race never showed");
    CHECK_MSG(war_wrong > 0, "the write-after-read race never showed in %d random schedules", kSeeds);
    std::printf("races shown: read-after-write in %d of %d schedules, write-after-read in %d of %d\n", raw_wrong,
                kSeeds + 1, war_wrong, kSeeds + 1);

    pd::sim::set_schedule(false, 0);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    return conformance::finish();
}
