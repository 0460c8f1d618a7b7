/// @file gemv.cpp
/// @brief Chapter 03's shape check and the dispatch by name over the versions() of gemv.hpp.
#include "gemv.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace pd::kernels::gemv {

void check_shape(const Shape& s) {
    auto positive = [](int v, const char* name) {
        if (v < 1) throw std::invalid_argument(std::string(name) + " must be >= 1, got " + std::to_string(v));
    };
    positive(s.n, "N (rows of W)");
    positive(s.k, "K (columns of W)");
    if (s.batch < 1 || s.batch > kMaxBatch)
        throw std::invalid_argument("B (batch) must be in 1 ... kMaxBatch = " + std::to_string(kMaxBatch) + ", got " +
                                    std::to_string(s.batch));
    if (s.w_elements() > 0x7FFFFFFFu)
        throw std::invalid_argument("N * K = " + std::to_string(s.w_elements()) +
                                    " exceeds 2^31 - 1 elements of W (the kernels index a row with 32 bits)");
}

namespace {

/// The dispatch shared by both element types: the launcher of @p version, or an exception
/// (find_version()) naming the valid ones.
template <typename T>
void dispatch(const std::string& version, const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    constexpr DType kType = std::is_same_v<T, float> ? DType::fp32 : DType::bf16;
    const Version& v = find_version(versions(), version, kType, "gemv");
    if (v.name == "v1") return gemv_thread_per_row(w, x, y, s, stream);
    if (v.name == "v2") return gemv_warp_per_row(w, x, y, s, stream);
    if (v.name == "v3") return gemv_vectorized(w, x, y, s, stream);
    if (v.name == "v4") return gemv_cub(w, x, y, s, stream);
    if constexpr (kType == DType::bf16)
        if (v.name == "v6") return gemv_batched_wmma(w, x, y, s, stream);
    return gemv_batched(w, x, y, s, stream);  // v5
}

}  // namespace

void gemv(const std::string& version, const float* w, const float* x, float* y, const Shape& s, cudaStream_t stream) {
    dispatch(version, w, x, y, s, stream);
}

void gemv(const std::string& version, const __nv_bfloat16* w, const __nv_bfloat16* x, float* y, const Shape& s,
          cudaStream_t stream) {
    dispatch(version, w, x, y, s, stream);
}

}  // namespace pd::kernels::gemv
