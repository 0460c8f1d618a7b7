/// @file layers.cu
/// @brief Chapter 04's small kernels (layers.hpp): embedding gather, RMSNorm, RoPE, SwiGLU, the
/// residual add, fp32 -> bf16, the token-major <-> head-major permutes, the bookkeeping of
/// chapter 05's mixed batches and the greedy argmax.
/// Each is one short kernel; together they move far fewer bytes than the projections between
/// them. The KV appends are lab 04's (solutions/04_kv_cache/kv_append.cu) and the
/// runtime's (kernels/runtime/kv_append_rows.cu).
#include "layers/layers.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/device_helpers.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include <thrust/execution_policy.h>
#include <thrust/scan.h>

#if !defined(PD_BACKEND_SIM)
#include <cub/block/block_reduce.cuh>
#endif

namespace pd::kernels::layers {

namespace {

/// Threads per block of every kernel here: eight warps.
constexpr int kThreads = 256;
/// Warps per block, for block_reduce().
constexpr int kWarps = kThreads / kWarpSize;
/// Elements an element-wise launch covers at most: the grid's x limit times the block.
constexpr std::size_t kMaxElements = std::size_t(0x7FFFFFFF) * kThreads;

/// Throws std::invalid_argument "<who>: <name> must be >= 1, got <v>" when @p v < 1.
void require_positive(const char* who, const char* name, long long v) {
    if (v < 1) throw std::invalid_argument(std::string(who) + ": " + name + " must be >= 1, got " + std::to_string(v));
}

/// Throws when @p n elements are none or more than one element-wise launch covers.
void require_elements(const char* who, const char* name, std::size_t n) {
    if (n < 1) throw std::invalid_argument(std::string(who) + ": " + name + " must be >= 1, got 0");
    if (n > kMaxElements)
        throw std::invalid_argument(std::string(who) + ": " + name + " = " + std::to_string(n) + " exceeds " +
                                    std::to_string(kMaxElements) + " (2^31 - 1 blocks of " + std::to_string(kThreads) +
                                    " threads)");
}

/// Blocks of kThreads covering @p n elements (n <= kMaxElements).
unsigned blocks_for(std::size_t n) {
    return unsigned(ceil_div(n, std::size_t(kThreads)));
}

/// Stores an fp32 result in an fp32 output: as is.
__device__ __forceinline__ void store(float* p, float v) {
    *p = v;
}
/// Stores an fp32 result in a bf16 output: rounded to the nearest even bf16.
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    *p = __float2bfloat16_rn(v);
}

}  // namespace

// ---- embedding ------------------------------------------------------------------------------

// [embedding_kernel]
/// Block t copies row tokens[t] of the table into row t of x; consecutive threads copy
/// consecutive columns (coalesced). An id outside 0 .. V-1 writes zeros rather than read
/// outside the table.
template <typename T>
__global__ void embedding_kernel(const int* __restrict__ tokens, const T* __restrict__ table, float* __restrict__ x,
                                 int D, int V, int first) {
    const int id = tokens[blockIdx.x] - first;  // first: chapter 10's shard of the table (else 0)
    const bool valid = id >= 0 && id < V;
    const T* row = table + std::size_t(valid ? id : 0) * D;
    float* out = x + std::size_t(blockIdx.x) * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) out[c] = valid ? to_f32(row[c]) : 0.f;
}
// [embedding_kernel]

/// Checks the sizes and launches embedding_kernel on table type Elem: T blocks of 256 threads.
template <typename Elem>
void launch_embedding(const int* tokens, const Elem* table, float* x, int T, int D, int V, cudaStream_t stream,
                      int first = 0) {
    require_positive("embedding", "T (tokens)", T);
    require_positive("embedding", "D (width)", D);
    require_positive("embedding", "V (rows of the table)", V);
    if (first < 0) throw std::invalid_argument("embedding: first = " + std::to_string(first) + " must be >= 0");
    embedding_kernel<Elem><<<unsigned(T), kThreads, 0, stream>>>(tokens, table, x, D, V, first);
    PD_CHECK_LAUNCH();
}

void embedding(const int* tokens, const float* table, float* x, int T, int D, int V, cudaStream_t stream) {
    launch_embedding(tokens, table, x, T, D, V, stream);
}

void embedding(const int* tokens, const __nv_bfloat16* table, float* x, int T, int D, int V, cudaStream_t stream) {
    launch_embedding(tokens, table, x, T, D, V, stream);
}
void embedding_shard(const int* tokens, const float* table, float* x, int T, int D, int first, int V,
                     cudaStream_t stream) {
    launch_embedding(tokens, table, x, T, D, V, stream, first);
}
void embedding_shard(const int* tokens, const __nv_bfloat16* table, float* x, int T, int D, int first, int V,
                     cudaStream_t stream) {
    launch_embedding(tokens, table, x, T, D, V, stream, first);
}

/// Row r of rank s's block goes to columns s cols ... of row r: one thread per element.
__global__ void interleave_shards_kernel(const float* __restrict__ gathered, float* __restrict__ out, int shards,
                                         int rows, int cols) {
    const std::size_t n = std::size_t(shards) * rows * cols;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const std::size_t s = i / (std::size_t(rows) * cols), rest = i % (std::size_t(rows) * cols);
        const std::size_t r = rest / cols, c = rest % cols;
        out[r * std::size_t(shards) * cols + s * cols + c] = gathered[i];
    }
}

void interleave_shards(const float* gathered, float* out, int shards, int rows, int cols, cudaStream_t stream) {
    require_positive("interleave_shards", "shards", shards);
    require_positive("interleave_shards", "rows", rows);
    require_positive("interleave_shards", "cols", cols);
    const std::size_t n = std::size_t(shards) * rows * cols;
    const unsigned blocks = unsigned(std::min<std::size_t>((n + kThreads - 1) / kThreads, 4096));
    interleave_shards_kernel<<<blocks, kThreads, 0, stream>>>(gathered, out, shards, rows, cols);
    PD_CHECK_LAUNCH();
}

// ---- RMSNorm --------------------------------------------------------------------------------

// [rmsnorm_kernel]
/// Block t normalizes row t: the threads add up squares over a strided slice of the row, one
/// block_reduce() gives every thread the row's sum, and each thread scales its slice.
template <typename Out>
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ weight, Out* __restrict__ y,
                               int D, float eps) {
    __shared__ float warp_results[kWarps];
    const float* row = x + std::size_t(blockIdx.x) * D;
    Out* out = y + std::size_t(blockIdx.x) * D;
    float sum = 0.f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) sum += row[i] * row[i];
    sum = block_reduce<kWarps>(sum, warp_results, SumOp{}, 0.f);
    const float inv_rms = rsqrtf(sum / float(D) + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x) store(out + i, weight[i] * (row[i] * inv_rms));
}
// [rmsnorm_kernel]

/// Checks the sizes and launches rmsnorm_kernel writing Out: T blocks of 256 threads.
template <typename Out>
void launch_rmsnorm(const float* x, const float* weight, Out* y, int T, int D, float eps, cudaStream_t stream) {
    require_positive("rmsnorm", "T (rows)", T);
    require_positive("rmsnorm", "D (width)", D);
    if (!(eps >= 0.f)) throw std::invalid_argument("rmsnorm: eps must be >= 0, got " + std::to_string(eps));
    rmsnorm_kernel<Out><<<unsigned(T), kThreads, 0, stream>>>(x, weight, y, D, eps);
    PD_CHECK_LAUNCH();
}

void rmsnorm(const float* x, const float* weight, float* y, int T, int D, float eps, cudaStream_t stream) {
    launch_rmsnorm(x, weight, y, T, D, eps, stream);
}

void rmsnorm(const float* x, const float* weight, __nv_bfloat16* y, int T, int D, float eps, cudaStream_t stream) {
    launch_rmsnorm(x, weight, y, T, D, eps, stream);
}

// ---- RoPE -----------------------------------------------------------------------------------

// [rope_kernel]
/// One thread per pair (x[2i], x[2i+1]) of a head of a token: the pair turns by
/// pos * theta^(-2i/d). The angle and its sine and cosine are computed in double: near
/// position 8000 neighbouring fp32 values are 5e-4 rad apart, too coarse for long contexts.
__global__ void rope_kernel(float* __restrict__ x, const int* __restrict__ positions, std::size_t pairs, int H, int d,
                            double theta) {
    const std::size_t p = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    const int half = d / 2;
    const int i = int(p % half);                        // pair index within the head
    const std::size_t t = p / (std::size_t(H) * half);  // token
    const double angle = double(positions[t]) * pow(theta, -2.0 * i / d);
    const float c = float(cos(angle)), s = float(sin(angle));
    float* pair = x + 2 * p;  // pairs are adjacent and heads contiguous: pair p starts at 2p
    const float x0 = pair[0], x1 = pair[1];
    pair[0] = x0 * c - x1 * s;
    pair[1] = x0 * s + x1 * c;
}
// [rope_kernel]

void rope(float* x, const int* positions, int T, int H, int d, double theta, cudaStream_t stream) {
    require_positive("rope", "T (tokens)", T);
    require_positive("rope", "H (heads)", H);
    if (d < 2 || d % 2 != 0)
        throw std::invalid_argument("rope: d (head dim) must be even and >= 2, got " + std::to_string(d));
    if (!(theta > 0)) throw std::invalid_argument("rope: theta must be > 0, got " + std::to_string(theta));
    const std::size_t pairs = std::size_t(T) * H * (d / 2);
    require_elements("rope", "T * H * d / 2 (pairs)", pairs);
    rope_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(x, positions, pairs, H, d, theta);
    PD_CHECK_LAUNCH();
}

// ---- element-wise: SwiGLU, residual add, fp32 -> bf16 ---------------------------------------

// [swiglu_kernel]
/// out[i] = silu(gate[i]) * up[i], one thread per element; silu(g) = g / (1 + e^-g) tends to 0
/// for large negative g (e^-g = inf gives g / inf = -0, not NaN).
template <typename Out>
__global__ void swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up, Out* __restrict__ out,
                              std::size_t n) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    store(out + i, g / (1.f + expf(-g)) * up[i]);
}
// [swiglu_kernel]

/// Checks the size and launches swiglu_kernel writing Out: one thread per element.
template <typename Out>
void launch_swiglu(const float* gate, const float* up, Out* out, std::size_t n, cudaStream_t stream) {
    require_elements("swiglu", "n (elements)", n);
    swiglu_kernel<Out><<<blocks_for(n), kThreads, 0, stream>>>(gate, up, out, n);
    PD_CHECK_LAUNCH();
}

void swiglu(const float* gate, const float* up, float* out, std::size_t n, cudaStream_t stream) {
    launch_swiglu(gate, up, out, n, stream);
}

void swiglu(const float* gate, const float* up, __nv_bfloat16* out, std::size_t n, cudaStream_t stream) {
    launch_swiglu(gate, up, out, n, stream);
}

/// x[i] += y[i], one thread per element: the residual stream takes each sublayer's output.
__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, std::size_t n) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

void add(float* x, const float* y, std::size_t n, cudaStream_t stream) {
    require_elements("add", "n (elements)", n);
    add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
    PD_CHECK_LAUNCH();
}

/// out[i] = bf16(x[i]), round to nearest even, one thread per element.
__global__ void to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ out, std::size_t n) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

void to_bf16(const float* x, __nv_bfloat16* out, std::size_t n, cudaStream_t stream) {
    require_elements("to_bf16", "n (elements)", n);
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, out, n);
    PD_CHECK_LAUNCH();
}

/// x[i] = float(bf16(x[i])), one thread per element.
__global__ void round_to_bf16_kernel(float* __restrict__ x, std::size_t n) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

void round_to_bf16(float* x, std::size_t n, cudaStream_t stream) {
    require_elements("round_to_bf16", "n (elements)", n);
    round_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n);
    PD_CHECK_LAUNCH();
}

// ---- permutes -------------------------------------------------------------------------------

// [permute_kernel]
/// One thread per element of out: [B, S, H, d] -> [B, H, S, d] when @p to_heads, the inverse
/// otherwise. Consecutive threads write consecutive elements and read runs of d consecutive
/// elements, so both sides stay coalesced whatever the layout.
__global__ void permute_kernel(const float* __restrict__ x, float* __restrict__ out, std::size_t n, int S, int H, int d,
                               bool to_heads) {
    const std::size_t o = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const std::size_t c = o % d, r = o / d;  // r: the row of out
    std::size_t b, s, h;
    if (to_heads) {  // out row r = (b H + h) S + s
        s = r % S;
        h = (r / S) % H;
        b = r / (std::size_t(S) * H);
        out[o] = x[((b * S + s) * H + h) * d + c];
    } else {  // out row r = (b S + s) H + h
        h = r % H;
        s = (r / H) % S;
        b = r / (std::size_t(S) * H);
        out[o] = x[((b * H + h) * S + s) * d + c];
    }
}
// [permute_kernel]

/// Checks the sizes and launches permute_kernel in direction @p to_heads.
void launch_permute(const char* who, const float* x, float* out, int B, int S, int H, int d, bool to_heads,
                    cudaStream_t stream) {
    require_positive(who, "B (batch)", B);
    require_positive(who, "S (tokens per sequence)", S);
    require_positive(who, "H (heads)", H);
    require_positive(who, "d (head dim)", d);
    const std::size_t n = std::size_t(B) * S * H * d;
    require_elements(who, "B * S * H * d (elements)", n);
    permute_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, out, n, S, H, d, to_heads);
    PD_CHECK_LAUNCH();
}

void tokens_to_heads(const float* x, float* out, int B, int S, int H, int d, cudaStream_t stream) {
    launch_permute("tokens_to_heads", x, out, B, S, H, d, true, stream);
}

void heads_to_tokens(const float* x, float* out, int B, int S, int H, int d, cudaStream_t stream) {
    launch_permute("heads_to_tokens", x, out, B, S, H, d, false, stream);
}

// ---- mixed batches (chapter 05) ---------------------------------------------------------------

namespace {

/// Block s: sequence s's context after the step, and the position and slot of each of its rows.
__global__ void pack_batch_kernel(const int* __restrict__ q_len, const int* __restrict__ context,
                                  const int* __restrict__ slot, const int* __restrict__ q_start,
                                  int* __restrict__ kv_len, int* __restrict__ positions, int* __restrict__ token_slot) {
    const int s = blockIdx.x, first = q_start[s], n = q_len[s];
    if (threadIdx.x == 0) kv_len[s] = context[s] + n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        positions[first + i] = context[s] + i;
        token_slot[first + i] = slot[s];
    }
}

/// Block s: copies the last row of sequence s.
__global__ void gather_last_rows_kernel(const float* __restrict__ x, const int* __restrict__ q_start,
                                        const int* __restrict__ q_len, float* __restrict__ out, int D) {
    const int s = blockIdx.x;
    const float* row = x + (std::size_t(q_start[s]) + q_len[s] - 1) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[std::size_t(s) * D + i] = row[i];
}

}  // namespace

namespace {

/// Thrust's temporary storage carved from a buffer the caller allocated once, so that a scan
/// inside a timed step allocates no device memory. Thrust asks for its storage through this
/// allocator (thrust::device(allocator)); asking for more than the buffer holds is an error.
class ScratchAllocator {
public:
    using value_type = char;
    ScratchAllocator(void* begin, std::size_t bytes) : begin_(static_cast<char*>(begin)), bytes_(bytes) {}
    char* allocate(std::ptrdiff_t n) {
        const std::size_t at = ceil_div(used_, std::size_t(256)) * 256;  // CUB aligns its storage to 256 bytes
        if (begin_ == nullptr || at + std::size_t(n) > bytes_)
            throw std::invalid_argument("pack_batch: the scan needs " + std::to_string(at + std::size_t(n)) +
                                        " bytes of scratch, the caller gave " + std::to_string(bytes_));
        used_ = at + std::size_t(n);
        return begin_ + at;
    }
    void deallocate(char*, std::size_t) {}

private:
    char* begin_;
    std::size_t bytes_;
    std::size_t used_ = 0;
};

}  // namespace

void pack_batch(const int* q_len, const int* context, const int* slot, int* q_start, int* kv_len, int* positions,
                int* token_slot, int S, void* scratch, std::size_t scratch_bytes) {
    require_positive("pack_batch", "S", S);
    if (S > 65535) throw std::invalid_argument("pack_batch: S = " + std::to_string(S) + " exceeds 65535");
    ScratchAllocator scratch_space(scratch, scratch_bytes);
    // [pack_batch_scan]
    // q_start[s] = q_len[0] + ... + q_len[s - 1]: Thrust's scan, its temporary storage from the scratch
    thrust::exclusive_scan(thrust::device(scratch_space), q_len, q_len + S, q_start);
    pack_batch_kernel<<<unsigned(S), 128>>>(q_len, context, slot, q_start, kv_len, positions, token_slot);
    // [pack_batch_scan]
    PD_CHECK_LAUNCH();
}

void gather_last_rows(const float* x, const int* q_start, const int* q_len, float* out, int S, int D,
                      cudaStream_t stream) {
    require_positive("gather_last_rows", "S", S);
    require_positive("gather_last_rows", "D", D);
    if (S > 65535) throw std::invalid_argument("gather_last_rows: S = " + std::to_string(S) + " exceeds 65535");
    gather_last_rows_kernel<<<unsigned(S), 128, 0, stream>>>(x, q_start, q_len, out, D);
    PD_CHECK_LAUNCH();
}

// ---- greedy argmax --------------------------------------------------------------------------

/// True when (value @p v, index @p j) beats (@p best, @p best_j): larger, or equal at a lower
/// index (the tie rule of argmax, and of cub::ArgMax).
__device__ __forceinline__ bool beats(float v, int j, float best, int best_j) {
    return v > best || (v == best && j < best_j);
}

// [argmax_kernel]
/// Block b finds the largest logit of row b: each thread scans a strided slice, then the block
/// reduces the threads' (index, value) pairs with the same rule, so the lowest index wins a tie
/// wherever the tied values sit. A thread with no element holds (-inf, INT_MAX), which loses to
/// any real element.
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* __restrict__ logits, int* __restrict__ out, int V) {
    const float* row = logits + std::size_t(blockIdx.x) * V;
    const int t = threadIdx.x;
    float best = -INFINITY;
    int best_j = INT_MAX;
    for (int j = t; j < V; j += kThreads) {
        if (beats(row[j], j, best, best_j)) {
            best = row[j];
            best_j = j;
        }
    }
#if !defined(PD_BACKEND_SIM)
    // CUB's block reduction with its ArgMax operator (the same tie rule); valid in thread 0.
    using Pair = cub::KeyValuePair<int, float>;
    using BlockReduce = cub::BlockReduce<Pair, kThreads>;
    __shared__ typename BlockReduce::TempStorage temp;
    const Pair result = BlockReduce(temp).Reduce(Pair(best_j, best), cub::ArgMax());
    if (t == 0) out[blockIdx.x] = result.key;
#else
    // The simulator cannot run CUB: a shared-memory tree halves the candidates at each step.
    __shared__ float values[kThreads];
    __shared__ int indices[kThreads];
    values[t] = best;
    indices[t] = best_j;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (t < stride && beats(values[t + stride], indices[t + stride], values[t], indices[t])) {
            values[t] = values[t + stride];
            indices[t] = indices[t + stride];
        }
        __syncthreads();  // the next step reads what this one wrote
    }
    if (t == 0) out[blockIdx.x] = indices[0];
#endif
}
// [argmax_kernel]

void argmax(const float* logits, int* out, int B, int V, cudaStream_t stream) {
    require_positive("argmax", "B (rows)", B);
    require_positive("argmax", "V (vocabulary)", V);
    argmax_kernel<<<unsigned(B), kThreads, 0, stream>>>(logits, out, V);
    PD_CHECK_LAUNCH();
}

}  // namespace pd::kernels::layers
