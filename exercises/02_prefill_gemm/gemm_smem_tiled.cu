/// @file gemm_smem_tiled.cu
/// @brief Lab 02: v3 = v2 (Predecessor: kernels/gemm/ch02_v2_coalesced.cu) + shared-memory tiles.
///
/// A block of 32 x 32 threads computes a 32 x 32 tile of Y, one output per thread, as v2
/// does. It walks along K in steps of 32: at each step the block stages a 32 x 32 tile of X and
/// one of W in shared memory, each element loaded once from global memory by one thread (in
/// coalesced rows along K), then every thread reads 32 of them from shared memory. Each
/// element of X and W is thus read from global memory T/32 or N/32 times instead of N or T
/// times.
#include "gemm/gemm.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"

namespace pd::kernels::gemm {

/// Side of the square tiles of v3 (of Y, of X and of W) and of its thread block.
constexpr int kSmemTile = 32;

// [gemm_smem_tiled_kernel]
/// Thread (tx, ty) of block (bx, by) computes y[t][n] with t = by * 32 + ty and n = bx * 32 + tx.
/// xs holds x[t0 .. t0+31][k0 .. k0+31] and ws holds w[n0 .. n0+31][k0 .. k0+31], both as
/// [row][k]. Tiles that overhang X or W are padded with zeros; outputs outside Y are not written.
__global__ void gemm_smem_tiled_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                       int T, int N, int K) {
    __shared__ float xs[kSmemTile][kSmemTile];
    // One float of padding per row: in the inner loop lane tx reads ws[tx][kk], so the 32 lanes
    // read 32 consecutive rows; with rows of 33 floats those words are 33 floats apart and fall
    // in 32 different banks (32 floats apart, without the padding, they would all share one).
    __shared__ float ws[kSmemTile][kSmemTile + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int t0 = blockIdx.y * kSmemTile, n0 = blockIdx.x * kSmemTile;
    const int t = t0 + ty, n = n0 + tx;
    float acc = 0.f;

    for (int k0 = 0; k0 < K; k0 += kSmemTile) {
        // TODO(student): 1. stage the tiles: thread (tx, ty) loads xs[ty][tx] = x[t0+ty][k0+tx] and ws[ty][tx] = w[n0+ty][k0+tx] (consecutive tx read consecutive k: coalesced), 0.f where the row or k0+tx falls outside X or W; then a barrier so that no thread reads a tile before it is complete (~8 lines)
        (void)x;
        (void)w;
        (void)T;
        (void)N;

        // TODO(student): 2. acc += the dot product of row ty of xs with row tx of ws (32 terms; the zeros staged past the edges of X and W add nothing); then a barrier so that no thread overwrites a tile another thread still reads (~4 lines)
        (void)xs;
        (void)ws;
    }

    // TODO(student): 3. store acc to y[t][n], only when t < T and n < N (the grid overhangs Y) (~2 lines)
    (void)acc;
    (void)t;
    (void)n;
}
// [gemm_smem_tiled_kernel]

void gemm_smem_tiled(const float* x, const float* w, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s);
    const dim3 block(kSmemTile, kSmemTile);
    const dim3 grid(ceil_div(s.n, kSmemTile), ceil_div(s.tokens, kSmemTile));
    gemm_smem_tiled_kernel<<<grid, block, 0, stream>>>(x, w, y, s.tokens, s.n, s.k);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::gemm
