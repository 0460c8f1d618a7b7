// Shared memory: a static 1D __shared__ array in a block-wide tree reduction (__syncthreads between
// the levels), a static 2D __shared__ tile in a transpose over a 2D grid, and dynamic
// `extern __shared__` memory sized by the launch, up to exactly the default 48 KiB and, after
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), above it. Sizes are ragged
// (1, 31, 33, 1000, 4097, ...) so last blocks are partial; outputs are poisoned first.
#include "check.cuh"

#include <algorithm>
#include <vector>

constexpr int kReduceBlock = 256;
constexpr int kTile = 32;

// Sums each block's slice of `in` (long long: exact). Threads past the end load 0 but still
// reach every barrier.
__global__ void block_sum(const int* in, long long* out, int n) {
    __shared__ long long partial[kReduceBlock];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// out (cols x rows) = transpose of in (rows x cols), through a padded 2D shared tile.
// Launched with blocks of kTile x 8 threads: each thread moves kTile / 8 elements.
__global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[kTile][kTile + 1];
    const int x = blockIdx.x * kTile + threadIdx.x;  // column of in
    for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
        const int y = blockIdx.y * kTile + dy;
        if (x < cols && y < rows) tile[dy][threadIdx.x] = in[y * cols + x];
    }
    __syncthreads();
    const int ox = blockIdx.y * kTile + threadIdx.x;  // column of out = row of in
    for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
        const int oy = blockIdx.x * kTile + dy;  // row of out = column of in
        if (ox < rows && oy < cols) out[oy * rows + ox] = tile[threadIdx.x][dy];
    }
}

// Each block stages `chunk` elements (the whole dynamic allocation) and writes, for each of
// its `valid` elements j, s[j] * 3 + s[valid - 1 - j]: every slot of the allocation is used.
__global__ void mirror_sum(const int* in, int* out, int n) {
    extern __shared__ int staged[];
    const int chunk = blockDim.x * 16;  // the launch gives 16 ints per thread
    const long long base = (long long)blockIdx.x * chunk;
    const int valid = n - base < chunk ? int(n - base) : chunk;
    for (int j = threadIdx.x; j < chunk; j += blockDim.x) staged[j] = base + j < n ? in[base + j] : -1;
    __syncthreads();
    for (int j = threadIdx.x; j < valid; j += blockDim.x) out[base + j] = staged[j] * 3 + staged[valid - 1 - j];
}

std::vector<int> random_ints(int n, std::uint64_t seed, int lo, int hi) {
    conformance::Lcg rng(seed);
    std::vector<int> v(n);
    for (int& x : v) x = rng.range(lo, hi);
    return v;
}

void check_block_sum(int n) {
    const std::vector<int> in = random_ints(n, 1000 + n, -1000000, 1000000);
    const int blocks = (n + kReduceBlock - 1) / kReduceBlock;
    std::vector<long long> want(blocks, 0), got(blocks);
    for (int i = 0; i < n; ++i) want[std::size_t(i / kReduceBlock)] += in[std::size_t(i)];
    int* d_in;
    long long* d_out;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, blocks * sizeof(long long)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, blocks * sizeof(long long)));
    block_sum<<<blocks, kReduceBlock>>>(d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    const int bad = conformance::mismatches("block_sum", got.data(), want.data(), want.size(),
                                            [](long long a, long long b) { return a == b; });
    CHECK_MSG(bad == 0, "block_sum n=%d seed=%d", n, 1000 + n);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

void check_transpose(int rows, int cols) {
    conformance::Lcg rng(std::uint64_t(rows) * 7919 + cols);
    std::vector<float> in(std::size_t(rows) * cols), got(in.size()), want(in.size());
    for (float& x : in) x = rng.uniform(-1.0f, 1.0f);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) want[std::size_t(c) * rows + r] = in[std::size_t(r) * cols + c];
    float *d_in, *d_out;
    const std::size_t bytes = in.size() * sizeof(float);
    CUDA_OK(cudaMalloc(&d_in, bytes));
    CUDA_OK(cudaMalloc(&d_out, bytes));
    CUDA_OK(cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, bytes));  // NaN: an unwritten element cannot compare equal
    const dim3 block(kTile, 8);
    const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
    transpose<<<grid, block>>>(d_in, d_out, rows, cols);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, bytes, cudaMemcpyDeviceToHost));
    const int bad = conformance::bit_mismatches("transpose", got.data(), want.data(), want.size());
    CHECK_MSG(bad == 0, "transpose rows=%d cols=%d", rows, cols);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

void check_mirror_sum(int n, int threads) {
    const int chunk = threads * 16;
    const std::size_t shared_bytes = std::size_t(chunk) * sizeof(int);
    const std::vector<int> in = random_ints(n, 77 + n, -100000, 100000);
    std::vector<int> want(n), got(n);
    for (int base = 0; base < n; base += chunk) {
        const int valid = std::min(chunk, n - base);
        for (int j = 0; j < valid; ++j)
            want[std::size_t(base + j)] = in[std::size_t(base + j)] * 3 + in[std::size_t(base + valid - 1 - j)];
    }
    int *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xFF, n * sizeof(int)));
    mirror_sum<<<(n + chunk - 1) / chunk, threads, shared_bytes>>>(d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    const int bad = conformance::mismatches("mirror_sum", got.data(), want.data(), want.size(),
                                            [](int a, int b) { return a == b; });
    CHECK_MSG(bad == 0, "mirror_sum n=%d threads=%d dynamic shared bytes=%zu", n, threads, shared_bytes);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

int main() {
    for (int n : {1, 31, 33, 256, 1000, 4097}) check_block_sum(n);
    const int shapes[][2] = {{1, 1}, {1, 31}, {33, 1}, {31, 33}, {33, 31}, {97, 129}, {200, 65}};
    for (const auto& s : shapes) check_transpose(s[0], s[1]);

    // Dynamic shared memory within the default limit: 16 ints per thread.
    for (int n : {1, 31, 33, 1000, 4097}) check_mirror_sum(n, 32);  // 2 KiB
    check_mirror_sum(4097, 768);                                    // exactly 48 KiB, no attribute needed

    // Above the default limit, after opting in (every GPU since Volta allows at least 64 KiB).
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK(prop.sharedMemPerBlock == 48 * 1024);
    CHECK(prop.sharedMemPerBlockOptin >= 64 * 1024);
    const int big_threads = 1024;  // 64 KiB
    // The C form (const void*): the simulator lacks the C++ template overload (builtins.cu checks it).
    CUDA_OK(cudaFuncSetAttribute(reinterpret_cast<const void*>(mirror_sum), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 big_threads * 16 * 4));
    for (int n : {1, 16383, 16385, 40000}) check_mirror_sum(n, big_threads);
    return conformance::finish();
}
