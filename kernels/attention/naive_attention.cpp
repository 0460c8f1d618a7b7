/// @file naive_attention.cpp
/// @brief Chapter 01's dispatch: the softmax of a version by name, and the three kernels of a
/// version in order (scores, softmax, P V).
#include "attention.hpp"

namespace pd::kernels::attention {

void softmax(const std::string& version, float* scores, const Shape& s, cudaStream_t stream) {
    const Version& v = find_version(versions(), version, DType::fp32, "naive_attention");
    if (v.name == "v1")
        softmax_smem_tree(scores, s, stream);
    else if (v.name == "v2")
        softmax_warp_shuffle(scores, s, stream);
    else
        softmax_cub(scores, s, stream);  // v3
}

void naive_attention(const std::string& version, const float* q, const float* k, const float* v, float* out,
                     float* workspace, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    find_version(versions(), version, DType::fp32, "naive_attention");  // before any launch
    scores(q, k, workspace, s, stream);
    softmax(version, workspace, s, stream);
    pv(workspace, v, out, s, stream);
}

}  // namespace pd::kernels::attention
