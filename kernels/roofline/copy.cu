/// @file copy.cu
/// @brief The memory-bandwidth ceiling: a grid-stride copy with 128-bit accesses.
#include "roofline.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pd::kernels::roofline {

// [copy_grid_stride]
/// Each thread copies float4 elements i, i + stride, ... so that a warp touches 512
/// consecutive bytes per step (fully coalesced), and a fixed-size grid covers any n.
__global__ void copy_grid_stride_kernel(const float4* __restrict__ in, float4* __restrict__ out, std::size_t n4,
                                        const float* __restrict__ in_tail, float* __restrict__ out_tail, int tail) {
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) out[i] = in[i];
    // The last n % 4 floats do not fill a float4: the first threads copy them one by one.
    const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t < std::size_t(tail)) out_tail[t] = in_tail[t];
}
// [copy_grid_stride]

void copy_grid_stride(const float* in, float* out, std::size_t n, cudaStream_t stream) {
    if (n == 0) throw std::invalid_argument("copy_grid_stride: n must be >= 1, got 0");
    if (reinterpret_cast<std::uintptr_t>(in) % 16 != 0)
        throw std::invalid_argument("copy_grid_stride: in must be 16-byte aligned");
    if (reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
        throw std::invalid_argument("copy_grid_stride: out must be 16-byte aligned");
    int device = 0, sms = 0;
    PD_CHECK_CUDA(cudaGetDevice(&device));
    PD_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const std::size_t n4 = n / 4;
    const int tail = static_cast<int>(n % 4);
    constexpr int kThreads = 256;
    // Enough blocks to fill every SM several times over, but no more than there is work.
    const std::size_t wanted = ceil_div<std::size_t>(n4 > 0 ? n4 : 1, kThreads);
    const unsigned blocks = static_cast<unsigned>(wanted < std::size_t(sms) * 8 ? wanted : std::size_t(sms) * 8);
    copy_grid_stride_kernel<<<blocks, kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), n4, in + 4 * n4, out + 4 * n4, tail);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::roofline
