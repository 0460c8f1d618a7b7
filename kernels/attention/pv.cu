/// @file pv.cu
/// @brief Step 3 of naive attention: O = P V over the allowed keys, one thread per output.
#include "attention.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::attention {

// [pv_kernel]
/// Thread (c, i) of block z computes out[z][i][c] = sum over allowed keys j of
/// P[z][i][j] * V[z'][j][c] (z' the KV head of z, as in scores_kernel); consecutive threads
/// read consecutive columns c of V (coalesced).
__global__ void pv_kernel(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ out, int q_len,
                          int kv_len, int d, int group, bool causal) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;  // output column
    const int i = blockIdx.y * blockDim.y + threadIdx.y;  // query
    if (i >= q_len || c >= d) return;
    const std::size_t bh = blockIdx.z;
    const int keys = allowed_keys(i, q_len, kv_len, causal);
    const float* pi = p + (bh * q_len + i) * kv_len;
    const float* vz = v + (bh / group) * kv_len * d;
    float acc = 0.f;
    for (int j = 0; j < keys; ++j) acc += pi[j] * vz[std::size_t(j) * d + c];
    out[(bh * q_len + i) * d + c] = acc;
}
// [pv_kernel]

void pv(const float* p, const float* v, float* out, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 block(32, 8);
    const dim3 grid(ceil_div(s.head_dim, 32), ceil_div(s.q_len, 8), unsigned(s.batch * s.heads));
    pv_kernel<<<grid, block, 0, stream>>>(p, v, out, s.q_len, s.kv_len, s.head_dim, s.heads / s.kv_head_count(),
                                          s.causal);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::attention
