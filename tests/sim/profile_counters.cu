// The profiler's counters against counts worked out by hand (docs/simulator.md, "The
// profiler"): one small kernel per rule, each launched in a profiling scope of its own, its
// counters compared with the numbers the rule gives. Built for the profiler (the simulator only:
// a GPU has Nsight Compute, and scripts/gpu-check compares the two).
//
// Global memory, one warp (32 lanes) unless said: consecutive floats, 1 request of 4 sectors;
// a stride of 2 floats, 8 sectors; strides of 8 and 32 floats, 32; float4 per lane, 16; offset
// by one float, 5; 16 active lanes, 2; a loop of 4 iterations, 4 requests; consecutive stores, 4.
// Shared memory, 4-byte words: stride 1, 1 wavefront; stride 2, 2; stride 32, 32; every lane
// the same word, 1 (a broadcast); a [32][33] tile read by column, 1, and [32][32], 32; 8-byte
// accesses, 2 (two phases of 16 lanes); 16-byte, 4 (four of 8). Warp operations: a shuffle
// reduction of a warp is 5 shuffles; a barrier counts once per warp; an atomic per request.
#include "check.cuh"

#include "pd/sim/profile.hpp"

#include <cuda_bf16.h>
#include <mma.h>

#include <string>
#include <vector>

using pd::sim::AccessCounts;
using pd::sim::KernelProfile;

#define CHECK_EQ(got, want)                                                                                        \
    conformance::check((got) == (want),                                                                            \
                       (std::string(#got " = ") + std::to_string(got) + ", want " + std::to_string(want)).c_str(), \
                       __FILE__, __LINE__)

__global__ void read_stride(const float* in, float* out, int stride, int offset, int active) {
    const int lane = threadIdx.x;
    if (lane >= active) return;
    out[lane] = in[offset + lane * stride];  // a load of in, then a store to out
}

__global__ void read_float4(const float4* in, float4* out) {
    out[threadIdx.x] = in[threadIdx.x];
}

__global__ void read_loop(const float* in, float* out, int iterations) {
    float sum = 0;
    for (int i = 0; i < iterations; ++i) sum += in[i * 32 + threadIdx.x];
    out[threadIdx.x] = sum;
}

__global__ void shared_stride(float* out, int stride) {
    __shared__ float s[32 * 32 + 1];
    for (int i = threadIdx.x; i < 32 * 32 + 1; i += 32) s[i] = float(i);  // 33 stores: 1 wavefront each
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x * stride) % (32 * 32)];
}

__global__ void shared_broadcast(float* out) {
    __shared__ float s[32];
    s[threadIdx.x] = float(threadIdx.x);
    __syncthreads();
    out[threadIdx.x] = s[7];
}

template <int kCols>
__global__ void shared_column(float* out) {
    __shared__ float tile[32][kCols];
    for (int r = 0; r < 32; ++r) tile[r][threadIdx.x] = float(r * 32 + threadIdx.x);  // rows: 1 wavefront each
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x][5];  // a column: lanes kCols words apart
}

// (a float4 built from four values is stored by the host compiler as four 4-byte stores, where
// nvcc issues one 16-byte store: the copy of a loaded float4 stays one access; docs/simulator.md)
__global__ void shared_wide(const float4* in16, double* out8, float4* out16) {
    __shared__ double d[32];
    __shared__ float4 q[32];
    d[threadIdx.x] = threadIdx.x;
    q[threadIdx.x] = in16[threadIdx.x];
    __syncthreads();
    out8[threadIdx.x] = d[threadIdx.x];
    out16[threadIdx.x] = q[threadIdx.x];
}

__global__ void warp_ops(const float* in, float* out, int* counter) {
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    __syncthreads();
    if (threadIdx.x % 32 == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = v;
    atomicAdd(counter, 1);
}

// WMMA: a 16 x 16 bf16 tile loaded from shared memory is read as ldmatrix.x4 reads it, 32 lanes of
// 16-byte row pieces in four phases of 8; rows ldm elements apart. ldm = 16 (32-byte rows): rows
// r and r + 4 of a phase share banks, 2 wavefronts a phase, 8 in all; ldm = 24 (48-byte rows,
// the usual padding): every phase conflict-free, 4.
template <int kLdm>
__global__ void wmma_tile(const __nv_bfloat16* in, float* out) {
    __shared__ __nv_bfloat16 tile[16 * kLdm];
    for (int i = threadIdx.x; i < 16 * kLdm; i += 32) tile[i] = in[i];
    __syncthreads();
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> a;
    nvcuda::wmma::load_matrix_sync(a, tile, kLdm);
    float sum = 0;
    for (int i = 0; i < a.num_elements; ++i) sum += __bfloat162float(a.x[i]);
    out[threadIdx.x] = sum;
}

// A planted uncoalesced GEMV (chapter 03's warp-per-row v2 with the roles of the lanes swapped:
// lane l takes row l and the warp walks along K together), whose load of W must be the worst
// site, flagged with the stride between the lanes.
constexpr int kPlantedLine = __LINE__ + 7;  // the line of the load of W below
__global__ void planted_gemv(const float* w, const float* x, float* y, int n, int k) {
    const int row = blockIdx.x * 32 + threadIdx.x;
    if (row >= n) return;
    float acc = 0.f;
    for (int c = 0; c < k; ++c) {
        const float xc = x[c];
        acc += w[std::size_t(row) * k + c] * xc;
    }
    y[row] = acc;
}

/// The one kernel a scope launched.
KernelProfile only(const std::vector<KernelProfile>& kernels) {
    conformance::check(kernels.size() == 1, "one kernel profiled", __FILE__, __LINE__);
    return kernels.empty() ? KernelProfile{} : kernels.front();
}

template <typename Launch>
KernelProfile profile(Launch&& launch) {
    pd::sim::profile_begin(50.0 * 1024 * 1024);
    launch();
    cudaDeviceSynchronize();
    return only(pd::sim::profile_end());
}

int main() {
    if (!pd::sim::profiler_available()) {
        std::printf("FAILED: this program was not compiled for the profiler\n");
        return 1;
    }
    float *in = nullptr, *out = nullptr;
    cudaMalloc(&in, 64 * 1024 * sizeof(float));
    cudaMalloc(&out, 64 * 1024 * sizeof(float));  // cudaMalloc aligns to 256 bytes
    cudaMemset(in, 0, 64 * 1024 * sizeof(float));

    // ---- global memory ----
    struct StrideCase {
        int stride, offset, active, sectors;
    };
    for (const StrideCase& c : {StrideCase{1, 0, 32, 4}, StrideCase{2, 0, 32, 8}, StrideCase{8, 0, 32, 32},
                                StrideCase{32, 0, 32, 32}, StrideCase{1, 1, 32, 5}, StrideCase{1, 0, 16, 2}}) {
        const KernelProfile k = profile([&] { read_stride<<<1, 32>>>(in, out, c.stride, c.offset, c.active); });
        std::printf("stride %d, offset %d, %d lanes: %llu requests, %llu sectors\n", c.stride, c.offset, c.active,
                    (unsigned long long)k.global_load.requests, (unsigned long long)k.global_load.sectors);
        CHECK_EQ(k.global_load.requests, 1ull);
        CHECK_EQ(k.global_load.sectors, (unsigned long long)c.sectors);
        CHECK_EQ(k.global_load.bytes, 4ull * c.active);
        CHECK_EQ(k.global_store.requests, 1ull);
        CHECK_EQ(k.global_store.sectors, c.active == 32 ? 4ull : 2ull);
    }
    {
        const KernelProfile k = profile(
            [&] { read_float4<<<1, 32>>>(reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out)); });
        CHECK_EQ(k.global_load.requests, 1ull);
        CHECK_EQ(k.global_load.sectors, 16ull);
        CHECK_EQ(k.global_load.lines, 4ull);
        CHECK_EQ(k.global_load.bytes, 512ull);
        CHECK_EQ(k.unique_sectors, 32ull);  // 16 read and 16 written
    }
    {
        const KernelProfile k = profile([&] { read_loop<<<2, 32>>>(in, out, 4); });
        CHECK_EQ(k.global_load.requests, 8ull);  // 4 per warp, 2 warps
        CHECK_EQ(k.global_load.sectors, 32ull);
        CHECK_EQ(k.unique_sectors, 16ull + 4ull);  // both blocks read the same 16 sectors; 4 written
        CHECK_EQ(k.requested_sectors, 32ull + 8ull);
        CHECK_EQ(k.global_store.requests, 2ull);
    }

    // ---- shared memory ----
    for (const auto& [stride, wavefronts] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{32, 32}}) {
        const KernelProfile k = profile([&] { shared_stride<<<1, 32>>>(out, stride); });
        std::printf("shared stride %d: %llu load requests, %llu wavefronts\n", stride,
                    (unsigned long long)k.shared_load.requests, (unsigned long long)k.shared_load.wavefronts);
        CHECK_EQ(k.shared_load.requests, 1ull);
        CHECK_EQ(k.shared_load.wavefronts, (unsigned long long)wavefronts);
        CHECK_EQ(k.shared_store.requests, 33ull);
        CHECK_EQ(k.shared_store.wavefronts, 33ull);
        CHECK_EQ(k.ops.barriers, 1ull);
    }
    {
        const KernelProfile k = profile([&] { shared_broadcast<<<1, 32>>>(out); });
        CHECK_EQ(k.shared_load.wavefronts, 1ull);
    }
    {
        const KernelProfile k = profile([&] { shared_column<33><<<1, 32>>>(out); });
        CHECK_EQ(k.shared_load.wavefronts, 1ull);  // padded: lanes 33 words apart, every bank once
        CHECK_EQ(k.shared_store.wavefronts, 32ull);
    }
    {
        const KernelProfile k = profile([&] { shared_column<32><<<1, 32>>>(out); });
        CHECK_EQ(k.shared_load.wavefronts, 32ull);  // a 32-way conflict: every lane in bank 5
    }
    {
        double* d8 = nullptr;
        float4* d16 = nullptr;
        cudaMalloc(&d8, 32 * sizeof(double));
        cudaMalloc(&d16, 32 * sizeof(float4));
        const KernelProfile k = profile([&] { shared_wide<<<1, 32>>>(reinterpret_cast<const float4*>(in), d8, d16); });
        CHECK_EQ(k.shared_load.requests, 2ull);
        CHECK_EQ(k.shared_load.wavefronts, 2ull + 4ull);
        CHECK_EQ(k.shared_store.wavefronts, 2ull + 4ull);
        cudaFree(d8);
        cudaFree(d16);
    }

    // ---- WMMA ----
    {
        const KernelProfile k16 =
            profile([&] { wmma_tile<16><<<1, 32>>>(reinterpret_cast<const __nv_bfloat16*>(in), out); });
        CHECK_EQ(k16.ops.wmma_load, 1ull);
        CHECK_EQ(k16.shared_load.requests, 1ull);  // the tile once, not once per lane
        CHECK_EQ(k16.shared_load.bytes, 512ull);
        CHECK_EQ(k16.shared_load.wavefronts, 8ull);
        const KernelProfile k24 =
            profile([&] { wmma_tile<24><<<1, 32>>>(reinterpret_cast<const __nv_bfloat16*>(in), out); });
        CHECK_EQ(k24.shared_load.wavefronts, 4ull);
    }

    // ---- a planted uncoalesced kernel, flagged by its site ----
    {
        const int n = 64, k = 48;
        const KernelProfile p = profile([&] { planted_gemv<<<n / 32, 32>>>(in, in + n * k, out, n, k); });
        CHECK_EQ(p.global_load.requests, 2ull * 2 * k);        // per warp, W and x each iteration
        CHECK_EQ(p.global_load.sectors, 2ull * k * (32 + 1));  // W: 32 rows, 32 sectors; x: 1 (a broadcast)
        const pd::sim::SiteProfile* worst = nullptr;
        for (const pd::sim::SiteProfile& s : p.sites)
            if (worst == nullptr || pd::sim::excess(s) > pd::sim::excess(*worst)) worst = &s;
        conformance::check(worst != nullptr, "the planted kernel has sites", __FILE__, __LINE__);
        if (worst != nullptr) {
            const std::string reading = pd::sim::reading(*worst);
            std::printf("planted: worst site %s:%d, %s\n", worst->file.c_str(), worst->line, reading.c_str());
            CHECK_EQ(worst->line, kPlantedLine);
            CHECK_EQ(pd::sim::excess(*worst), 2ull * k * (32 - 4));  // 32 sectors where 4 would do
            conformance::check(reading.find("192 bytes apart") != std::string::npos,
                               "the reading names the lanes' stride (48 floats: 192 bytes)", __FILE__, __LINE__);
        }
    }

    // ---- warp operations ----
    {
        int* counter = nullptr;
        cudaMalloc(&counter, sizeof(int));
        cudaMemset(counter, 0, sizeof(int));
        const KernelProfile k = profile([&] { warp_ops<<<3, 64>>>(in, out, counter); });
        CHECK_EQ(k.ops.shuffles, 5ull * 6);  // 5 per warp, 6 warps
        CHECK_EQ(k.ops.barriers, 6ull);      // one __syncthreads per block, once per warp
        CHECK_EQ(k.global_atomic.requests, 6ull);
        CHECK_EQ(k.global_atomic.sectors, 6ull);  // every lane the same word
        CHECK_EQ(k.global_store.requests, 6ull);  // one lane each
        CHECK_EQ(k.launches, 1ull);
        CHECK_EQ(k.threads, 192ull);
        int host = 0;
        cudaMemcpy(&host, counter, sizeof(int), cudaMemcpyDeviceToHost);
        CHECK_EQ(host, 192);  // the atomics still count
        cudaFree(counter);
    }
    cudaFree(in);
    cudaFree(out);
    return conformance::finish();
}
