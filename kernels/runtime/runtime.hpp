/// @file runtime.hpp
/// @brief The runtime kernels: forms the model runs that no chapter's step is on its own. Each
/// names the steps it combines or extends, and is tested against the same CPU references as
/// those steps and, on their shapes and inputs, bitwise against them. Includable from plain C++.
#pragma once

#include "gemm/gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pd::kernels::runtime {

/// Y [T, N] = X [T, K] W [N, K]^T with bf16 inputs on the SIMT units (fp32 accumulation, fp32
/// output): chapter 02's v6 (gemm/vectorized.cu) with each element widened to fp32 as it is
/// loaded. The model's bf16 passes take it on GPUs without bf16 tensor cores (compute
/// capability below 8.0, a T4), where chapter 02's v7 and v8 cannot run. Bitwise equal to v6 on
/// the same values in fp32 (the same tiles, the same sums in the same order). 8-byte loads of 4
/// elements where K % 4 == 0 and X, W are 8-byte aligned; element by element otherwise.
/// @param x [T, K]  @param w [N, K]  @param y [T, N] fp32  @param s the sizes (gemm::check_shape())
/// @param stream the stream
void gemm_simt_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const gemm::Shape& s,
                    cudaStream_t stream = nullptr);

/// The simulator work of one gemm_simt_bf16() on @p s: v6's (gemm::sim_work()).
/// @param s the sizes
inline double gemm_simt_bf16_sim_work(const gemm::Shape& s) {
    return gemm::sim_work("v6", s);
}

}  // namespace pd::kernels::runtime
