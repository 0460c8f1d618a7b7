// Diagnostics of the warp-level matrix instructions of pd/warp_mma.cuh (simulator only: on a
// GPU these bugs are undefined behaviour, a fault or garbage): each stops the kernel with the
// error a GPU would report where it has one, and a diagnostic naming the instruction, the
// thread and the source line. Cases:
//  * an ldmatrix row address not 16-byte aligned (lane 5's), cudaErrorMisalignedAddress;
//  * a cp.async of 12 bytes (the sizes are 4, 8 and 16), and a 16-byte cp.async to an address
//    8 bytes past a 16-byte boundary (cudaErrorMisalignedAddress);
//  * an ldmatrix of a cp.async destination before the copying thread's wait (the missing
//    cp.async.wait_group before __syncthreads), naming both lines;
//  * an mma.sync reached by half of the warp, and by a partial warp (a block of 48 threads);
//  * the lanes of one warp at two different ldmatrix forms (x4 in half the warp, x2 in the other).
// And the documented rule for plain reads, which the simulator does not see: a cp.async
// destination holds 0xFF bytes until the wait, so reading it early gives garbage (NaN), and the
// copied bytes after the wait. After each fault, cudaDeviceReset() and a valid launch runs.
#include "diag.cuh"

#include "pd/warp_mma.cuh"

#include <cstdint>
#include <cstring>
#include <vector>

constexpr int kMisalignedLine = __LINE__ + 7;
__global__ void ldmatrix_misaligned(std::uint32_t* out) {
    __shared__ __align__(16) std::uint16_t s[32 * 8 + 8];
    for (int i = threadIdx.x; i < 32 * 8 + 8; i += 32) s[i] = std::uint16_t(i);
    __syncthreads();
    const int lane = threadIdx.x % 32, shift = lane == 5 ? 1 : 0;  // lane 5: 2 bytes off
    std::uint32_t r[4];
    pd::ldmatrix_x4(r, s + lane * 8 + shift);
    out[threadIdx.x] = r[0];
}

constexpr int kBadSizeLine = __LINE__ + 4;
__global__ void cp_async_bad_size(const unsigned char* src, unsigned char* out) {
    __shared__ __align__(16) unsigned char s[32 * 16];
    // A 12-byte copy: no such cp.async (ptxas refuses the size; the wrapper traps on a GPU).
    pd::cp_async(s + 16 * threadIdx.x, src + 16 * threadIdx.x, 12, 12);
    pd::cp_async_wait_all();
    out[threadIdx.x] = s[16 * threadIdx.x];
}

constexpr int kMisalignedCopyLine = __LINE__ + 3;
__global__ void cp_async_misaligned(const unsigned char* src, unsigned char* out) {
    __shared__ __align__(16) unsigned char s[32 * 16 + 16];
    pd::cp_async(s + 16 * threadIdx.x + 8, src + 16 * threadIdx.x, 16, 16);
    pd::cp_async_wait_all();
    out[threadIdx.x] = s[16 * threadIdx.x + 8];
}

constexpr int kCopyLine = __LINE__ + 9, kReadLine = __LINE__ + 14;
// Every thread of a 64-thread block stages one 16-byte row; warp 0 then reads 32 of the rows
// with ldmatrix. Bug: the wait is missing before the barrier, so the rows are still in flight.
__global__ void ldmatrix_before_wait(const std::uint16_t* src, std::uint32_t* out, bool wait) {
    __shared__ __align__(16) std::uint16_t s[64 * 8];
    const int t = threadIdx.x;
    // The row index is reversed so that the rows warp 0 reads are copied by warp 1: another
    // thread's copy is pending, not only the reader's own.
    const int row = 63 - t;
    pd::cp_async(s + row * 8, src + row * 8, 16, 16);
    pd::cp_async_commit();
    if (wait) pd::cp_async_wait<0>();  // called with wait = false: the bug
    __syncthreads();
    std::uint32_t r[4];
    if (t < 32) pd::ldmatrix_x4(r, s + t * 8);
    if (t < 32) out[t] = r[0];
    pd::cp_async_wait<0>();
}

// Plain loads are not instrumented: before the wait the destination reads as 0xFF bytes.
__global__ void plain_read_before_wait(const float* src, float* early, float* late) {
    __shared__ __align__(16) float s[32 * 4];
    const int t = threadIdx.x;
    pd::cp_async(s + 4 * t, src + 4 * t, 16, 16);
    pd::cp_async_commit();
    early[t] = s[4 * t];  // bug: before the wait
    pd::cp_async_wait<0>();
    late[t] = s[4 * t];
}

constexpr int kHalfWarpLine = __LINE__ + 6;
__global__ void mma_half_warp(float* out) {
    const std::uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    const float c[4] = {0, 0, 0, 0};
    float d[4] = {0, 0, 0, 0};
    // Bug: an mma.sync in divergent code; lanes 16-31 never reach it.
    if (threadIdx.x % 32 < 16) pd::mma_m16n8k16_bf16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

constexpr int kPartialLine = __LINE__ + 6;
__global__ void mma_partial_warp(float* out) {
    const std::uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    const float c[4] = {0, 0, 0, 0};
    float d[4];
    // Launched with 48 threads: warp 1 has 16 lanes, and an mma.sync needs 32.
    pd::mma_m16n8k16_f16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

constexpr int kX4Line = __LINE__ + 8, kX2Line = __LINE__ + 10;
__global__ void ldmatrix_two_forms(std::uint32_t* out) {
    __shared__ __align__(16) std::uint16_t s[32 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) s[i] = std::uint16_t(i);
    __syncthreads();
    std::uint32_t r[4] = {0, 0, 0, 0};
    // Bug: the two halves of the warp execute different ldmatrix instructions.
    if (threadIdx.x < 16) {
        pd::ldmatrix_x4(r, s + threadIdx.x * 8);
    } else {
        pd::ldmatrix_x2(reinterpret_cast<std::uint32_t(&)[2]>(r), s + threadIdx.x * 8);
    }
    out[threadIdx.x] = r[0];
}

int main() {
    using conformance::at;
    std::uint32_t* d_u32;
    float *d_f, *d_f2;
    unsigned char *d_bytes, *d_out;
    std::uint16_t* d_rows;
    CUDA_OK(cudaMalloc(&d_u32, 64 * sizeof(std::uint32_t)));
    CUDA_OK(cudaMalloc(&d_f, 128 * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_f2, 128 * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_bytes, 1024));
    CUDA_OK(cudaMalloc(&d_out, 64));
    CUDA_OK(cudaMalloc(&d_rows, 64 * 8 * sizeof(std::uint16_t)));
    CUDA_OK(cudaMemset(d_bytes, 7, 1024));
    std::vector<std::uint16_t> rows(64 * 8);
    for (int i = 0; i < 64 * 8; ++i) rows[std::size_t(i)] = std::uint16_t(i);
    CUDA_OK(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice));

    ldmatrix_misaligned<<<1, 32>>>(d_u32);
    conformance::expect_fault("ldmatrix, misaligned row", cudaErrorMisalignedAddress,
                              {"ldmatrix.sync.aligned.m8n8.x4.shared.b16", "thread (5,0,0)", "lane 5",
                               "not 16-byte aligned", at(__FILE__, kMisalignedLine)});
    check_recovered("ldmatrix, misaligned row");

    cp_async_bad_size<<<1, 32>>>(d_bytes, d_out);
    conformance::expect_fault(
        "cp.async of 12 bytes", cudaErrorLaunchFailure,
        {"cp.async of 12 bytes", "4, 8 or 16", "block (0,0,0) thread (", at(__FILE__, kBadSizeLine)});
    check_recovered("cp.async of 12 bytes");

    cp_async_misaligned<<<1, 32>>>(d_bytes, d_out);
    conformance::expect_fault(
        "cp.async, misaligned destination", cudaErrorMisalignedAddress,
        {"cp.async of 16 bytes", "destination address is not 16-byte aligned", at(__FILE__, kMisalignedCopyLine)});
    check_recovered("cp.async, misaligned destination");

    // With the wait in place the same kernel runs and reads the rows (row t holds 8t .. 8t + 7).
    ldmatrix_before_wait<<<1, 64>>>(d_rows, d_u32, true);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<std::uint32_t> got(32);
    CUDA_OK(cudaMemcpy(got.data(), d_u32, 32 * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
    std::vector<std::uint32_t> want(32);
    for (int l = 0; l < 32; ++l) {
        const int e = (l / 4) * 8 + 2 * (l % 4);  // matrix 0 = rows 0-7: (l / 4, 2 (l % 4)) and the next
        want[std::size_t(l)] = std::uint32_t(e) | (std::uint32_t(e + 1) << 16);
    }
    CHECK(conformance::bit_mismatches("ldmatrix after the wait", got.data(), want.data(), 32) == 0);
    ldmatrix_before_wait<<<1, 64>>>(d_rows, d_u32, false);
    conformance::expect_fault("ldmatrix before the cp.async wait", cudaErrorLaunchFailure,
                              {"ldmatrix.sync.aligned.m8n8.x4.shared.b16", "is still copying", "a cp.async of thread (",
                               at(__FILE__, kCopyLine), at(__FILE__, kReadLine)});
    check_recovered("ldmatrix before the cp.async wait");

    std::vector<float> src(128);
    for (int i = 0; i < 128; ++i) src[std::size_t(i)] = float(i);
    CUDA_OK(cudaMemcpy(d_f, src.data(), 128 * sizeof(float), cudaMemcpyHostToDevice));
    plain_read_before_wait<<<1, 32>>>(d_f, d_f2, d_f2 + 32);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> early_late(64);
    CUDA_OK(cudaMemcpy(early_late.data(), d_f2, 64 * sizeof(float), cudaMemcpyDeviceToHost));
    int garbage = 0, landed = 0;
    for (int t = 0; t < 32; ++t) {
        std::uint32_t bits;
        std::memcpy(&bits, &early_late[std::size_t(t)], 4);
        garbage += bits == 0xFFFFFFFFu;
        landed += early_late[std::size_t(32 + t)] == float(4 * t);
    }
    CHECK_MSG(garbage == 32, "a plain read before the wait must see the 0xFF poison: %d of 32 did", garbage);
    CHECK_MSG(landed == 32, "after the wait the copied values must be there: %d of 32 were", landed);

    mma_half_warp<<<1, 32>>>(d_f);
    conformance::expect_fault(
        "mma.sync in half of the warp", cudaErrorLaunchFailure,
        {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", at(__FILE__, kHalfWarpLine), "exited"});
    check_recovered("mma.sync in half of the warp");

    mma_partial_warp<<<1, 48>>>(d_f);
    conformance::expect_fault(
        "mma.sync in a partial warp", cudaErrorLaunchFailure,
        {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", at(__FILE__, kPartialLine), "do not exist", "48"});
    check_recovered("mma.sync in a partial warp");

    ldmatrix_two_forms<<<1, 32>>>(d_u32);
    conformance::expect_fault(
        "two ldmatrix forms in one warp", cudaErrorLaunchFailure,
        {"different warp collectives", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", at(__FILE__, kX4Line),
         "ldmatrix.sync.aligned.m8n8.x2.shared.b16", at(__FILE__, kX2Line)});
    check_recovered("two ldmatrix forms in one warp");

    CUDA_OK(cudaFree(d_u32));
    CUDA_OK(cudaFree(d_f));
    CUDA_OK(cudaFree(d_f2));
    CUDA_OK(cudaFree(d_bytes));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_rows));
    return conformance::finish();
}
