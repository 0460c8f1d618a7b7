// Kernel templates launched without their template arguments, which the launch deduces from
// its arguments as a call does: one type parameter (add_one, for float and int), two (In and
// Out of convert_scale), a non-type one deduced from a struct argument (Taps<N> of fir), and a
// non-type one given with the type deduced (block_sum<128>); explicit arguments still work
// (add_one<double>, fir<float, 3>); the arguments are converted to the parameter types as in a
// call (float* to const float*, int to size_t: describe_n reports the size and value of its
// size_t parameter, and a negative int arrives as the size_t it converts to); a kernel in a
// namespace; and the launch selects the very specialization cudaFuncSetAttribute was given
// (reverse_in_shared with 60 KiB of dynamic shared memory, above the default 48 KiB limit).
// Every result is checked exactly against the host.
#include "check.cuh"

#include <cstddef>
#include <vector>

template <typename T>
__global__ void add_one(T* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += T(1);
}

// out[i] = Out(in[i]) * scale: two type parameters, both deduced.
template <typename In, typename Out>
__global__ void convert_scale(const In* in, Out* out, Out scale, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = Out(in[i]) * scale;
}

// N filter taps, passed by value.
template <int N>
struct Taps {
    float w[N];
};

// y[i] = sum over t < N of w[t] * x[i + t] (x has n + N - 1 elements): N is deduced from taps.
template <typename T, int N>
__global__ void fir(const T* x, T* y, Taps<N> taps, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T acc = T(0);
    for (int t = 0; t < N; ++t) acc += T(taps.w[t]) * x[i + t];
    y[i] = acc;
}

// The sum of each block of BLOCK elements: BLOCK is given, T deduced.
template <int BLOCK, typename T>
__global__ void block_sum(const T* x, T* sums, int n) {
    __shared__ T s[BLOCK];
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : T(0);
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = s[0];
}

// The size and value of the size_t parameter that an int argument was converted to.
template <typename T>
__global__ void describe_n(T* out, std::size_t n) {
    out[0] = T(sizeof(n));
    out[1] = T(n % 1000003);
}

namespace kernels {
// x[i] = x[i] * a + b, in a namespace: launched as kernels::affine.
template <typename T>
__global__ void affine(T* x, T a, T b, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}
}  // namespace kernels

// Reverses n elements through dynamic shared memory (one block).
template <typename T>
__global__ void reverse_in_shared(const T* in, T* out, int n) {
    extern __shared__ unsigned char bytes[];
    T* s = reinterpret_cast<T*>(bytes);
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];
}

template <typename T>
T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_OK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
std::vector<T> to_host(const T* d, std::size_t n) {
    std::vector<T> h(n);
    CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

void finish_launch() {
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
}

int main() {
    conformance::Lcg rng(20240613);
    const int n = 1000;  // not a multiple of any block size used

    // One type parameter, deduced as float, then as int; explicit <double> still works.
    {
        std::vector<float> xf(n);
        std::vector<int> xi(n);
        std::vector<double> xd(n);
        for (int i = 0; i < n; ++i) xf[i] = rng.uniform(-8.0f, 8.0f), xi[i] = rng.range(-5000, 5000), xd[i] = 0.25 * i;
        float* df = to_device(xf);
        int* di = to_device(xi);
        double* dd = to_device(xd);
        add_one<<<(n + 127) / 128, 128>>>(df, n);
        finish_launch();
        add_one<<<(n + 63) / 64, 64>>>(di, n);
        finish_launch();
        add_one<double><<<(n + 255) / 256, 256>>>(dd, n);
        finish_launch();
        std::vector<float> wf(n);
        std::vector<int> wi(n);
        std::vector<double> wd(n);
        for (int i = 0; i < n; ++i) wf[i] = xf[i] + 1.0f, wi[i] = xi[i] + 1, wd[i] = xd[i] + 1.0;
        CHECK(conformance::bit_mismatches("add_one<float> (deduced)", to_host(df, n).data(), wf.data(), n) == 0);
        CHECK(conformance::bit_mismatches("add_one<int> (deduced)", to_host(di, n).data(), wi.data(), n) == 0);
        CHECK(conformance::bit_mismatches("add_one<double> (explicit)", to_host(dd, n).data(), wd.data(), n) == 0);
        CUDA_OK(cudaFree(df));
        CUDA_OK(cudaFree(di));
        CUDA_OK(cudaFree(dd));
    }

    // Two type parameters: In = int from an int* (converted to const int*), Out = double.
    {
        std::vector<int> in(n);
        for (int& v : in) v = rng.range(-100000, 100000);
        int* d_in = to_device(in);
        double* d_out = to_device(std::vector<double>(n, -1.0));
        const double scale = 0.375;
        convert_scale<<<(n + 127) / 128, 128>>>(d_in, d_out, scale, n);
        finish_launch();
        std::vector<double> want(n);
        for (int i = 0; i < n; ++i) want[i] = double(in[i]) * scale;
        CHECK(conformance::bit_mismatches("convert_scale<int, double>", to_host(d_out, n).data(), want.data(), n) == 0);
        CUDA_OK(cudaFree(d_in));
        CUDA_OK(cudaFree(d_out));
    }

    // A non-type parameter deduced from Taps<5>; then fir<float, 3> with explicit arguments.
    {
        std::vector<float> x(n + 4);
        for (float& v : x) v = float(rng.range(-64, 64)) / 8.0f;  // small dyadic values: exact sums
        float* d_x = to_device(x);
        float* d_y = to_device(std::vector<float>(n, -1.0f));
        Taps<5> taps5{{0.5f, -1.0f, 2.0f, 0.25f, -0.125f}};
        fir<<<(n + 127) / 128, 128>>>(d_x, d_y, taps5, n);
        finish_launch();
        std::vector<float> want(n);
        for (int i = 0; i < n; ++i) {
            float acc = 0.0f;
            for (int t = 0; t < 5; ++t) acc += taps5.w[t] * x[i + t];
            want[i] = acc;
        }
        CHECK(conformance::bit_mismatches("fir with N = 5 (deduced)", to_host(d_y, n).data(), want.data(), n) == 0);
        Taps<3> taps3{{1.5f, -0.5f, 4.0f}};
        fir<float, 3><<<(n + 127) / 128, 128>>>(d_x, d_y, taps3, n);
        finish_launch();
        for (int i = 0; i < n; ++i) want[i] = 1.5f * x[i] + -0.5f * x[i + 1] + 4.0f * x[i + 2];
        CHECK(conformance::bit_mismatches("fir<float, 3> (explicit)", to_host(d_y, n).data(), want.data(), n) == 0);
        CUDA_OK(cudaFree(d_x));
        CUDA_OK(cudaFree(d_y));
    }

    // BLOCK given, T deduced (and float* converted to const float*), on a stream.
    {
        constexpr int kBlock = 128;
        const int blocks = (n + kBlock - 1) / kBlock;
        std::vector<float> x(n);
        for (float& v : x) v = float(rng.range(-1000, 1000)) / 4.0f;
        float* d_x = to_device(x);
        float* d_sums = to_device(std::vector<float>(blocks, -1.0f));
        cudaStream_t stream;
        CUDA_OK(cudaStreamCreate(&stream));
        block_sum<kBlock><<<blocks, kBlock, 0, stream>>>(d_x, d_sums, n);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaStreamSynchronize(stream));
        std::vector<float> want(blocks, 0.0f);
        for (int i = 0; i < n; ++i) want[i / kBlock] += x[i];  // quarters of small integers: exact
        CHECK(conformance::bit_mismatches("block_sum<128> (T deduced)", to_host(d_sums, blocks).data(), want.data(),
                                          blocks) == 0);
        CUDA_OK(cudaStreamDestroy(stream));
        CUDA_OK(cudaFree(d_x));
        CUDA_OK(cudaFree(d_sums));
    }

    // int arguments for a size_t parameter: converted as in a call, a negative one wrapping.
    {
        long long* d_out = to_device(std::vector<long long>(2, -1));
        const int count = 123456;
        describe_n<<<1, 1>>>(d_out, count);
        finish_launch();
        std::vector<long long> got = to_host(d_out, 2);
        CHECK_MSG(got[0] == (long long)sizeof(std::size_t) && got[1] == count,
                  "describe_n(123456): size %lld, value %lld", got[0], got[1]);
        const int negative = -rng.range(1, 1000);
        describe_n<<<1, 1>>>(d_out, negative);
        finish_launch();
        got = to_host(d_out, 2);
        const long long wrapped = (long long)(std::size_t(negative) % 1000003);
        CHECK_MSG(got[1] == wrapped, "describe_n(%d): value %lld, want %lld", negative, got[1], wrapped);
        CUDA_OK(cudaFree(d_out));
    }

    // A kernel template in a namespace, named with its namespace.
    {
        std::vector<int> x(n);
        for (int& v : x) v = rng.range(-3000, 3000);
        int* d_x = to_device(x);
        kernels::affine<<<(n + 255) / 256, 256>>>(d_x, 3, -7, n);
        finish_launch();
        std::vector<int> want(n);
        for (int i = 0; i < n; ++i) want[i] = x[i] * 3 - 7;
        CHECK(conformance::bit_mismatches("kernels::affine<int>", to_host(d_x, n).data(), want.data(), n) == 0);
        CUDA_OK(cudaFree(d_x));
    }

    // The launch deduces reverse_in_shared<float>, the specialization that was allowed 60 KiB:
    // another one would be refused (cudaErrorInvalidValue) above the 48 KiB default.
    {
        constexpr int kBytes = 60 * 1024;
        const int m = kBytes / int(sizeof(float));
        std::vector<float> in(m);
        for (float& v : in) v = rng.uniform(-1.0f, 1.0f);
        float* d_in = to_device(in);
        float* d_out = to_device(std::vector<float>(m, -1.0f));
        CUDA_OK(cudaFuncSetAttribute(reverse_in_shared<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
        reverse_in_shared<<<1, 256, kBytes>>>(d_in, d_out, m);
        const cudaError_t err = cudaGetLastError();
        CHECK_MSG(err == cudaSuccess, "launch with 60 KiB of dynamic shared memory: %s", cudaGetErrorName(err));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> want(in.rbegin(), in.rend());
        CHECK(conformance::bit_mismatches("reverse_in_shared<float>", to_host(d_out, m).data(), want.data(), m) == 0);
        CUDA_OK(cudaFree(d_in));
        CUDA_OK(cudaFree(d_out));
    }

    return conformance::finish();
}
