// The warp-level matrix instructions of the PTX ISA on the simulator (pd/sim/warp_matrix.hpp):
// mma.sync.aligned.m16n8k16 and ldmatrix.sync.aligned.m8n8 as warp-wide instructions that
// move elements between lanes exactly as the PTX ISA's fragment tables say, and cp.async as
// copies that land when the issuing thread's cp.async.wait_group retires them.
//
// The fragment tables below are written as the PTX ISA writes them ("Matrix Fragments for
// mma.m16n8k16 with floating point type", and the ldmatrix description): for lane l,
// groupID = l >> 2 and threadID_in_group = l % 4, and element i of a fragment sits in 32-bit
// register i / 2, low half first. tests/sim/warp_matrix.cu checks them against its own model of
// the same tables, and runs unchanged on a GPU.
#include "sim_internal.hpp"

#include "pd/sim/warp_matrix.hpp"

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace pd::sim::ptx {

using detail::current;
using detail::current_block;
using detail::kernel_fault;

namespace {

// ---- fragment tables of mma.m16n8k16 (.f16 / .bf16 inputs, .f32 accumulators) ---------------

int group_id(int lane) {
    return lane >> 2;
}
int thread_in_group(int lane) {
    return lane % 4;
}

/// Multiplicand A (16 x 16, row), element a_i (i = 0 .. 7) of @p lane:
///   row = groupID            for a_i where 0 <= i < 2 || 4 <= i < 6
///         groupID + 8        otherwise
///   col = threadID_in_group * 2 + (i & 1)        for a_i where i < 4
///         threadID_in_group * 2 + (i & 1) + 8    for a_i where i >= 4
int a_row(int lane, int i) {
    return group_id(lane) + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8);
}
int a_col(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1) + (i < 4 ? 0 : 8);
}

/// Multiplicand B (16 x 8, col), element b_i (i = 0 .. 3) of @p lane:
///   row = threadID_in_group * 2 + (i & 1)        for b_i where i < 2
///         threadID_in_group * 2 + (i & 1) + 8    for b_i where i >= 2
///   col = groupID
int b_row(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1) + (i < 2 ? 0 : 8);
}
int b_col(int lane, int) {
    return group_id(lane);
}

/// Accumulators C and D (16 x 8, f32), element c_i (i = 0 .. 3) of @p lane:
///   row = groupID for c_i where i < 2, groupID + 8 for c_i where i >= 2
///   col = threadID_in_group * 2 + (i & 1)
int c_row(int lane, int i) {
    return group_id(lane) + (i < 2 ? 0 : 8);
}
int c_col(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1);
}

/// Element @p half (0: bits 0-15, 1: bits 16-31) of a packed register, as float (exact).
template <MmaInput kInput>
float element(std::uint32_t reg, int half) {
    const std::uint16_t bits = std::uint16_t(reg >> (16 * half));
    if constexpr (kInput == MmaInput::bf16)
        return std::bit_cast<float>(std::uint32_t(bits) << 16);
    else
        return __half2float(std::bit_cast<__half>(bits));
}

/// One lane's operands of an mma.sync, on its stack while the warp gathers.
struct MmaOperands {
    float* d;
    const std::uint32_t* a;
    const std::uint32_t* b;
    const float* c;
};

/// Executes one mma.sync for the warp: rebuilds A, B and C from the 32 lanes' fragments, then
/// gives each lane its fragment of D = A B + C.
template <MmaInput kInput>
void execute_mma(void* const* lane_args) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < kWarpSize; ++l) {
        const auto* op = static_cast<const MmaOperands*>(lane_args[l]);
        for (int i = 0; i < 8; ++i) A[a_row(l, i)][a_col(l, i)] = element<kInput>(op->a[i / 2], i % 2);
        for (int i = 0; i < 4; ++i) B[b_row(l, i)][b_col(l, i)] = element<kInput>(op->b[i / 2], i % 2);
        for (int i = 0; i < 4; ++i) C[c_row(l, i)][c_col(l, i)] = op->c[i];
    }
    // Each product of two 16-bit inputs is exact in fp32; the sum runs in fp32 in k order.
    float D[16][8];
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 8; ++c) {
            float acc = C[r][c];
            for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][c];
            D[r][c] = acc;
        }
    // Written only now: a lane's d may be its c, which other lanes' results no longer need.
    for (int l = 0; l < kWarpSize; ++l) {
        const auto* op = static_cast<const MmaOperands*>(lane_args[l]);
        for (int i = 0; i < 4; ++i) op->d[i] = D[c_row(l, i)][c_col(l, i)];
    }
}

// ---- ldmatrix.m8n8 ---------------------------------------------------------------------------

/// One lane's operands of an ldmatrix.
struct LdmatrixOperands {
    std::uint32_t* regs;
    const void* row;
};

/// Executes one ldmatrix for the warp. Row r of matrix q starts at the address lane 8q + r gave
/// (16 bytes: 8 elements). Lane l receives in register q the pair of elements
///   (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1)           without .trans,
///   (rows 2 (l % 4) and 2 (l % 4) + 1, column l / 4)           with .trans (a column-major read),
/// the first of the pair in the low half.
template <int kCount, bool kTrans>
void execute_ldmatrix(void* const* lane_args) {
    std::uint16_t m[kCount][8][8];  // every row is read before any register is written
    for (int q = 0; q < kCount; ++q)
        for (int r = 0; r < 8; ++r)
            std::memcpy(m[q][r], static_cast<const LdmatrixOperands*>(lane_args[8 * q + r])->row, 16);
    for (int l = 0; l < kWarpSize; ++l) {
        auto* op = static_cast<LdmatrixOperands*>(lane_args[l]);
        for (int q = 0; q < kCount; ++q) {
            const std::uint16_t lo = kTrans ? m[q][2 * (l % 4)][l / 4] : m[q][l / 4][2 * (l % 4)];
            const std::uint16_t hi = kTrans ? m[q][2 * (l % 4) + 1][l / 4] : m[q][l / 4][2 * (l % 4) + 1];
            op->regs[q] = std::uint32_t(lo) | (std::uint32_t(hi) << 16);
        }
    }
}

/// The executor and the PTX name of each form of ldmatrix.
struct LdmatrixForm {
    void (*execute)(void* const*);
    const char* name;
};
LdmatrixForm ldmatrix_form(int count, bool trans) {
    switch (count * 2 + (trans ? 1 : 0)) {
        case 2:
            return {&execute_ldmatrix<1, false>, "ldmatrix.sync.aligned.m8n8.x1.shared.b16"};
        case 3:
            return {&execute_ldmatrix<1, true>, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16"};
        case 4:
            return {&execute_ldmatrix<2, false>, "ldmatrix.sync.aligned.m8n8.x2.shared.b16"};
        case 5:
            return {&execute_ldmatrix<2, true>, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"};
        case 8:
            return {&execute_ldmatrix<4, false>, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"};
        case 9:
            return {&execute_ldmatrix<4, true>, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"};
        default:
            return {nullptr, "ldmatrix"};
    }
}

// ---- cp.async: copies in flight, per thread, until its wait_group retires them ------------------

/// One cp.async not yet carried out.
struct PendingCopy {
    unsigned char* dst;
    const unsigned char* src;
    int bytes, src_bytes;
    std::uint64_t group;  ///< the issuing thread's group number (its commits before the copy)
    std::source_location loc;
};

/// The cp.async state of the block running on this worker.
struct AsyncCopies {
    std::vector<std::uint64_t> committed;           ///< per thread: groups committed so far
    std::vector<std::vector<PendingCopy>> pending;  ///< per thread, in issue order
    /// Destination address -> issuing thread, for the reads ldmatrix checks (a copy covers at
    /// most 16 bytes, so the copies overlapping [p, p + n) start in (p - 16, p + n)).
    std::multimap<std::uintptr_t, int> by_destination;
};
thread_local AsyncCopies async_copies;

/// "(x,y,z)": the coordinates of thread @p linear of the running block.
std::string thread_coords(int linear) {
    const dim3 bd = current_block->block_dim;
    const unsigned x = unsigned(linear) % bd.x, y = (unsigned(linear) / bd.x) % bd.y,
                   z = unsigned(linear) / (bd.x * bd.y);
    return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

std::string where(const std::source_location& loc) {
    return std::string(loc.file_name()) + ":" + std::to_string(loc.line());
}

/// Stops the kernel if any of the @p n bytes at @p p is the destination of a cp.async of this
/// block that its thread has not yet waited for (@p what: the reading instruction).
void check_not_pending(const void* p, std::size_t n, const char* what, const std::source_location& loc) {
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    auto it = async_copies.by_destination.lower_bound(start >= 15 ? start - 15 : 0);
    for (; it != async_copies.by_destination.end() && it->first < start + n; ++it) {
        for (const PendingCopy& c : async_copies.pending[std::size_t(it->second)]) {
            const auto d = reinterpret_cast<std::uintptr_t>(c.dst);
            if (d != it->first || d + std::uintptr_t(c.bytes) <= start) continue;
            std::ostringstream text;
            text << what << " reads shared memory that a cp.async of thread " << thread_coords(it->second) << " ("
                 << where(c.loc) << ") is still copying: that thread has not waited for it (cp.async.wait_group "
                 << "retires a group; then a __syncthreads makes the data visible to the other threads)";
            kernel_fault(cudaErrorLaunchFailure, text.str().c_str(), loc);
        }
    }
}

/// Carries out the copies of thread @p t whose group is below @p below, in issue order.
void retire(int t, std::uint64_t below) {
    std::vector<PendingCopy>& mine = async_copies.pending[std::size_t(t)];
    std::size_t done = 0;
    for (; done < mine.size() && mine[done].group < below; ++done) {
        const PendingCopy& c = mine[done];
        std::memcpy(c.dst, c.src, std::size_t(c.src_bytes));
        std::memset(c.dst + c.src_bytes, 0, std::size_t(c.bytes - c.src_bytes));  // the zero fill
        auto [first, last] = async_copies.by_destination.equal_range(reinterpret_cast<std::uintptr_t>(c.dst));
        for (auto it = first; it != last; ++it)
            if (it->second == t) {
                async_copies.by_destination.erase(it);
                break;
            }
    }
    mine.erase(mine.begin(), mine.begin() + std::ptrdiff_t(done));
}

/// Stops the process when a device instruction is called from host code.
void require_kernel(const char* what, const std::source_location& loc) {
    if (current != nullptr) return;
    std::fprintf(stderr, "pd::sim: %s called outside a kernel at %s:%u (it is a device instruction)\n", what,
                 loc.file_name(), unsigned(loc.line()));
    std::abort();
}

}  // namespace

void mma_m16n8k16(MmaInput input, float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c,
                  const std::source_location& loc) {
    MmaOperands mine{d, a, b, c};
    require_kernel("mma.sync", loc);
    // m16n8k16 is an sm_80 shape for both input types (sm_75 has f16 m16n8k8)
    detail::require_compute_capability(
        80, input == MmaInput::bf16 ? "mma.sync m16n8k16 with bf16 inputs" : "mma.sync m16n8k16 with f16 inputs", loc);
    if (input == MmaInput::bf16)
        detail::warp_instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", &execute_mma<MmaInput::bf16>,
                                 &mine, loc);
    else
        detail::warp_instruction("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", &execute_mma<MmaInput::f16>,
                                 &mine, loc);
}

void ldmatrix(int count, bool trans, std::uint32_t* regs, const void* row, const std::source_location& loc) {
    const LdmatrixForm form = ldmatrix_form(count, trans);
    require_kernel(form.name, loc);
    if (form.execute == nullptr) kernel_fault(cudaErrorLaunchFailure, "ldmatrix: the count is 1, 2 or 4", loc);
    // Only lanes 0 .. 8 count - 1 give row addresses; each is checked by its own lane, so the
    // diagnostic names the lane whose address is wrong.
    const int lane = current->linear % kWarpSize;
    if (lane < 8 * count) {
        const auto address = reinterpret_cast<std::uintptr_t>(row);
        if (address % 16 != 0) {
            const std::string text = std::string(form.name) + ": the row address of lane " + std::to_string(lane) +
                                     " is not 16-byte aligned (it is " + std::to_string(address % 16) +
                                     " bytes past a 16-byte boundary; each row is 16 bytes and must start on one)";
            kernel_fault(cudaErrorMisalignedAddress, text.c_str(), loc);
        }
        check_not_pending(row, 16, form.name, loc);
        detail::profile_access(row, 16, false, loc.file_name(), unsigned(loc.line()), "ldmatrix");
    }
    LdmatrixOperands mine{regs, row};
    detail::warp_instruction(form.name, form.execute, &mine, loc);
}

void cp_async(void* dst, const void* src, int bytes, int src_bytes, const std::source_location& loc) {
    require_kernel("cp.async", loc);
    detail::require_compute_capability(80, "cp.async", loc);
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        const std::string text = "cp.async of " + std::to_string(bytes) +
                                 " bytes: a cp.async copies 4, 8 or 16 bytes (ptxas accepts no other size)";
        kernel_fault(cudaErrorLaunchFailure, text.c_str(), loc);
    }
    if (src_bytes < 0 || src_bytes > bytes) {
        const std::string text = "cp.async of " + std::to_string(bytes) + " bytes with a source size of " +
                                 std::to_string(src_bytes) + ": the source size is 0 to " + std::to_string(bytes);
        kernel_fault(cudaErrorLaunchFailure, text.c_str(), loc);
    }
    const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
    if (d % unsigned(bytes) != 0 || (src_bytes > 0 && s % unsigned(bytes) != 0)) {
        const std::string text = "cp.async of " + std::to_string(bytes) + " bytes: the " +
                                 (d % unsigned(bytes) != 0 ? "destination" : "source") + " address is not " +
                                 std::to_string(bytes) + "-byte aligned";
        kernel_fault(cudaErrorMisalignedAddress, text.c_str(), loc);
    }
    // the profiler: the global read (of the source bytes) and the shared write of one lane
    if (src_bytes > 0)
        detail::profile_access(src, unsigned(src_bytes), false, loc.file_name(), unsigned(loc.line()), "cp.async");
    detail::profile_access(dst, unsigned(bytes), true, loc.file_name(), unsigned(loc.line()), "cp.async");
    const int t = current->linear;
    // In flight: the destination holds garbage (0xFF bytes) until the copy lands at the wait.
    std::memset(dst, 0xFF, std::size_t(bytes));
    async_copies.pending[std::size_t(t)].push_back({static_cast<unsigned char*>(dst),
                                                    static_cast<const unsigned char*>(src), bytes, src_bytes,
                                                    async_copies.committed[std::size_t(t)], loc});
    async_copies.by_destination.emplace(d, t);
}

void cp_async_commit(const std::source_location& loc) {
    require_kernel("cp.async.commit_group", loc);
    ++async_copies.committed[std::size_t(current->linear)];
}

void cp_async_wait(int pending, const std::source_location& loc) {
    require_kernel("cp.async.wait_group", loc);
    const int t = current->linear;
    const std::uint64_t committed = async_copies.committed[std::size_t(t)];
    // Groups 0 .. committed - 1 are committed; all but the newest `pending` of them complete.
    if (std::uint64_t(pending) < committed) retire(t, committed - std::uint64_t(pending));
}

void cp_async_wait_all(const std::source_location& loc) {
    require_kernel("cp.async.wait_all", loc);
    const int t = current->linear;
    ++async_copies.committed[std::size_t(t)];
    retire(t, async_copies.committed[std::size_t(t)]);
}

}  // namespace pd::sim::ptx

namespace pd::sim::detail {

void begin_block_async_copies(std::size_t threads) {
    ptx::async_copies.committed.assign(threads, 0);
    ptx::async_copies.pending.resize(threads);
    for (auto& p : ptx::async_copies.pending) p.clear();
    ptx::async_copies.by_destination.clear();
}

}  // namespace pd::sim::detail
