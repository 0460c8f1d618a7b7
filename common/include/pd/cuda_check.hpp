/// @file cuda_check.hpp
/// @brief One error-checking macro for every CUDA runtime call in the project.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace pd {

/// A failed CUDA runtime call: what() holds the call, %file:line, error name and text.
class CudaError : public std::runtime_error {
public:
    /// An error @p code with its full message @p what (see cuda_error_message).
    CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
    /// The CUDA error code that caused the exception.
    cudaError_t code() const noexcept { return code_; }

private:
    cudaError_t code_;
};

/// Builds the message of a failed call: "`call` at %file:line: cudaErrorX (text)".
std::string cuda_error_message(cudaError_t code, const char* call, const char* file, int line);

/// Throws CudaError when @p code is not cudaSuccess. Used through PD_CHECK_CUDA.
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
    if (code != cudaSuccess) throw CudaError(code, cuda_error_message(code, call, file, line));
}

}  // namespace pd

/// Checks a CUDA runtime call; on failure throws pd::CudaError naming the call, the source
/// location, the error name and its description.
#define PD_CHECK_CUDA(call) ::pd::check_cuda((call), #call, __FILE__, __LINE__)

/// Checks that the last kernel launch was accepted (bad configuration, missing kernel image).
/// Call right after `kernel<<<...>>>(...)`; it does not wait for the kernel to finish.
#define PD_CHECK_LAUNCH() ::pd::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
