/// @file cublas.hpp
/// @brief cuBLAS, the baseline GEMM-like kernels are measured against.
///
/// cuBLAS runs on the GPU only. On the simulator this header declares the same names so that a
/// chapter's baseline code compiles on both backends unchanged; there, creating a handle or
/// calling a function throws std::invalid_argument, and chapters create no handle.
#pragma once

#include <cuda_bf16.h>

#include <stdexcept>
#include <string>
#include <utility>

#if defined(PD_BACKEND_SIM)

namespace pd {

/// The simulator's stand-in for cuBLAS's handle type: there is no cuBLAS to hold.
using cublasHandle_t = struct NoCublasOnTheSimulator*;

/// On the simulator: cannot be created (throws std::invalid_argument).
class CublasHandle {
public:
    CublasHandle() { throw std::invalid_argument("cuBLAS runs on a GPU only, not on the simulator"); }
    /// Never reached: the constructor throws.
    cublasHandle_t get() const noexcept { return nullptr; }
};

/// On the simulator: throws std::invalid_argument (no cuBLAS).
template <typename... Args>
void cublas_linear(Args&&...) {
    throw std::invalid_argument("cuBLAS runs on a GPU only, not on the simulator");
}
/// On the simulator: throws std::invalid_argument (no cuBLAS).
template <typename... Args>
void cublas_gemv(Args&&...) {
    throw std::invalid_argument("cuBLAS runs on a GPU only, not on the simulator");
}

}  // namespace pd

#else

#include <cublas_v2.h>

namespace pd {

/// Name of a cuBLAS status code, e.g. "CUBLAS_STATUS_NOT_SUPPORTED".
inline std::string cublas_status_name(cublasStatus_t s) {
    return cublasGetStatusName(s);
}

/// Throws std::runtime_error naming the call and location when @p s is not success.
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLAS error: `") + call + "` at " + file + ":" + std::to_string(line) +
                                 ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

/// An owned cuBLAS handle (RAII). One per program; never a global.
class CublasHandle {
public:
    CublasHandle() { check_cublas(cublasCreate(&h_), "cublasCreate", __FILE__, __LINE__); }
    ~CublasHandle() {
        if (h_ != nullptr) cublasDestroy(h_);
    }
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    /// Takes over @p o's handle; @p o is left empty.
    CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    CublasHandle& operator=(CublasHandle&&) = delete;
    /// The handle, for cuBLAS calls.
    cublasHandle_t get() const noexcept { return h_; }

private:
    cublasHandle_t h_ = nullptr;
};

/// Y [M, N] = X [M, K] W [N, K]^T for row-major fp32 matrices, with cublasSgemm (no TF32:
/// the handle's default math mode): the baseline of chapters 02 and 03. cuBLAS is
/// column-major, so it computes Y^T [N, M] = W X^T with W transposed (ld K) and X as is (ld K).
/// @param h the handle  @param x [M, K]  @param w [N, K]  @param y [M, N]
/// @param m M  @param n N  @param k K
inline void cublas_linear(cublasHandle_t h, const float* x, const float* w, float* y, int m, int n, int k) {
    const float alpha = 1.f, beta = 0.f;
    check_cublas(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, k, x, k, &beta, y, n), "cublasSgemm",
                 __FILE__, __LINE__);
}

/// As above with bf16 X and W, fp32 accumulation and an fp32 Y, with cublasGemmEx
/// (tensor cores). @param h the handle  @param x [M, K]  @param w [N, K]  @param y [M, N] fp32
/// @param m M  @param n N  @param k K
inline void cublas_linear(cublasHandle_t h, const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int m, int n,
                          int k) {
    const float alpha = 1.f, beta = 0.f;
    check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta,
                              y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx", __FILE__, __LINE__);
}

/// y [N] = W [N, K] x [K] in fp32 with cublasSgemv: the row-major W is a column-major
/// K x N matrix, used transposed. @param h the handle  @param w [N, K]  @param x [K]
/// @param y [N]  @param n N  @param k K
inline void cublas_gemv(cublasHandle_t h, const float* w, const float* x, float* y, int n, int k) {
    const float alpha = 1.f, beta = 0.f;
    check_cublas(cublasSgemv(h, CUBLAS_OP_T, k, n, &alpha, w, k, x, 1, &beta, y, 1), "cublasSgemv", __FILE__, __LINE__);
}

/// y [N] = W [N, K] x [K] with bf16 W and x, fp32 compute and an fp32 y, with
/// cublasTSSgemvStridedBatched (one batch; CUDA 11.6 and later): cuBLAS's own bf16 GEMV.
/// @param h the handle  @param w [N, K]  @param x [K]  @param y [N]  @param n N  @param k K
inline void cublas_gemv(cublasHandle_t h, const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, int n, int k) {
    const float alpha = 1.f, beta = 0.f;
    check_cublas(cublasTSSgemvStridedBatched(h, CUBLAS_OP_T, k, n, &alpha, w, k, 0, x, 1, 0, &beta, y, 1, 0, 1),
                 "cublasTSSgemvStridedBatched", __FILE__, __LINE__);
}

}  // namespace pd

/// Checks a cuBLAS call; throws naming the call, %file:line and the status.
#define PD_CHECK_CUBLAS(call) ::pd::check_cublas((call), #call, __FILE__, __LINE__)

#endif
