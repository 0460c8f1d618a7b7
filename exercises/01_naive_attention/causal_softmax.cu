/// @file causal_softmax.cu
/// @brief Lab 01: the causal, numerically stable row softmax of naive attention (v1,
/// softmax_smem_tree), the first step (no predecessor).
///
/// One block per score row; each thread handles keys t, t + blockDim.x, ... (rows longer than
/// the block), and the block combines the per-thread results with a shared-memory tree
/// reduction, twice: once for the row maximum, once for the sum of exponentials.
#include "attention/attention.hpp"  // allowed_keys(): the mask rule

#include "pd/cuda_check.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace pd::kernels::attention {

/// Threads per row: a power of two, so the tree can halve it down to one.
constexpr int kSmemTreeThreads = 256;

// [softmax_smem_tree_kernel]
/// Row r of the [B*H*Sq, Sk] score matrix is query i = r % Sq of its head. In place:
/// s[j] = exp(s[j] - max) / sum over the allowed keys j, and exactly 0 at the masked ones.
__global__ void softmax_smem_tree_kernel(float* __restrict__ scores, int q_len, int kv_len, bool causal) {
    __shared__ float partial[kSmemTreeThreads];
    const std::size_t row = blockIdx.x;
    const int keys = allowed_keys(int(row % std::size_t(q_len)), q_len, kv_len, causal);  // the mask rule
    float* s = scores + row * std::size_t(kv_len);
    const int t = threadIdx.x;

    // TODO(student): 1. row_max = the largest score among the allowed keys s[0 .. keys-1]: each thread takes keys t, t + blockDim.x, ...; then halve the block in a shared-memory tree (partial[]), with a __syncthreads after every step (~12 lines)
    float row_max = 0.f;

    // TODO(student): 2. replace each allowed score by exp(s[j] - row_max) (subtracting the maximum keeps exp from overflowing), and reduce their sum into row_sum with the same tree (~12 lines)
    float row_sum = 1.f;

    // TODO(student): 3. divide the allowed entries by row_sum, and write exact zeros at the masked keys s[keys .. kv_len-1] (~4 lines)
    (void)row_max;
    (void)row_sum;
    (void)partial;
    (void)keys;
    (void)s;
    (void)t;
}
// [softmax_smem_tree_kernel]

void softmax_smem_tree(float* scores, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const std::size_t rows = std::size_t(s.batch) * s.heads * s.q_len;  // <= 2^31 - 1: check_shape
    softmax_smem_tree_kernel<<<unsigned(rows), kSmemTreeThreads, 0, stream>>>(scores, s.q_len, s.kv_len, s.causal);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::attention
