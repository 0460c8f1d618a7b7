// __activemask() returns the lanes that execute the call together with the caller: always the
// caller's own lane, never a lane that has exited or that is on the other side of a branch
// (the Programming Guide's "active threads" are those on the current instruction). Checked
// without divergence (the whole warp), after some lanes of each warp returned, and in both
// sides of an if/else. Only these guaranteed properties are checked: a GPU may also split a
// side of a branch, so the exact mask is not.
#include "check.cuh"

#include <vector>

// Lanes at or above keep[warp] return at once; the others record __activemask().
__global__ void after_exit(const int* keep, unsigned* out) {
    const int t = threadIdx.x, lane = t % 32;
    if (lane >= keep[t / 32]) return;
    out[t] = __activemask();
}

// Lanes below split[warp] record __activemask() in the `if`, the others in the `else`.
__global__ void in_branches(const int* split, unsigned* out) {
    const int t = threadIdx.x, lane = t % 32;
    unsigned m;
    if (lane < split[t / 32]) {
        m = __activemask();
    } else {
        m = __activemask();
    }
    out[t] = m;
}

__global__ void converged(unsigned* out) {
    out[threadIdx.x] = __activemask();
}

std::vector<unsigned> run(void (*launch)(const int*, unsigned*), const std::vector<int>& per_warp) {
    const int n = 32 * int(per_warp.size());
    int* d_arg;
    unsigned* d_out;
    CUDA_OK(cudaMalloc(&d_arg, per_warp.size() * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(unsigned)));
    CUDA_OK(cudaMemcpy(d_arg, per_warp.data(), per_warp.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, n * sizeof(unsigned)));
    launch(d_arg, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<unsigned> got(n);
    CUDA_OK(cudaMemcpy(got.data(), d_out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d_arg));
    CUDA_OK(cudaFree(d_out));
    return got;
}

unsigned below(int k) {
    return k >= 32 ? 0xffffffffu : (1u << k) - 1;
}

int main() {
    {
        unsigned* d_out;
        CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(unsigned)));
        CUDA_OK(cudaMemset(d_out, 0, 64 * sizeof(unsigned)));
        converged<<<1, 64>>>(d_out);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned> got(64);
        CUDA_OK(cudaMemcpy(got.data(), d_out, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int t = 0; t < 64; ++t) bad += !((got[t] >> (t % 32)) & 1u);
        CHECK_MSG(bad == 0, "converged: %d lanes missing from their own mask", bad);
        CUDA_OK(cudaFree(d_out));
    }

    conformance::Lcg rng(5);
    std::vector<int> keep = {32, 1, 17, 9, 31};
    for (int i = 0; i < 3; ++i) keep.push_back(rng.range(1, 31));
    const auto got_exit = run([](const int* k, unsigned* o) { after_exit<<<1, 256>>>(k, o); }, keep);
    int bad = 0;
    for (int t = 0; t < 256; ++t) {
        const int lane = t % 32, k = keep[t / 32];
        if (lane >= k)
            bad += got_exit[t] != 0xffffffffu;  // exited: never written
        else
            bad += !((got_exit[t] >> lane) & 1u) || (got_exit[t] & ~below(k)) != 0;
        if (lane < k && ((got_exit[t] & ~below(k)) != 0) && bad < 4)
            std::printf("  after_exit: thread %d (lanes kept %d) got %08x\n", t, k, got_exit[t]);
    }
    CHECK_MSG(bad == 0, "__activemask after exits: %d wrong", bad);

    std::vector<int> split = {16, 1, 31, 5};
    for (int i = 0; i < 4; ++i) split.push_back(rng.range(1, 31));
    const auto got_branch = run([](const int* s, unsigned* o) { in_branches<<<1, 256>>>(s, o); }, split);
    bad = 0;
    for (int t = 0; t < 256; ++t) {
        const int lane = t % 32, k = split[t / 32];
        const unsigned side = lane < k ? below(k) : ~below(k);
        const bool ok = ((got_branch[t] >> lane) & 1u) && (got_branch[t] & ~side) == 0;
        if (!ok && bad < 4) std::printf("  in_branches: thread %d (split %d) got %08x\n", t, k, got_branch[t]);
        bad += !ok;
    }
    CHECK_MSG(bad == 0, "__activemask in branches: %d wrong", bad);
    return conformance::finish();
}
