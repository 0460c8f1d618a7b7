/// @file warp_matrix.hpp
/// @brief The simulator's emulation of the warp-level matrix instructions of the PTX ISA that
/// Ampere-style kernels write as inline PTX: `mma.sync.aligned.m16n8k16` (bf16 and f16 inputs,
/// f32 accumulators), `ldmatrix.sync.aligned.m8n8` (x1, x2, x4, `.trans`) and `cp.async` with
/// `cp.async.commit_group` and `cp.async.wait_group`.
///
/// Kernels do not call these functions directly: they call the wrappers of `pd/warp_mma.cuh`,
/// which are inline PTX on the cuda backend and these functions on the simulator. Each function
/// takes, last, the call site of the wrapper's caller, which diagnostics name.
///
/// **Fragments as the PTX ISA lays them out.** Unlike nvcuda::wmma here (every lane holds the
/// whole tile), these instructions have a documented mapping of matrix elements to lanes and
/// registers, and kernels rely on it: a lane's registers hold exactly the elements the PTX ISA
/// gives that lane. mma.sync and ldmatrix are warp-wide instructions (pd::sim::detail::
/// warp_instruction()): when all 32 lanes have arrived, the instruction is executed once for the
/// warp, reading every lane's registers (or row addresses) and writing every lane's results, as
/// the hardware does. The tables (which lane, which register, which half) are in
/// src/warp_matrix.cpp, each next to the PTX ISA's formula it implements.
///
/// **cp.async is asynchronous here too.** A copy is recorded when issued and carried out when
/// the issuing thread's `cp.async.wait_group` retires its group; until then its destination
/// holds 0xFF bytes (NaN as a float), so a plain read before the wait gets garbage, as on a GPU,
/// where it gets whatever was there. ldmatrix, whose reads the simulator sees, stops the kernel
/// when it reads bytes that a cp.async of any thread of the block still has pending.
///
/// What the hardware punishes stops the kernel with a diagnostic naming the thread and the line:
/// an ldmatrix row address that is not 16-byte aligned, a cp.async size other than 4, 8 or 16
/// bytes or an address not aligned to it, an ldmatrix read of a pending cp.async destination, a
/// warp-wide instruction not reached by all 32 lanes of the warp, or lanes at different ones.
#pragma once

#include <cstdint>
#include <source_location>

/// The simulator's emulation of PTX instructions that kernels write as inline assembly.
namespace pd::sim::ptx {

/// The input type of an mma.sync: two elements packed in each 32-bit register, low half first.
enum class MmaInput {
    bf16,  ///< `.bf16`: __nv_bfloat16
    f16    ///< `.f16`: __half
};

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (or `.f16.f16`): D = A B + C for
/// A 16 x 16, B 16 x 8, C and D 16 x 8 in fp32, each lane holding its fragments of A (4
/// registers, 8 elements), B (2 registers, 4 elements), C and D (4 floats) in the PTX ISA's
/// layout. @p d may be @p c. Products are exact and summed in fp32, c first then k = 0 .. 15, so
/// results match a GPU's exactly where every partial sum is exact (small integers), and up to
/// the order of the additions otherwise.
/// @param input the type of the elements of A and B
/// @param d this lane's 4 accumulators out
/// @param a this lane's 4 registers of A
/// @param b this lane's 2 registers of B
/// @param c this lane's 4 accumulators in
/// @param loc the call site
void mma_m16n8k16(MmaInput input, float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c,
                  const std::source_location& loc);

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16` and its x1, x2 and `.trans` forms: @p count
/// 8 x 8 matrices of 16-bit elements; lanes 8q .. 8q + 7 give the addresses of the 8 rows (16
/// bytes each, 16-byte aligned) of matrix q, and lane l receives in register q the elements
/// (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix q, or with @p trans (2 (l % 4), l / 4)
/// and (2 (l % 4) + 1, l / 4). The addresses of lanes 8 count and above are ignored.
/// @param count 1, 2 or 4 matrices
/// @param trans the `.trans` form
/// @param regs this lane's @p count registers out
/// @param row this lane's row address
/// @param loc the call site
void ldmatrix(int count, bool trans, std::uint32_t* regs, const void* row, const std::source_location& loc);

/// `cp.async.ca.shared.global` (4 or 8 bytes) or `cp.async.cg.shared.global` (16 bytes): starts
/// copying @p src_bytes bytes from @p src (global) to @p dst (shared) and zero-filling the rest
/// of @p bytes, in this thread's current (not yet committed) group. @p bytes is 4, 8 or 16;
/// @p dst and @p src are aligned to it; 0 <= @p src_bytes <= @p bytes.
/// @param dst the destination in shared memory
/// @param src the source in global memory
/// @param bytes the size of the copy
/// @param src_bytes the bytes read from @p src
/// @param loc the call site
void cp_async(void* dst, const void* src, int bytes, int src_bytes, const std::source_location& loc);

/// `cp.async.commit_group`: closes this thread's current group of cp.async copies (an empty
/// group if it has none).
/// @param loc the call site
void cp_async_commit(const std::source_location& loc);

/// `cp.async.wait_group`: carries out this thread's committed copies except those of its
/// @p pending most recent groups. Copies not committed yet are not waited for (as in PTX).
/// @param pending the groups left in flight
/// @param loc the call site
void cp_async_wait(int pending, const std::source_location& loc);

/// `cp.async.wait_all`: commits, then carries out every cp.async copy of this thread.
/// @param loc the call site
void cp_async_wait_all(const std::source_location& loc);

}  // namespace pd::sim::ptx
