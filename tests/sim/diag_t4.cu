// The simulator as a T4 (PD_SIM_DEVICE=T4, set by the test): compute capability 7.5 and a T4's
// limits (48 KiB of shared memory per block, 64 KiB with the opt-in attribute, 1,024 threads and
// 64 KiB of shared memory per SM, 40 SMs), and the instructions that came with sm_80 stopping the
// kernel as the trap a T4 build has in their place would: bf16 mma.sync m16n8k16, cp.async and
// bf16 WMMA each end their launch with cudaErrorIllegalInstruction and a diagnostic naming the
// instruction, both capabilities and the line. ldmatrix (sm_75) and __half WMMA (sm_70) run.
// After each fault, cudaDeviceReset() and a valid launch runs.
#include "diag.cuh"

#include "pd/warp_mma.cuh"

#include <mma.h>

#include <cstdint>
#include <vector>

using namespace nvcuda;

constexpr int kMmaLine = __LINE__ + 5;
__global__ void mma_bf16(float* out) {
    std::uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};  // bf16 ones
    std::uint32_t b[2] = {0x3f803f80u, 0x3f803f80u};
    float c[4] = {}, d[4];
    pd::mma_m16n8k16_bf16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

constexpr int kCopyLine = __LINE__ + 3;
__global__ void cp_async_copy(const float4* src, float* out) {
    __shared__ float4 s[32];
    pd::cp_async(s + threadIdx.x, src + threadIdx.x, 16, 16);
    pd::cp_async_wait_all();
    out[threadIdx.x] = s[threadIdx.x].x;
}

constexpr int kWmmaLine = __LINE__ + 6;
__global__ void wmma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

/// __half WMMA (sm_70) and ldmatrix (sm_75): a T4 has both.
__global__ void turing_ok(const __half* a, const __half* b, float* c, std::uint32_t* r) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
    __shared__ __align__(16) std::uint16_t s[32 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) s[i] = std::uint16_t(i);
    __syncwarp();
    std::uint32_t q[4];
    pd::ldmatrix_x4(q, s + threadIdx.x * 8);
    r[threadIdx.x] = q[0];
}

int main() {
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK(prop.major == 7 && prop.minor == 5);
    CHECK(prop.multiProcessorCount == 40);
    CHECK(prop.maxThreadsPerMultiProcessor == 1024);
    CHECK(prop.sharedMemPerBlock == 48 * 1024 && prop.sharedMemPerBlockOptin == 64 * 1024);
    CHECK(prop.sharedMemPerMultiprocessor == 64 * 1024);
    int v = 0;
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, 0));
    CHECK(v == 5);
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK(v == 64 * 1024);
    // 64 KiB of dynamic shared memory is the most a T4 allows (an H100's 227 KiB would fail)
    CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&cp_async_copy),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
    CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&cp_async_copy),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024 + 1) == cudaErrorInvalidValue);
    (void)cudaGetLastError();

    float *out = nullptr, *c = nullptr;
    float4* src = nullptr;
    __nv_bfloat16* ab = nullptr;
    __half* ah = nullptr;
    std::uint32_t* r = nullptr;
    CUDA_OK(cudaMalloc(&out, 32 * sizeof(float)));
    CUDA_OK(cudaMalloc(&src, 32 * sizeof(float4)));
    CUDA_OK(cudaMalloc(&c, 256 * sizeof(float)));
    CUDA_OK(cudaMalloc(&ab, 256 * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc(&ah, 256 * sizeof(__half)));
    CUDA_OK(cudaMalloc(&r, 32 * sizeof(std::uint32_t)));
    CUDA_OK(cudaMemset(src, 0, 32 * sizeof(float4)));
    CUDA_OK(cudaMemset(ab, 0, 256 * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMemset(ah, 0, 256 * sizeof(__half)));
    mma_bf16<<<1, 32>>>(out);
    conformance::expect_fault("bf16 mma.sync", cudaErrorIllegalInstruction,
                              {"mma.sync m16n8k16 with bf16 inputs needs compute capability 8.0",
                               "the simulated device (PD_SIM_DEVICE=T4) has 7.5", conformance::at(__FILE__, kMmaLine)});
    cp_async_copy<<<1, 32>>>(src, out);
    conformance::expect_fault(
        "cp.async", cudaErrorIllegalInstruction,
        {"cp.async needs compute capability 8.0", "PD_SIM_DEVICE=T4", conformance::at(__FILE__, kCopyLine)});
    wmma_bf16<<<1, 32>>>(ab, ab, c);
    conformance::expect_fault("bf16 WMMA", cudaErrorIllegalInstruction,
                              {"nvcuda::wmma::load_matrix_sync of __nv_bfloat16 needs compute capability 8.0",
                               "has 7.5", conformance::at(__FILE__, kWmmaLine)});
    turing_ok<<<1, 32>>>(ah, ah, c, r);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    for (void* p : {(void*)out, (void*)src, (void*)c, (void*)ab, (void*)ah, (void*)r}) CUDA_OK(cudaFree(p));
    return conformance::finish();
}
