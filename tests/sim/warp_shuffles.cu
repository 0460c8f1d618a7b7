// Warp shuffles against a host model of the CUDA Programming Guide's rules, for every lane:
// __shfl_sync / _up / _down / _xor with width 32, 16, 8, 4, 2 and 1 on int, float, double,
// unsigned long long and __half (bitwise), with source lanes out of range (__shfl_sync takes
// srcLane modulo width; _up/_down keep their own value past the segment's edge; _xor may read
// earlier segments but gets its own value from later ones); warp sum reductions by _down and by
// _xor butterflies (whole warp and segments of 8) replayed on the host in the same order; a
// shuffle with a partial mask (even lanes only); and lane numbering in a 2D block.
#include "check.cuh"

#include <cuda_fp16.h>

#include <vector>

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 64;                // two warps
constexpr int kNumWidths = 6;               // widths 32 >> w: 32, 16, 8, 4, 2, 1
constexpr int kIdxMin = -33, kIdxMax = 64;  // srcLane values tried with __shfl_sync
constexpr int kIdxCount = kIdxMax - kIdxMin + 1;
constexpr int kParams = kIdxCount + 3 * 32;

// out[((w * kParams) + p) * kThreads + t]: thread t's result for width 32 >> w and parameter p.
template <typename T>
__global__ void shuffle_all(const T* in, T* out) {
    const int t = threadIdx.x;
    const T v = in[t];
    for (int w = 0; w < kNumWidths; ++w) {
        const int width = 32 >> w;
        T* o = out + w * kParams * kThreads + t;
        int p = 0;
        for (int src = kIdxMin; src <= kIdxMax; ++src, ++p) o[p * kThreads] = __shfl_sync(kFull, v, src, width);
        for (int d = 0; d < 32; ++d, ++p) o[p * kThreads] = __shfl_up_sync(kFull, v, d, width);
        for (int d = 0; d < 32; ++d, ++p) o[p * kThreads] = __shfl_down_sync(kFull, v, d, width);
        for (int m = 0; m < 32; ++m, ++p) o[p * kThreads] = __shfl_xor_sync(kFull, v, m, width);
    }
}

// Host model: the lane (0..31) whose value lane `lane` receives.
int model_idx(int lane, int src, int width) {
    const int seg = lane / width * width;
    return seg + ((src % width) + width) % width;
}
int model_up(int lane, int delta, int width) {
    const int seg = lane / width * width;
    return lane - delta >= seg ? lane - delta : lane;
}
int model_down(int lane, int delta, int width) {
    const int seg = lane / width * width;
    return lane + delta < seg + width ? lane + delta : lane;
}
int model_xor(int lane, int mask, int width) {
    const int seg = lane / width * width;
    const int src = lane ^ mask;
    return src < seg + width ? src : lane;  // earlier segments are readable, later ones are not
}

template <typename T>
void check_shuffle_all(const char* type, std::uint64_t seed) {
    conformance::Lcg rng(seed);
    std::vector<T> in(kThreads);
    for (T& x : in) {
        const std::uint64_t bits = rng.next64();
        std::memcpy(static_cast<void*>(&x), &bits, sizeof(T));
    }
    const std::size_t count = std::size_t(kNumWidths) * kParams * kThreads;
    std::vector<T> got(count), want(count);
    for (int w = 0; w < kNumWidths; ++w) {
        const int width = 32 >> w;
        for (int t = 0; t < kThreads; ++t) {
            const int warp_base = t / 32 * 32, lane = t % 32;
            T* o = want.data() + std::size_t(w) * kParams * kThreads + t;
            int p = 0;
            for (int src = kIdxMin; src <= kIdxMax; ++src, ++p)
                o[p * kThreads] = in[warp_base + model_idx(lane, src, width)];
            for (int d = 0; d < 32; ++d, ++p) o[p * kThreads] = in[warp_base + model_up(lane, d, width)];
            for (int d = 0; d < 32; ++d, ++p) o[p * kThreads] = in[warp_base + model_down(lane, d, width)];
            for (int m = 0; m < 32; ++m, ++p) o[p * kThreads] = in[warp_base + model_xor(lane, m, width)];
        }
    }
    T *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, kThreads * sizeof(T)));
    CUDA_OK(cudaMalloc(&d_out, count * sizeof(T)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), kThreads * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xA5, count * sizeof(T)));
    shuffle_all<T><<<1, kThreads>>>(d_in, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, count * sizeof(T), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int w = 0; w < kNumWidths; ++w) {
        for (int p = 0; p < kParams; ++p) {
            const std::size_t at = (std::size_t(w) * kParams + p) * kThreads;
            const int q = p - kIdxCount;
            const char* op = q < 0    ? "__shfl_sync"
                             : q < 32 ? "__shfl_up_sync"
                             : q < 64 ? "__shfl_down_sync"
                                      : "__shfl_xor_sync";
            const int param = q < 0 ? kIdxMin + p : q % 32;
            for (int t = 0; t < kThreads; ++t) {
                if (std::memcmp(&got[at + t], &want[at + t], sizeof(T)) == 0) continue;
                if (bad++ < 5)
                    std::printf("  %s %s(param %d, width %d): thread %d got a wrong value\n", type, op, param, 32 >> w,
                                t);
            }
        }
    }
    CHECK_MSG(bad == 0, "%s: %d wrong results (seed %llu)", type, bad, (unsigned long long)seed);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

// Warp sums: by _down (lane 0 gets the total, other lanes partial sums), by a whole-warp _xor
// butterfly (every lane gets the total) and by a width-8 butterfly (sums of 8-lane segments).
template <typename T>
__global__ void warp_sums(const T* in, T* down, T* butterfly, T* segments) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    T a = in[t], b = in[t], c = in[t];
    for (int offset = 16; offset > 0; offset /= 2) a += __shfl_down_sync(kFull, a, offset);
    for (int mask = 16; mask > 0; mask /= 2) b += __shfl_xor_sync(kFull, b, mask);
    for (int mask = 4; mask > 0; mask /= 2) c += __shfl_xor_sync(kFull, c, mask, 8);
    down[t] = a;
    butterfly[t] = b;
    segments[t] = c;
}

template <typename T>
void check_warp_sums(const char* type, int warps, std::uint64_t seed) {
    const int n = warps * 32;
    conformance::Lcg rng(seed);
    std::vector<T> in(n);
    for (T& x : in) x = T(rng.uniform(-100.0f, 100.0f));
    // Replay the same additions in the same order on the host.
    std::vector<T> down(in), butterfly(in), segments(in);
    for (int w = 0; w < warps; ++w) {
        T* a = down.data() + w * 32;
        T* b = butterfly.data() + w * 32;
        T* c = segments.data() + w * 32;
        for (int offset = 16; offset > 0; offset /= 2) {
            T next[32];
            for (int l = 0; l < 32; ++l) next[l] = a[l] + a[l + offset < 32 ? l + offset : l];
            std::memcpy(a, next, sizeof next);
        }
        for (int mask = 16; mask > 0; mask /= 2) {
            T next[32];
            for (int l = 0; l < 32; ++l) next[l] = b[l] + b[l ^ mask];
            std::memcpy(b, next, sizeof next);
        }
        for (int mask = 4; mask > 0; mask /= 2) {
            T next[32];
            for (int l = 0; l < 32; ++l) next[l] = c[l] + c[l ^ mask];
            std::memcpy(c, next, sizeof next);
        }
    }
    std::vector<T> got_down(n), got_butterfly(n), got_segments(n);
    T *d_in, *d_down, *d_butterfly, *d_segments;
    const std::size_t bytes = n * sizeof(T);
    CUDA_OK(cudaMalloc(&d_in, bytes));
    CUDA_OK(cudaMalloc(&d_down, bytes));
    CUDA_OK(cudaMalloc(&d_butterfly, bytes));
    CUDA_OK(cudaMalloc(&d_segments, bytes));
    CUDA_OK(cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_down, 0xFF, bytes));
    CUDA_OK(cudaMemset(d_butterfly, 0xFF, bytes));
    CUDA_OK(cudaMemset(d_segments, 0xFF, bytes));
    warp_sums<T><<<warps / 2, 64>>>(d_in, d_down, d_butterfly, d_segments);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got_down.data(), d_down, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_butterfly.data(), d_butterfly, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_segments.data(), d_segments, bytes, cudaMemcpyDeviceToHost));
    CHECK_MSG(conformance::bit_mismatches("down", got_down.data(), down.data(), n) == 0, "%s", type);
    CHECK_MSG(conformance::bit_mismatches("butterfly", got_butterfly.data(), butterfly.data(), n) == 0, "%s", type);
    CHECK_MSG(conformance::bit_mismatches("segments", got_segments.data(), segments.data(), n) == 0, "%s", type);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_down));
    CUDA_OK(cudaFree(d_butterfly));
    CUDA_OK(cudaFree(d_segments));
}

// Only the even lanes shuffle, with a mask naming exactly them; odd lanes keep their input.
__global__ void even_lanes(const int* in, int* out) {
    const int t = threadIdx.x, lane = t % 32;
    int v = in[t];
    if (lane % 2 == 0) {
        const unsigned even = 0x55555555u;
        v = __shfl_xor_sync(even, v, 2) * 1000 + __shfl_sync(even, v, (lane + 6) % 32);
    }
    out[t] = v;
}

// In an 8 x 8 block, lanes count along x first: shuffling down by 8 reads the row below.
__global__ void row_below(const int* in, int* out) {
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    out[t] = __shfl_down_sync(kFull, in[t], 8);
}

void check_small_kernels() {
    conformance::Lcg rng(4242);
    std::vector<int> in(64), got(64), want(64);
    for (int& x : in) x = rng.range(0, 999);
    int *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, 64 * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
    const auto same = [](int a, int b) { return a == b; };

    for (int t = 0; t < 64; ++t) {
        const int lane = t % 32, base = t - lane;
        want[t] = lane % 2 ? in[t] : in[base + (lane ^ 2)] * 1000 + in[base + (lane + 6) % 32];
    }
    CUDA_OK(cudaMemset(d_out, 0xFF, 64 * sizeof(int)));
    even_lanes<<<1, 64>>>(d_in, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(conformance::mismatches("even_lanes", got.data(), want.data(), 64, same) == 0);

    for (int t = 0; t < 64; ++t) want[t] = in[t % 32 + 8 < 32 ? t + 8 : t];
    CUDA_OK(cudaMemset(d_out, 0xFF, 64 * sizeof(int)));
    row_below<<<1, dim3(8, 8)>>>(d_in, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, 64 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(conformance::mismatches("row_below", got.data(), want.data(), 64, same) == 0);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

int main() {
    check_shuffle_all<int>("int", 1);
    check_shuffle_all<float>("float", 2);
    check_shuffle_all<double>("double", 3);
    check_shuffle_all<unsigned long long>("unsigned long long", 4);
    check_shuffle_all<__half>("__half", 5);
    check_warp_sums<int>("int", 8, 11);
    check_warp_sums<float>("float", 8, 12);
    check_warp_sums<double>("double", 8, 13);
    check_small_kernels();
    return conformance::finish();
}
