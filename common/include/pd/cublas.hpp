/// @file cublas.hpp
/// @brief cuBLAS, the baseline GEMM-like kernels are measured against (cuda backend only).
#pragma once

#include <cublas_v2.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace pd {

/// Name of a cuBLAS status code, e.g. "CUBLAS_STATUS_NOT_SUPPORTED".
inline std::string cublas_status_name(cublasStatus_t s) { return cublasGetStatusName(s); }

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

}  // namespace pd

/// Checks a cuBLAS call; throws naming the call, file:line and the status.
#define PD_CHECK_CUBLAS(call) ::pd::check_cublas((call), #call, __FILE__, __LINE__)
