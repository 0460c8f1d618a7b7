// pd_sim_bench: how fast the simulator runs, on this CPU. Prints (never asserts) two figures:
// barrier arrivals per second for one 256-thread block on one worker thread (the cost of a
// fiber switch plus the barrier's bookkeeping), and the time of a shared-memory tiled
// 256 x 256 x 256 GEMM kernel, whose result is checked first. These are CPU figures of the
// simulator, not GPU performance. `--quick` runs tiny sizes (used as a smoke test).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#define OK(call)                                                                        \
    do {                                                                                \
        const cudaError_t e = (call);                                                   \
        if (e != cudaSuccess) {                                                         \
            std::printf("pd_sim_bench: %s failed: %s\n", #call, cudaGetErrorString(e)); \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

__global__ void barrier_loop(int* out, int rounds) {
    int v = 0;
    for (int r = 0; r < rounds; ++r) {
        v += threadIdx.x;
        __syncthreads();
    }
    out[threadIdx.x] = v;
}

constexpr int kTile = 16;

__global__ void tiled_gemm(const float* a, const float* b, float* c, int n) {
    __shared__ float as[kTile][kTile];
    __shared__ float bs[kTile][kTile];
    const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < n; k0 += kTile) {
        as[threadIdx.y][threadIdx.x] = a[row * n + k0 + threadIdx.x];
        bs[threadIdx.y][threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < kTile; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    c[row * n + col] = acc;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const int threads = 256, rounds = quick ? 10 : 4000;
    int* d_out;
    OK(cudaMalloc(&d_out, threads * sizeof(int)));
    barrier_loop<<<1, threads>>>(d_out, 1);  // warm up: fiber stacks are allocated once per worker
    OK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    barrier_loop<<<1, threads>>>(d_out, rounds);
    OK(cudaGetLastError());
    OK(cudaDeviceSynchronize());
    const double barrier_s = seconds_since(t0);
    std::vector<int> out(threads);
    OK(cudaMemcpy(out.data(), d_out, threads * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int t = 0; t < threads; ++t) ok = ok && out[t] == t * rounds;

    const int n = quick ? 32 : 256;
    std::vector<float> a(n * n), b(n * n), c(n * n);
    unsigned s = 12345;
    for (auto* m : {&a, &b})
        for (float& v : *m) v = float((s = s * 1664525u + 1013904223u) >> 28) - 7.f;  // small integers: exact
    float *da, *db, *dc;
    OK(cudaMalloc(&da, n * n * sizeof(float)));
    OK(cudaMalloc(&db, n * n * sizeof(float)));
    OK(cudaMalloc(&dc, n * n * sizeof(float)));
    OK(cudaMemcpy(da, a.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    OK(cudaMemcpy(db, b.data(), n * n * sizeof(float), cudaMemcpyHostToDevice));
    t0 = std::chrono::steady_clock::now();
    tiled_gemm<<<dim3(n / kTile, n / kTile), dim3(kTile, kTile)>>>(da, db, dc, n);
    OK(cudaGetLastError());
    OK(cudaDeviceSynchronize());
    const double gemm_s = seconds_since(t0);
    OK(cudaMemcpy(c.data(), dc, n * n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n && ok; ++i)
        for (int j = 0; j < n; ++j) {
            double ref = 0;
            for (int k = 0; k < n; ++k) ref += double(a[i * n + k]) * b[k * n + j];
            if (c[i * n + j] != float(ref)) {
                std::printf("pd_sim_bench: GEMM mismatch at (%d,%d): %g vs %g\n", i, j, c[i * n + j], ref);
                ok = false;
                break;
            }
        }
    OK(cudaFree(d_out));
    OK(cudaFree(da));
    OK(cudaFree(db));
    OK(cudaFree(dc));
    int workers = 0;
    OK(cudaDeviceGetAttribute(&workers, cudaDevAttrMultiProcessorCount, 0));
    std::printf("simulator benchmark (CPU figures, not GPU performance; %d worker threads)\n", workers);
    std::printf("  barrier arrivals: %.2f million per second (one block of %d threads, %d barriers, %.3f s)\n",
                threads * double(rounds) / barrier_s / 1e6, threads, rounds, barrier_s);
    std::printf("  tiled GEMM %d x %d x %d (16x16 tiles, %d blocks): %.3f s, %.1f MFLOP/s\n", n, n, n,
                (n / kTile) * (n / kTile), gemm_s, 2.0 * n * n * n / gemm_s / 1e6);
    std::printf("  results %s\n", ok ? "checked: correct" : "WRONG");
    return ok ? 0 : 1;
}
