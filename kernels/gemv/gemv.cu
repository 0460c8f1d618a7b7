/// @file gemv.cu
/// @brief Chapter 03's shape check, its list of versions and their dispatch by name.
#include "gemv.hpp"

#include <stdexcept>
#include <string>

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

std::vector<Version> versions() {
    std::vector<Version> v = {
        {"v1", "one thread per row of W (uncoalesced: a warp's loads are K elements apart)"},
        {"v2", "v1 + one warp per row: coalesced loads, partial sums added by warp shuffles (Lab 03)"},
        {"v3", "v2 + 128-bit loads (4 fp32 or 8 bf16 per lane, 4 in flight) and 4 rows per block"},
#if !defined(PD_BACKEND_SIM)
        {"v4", "v3 with the warp sum done by CUB's WarpReduce (CUDA only)"},
#endif
        {"v5",
         "batched decode: each weight read once for all B tokens (X in shared memory; bf16 B >= 5: tensor cores)"},
    };
    return v;
}

namespace {

/// The dispatch shared by both element types: the launcher of @p version, or an exception
/// listing the valid names.
template <typename T>
void dispatch(const std::string& version, const T* w, const T* x, float* y, const Shape& s, cudaStream_t stream) {
    if (version == "v1") return gemv_thread_per_row(w, x, y, s, stream);
    if (version == "v2") return gemv_warp_per_row(w, x, y, s, stream);
    if (version == "v3") return gemv_vectorized(w, x, y, s, stream);
    if (version == "v4") return gemv_cub(w, x, y, s, stream);  // throws "CUDA-only" on the simulator
    if (version == "v5") return gemv_batched(w, x, y, s, stream);
    std::string valid;
    for (const Version& v : versions()) valid += (valid.empty() ? "" : ", ") + v.name;
    throw std::invalid_argument("gemv: unknown version '" + version + "' (valid: " + valid + ")");
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
