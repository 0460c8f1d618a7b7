/// @file ch08_int8_gemv.cu
/// @brief Chapter 08, the int8 GEMV: Y [B, N] = X [B, K] W [N, K]^T with W in int8 codes and an
/// fp32 scale per row. Predecessor: kernels/gemv/ch03_v5_batched_simt.cu (chapter 03's v5, the
/// batched SIMT GEMV; the _tc kernel here is its v6, ch03_v6_batched_wmma.cu, fed the same way).
/// The one change: W is read as packed codes, 16 per 16-byte load, through the format's view
/// (int8_gemv::Weights: load() and dequant8(), which decodes each byte in registers), and the row's
/// scale multiplies the finished sums. What every format's kernel shares (the launch geometry,
/// X staged in shared memory) is gemv_quant.cuh's; ch08_fp8_gemv.cu and lab 08's gemv_int4.cu
/// are this file with another view.
#include "gemv_quant.cuh"
#include "quant.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"

#include <mma.h>

#include <stdexcept>
#include <string>

namespace pd::kernels::quant::int8_gemv {

/// Value @p i (0 ... 3) of the little-endian 32-bit word @p u, as the int8 it stores.
__device__ __forceinline__ float int8_at(unsigned u, int i) {
    return float(int(u << (24 - 8 * i)) >> 24);  // the byte moved to the top, then shifted back with its sign
}

/// The int8 weights of a matrix: 16 values per vector, a scale per row.
struct Weights {
    static constexpr int kValues = 16;  ///< weights per 16-byte vector
    /// The vector's bytes.
    struct Vector {
        uint4 bits;  ///< 16 codes, value c in byte c
    };
    const std::uint8_t* __restrict__ packed;  ///< [N, vectors_per_row x 16]
    const float* __restrict__ scales;         ///< [N]
    int row_vectors;                          ///< 16-byte vectors per row

    /// Vector @p vec of row @p row: one 128-bit load. @param row the row  @param vec the vector
    /// @return its bytes
    __device__ __forceinline__ Vector load(int row, int vec) const {
        return {load16(packed + (std::size_t(row) * row_vectors + vec) * 16)};
    }
    /// Values 8 j ... 8 j + 7: the bytes of words 2 j and 2 j + 1.
    __device__ __forceinline__ void dequant8(const Vector& v, int j, float (&w)[8]) const {
        const unsigned lo = j == 0 ? v.bits.x : v.bits.z, hi = j == 0 ? v.bits.y : v.bits.w;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = int8_at(lo, i);
            w[4 + i] = int8_at(hi, i);
        }
    }
    /// The scale of row @p row, applied to its finished sums. @param row the row @return the scale
    __device__ __forceinline__ float row_scale(int row) const {
        return scales[row];
    }
};

// [gemv_quant_kernel]
/// Chapter 03's v5 (batched SIMT decode) reading packed weights. Warp w of block i computes
/// rows (i kQuantWarps + w) kQuantRowsPerWarp ... + 3 for the kBatch tokens (kBatch >= batch: the tokens past it are
/// zeros). Per chunk of kQuantChunk columns, the block stages X once; each lane takes the chunk's vectors lane, lane +
/// 32, ..., loads its 4 rows' packed vectors together, decodes 8 values of each row at a time and multiplies them with
/// 8 columns of every token. The warp then adds its lanes' sums (warp_reduce_sums) and the row's scale multiplies each
/// one.
template <int kBatch>
__global__ void __launch_bounds__(kQuantThreads) gemv_quant_kernel(const Weights w, const __nv_bfloat16* __restrict__ x,
                                                                   float* __restrict__ y, int n, int k, int batch) {
    constexpr int V = Weights::kValues, kUnits = V / 8, R = kQuantRowsPerWarp;
    __shared__ uint4 xs[kBatch][kUnits][kQuantChunk / V];
    const int lane = threadIdx.x % kWarpSize;
    const int row0 = (blockIdx.x * kQuantWarps + threadIdx.x / kWarpSize) * R;
    float acc[R * kBatch] = {};  // acc[r * kBatch + b]: row row0 + r, token b
    for (int c0 = 0; c0 < k; c0 += kQuantChunk) {
        __syncthreads();  // the previous chunk's reads are done
        stage_tokens<V, kBatch>(xs, x, k, batch, c0);
        __syncthreads();
        const int vectors = (k - c0 < kQuantChunk ? ceil_div(k - c0, V) : kQuantChunk / V);
        for (int v = lane; v < vectors; v += kWarpSize) {
            Weights::Vector packed[R];
#pragma unroll
            for (int r = 0; r < R; ++r)  // the 4 loads first: they are in flight together (rows past N: zeros)
                packed[r] = row0 + r < n ? w.load(row0 + r, c0 / V + v) : Weights::Vector{};
#pragma unroll
            for (int j = 0; j < kUnits; ++j) {
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; ++r) w.dequant8(packed[r], j, wf[r]);  // rows past N: zeros
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    const uint4 xv = xs[b][j][staged_slot<kUnits>(j, v)];
                    const unsigned u[4] = {xv.x, xv.y, xv.z, xv.w};
                    float xf[8];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        xf[2 * e] = __uint_as_float(u[e] << 16);
                        xf[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
                    }
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[r * kBatch + b] = fmaf(wf[r][e], xf[e], acc[r * kBatch + b]);
                }
            }
        }
    }
    // The warp's R x kBatch sums, 32 at a time: lane j then holds sum j of the 32. (For kBatch >= 4
    // ptxas keeps the 16 or 32 values of this final reduction in local memory, 64-128 bytes per
    // thread once per kernel, where chapter 03's v5 keeps them in registers: a cost at the end,
    // not in the loop that streams the weights.)
    constexpr int kSums = R * kBatch, kRound = kSums < kWarpSize ? kSums : kWarpSize;
#pragma unroll
    for (int g = 0; g < kSums / kRound; ++g) {
        float part[kRound];
#pragma unroll
        for (int i = 0; i < kRound; ++i) part[i] = acc[g * kRound + i];
        const float sum = warp_reduce_sums(part);
        const int i = g * kRound + lane, r = i / kBatch, b = i % kBatch;
        if (lane < kRound && b < batch && row0 + r < n) y[std::size_t(b) * n + row0 + r] = sum * w.row_scale(row0 + r);
    }
}
// [gemv_quant_kernel]

// [gemv_quant_mma_kernel]
/// The tensor-core path of the quantized GEMV: chapter 03's v6 (WMMA 16 x 16 x 16, bf16 in,
/// fp32 accumulation) reading packed weights, for up to 16 tokens (one 16-token tile of X^T;
/// the tokens past the batch are zeros). Warp w of block i computes the 16 rows
/// (i kQuantMmaWarps + w) 16 ... + 15. Lanes r and r + 16 take row r of the strip, lane r the
/// row's even vectors and lane r + 16 its odd ones: each lane loads kQuantMmaLoads packed
/// 16-byte vectors together, then, per vector, decodes its kValues weights in registers
/// (dequant8()), rounds them to bf16 and stores them as row r of kValues / 16 tiles of the
/// warp's shared tile buffer; the warp multiplies each 16 x 16 tile with the 16-token tile of
/// X^T staged once per chunk for the block. The int8 codes are exact in bf16; the row's scale
/// multiplies the finished sums.
__global__ void __launch_bounds__(kQuantMmaThreads)
    gemv_quant_mma_kernel(const Weights w, const __nv_bfloat16* __restrict__ x, float* __restrict__ y, int n, int k,
                          int batch) {
#if defined(PD_BACKEND_SIM) || __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    using bf16 = __nv_bfloat16;
    constexpr int V = Weights::kValues, kTilesPerVector = V / 16;
    constexpr int kXLd = kQuantMmaChunk + 8;  // +16 bytes per token: the 16 tokens start in different banks
    constexpr int kWLd = 16 + 8;              // the same for the rows of a W tile
    constexpr int kOutLd = 16 + 8;            // Y^T's rows at the end, 96 bytes apart: 4 rows fill 128 bytes
    // X^T's chunk, col-major for matrix_b: column c of token t at xs[t * kXLd + c]. Both buffers are
    // written as 16-byte vectors and read by load_matrix_sync as bf16.
    __shared__ __align__(128) uint4 xs_vectors[16 * kXLd / 8];
    // each warp's tiles of one pair of vectors: [warp][tile][16 rows][kWLd]
    __shared__ __align__(128) uint4 tiles[kQuantMmaWarps][2 * kTilesPerVector][16 * kWLd / 8];
    const bf16* xs = reinterpret_cast<const bf16*>(xs_vectors);

    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    // lanes 0-15 take the even vectors of rows 0-15, lanes 16-31 the odd ones: the 8 lanes of a
    // shared-memory store phase write 8 different rows of one tile, in 8 different bank groups
    const int r = lane % 16, half = lane / 16, row = (blockIdx.x * kQuantMmaWarps + warp) * 16 + r;
    const int row_vectors = ceil_div(k, V);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.f);
    for (int c0 = 0; c0 < k; c0 += kQuantMmaChunk) {
        __syncthreads();  // every warp has finished with the previous chunk
        for (int i = threadIdx.x; i < 16 * kQuantMmaChunk / 8; i += kQuantMmaThreads) {
            const int t = i / (kQuantMmaChunk / 8), c = 8 * (i % (kQuantMmaChunk / 8));
            xs_vectors[(t * kXLd + c) / 8] = load_x8(x, k, batch, t, c0 + c);
        }
        __syncthreads();
        const int v0 = c0 / V, chunk_vectors = kQuantMmaChunk / V;  // the chunk's vectors of a row
        for (int p = 0; p < chunk_vectors; p += 2 * kQuantMmaLoads) {
            Weights::Vector packed[kQuantMmaLoads];
#pragma unroll
            for (int j = 0; j < kQuantMmaLoads; ++j) {  // the loads first: in flight together
                const int vec = v0 + p + 2 * j + half;
                packed[j] = row < n && vec < row_vectors ? w.load(row, vec) : Weights::Vector{};
            }
#pragma unroll
            for (int j = 0; j < kQuantMmaLoads; ++j) {
                if (c0 + (p + 2 * j) * V >= k)
                    break;  // past K: the rest of the chunk is zeros (the same in every lane)
#pragma unroll
                for (int u = 0; u < V / 8; ++u) {  // row r of tile (half, u / 2): 8 values at column 8 (u % 2)
                    float f[8];
                    w.dequant8(packed[j], u, f);
                    const uint4 bits = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                                                  pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
                    tiles[warp][half * kTilesPerVector + u / 2][(r * kWLd + 8 * (u % 2)) / 8] = bits;
                }
                __syncwarp();  // the tiles are complete before the warp reads them
#pragma unroll
                for (int t = 0; t < 2 * kTilesPerVector; ++t) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
                    wmma::load_matrix_sync(a, reinterpret_cast<const bf16*>(tiles[warp][t]), kWLd);
                    // tile t holds columns (p + 2 j + t / kTilesPerVector) V + 16 (t % kTilesPerVector) of the chunk
                    wmma::load_matrix_sync(b, xs + ((p + 2 * j + t / kTilesPerVector) * V + 16 * (t % kTilesPerVector)),
                                           kXLd);
                    wmma::mma_sync(acc, a, b, acc);
                }
                __syncwarp();  // every lane has read the tiles before the next vector overwrites them
            }
        }
    }
    // Y^T [16 rows, 16 tokens] through the warp's tile buffer (fp32, rows kOutLd apart), then the
    // row's scale and the valid rows and tokens to y [B, N].
    float* out = reinterpret_cast<float*>(tiles[warp]);
    static_assert(sizeof(tiles[0]) >= 16 * kOutLd * sizeof(float), "a warp's tile buffer holds its 16 x 16 sums");
    __syncwarp();
    wmma::store_matrix_sync(out, acc, kOutLd, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * 16; i += kWarpSize) {
        const int rr = i / 16, t = i % 16, out_row = (blockIdx.x * kQuantMmaWarps + warp) * 16 + rr;
        if (out_row < n && t < batch) y[std::size_t(t) * n + out_row] = out[rr * kOutLd + t] * w.row_scale(out_row);
    }
#else
    __trap();  // not launched: the launcher checks the compute capability
#endif
}
// [gemv_quant_mma_kernel]

// [dequantize_kernel]
/// The dequantized weights that a prompt's GEMM reads: thread i writes vector i % row_vectors of
/// row i / row_vectors, decoded by the GEMV's load() and dequant8(), times the row's scale,
/// rounded to bf16.
__global__ void dequantize_kernel(const Weights w, int n, int k, int row_vectors, __nv_bfloat16* __restrict__ out) {
    constexpr int V = Weights::kValues;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * row_vectors) return;
    const int row = int(i / row_vectors), vec = int(i % row_vectors);
    const Weights::Vector v = w.load(row, vec);
    const float s = w.row_scale(row);
#pragma unroll
    for (int j = 0; j < V / 8; ++j) {
        float f[8];
        w.dequant8(v, j, f);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int c = vec * V + 8 * j + e;
            if (c < k) out[std::size_t(row) * k + c] = __float2bfloat16_rn(f[e] * s);
        }
    }
}
// [dequantize_kernel]

/// Launches gemv_quant_kernel<kBatch>: grid ceil(N / 32) blocks of 256 threads.
template <int kBatch>
void launch_batch(const Weights& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    gemv_quant_kernel<kBatch>
        <<<unsigned(ceil_div(s.n, kQuantRowsPerBlock)), kQuantThreads, 0, stream>>>(w, x, y, s.n, s.k, s.batch);
    PD_CHECK_LAUNCH();
}

/// The view of @p q's int8 weights. @param q the packed matrix, checked to be int8
/// @param who the caller, named in the error @return the view
Weights view(const DeviceQuantizedMatrix& q, const char* who) {
    if (q.layout.format != Format::int8)
        throw std::invalid_argument(std::string(who) + ": weights in " + to_string(q.layout.format) + ", not int8");
    return {q.packed.data(), q.row_scales.data(), q.layout.vectors_per_row()};
}

}  // namespace pd::kernels::quant::int8_gemv

namespace pd::kernels::quant {

void gemv_int8(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s, cudaStream_t stream) {
    check_shape(s, w.layout);
    const int8_gemv::Weights v = int8_gemv::view(w, "gemv_int8");
    if (s.batch == 1)  // the kernel for the smallest of 1, 2, 4, 8, 16 tokens that holds the batch
        int8_gemv::launch_batch<1>(v, x, y, s, stream);
    else if (s.batch == 2)
        int8_gemv::launch_batch<2>(v, x, y, s, stream);
    else if (s.batch <= 4)
        int8_gemv::launch_batch<4>(v, x, y, s, stream);
    else if (s.batch <= 8)
        int8_gemv::launch_batch<8>(v, x, y, s, stream);
    else
        int8_gemv::launch_batch<16>(v, x, y, s, stream);
}

void gemv_int8_mma(const DeviceQuantizedMatrix& w, const __nv_bfloat16* x, float* y, const Shape& s,
                   cudaStream_t stream) {
    check_shape(s, w.layout);
    const int8_gemv::Weights v = int8_gemv::view(w, "gemv_int8_mma");
    require_bf16_tensor_cores("quant::gemv_int8_mma (int8_tc)");
    int8_gemv::gemv_quant_mma_kernel<<<unsigned(ceil_div(s.n, kQuantMmaRows)), kQuantMmaThreads, 0, stream>>>(
        v, x, y, s.n, s.k, s.batch);
    PD_CHECK_LAUNCH();
}

void dequantize_int8(const DeviceQuantizedMatrix& q, __nv_bfloat16* out, cudaStream_t stream) {
    const long long threads = (long long)q.n * q.layout.vectors_per_row();  // a thread per 16-byte vector
    int8_gemv::dequantize_kernel<<<unsigned(ceil_div(threads, 256ll)), 256, 0, stream>>>(
        int8_gemv::view(q, "dequantize_int8"), q.n, q.layout.k, q.layout.vectors_per_row(), out);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::quant
