/// @file naive_attention.cu
/// @brief The versions of chapter 01 and their dispatch: scores, softmax (v1 | v2 | v3), P V.
#include "attention.hpp"

#include <stdexcept>

namespace pd::kernels::attention {

std::vector<std::string> versions() {
#if defined(PD_BACKEND_SIM)
    return {"v1", "v2"};  // v3 needs CUB: CUDA only
#else
    return {"v1", "v2", "v3"};
#endif
}

void naive_attention(const std::string& version, const float* q, const float* k, const float* v, float* out,
                     float* workspace, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    scores(q, k, workspace, s, stream);
    if (version == "v1") softmax_v1(workspace, s, stream);
    else if (version == "v2") softmax_v2(workspace, s, stream);
    else if (version == "v3") softmax_v3(workspace, s, stream);
    else throw std::invalid_argument("naive_attention: unknown version '" + version + "' (v1, v2 or v3)");
    pv(workspace, v, out, s, stream);
}

}  // namespace pd::kernels::attention
