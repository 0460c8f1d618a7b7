/// @file warp_mma.cuh
/// @brief The warp-level matrix instructions under WMMA, as device functions: `mma.sync`
/// (m16n8k16, bf16 or f16 inputs, fp32 accumulators), `ldmatrix` (x1, x2, x4, `.trans`) and
/// `cp.async` with its commit and wait groups.
///
/// On the cuda backend each function is one inline PTX instruction (compute capability 8.0 and
/// later; on an older GPU they trap). On the simulator each is emulated with the PTX ISA's exact
/// fragment layouts (pd/sim/warp_matrix.hpp): a kernel written against these functions runs,
/// and is tested, on both. The simulator also stops, naming the thread and the line, what the
/// hardware punishes: an `ldmatrix` row address that is not 16-byte aligned, a `cp.async` of a
/// size other than 4, 8 or 16 bytes (or misaligned), an `ldmatrix` of bytes a `cp.async` has not
/// yet delivered (before its wait), and a warp-wide instruction not executed by the whole warp.
///
/// **Fragments.** For lane l of a warp, let g = l / 4 (its group) and t = l % 4 (its place in
/// the group). Registers are 32 bits and hold two 16-bit elements, the first in the low half.
///
/// | operand | registers | lane l holds |
/// | :------ | :-------- | :----------- |
/// | A, 16 x 16 (row) | a[0..3] | a[0]: (g, 2t), (g, 2t+1); a[1]: (g+8, 2t), (g+8, 2t+1); a[2]: (g, 2t+8), (g, 2t+9);
/// a[3]: (g+8, 2t+8), (g+8, 2t+9) | | B, 16 x 8 (col) | b[0..1] | b[0]: (2t, g), (2t+1, g); b[1]: (2t+8, g), (2t+9, g)
/// | | C, D, 16 x 8 | c[0..3] (float) | (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) | | ldmatrix, each 8 x 8 matrix q |
/// r[q] | (g, 2t), (g, 2t+1); with `.trans` (2t, g), (2t+1, g) |
///
/// So an `ldmatrix_x4` of the four 8 x 8 quarters of a row-major 16 x 16 tile (lanes 0-15 giving
/// rows 0-15 at columns 0-7, lanes 16-31 the same rows at columns 8-15) is exactly an A fragment,
/// and an `ldmatrix_x2` of B's columns stored as rows (W's rows in Y = X W^T) is a B fragment.
///
/// For `.cu` files only (nvcc, or the simulator's build of a kernel source).
#pragma once

#include <cstdint>

#if defined(PD_BACKEND_SIM)
#include "pd/sim/warp_matrix.hpp"

#include <source_location>
#endif

namespace pd {

#if defined(PD_BACKEND_SIM)

// ---- on the simulator: the emulation ---------------------------------------------------------
// The same functions as on a GPU (documented below), each forwarding to its emulation in
// pd/sim/warp_matrix.hpp with one more parameter, filled in by the compiler: the caller's source
// line, which the simulator's diagnostics name.

__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                         const float (&c)[4],
                                         const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::mma_m16n8k16(sim::ptx::MmaInput::bf16, d, a, b, c, call_site);
}
__device__ inline void mma_m16n8k16_f16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                        const float (&c)[4],
                                        const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::mma_m16n8k16(sim::ptx::MmaInput::f16, d, a, b, c, call_site);
}
__device__ inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row,
                                   const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(4, false, r, row, call_site);
}
__device__ inline void ldmatrix_x2(std::uint32_t (&r)[2], const void* row,
                                   const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(2, false, r, row, call_site);
}
__device__ inline void ldmatrix_x1(std::uint32_t (&r)[1], const void* row,
                                   const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(1, false, r, row, call_site);
}
__device__ inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row,
                                         const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(4, true, r, row, call_site);
}
__device__ inline void ldmatrix_x2_trans(std::uint32_t (&r)[2], const void* row,
                                         const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(2, true, r, row, call_site);
}
__device__ inline void ldmatrix_x1_trans(std::uint32_t (&r)[1], const void* row,
                                         const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::ldmatrix(1, true, r, row, call_site);
}
__device__ inline void cp_async(void* dst, const void* src, int bytes, int src_bytes,
                                const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::cp_async(dst, src, bytes, src_bytes, call_site);
}
__device__ inline void cp_async_commit(const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::cp_async_commit(call_site);
}
template <int kPending>
__device__ inline void cp_async_wait(const std::source_location& call_site = std::source_location::current()) {
    static_assert(kPending >= 0, "cp_async_wait: the number of groups left in flight is >= 0");
    sim::ptx::cp_async_wait(kPending, call_site);
}
__device__ inline void cp_async_wait_all(const std::source_location& call_site = std::source_location::current()) {
    sim::ptx::cp_async_wait_all(call_site);
}

#else

// ---- on a GPU: one PTX instruction each ------------------------------------------------------

namespace detail {
/// The 32-bit shared-state-space address of @p p, which PTX's `.shared` instructions take.
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
}  // namespace detail

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`: d = a b + c for one 16 x 16 x 8 tile,
/// A 16 x 16 and B 16 x 8 in bf16, C and D in fp32, as fragments (see the table of warp_mma.cuh).
/// Every lane of the warp calls it (a warp-wide instruction). @p d may be @p c.
/// @param d this lane's 4 accumulators out  @param a its A fragment (8 bf16 in 4 registers)
/// @param b its B fragment (4 bf16 in 2 registers)  @param c its 4 accumulators in
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                                  const std::uint32_t (&b)[2], const float (&c)[4]) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
    __trap();  // bf16 tensor cores need compute capability 8.0
#endif
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: as mma_m16n8k16_bf16() with `__half`
/// inputs.
/// @param d this lane's 4 accumulators out  @param a its A fragment (8 f16 in 4 registers)
/// @param b its B fragment (4 f16 in 2 registers)  @param c its 4 accumulators in
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2], const float (&c)[4]) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
    __trap();  // m16n8k16 needs compute capability 8.0
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8 x 8 matrices of 16-bit elements from
/// shared memory. Lanes 8q .. 8q + 7 give the addresses of rows 0 .. 7 of matrix q (16 bytes
/// each, 16-byte aligned); lane l receives in r[q] the elements (l / 4, 2 (l % 4)) and
/// (l / 4, 2 (l % 4) + 1) of matrix q. Every lane of the warp calls it.
/// @param r the four registers out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x2.shared.b16`: as ldmatrix_x4() for two matrices; lanes 0 .. 15
/// give the row addresses (the others' are ignored).
/// @param r the two registers out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t (&r)[2], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x1.shared.b16`: as ldmatrix_x4() for one matrix; lanes 0 .. 7
/// give the row addresses (the others' are ignored).
/// @param r the register out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x1(std::uint32_t (&r)[1], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: as ldmatrix_x4(), each matrix transposed
/// on the way: lane l receives in r[q] the elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4)
/// of matrix q as stored. Loads a B fragment from a row-major K x N tile.
/// @param r the four registers out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16`: ldmatrix_x2() with each matrix transposed.
/// @param r the two registers out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t (&r)[2], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16`: ldmatrix_x1() with the matrix transposed.
/// @param r the register out  @param row this lane's row address (shared memory)
__device__ __forceinline__ void ldmatrix_x1_trans(std::uint32_t (&r)[1], const void* row) {
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(detail::shared_address(row))
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/// `cp.async`: starts an asynchronous copy of @p bytes (4, 8 or 16) from global memory @p src
/// to shared memory @p dst, both aligned to @p bytes, that does not pass through registers. Only
/// @p src_bytes (0 .. @p bytes) are read; the rest of @p dst is zero-filled (0: nothing is read,
/// which guards a tile that overhangs the matrix). 16-byte copies bypass L1 (`.cg`), 4- and 8-byte
/// copies go through it (`.ca`, the only form for those sizes). The copy joins this thread's
/// current group: cp_async_commit() closes the group, cp_async_wait() waits for it, and only
/// then may this thread read @p dst (other threads: after a barrier that follows the wait).
/// @param dst shared memory  @param src global memory  @param bytes 4, 8 or 16, a constant
/// @param src_bytes the bytes read from @p src
__device__ __forceinline__ void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
#if __CUDA_ARCH__ >= 800
    // The size is an immediate of the instruction: with a constant argument the switch folds
    // to one instruction; any other size traps (ptxas would refuse it as an immediate).
    switch (bytes) {
        case 4:
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(detail::shared_address(dst)), "l"(src),
                         "r"(src_bytes)
                         : "memory");
            break;
        case 8:
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(detail::shared_address(dst)), "l"(src),
                         "r"(src_bytes)
                         : "memory");
            break;
        case 16:
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(detail::shared_address(dst)), "l"(src),
                         "r"(src_bytes)
                         : "memory");
            break;
        default:
            __trap();
    }
#elif defined(__CUDA_ARCH__)
    __trap();  // cp.async needs compute capability 8.0
#endif
}

/// `cp.async.commit_group`: closes this thread's current group of cp.async copies (an empty
/// group when it has none, which keeps the counting of cp_async_wait() uniform).
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// `cp.async.wait_group kPending`: waits until at most @p kPending of this thread's committed
/// groups are still in flight; the copies of every older group have then landed.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    static_assert(kPending >= 0, "cp_async_wait: the number of groups left in flight is >= 0");
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

/// `cp.async.wait_all`: commits this thread's current group, then waits for all its copies.
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

#endif

}  // namespace pd
