/// @file scores.cu
/// @brief Step 1 of naive attention: every score of Q K^T, one thread each.
#include "attention.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

void check_shape(const Shape& s) {
    auto positive = [](int v, const char* name) {
        if (v < 1) throw std::invalid_argument(std::string(name) + " must be >= 1, got " + std::to_string(v));
    };
    positive(s.batch, "batch");
    positive(s.heads, "heads");
    positive(s.q_len, "q_len (Sq)");
    positive(s.kv_len, "kv_len (Sk)");
    positive(s.head_dim, "head_dim (d)");
    if (s.kv_heads < 0 || s.heads % s.kv_head_count() != 0)
        throw std::invalid_argument("heads (H) = " + std::to_string(s.heads) +
                                    " must be a multiple of kv_heads (Hkv) = " + std::to_string(s.kv_heads));
    if (s.q_len > s.kv_len)
        throw std::invalid_argument("q_len (Sq) = " + std::to_string(s.q_len) + " must be <= kv_len (Sk) = " +
                                    std::to_string(s.kv_len) + ": the queries are the last Sq of Sk positions");
    if (long(s.batch) * s.heads > 65535)
        throw std::invalid_argument("batch * heads = " + std::to_string(long(s.batch) * s.heads) +
                                    " exceeds 65535, the grid's z limit");
    if (s.q_len > 65535 * 8) throw std::invalid_argument("q_len (Sq) = " + std::to_string(s.q_len) + " exceeds 524280");
    if (std::size_t(s.batch) * s.heads * s.q_len > 0x7FFFFFFFu)
        throw std::invalid_argument(
            "batch * heads * q_len (Sq) = " + std::to_string(std::size_t(s.batch) * s.heads * s.q_len) +
            " exceeds 2^31 - 1 score rows (the softmax grid's x limit)");
}

// [scores_kernel]
/// Thread (j, i) of block z computes score[z][i][j] = (q_i . k_j) / sqrt(d): each thread
/// reads a whole row of Q and of K, so Q and K are re-read Sk and Sq times (from cache).
/// Block z = b * H + h reads KV head b * Hkv + h / group (group = H / Hkv, 1 without GQA).
__global__ void scores_kernel(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s,
                              int q_len, int kv_len, int d, int group, float scale) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;  // key
    const int i = blockIdx.y * blockDim.y + threadIdx.y;  // query
    if (i >= q_len || j >= kv_len) return;
    const std::size_t bh = blockIdx.z, kvh = bh / group;  // kvh = (b H + h) / group = b Hkv + h / group
    const float* qi = q + (bh * q_len + i) * d;
    const float* kj = k + (kvh * kv_len + j) * d;
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += qi[c] * kj[c];
    s[(bh * q_len + i) * kv_len + j] = acc * scale;
}
// [scores_kernel]

void scores(const float* q, const float* k, float* s, const Shape& shape, cudaStream_t stream) {
    check_shape(shape);
    const dim3 block(32, 8);
    const dim3 grid(ceil_div(shape.kv_len, 32), ceil_div(shape.q_len, 8), unsigned(shape.batch * shape.heads));
    scores_kernel<<<grid, block, 0, stream>>>(q, k, s, shape.q_len, shape.kv_len, shape.head_dim,
                                              shape.heads / shape.kv_head_count(),
                                              1.0f / std::sqrt(float(shape.head_dim)));
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::attention
