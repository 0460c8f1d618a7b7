// The simulator's execution engine: every CUDA thread a fiber, the fibers of one block on one
// OS thread, blocks spread over a pool of worker threads.
//
// A block runs in passes: each runnable fiber is resumed until it finishes or waits at a
// barrier or warp collective. When no fiber can run, completed warp collectives and the block
// barrier are released; if nothing can be released the block is stuck, and the diagnosis
// names the threads and source lines involved. Any fault stops the launch with an error.
//
// Two things a learner's kernel can do that no check above sees: crash the process (a wild or
// freed pointer, a stack overflow, an integer division by zero: a signal), and spin in a loop
// waiting for a thread that, here, never runs. The first is named by a signal handler (the
// kernel, block and thread, and how to find the line); the second by a watchdog thread that
// ends the process when a thread runs too long without yielding, and says why.
#include "sim_internal.hpp"

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#define PD_SIM_ASAN 1
#endif

namespace ctx = boost::context;

namespace pd::sim::detail {

__thread ThreadState* current = nullptr;
__thread const BlockInfo* current_block = nullptr;

Settings& settings() {
    static Settings s = [] {
        Settings s;
#if defined(__FMA__) && defined(__x86_64__)
        if (!__builtin_cpu_supports("fma")) {  // built with -mfma (sim/CMakeLists.txt)
            std::fprintf(stderr,
                         "pd::sim: this program was built for a CPU with FMA instructions, and this CPU has none: "
                         "build it on this machine\n");
            std::exit(2);
        }
#endif
        const unsigned hw = std::thread::hardware_concurrency();
        s.workers = hw > 0 ? int(hw) : 1;
        if (const char* v = std::getenv("PD_SIM_THREADS")) s.workers = std::max(1, std::atoi(v));
        if (const char* v = std::getenv("PD_SIM_SCHEDULE")) s.random_schedule = std::string(v) == "random";
        if (const char* v = std::getenv("PD_SIM_SEED")) s.seed = std::strtoull(v, nullptr, 10);
#if defined(PD_SIM_ASAN)
        std::size_t kib = 256;  // instrumented frames are larger
#else
        std::size_t kib = 64;
#endif
        if (const char* v = std::getenv("PD_SIM_STACK_KIB"))
            kib = std::max<std::size_t>(16, std::strtoull(v, nullptr, 10));
        s.stack_bytes = kib * 1024;
        if (const char* v = std::getenv("PD_SIM_WATCHDOG_SECONDS")) s.watchdog_seconds = std::max(0.0, std::atof(v));
        if (const char* v = std::getenv("PD_SIM_DEVICES")) {
            char* end = nullptr;
            const long n = std::strtol(v, &end, 10);
            if (end == v || *end != '\0' || n < 1 || n > kMaxDevices) {
                std::fprintf(stderr, "pd::sim: PD_SIM_DEVICES = '%s' must be a number of virtual devices, 1 ... %d\n",
                             v, kMaxDevices);
                std::exit(2);
            }
            s.devices = int(n);
        }
        if (const char* v = std::getenv("PD_SIM_NCCL_TIMEOUT_SECONDS"))
            s.collective_timeout_seconds = std::max(0.1, std::atof(v));
        if (const char* v = std::getenv("PD_SIM_DEVICE"); v != nullptr && *v != '\0') {
            const std::string name = v;
            if (name == "T4") {
                // NVIDIA's T4 (Turing, sm_75): 40 SMs, 1,024 resident threads and 16 blocks per SM,
                // 64 KiB of shared memory per SM and per block with the opt-in attribute (CUDA C++
                // Programming Guide, compute capability 7.5; the T4 datasheet)
                s.device = {.name = "T4",
                            .compute_capability = 75,
                            .shared_optin = 64 * 1024,
                            .shared_per_sm = 64 * 1024,
                            .threads_per_sm = 1024,
                            .blocks_per_sm = 16,
                            .sms = 40};
            } else if (name != "default") {
                std::fprintf(stderr, "pd::sim: PD_SIM_DEVICE = '%s': the presets are default and T4\n", v);
                std::exit(2);
            }
        }
        if (const char* v = std::getenv("PD_SIM_WORK_GFLOP"); v != nullptr && *v != '\0') {
            char* end = nullptr;
            const double g = std::strtod(v, &end);
            if (end == v || *end != '\0' || !(g > 0) || !std::isfinite(g)) {
                std::fprintf(stderr, "pd::sim: PD_SIM_WORK_GFLOP = '%s' must be a positive number of GFLOP\n", v);
                std::exit(2);
            }
            s.launch_work_budget = g * 1e9;
        }
        if (const char* v = std::getenv("PD_SIM_PEER_ACCESS"); v != nullptr && *v != '\0') {
            const std::string on = v;
            if (on != "0" && on != "1") {
                std::fprintf(stderr, "pd::sim: PD_SIM_PEER_ACCESS = '%s' must be 1 (peer access, the default) or 0\n",
                             v);
                std::exit(2);
            }
            s.peer_access = on == "1";
        }
        return s;
    }();
    return s;
}

namespace {

// ---- fiber stacks: mmap'd with a guard page, pooled per worker so launches reuse them ----------

class StackPool {
public:
    ~StackPool() {
        for (auto& sc : free_) release(sc);
    }
    ctx::stack_context get() {
        if (!free_.empty()) {
            ctx::stack_context sc = free_.back();
            free_.pop_back();
            return sc;
        }
        const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
        const std::size_t size = settings().stack_bytes + page;
        void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) throw std::bad_alloc();
        mprotect(base, page, PROT_NONE);  // overflow faults instead of corrupting memory
        ctx::stack_context sc;
        sc.size = size;
        sc.sp = static_cast<char*>(base) + size;
        return sc;
    }
    void put(ctx::stack_context& sc) { free_.push_back(sc); }

private:
    static void release(ctx::stack_context& sc) { munmap(static_cast<char*>(sc.sp) - sc.size, sc.size); }
    std::vector<ctx::stack_context> free_;
};

thread_local StackPool stack_pool;
thread_local const char* last_stack_guard = nullptr;  ///< the guard page of the stack allocated last

struct PooledStack {
    ctx::stack_context allocate() {
        ctx::stack_context sc = stack_pool.get();
        last_stack_guard = static_cast<const char*>(sc.sp) - sc.size;
        return sc;
    }
    void deallocate(ctx::stack_context& sc) noexcept { stack_pool.put(sc); }
};

// ---- dynamic shared memory: one buffer per worker, the size of the opt-in limit -------------

struct DynamicShared {
    struct alignas(256) Storage {
        unsigned char bytes[kSharedPerBlockOptin];
    };
    std::unique_ptr<Storage> storage = std::make_unique<Storage>();  // over-aligned new and delete
    std::size_t in_use = 0;
    unsigned char* data() { return storage->bytes; }
};
thread_local DynamicShared dynamic_shared;

// ---- per-thread and per-block scheduling state ---------------------------------------------

enum class Wait { Runnable, Barrier, Warp, Exited, Faulted };

struct Slot : ThreadState {
    ctx::fiber fiber;                   // the thread while it is suspended
    ctx::fiber sink;                    // the scheduler while the thread runs
    const char* stack_guard = nullptr;  // the page below its stack (an overflow faults there)
    bool started = false;
    Wait wait = Wait::Runnable;
    std::source_location loc;
    // block barrier
    BarrierKind barrier_kind = BarrierKind::Sync;
    int predicate = 0;
    int barrier_result = 0;
    // warp collective
    WarpOp op = WarpOp::SyncWarp;
    unsigned mask = 0;
    std::uint64_t value = 0, result = 0;
    int param = 0, width = 32;
    // warp-wide PTX instruction (op == WarpOp::Instruction): its name, what executes it, and
    // this lane's operands (on this thread's stack, alive while it waits)
    const char* instruction = nullptr;
    void (*execute)(void* const* lane_args) = nullptr;
    void* instruction_args = nullptr;
    bool internal = false;  // the simulator's own collective (WMMA's checks): not profiled
};

const char* barrier_name(BarrierKind k) {
    switch (k) {
        case BarrierKind::Sync:
            return "__syncthreads";
        case BarrierKind::Count:
            return "__syncthreads_count";
        case BarrierKind::And:
            return "__syncthreads_and";
        case BarrierKind::Or:
            return "__syncthreads_or";
    }
    return "?";
}

const char* warp_op_name(WarpOp op) {
    switch (op) {
        case WarpOp::SyncWarp:
            return "__syncwarp";
        case WarpOp::Shfl:
            return "__shfl_sync";
        case WarpOp::ShflUp:
            return "__shfl_up_sync";
        case WarpOp::ShflDown:
            return "__shfl_down_sync";
        case WarpOp::ShflXor:
            return "__shfl_xor_sync";
        case WarpOp::Ballot:
            return "__ballot_sync";
        case WarpOp::Any:
            return "__any_sync";
        case WarpOp::All:
            return "__all_sync";
        case WarpOp::Match:
            return "__match_any_sync";
        case WarpOp::Wmma:
            return "a wmma warp operation";
        case WarpOp::ActiveMask:
            return "__activemask";
        case WarpOp::ReduceAdd:
            return "__reduce_add_sync";
        case WarpOp::ReduceMinU:
        case WarpOp::ReduceMinI:
            return "__reduce_min_sync";
        case WarpOp::ReduceMaxU:
        case WarpOp::ReduceMaxI:
            return "__reduce_max_sync";
        case WarpOp::ReduceAnd:
            return "__reduce_and_sync";
        case WarpOp::ReduceOr:
            return "__reduce_or_sync";
        case WarpOp::ReduceXor:
            return "__reduce_xor_sync";
        case WarpOp::Instruction:
            return "a warp-wide PTX instruction";
    }
    return "?";
}

/// The name of the collective a waiting thread is at: the instruction's own name for a
/// warp-wide PTX instruction (ldmatrix, mma.sync), else the intrinsic's.
const char* op_label(const Slot& s) {
    return s.op == WarpOp::Instruction && s.instruction ? s.instruction : warp_op_name(s.op);
}

/// Two calls are the same call site when file, line and column agree.
bool same_site(const std::source_location& a, const std::source_location& b) {
    return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

std::string where(const std::source_location& loc) {
    return std::string(loc.file_name()) + ":" + std::to_string(loc.line());
}

std::string hex(unsigned mask) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", mask);
    return buf;
}

std::string coords(const uint3& v) {
    return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

struct Launch;

/// A static `__shared__` variable that a thread of the block has reached (shared_variable()).
struct SharedVariable {
    const void* address;
    std::size_t bytes;
};

struct BlockRun {
    BlockInfo info;
    const Launch* launch = nullptr;
    std::vector<Slot> slots;
    std::vector<int> order;
    std::vector<int> exited_in_warp;  ///< threads of each warp that have exited (usually none)
    int live = 0;
    bool failed = false;
    std::mt19937_64 rng;
    std::uint64_t passes = 0;
    std::vector<SharedVariable> shared_variables;  ///< poisoned in this block, in order reached
    std::size_t static_shared_bytes = 0;           ///< their total

    int warp_count() const { return int((slots.size() + kWarpSize - 1) / kWarpSize); }
    int lanes_in_warp(int w) const { return std::min<int>(kWarpSize, int(slots.size()) - w * kWarpSize); }
};

struct Launch {
    LaunchRequest req;
    std::size_t total_blocks = 0;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex error_mutex;
    std::string diagnostic;
    cudaError_t error = cudaSuccess;
    bool profiled = false;  ///< counted by the profiler (a scope is open, the kernels are instrumented)
};

thread_local BlockRun* running_block = nullptr;

/// Records the first fault of a launch; later ones are dropped (a GPU reports one error too).
void record_fault(BlockRun& b, cudaError_t code, const std::string& text) {
    b.failed = true;
    Launch& l = *const_cast<Launch*>(b.launch);
    std::lock_guard<std::mutex> lock(l.error_mutex);
    if (l.error == cudaSuccess) {
        l.error = code;
        l.diagnostic = text;
    }
    l.failed = true;
}

std::string thread_label(const BlockRun& b, const Slot& s) {
    return "block " + coords(b.info.block_idx) + " thread " + coords(s.thread_idx);
}

Slot& self() {
    return *static_cast<Slot*>(current);
}

/// Switches from the running thread back to the scheduler; returns when resumed.
void suspend(Slot& s) {
    s.sink = std::move(s.sink).resume();
}

/// Marks the running thread faulted and never returns (its fiber is abandoned, not unwound).
[[noreturn]] void fault_and_stop(cudaError_t code, const std::string& text) {
    Slot& s = self();
    record_fault(*running_block, code, text);
    s.wait = Wait::Faulted;
    for (;;) suspend(s);
}

// ---- warp collectives --------------------------------------------------------------------

bool is_power_of_two(int w) {
    return w > 0 && (w & (w - 1)) == 0;
}

/// Computes the results of a complete collective of the lanes in @p mask of warp @p w.
void complete_collective(BlockRun& b, int w, unsigned mask) {
    Slot* lanes[kWarpSize] = {};
    for (int l = 0; l < kWarpSize; ++l)
        if (mask & (1u << l)) lanes[l] = &b.slots[std::size_t(w * kWarpSize + l)];
    const int first = std::countr_zero(mask);
    const WarpOp op = lanes[first]->op;
    for (int l = 0; l < kWarpSize; ++l) {
        Slot* s = lanes[l];
        if (s == nullptr) continue;
        // A warp-wide instruction (.aligned) must be the same instruction in every lane: the
        // same call site and the same form (x1 or x4, bf16 or f16, ...).
        const bool other_instruction =
            op == WarpOp::Instruction && (s->execute != lanes[first]->execute || !same_site(s->loc, lanes[first]->loc));
        if (s->op != op || other_instruction) {
            record_fault(b, cudaErrorLaunchFailure,
                         "lanes of one warp met at different warp collectives: " + thread_label(b, *lanes[first]) +
                             " at " + op_label(*lanes[first]) + " (" + where(lanes[first]->loc) + "), " +
                             thread_label(b, *s) + " at " + op_label(*s) + " (" + where(s->loc) + ")");
            return;
        }
    }
    if (!lanes[first]->internal) profile_warp_op(op, lanes[first]->instruction);
    // All the warp's live lanes met: the accesses each made since the warp last met are paired
    // into requests now (the profiler).
    if (std::popcount(mask) + b.exited_in_warp[std::size_t(w)] >= b.lanes_in_warp(w)) profile_sync(w);
    if (op == WarpOp::Instruction) {
        // Every lane waits (suspended, its operands alive on its stack): the instruction runs
        // once for the whole warp.
        void* args[kWarpSize] = {};
        for (int l = 0; l < kWarpSize; ++l)
            if (lanes[l]) args[l] = lanes[l]->instruction_args;
        lanes[first]->execute(args);
        for (int l = 0; l < kWarpSize; ++l)
            if (lanes[l]) {
                lanes[l]->result = 0;
                lanes[l]->wait = Wait::Runnable;
            }
        return;
    }
    unsigned ballot = 0;
    for (int l = 0; l < kWarpSize; ++l)
        if (lanes[l] && lanes[l]->value) ballot |= 1u << l;
    for (int l = 0; l < kWarpSize; ++l) {
        Slot* s = lanes[l];
        if (s == nullptr) continue;
        const int width = s->width;
        const int seg = l & ~(width - 1);  // first lane of this lane's segment
        int src = l;
        switch (op) {
            case WarpOp::Shfl:
                src = seg + (((s->param % width) + width) % width);
                break;
            case WarpOp::ShflUp:
                src = (l - seg) >= s->param ? l - s->param : l;
                break;
            case WarpOp::ShflDown:
                src = (l - seg) + s->param < width ? l + s->param : l;
                break;
            case WarpOp::ShflXor: {
                const int x = l ^ s->param;
                src = (x >= seg + width || x >= kWarpSize) ? l : x;  // later segments: own value
                break;
            }
            default:
                break;
        }
        switch (op) {
            case WarpOp::Shfl:
            case WarpOp::ShflUp:
            case WarpOp::ShflDown:
            case WarpOp::ShflXor:
                if (!(mask & (1u << src))) {
                    // Undefined on a GPU: all-one bits (NaN for floats, -1 for integers).
                    s->result = ~std::uint64_t{0};
                    break;
                }
                s->result = lanes[src]->value;
                break;
            case WarpOp::Ballot:
                s->result = ballot;
                break;
            case WarpOp::Any:
                s->result = ballot != 0;
                break;
            case WarpOp::All:
                s->result = ballot == mask;
                break;
            case WarpOp::Match: {
                unsigned same = 0;
                for (int k = 0; k < kWarpSize; ++k)
                    if (lanes[k] && lanes[k]->value == s->value) same |= 1u << k;
                s->result = same;
                break;
            }
            case WarpOp::ReduceAdd:
            case WarpOp::ReduceMinU:
            case WarpOp::ReduceMaxU:
            case WarpOp::ReduceMinI:
            case WarpOp::ReduceMaxI:
            case WarpOp::ReduceAnd:
            case WarpOp::ReduceOr:
            case WarpOp::ReduceXor: {
                std::uint32_t acc = std::uint32_t(lanes[first]->value);
                for (int k = first + 1; k < kWarpSize; ++k) {
                    if (!lanes[k]) continue;
                    const std::uint32_t v = std::uint32_t(lanes[k]->value);
                    switch (op) {
                        case WarpOp::ReduceAdd:
                            acc += v;
                            break;
                        case WarpOp::ReduceMinU:
                            acc = std::min(acc, v);
                            break;
                        case WarpOp::ReduceMaxU:
                            acc = std::max(acc, v);
                            break;
                        case WarpOp::ReduceMinI:
                            acc = std::uint32_t(std::min(std::int32_t(acc), std::int32_t(v)));
                            break;
                        case WarpOp::ReduceMaxI:
                            acc = std::uint32_t(std::max(std::int32_t(acc), std::int32_t(v)));
                            break;
                        case WarpOp::ReduceAnd:
                            acc &= v;
                            break;
                        case WarpOp::ReduceOr:
                            acc |= v;
                            break;
                        default:
                            acc ^= v;
                            break;
                    }
                }
                s->result = acc;
                break;
            }
            case WarpOp::SyncWarp:
            case WarpOp::ActiveMask:
            case WarpOp::Wmma:
            case WarpOp::Instruction:
                s->result = 0;
                break;
        }
    }
    for (int l = 0; l < kWarpSize; ++l)
        if (lanes[l]) lanes[l]->wait = Wait::Runnable;
}

/// __activemask: when no thread can run, the lanes of a warp waiting at the same
/// __activemask call are the ones executing it together; each gets their mask.
bool release_active_masks(BlockRun& b) {
    bool released = false;
    for (int w = 0; w < b.warp_count(); ++w) {
        const int base = w * kWarpSize, n = b.lanes_in_warp(w);
        unsigned done = 0;
        for (int l = 0; l < n; ++l) {
            const Slot& first = b.slots[std::size_t(base + l)];
            if (first.wait != Wait::Warp || first.op != WarpOp::ActiveMask || (done & (1u << l))) continue;
            unsigned group = 0;
            for (int k = l; k < n; ++k) {
                const Slot& o = b.slots[std::size_t(base + k)];
                if (o.wait == Wait::Warp && o.op == WarpOp::ActiveMask && same_site(o.loc, first.loc)) group |= 1u << k;
            }
            for (int k = l; k < n; ++k) {
                if (!(group & (1u << k))) continue;
                Slot& o = b.slots[std::size_t(base + k)];
                o.result = group;
                o.wait = Wait::Runnable;
            }
            done |= group;
            released = true;
        }
    }
    return released;
}

/// Releases every warp collective whose lanes have all arrived with the same mask.
bool release_warps(BlockRun& b) {
    bool released = false;
    for (int w = 0; w < b.warp_count() && !b.failed; ++w) {
        const int base = w * kWarpSize, n = b.lanes_in_warp(w);
        unsigned done = 0;
        for (int l = 0; l < n; ++l) {
            const Slot& s = b.slots[std::size_t(base + l)];
            if (s.wait != Wait::Warp || s.op == WarpOp::ActiveMask || (done & (1u << l))) continue;
            const unsigned mask = s.mask;
            bool complete = true;
            for (int k = 0; k < kWarpSize && complete; ++k) {
                if (!(mask & (1u << k))) continue;
                const Slot& o = b.slots[std::size_t(base + k)];
                complete = o.wait == Wait::Warp && o.mask == mask;
            }
            done |= mask;
            if (complete) {
                complete_collective(b, w, mask);
                released = true;
            }
        }
    }
    return released;
}

// ---- block barrier -------------------------------------------------------------------------

/// Releases the block barrier when every thread that has not exited waits at it.
bool release_barrier(BlockRun& b) {
    int waiting = 0, exited = 0;
    const Slot* first = nullptr;
    for (const Slot& s : b.slots) {
        if (s.wait == Wait::Barrier) {
            ++waiting;
            if (!first) first = &s;
        } else if (s.wait == Wait::Exited) {
            ++exited;
        } else {
            return false;  // someone waits at a warp collective: not a barrier release
        }
    }
    if (waiting == 0 || exited > 0) return false;
    for (const Slot& s : b.slots) {
        if (!same_site(s.loc, first->loc) || s.barrier_kind != first->barrier_kind)
            return false;  // different barriers: diagnosed as stuck
    }
    int count = 0;
    for (const Slot& s : b.slots) count += s.predicate;
    const int n = int(b.slots.size());
    for (Slot& s : b.slots) {
        switch (s.barrier_kind) {
            case BarrierKind::Sync:
                s.barrier_result = 0;
                break;
            case BarrierKind::Count:
                s.barrier_result = count;
                break;
            case BarrierKind::And:
                s.barrier_result = count == n;
                break;
            case BarrierKind::Or:
                s.barrier_result = count > 0;
                break;
        }
        s.wait = Wait::Runnable;
    }
    profile_sync(-1);  // the block met: its accesses so far form their requests
    profile_barrier(b.warp_count());
    if (settings().random_schedule) std::shuffle(b.order.begin(), b.order.end(), b.rng);
    return true;
}

/// Explains why no thread of the block can make progress.
std::string diagnose_stuck(const BlockRun& b) {
    std::ostringstream out;
    std::map<std::string, int> at_barrier;
    const Slot* first_exited = nullptr;
    const Slot* first_barrier = nullptr;
    int exited = 0;
    for (const Slot& s : b.slots) {
        if (s.wait == Wait::Barrier) {
            at_barrier[std::string(barrier_name(s.barrier_kind)) + " at " + where(s.loc)]++;
            if (!first_barrier) first_barrier = &s;
        }
        if (s.wait == Wait::Exited) {
            ++exited;
            if (!first_exited) first_exited = &s;
        }
    }
    // A warp collective waiting for a lane that is elsewhere.
    for (const Slot& s : b.slots) {
        if (s.wait != Wait::Warp || s.op == WarpOp::ActiveMask) continue;
        const int base = (s.linear / kWarpSize) * kWarpSize;
        for (int k = 0; k < kWarpSize; ++k) {
            if (!(s.mask & (1u << k))) continue;
            const Slot& o = b.slots[std::size_t(base + k)];
            if (o.wait == Wait::Warp && o.mask == s.mask) continue;
            out << "deadlock: " << thread_label(b, s) << " waits at " << op_label(s) << " (" << where(s.loc)
                << ") for lane " << k << " of its warp, but that lane ";
            if (o.wait == Wait::Exited)
                out << "has exited (every lane named in the mask must reach the collective)";
            else if (o.wait == Wait::Barrier)
                out << "waits at " << barrier_name(o.barrier_kind) << " (" << where(o.loc) << ")";
            else
                out << "waits at " << op_label(o) << " (" << where(o.loc) << ") with mask " << hex(o.mask);
            return out.str();
        }
    }
    if (!at_barrier.empty() && exited > 0) {
        out << "divergent barrier: " << thread_label(b, *first_barrier) << " waits at "
            << barrier_name(first_barrier->barrier_kind) << " (" << where(first_barrier->loc) << ") but " << exited
            << " thread(s) of the block exited without reaching it (first: " << thread_label(b, *first_exited)
            << "); every thread of the block must reach the same __syncthreads";
        return out.str();
    }
    if (at_barrier.size() > 1) {
        out << "divergent barrier: the threads of one block wait at different barriers:";
        for (const auto& [site, n] : at_barrier) out << " " << n << " at " << site << ";";
        return out.str();
    }
    out << "deadlock: no thread of block " << coords(b.info.block_idx) << " can make progress";
    return out.str();
}

// ---- the watchdog: a thread that runs too long without yielding ------------------------------

/// What one OS thread that runs blocks is doing, read by the watchdog thread: the simulated
/// thread it runs (null between resumes) and a count of its resumes. Never freed: the watchdog
/// may read it while the program exits.
struct WorkerWatch {
    std::atomic<const Slot*> slot{nullptr};
    std::atomic<const BlockRun*> block{nullptr};
    std::atomic<std::uint64_t> resumes{0};
};

std::mutex watch_mutex;
std::vector<WorkerWatch*>* watched = new std::vector<WorkerWatch*>;  // every worker's, never freed

WorkerWatch& my_watch() {
    thread_local WorkerWatch* w = [] {
        auto* fresh = new WorkerWatch;
        std::lock_guard<std::mutex> lock(watch_mutex);
        watched->push_back(fresh);
        return fresh;
    }();
    return *w;
}

[[noreturn]] void report_stuck_thread(const BlockRun& b, const Slot& s, double seconds) {
    const uint3 bi = b.info.block_idx, t = s.thread_idx;
    std::fflush(stdout);  // what the program printed so far is not lost
    std::fprintf(stderr,
                 "pd::sim: kernel '%s', block (%u,%u,%u) thread (%u,%u,%u), has run for %.0f s without reaching a "
                 "barrier, a warp operation or its end: it is probably waiting in a loop for a value that another "
                 "thread (of its block, or of a later block) has yet to write. The simulator runs a block's threads "
                 "one at a time, each until it waits or ends, and cannot preempt one, so that other thread never "
                 "runs (on a GPU since Volta such a loop may end, though CUDA does not promise it for threads of "
                 "different blocks). Wait at a barrier instead: __syncthreads(), or a cooperative-groups sync "
                 "(cooperative_groups::this_thread_block().sync()), which is portable. PD_SIM_WATCHDOG_SECONDS sets "
                 "this limit (0: none).\n",
                 kernel_name(b.launch->req.kernel).c_str(), bi.x, bi.y, bi.z, t.x, t.y, t.z, seconds);
    std::fflush(stderr);
    std::_Exit(1);  // not exit(): the stuck thread still runs, and destructors would race with it
}

/// Samples every worker four times a second; a worker whose resume count has not moved while it
/// runs the same simulated thread for the set time is stuck.
void watchdog_loop(double limit_s) {
    struct Seen {
        std::uint64_t resumes = ~0ull;
        const Slot* slot = nullptr;
        int samples = 0;
    };
    std::map<const WorkerWatch*, Seen> seen;
    constexpr double kPeriod = 0.25;
    for (;;) {
        std::this_thread::sleep_for(std::chrono::duration<double>(kPeriod));
        std::vector<WorkerWatch*> now;
        {
            std::lock_guard<std::mutex> lock(watch_mutex);
            now = *watched;
        }
        for (WorkerWatch* w : now) {
            const Slot* slot = w->slot.load(std::memory_order_acquire);
            const std::uint64_t resumes = w->resumes.load(std::memory_order_acquire);
            Seen& was = seen[w];
            if (slot == nullptr || slot != was.slot || resumes != was.resumes) {
                was = Seen{resumes, slot, 0};
                continue;
            }
            // Counted in samples, not read off a clock: a program stopped in a debugger is not stuck.
            if (++was.samples * kPeriod >= limit_s)
                report_stuck_thread(*w->block.load(std::memory_order_acquire), *slot, was.samples * kPeriod);
        }
    }
}

// ---- a crash in a kernel: name the kernel, the block and the thread ---------------------------

#if !defined(PD_SIM_ASAN)  // in the sanitizer build AddressSanitizer reports these, with the line
const int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE};
struct sigaction previous_action[3];

void on_fault(int sig, siginfo_t* info, void*) {
    const BlockRun* b = running_block;
    const Slot* s = current != nullptr ? static_cast<const Slot*>(current) : nullptr;
    static std::atomic<bool> reported{false};
    if (b != nullptr && s != nullptr && reported.exchange(true)) {
        for (;;) pause();  // another worker's fault is being reported; its signal ends the process
    }
    if (b != nullptr && s != nullptr) {
        const char* addr = static_cast<const char*>(info->si_addr);
        const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
        const bool overflow = s->stack_guard != nullptr && addr >= s->stack_guard && addr < s->stack_guard + page;
        char what[256];
        if (sig == SIGFPE)
            std::snprintf(what, sizeof what,
                          "an arithmetic fault (SIGFPE): an integer division by zero, or INT_MIN / -1");
        else if (overflow)
            std::snprintf(what, sizeof what,
                          "a stack overflow (SIGSEGV): each simulated thread has a %zu KiB stack (PD_SIM_STACK_KIB); "
                          "a large local array or deep recursion passed it",
                          settings().stack_bytes / 1024);
        else
            std::snprintf(what, sizeof what,
                          "an invalid memory access (%s) at address %p: a wild, null or freed pointer",
                          sig == SIGBUS ? "SIGBUS" : "SIGSEGV", info->si_addr);
        const uint3 bi = b->info.block_idx, t = s->thread_idx;
        std::fflush(stdout);  // what the program printed so far is not lost
        std::fprintf(
            stderr,
            "pd::sim: kernel '%s' crashed in block (%u,%u,%u) thread (%u,%u,%u) with %s. Rebuild with "
            "`scripts/simcc --sanitize` (or configure with -DPD_SIM_SANITIZE=ON) and run again for the line.\n",
            kernel_name(b->launch->req.kernel).c_str(), bi.x, bi.y, bi.z, t.x, t.y, t.z, what);
        std::fflush(stderr);
    }
    // Back to what was there before; returning runs the faulting instruction again, and the
    // signal then ends the process as it would have without this handler.
    for (int i = 0; i < 3; ++i)
        if (kFaultSignals[i] == sig) sigaction(sig, &previous_action[i], nullptr);
}

void install_fault_handler() {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;  // on the alternate stack: the fiber's may be what overflowed
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(kFaultSignals[i], &sa, &previous_action[i]);
}

/// Gives the calling OS thread an alternate signal stack, once.
void ensure_signal_stack() {
    thread_local bool done = false;
    if (done) return;
    done = true;
    stack_t ss{};
    ss.ss_size = 64 * 1024;
    ss.ss_sp = std::malloc(ss.ss_size);  // kept for the thread's life
    if (ss.ss_sp != nullptr) sigaltstack(&ss, nullptr);
}
#else
void install_fault_handler() {}
void ensure_signal_stack() {}
#endif

// ---- running one block ----------------------------------------------------------------------

void resume(BlockRun& b, Slot& s) {
    current = &s;
    WorkerWatch& watch = my_watch();
    watch.block.store(&b, std::memory_order_relaxed);
    watch.resumes.fetch_add(1, std::memory_order_relaxed);
    watch.slot.store(&s, std::memory_order_release);
    if (!s.started) {
        s.started = true;
        s.fiber = ctx::fiber(std::allocator_arg, PooledStack{}, [&b, &s](ctx::fiber&& sink) -> ctx::fiber {
            s.sink = std::move(sink);
            try {
                b.launch->req.invoke(b.launch->req.bound);
            } catch (const ctx::detail::forced_unwind&) {
                throw;
            } catch (const std::exception& e) {
                record_fault(b, cudaErrorLaunchFailure,
                             thread_label(b, s) + ": C++ exception escaped the kernel: " + e.what());
            }
            s.wait = Wait::Exited;
            --b.live;
            ++b.exited_in_warp[std::size_t(s.linear / kWarpSize)];
            return std::move(s.sink);
        });
        s.stack_guard = last_stack_guard;
    }
    s.fiber = std::move(s.fiber).resume();
    watch.slot.store(nullptr, std::memory_order_release);
    current = nullptr;
}

/// Fibers of a failed block are abandoned rather than unwound: a fault may have stopped a
/// thread inside a function that must not throw (an assertion handler).
void abandon(BlockRun& b) {
    for (Slot& s : b.slots) {
        if (!s.fiber) continue;
        auto* kept = new ctx::fiber(std::move(s.fiber));  // deliberately leaked with its stack
#if defined(PD_SIM_ASAN)
        __lsan_ignore_object(kept);
#else
        (void)kept;
#endif
    }
}

void run_block(Launch& l, std::size_t linear_block) {
    const dim3 g = l.req.grid, bd = l.req.block;
    BlockRun b;
    b.launch = &l;
    b.info.block_idx = uint3{unsigned(linear_block % g.x), unsigned((linear_block / g.x) % g.y),
                             unsigned(linear_block / (std::size_t(g.x) * g.y))};
    b.info.block_dim = bd;
    b.info.grid_dim = g;
    const std::size_t n = std::size_t(bd.x) * bd.y * bd.z;
    b.slots.resize(n);
    b.order.resize(n);
    b.exited_in_warp.assign(std::size_t(b.warp_count()), 0);
    for (std::size_t t = 0; t < n; ++t) {
        Slot& s = b.slots[t];
        s.thread_idx = uint3{unsigned(t % bd.x), unsigned((t / bd.x) % bd.y), unsigned(t / (std::size_t(bd.x) * bd.y))};
        s.linear = int(t);
        b.order[t] = int(t);
    }
    b.live = int(n);
    if (settings().random_schedule) {
        b.rng.seed(settings().seed * 0x9E3779B97F4A7C15ull + linear_block);
        std::shuffle(b.order.begin(), b.order.end(), b.rng);
    }
    // Dynamic shared memory starts as NaN bytes, so reading it before writing shows up.
    DynamicShared& dyn = dynamic_shared;
    dyn.in_use = l.req.shared_bytes;
    std::memset(dyn.data(), 0xFF, dyn.in_use);
#if defined(PD_SIM_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(dyn.data(), dyn.in_use);
    ASAN_POISON_MEMORY_REGION(dyn.data() + dyn.in_use, kSharedPerBlockOptin - dyn.in_use);
#endif
    // Static __shared__ variables are poisoned when a thread of this block first reaches their
    // declaration (shared_variable()); no cp.async of an earlier block is pending here.
    begin_block_async_copies(n);
    ensure_signal_stack();
    if (l.profiled) profile_block_begin(n, dyn.data(), dyn.in_use);

    running_block = &b;
    current_block = &b.info;
    while (!b.failed && !l.failed) {
        for (int idx : b.order) {
            Slot& s = b.slots[std::size_t(idx)];
            if (s.wait == Wait::Runnable) resume(b, s);
            if (b.failed) break;
        }
        if (b.failed || b.live == 0) break;
        if (release_warps(b) || b.failed) continue;
        if (release_active_masks(b)) continue;
        if (release_barrier(b)) continue;
        record_fault(b, cudaErrorLaunchFailure, diagnose_stuck(b));
    }
    if (l.profiled) profile_block_end(linear_block, b.static_shared_bytes);
    if (b.failed || l.failed) abandon(b);
    running_block = nullptr;
    current_block = nullptr;
#if defined(PD_SIM_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(dyn.data(), kSharedPerBlockOptin);
#endif
}

// ---- the worker pool ------------------------------------------------------------------------

class WorkerPool {
public:
    explicit WorkerPool(int workers) {
        for (int i = 1; i < workers; ++i) threads_.emplace_back([this] { loop(); });
    }
    ~WorkerPool() {
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    /// Runs @p job on every worker and on the calling thread; returns when all have finished.
    void run(const std::function<void()>& job) {
        {
            std::lock_guard<std::mutex> lock(m_);
            job_ = &job;
            ++generation_;
            pending_ = int(threads_.size());
        }
        cv_.notify_all();
        job();
        std::unique_lock<std::mutex> lock(m_);
        done_.wait(lock, [this] { return pending_ == 0; });
        job_ = nullptr;
    }

private:
    void loop() {
        std::uint64_t seen = 0;
        for (;;) {
            const std::function<void()>* job;
            {
                std::unique_lock<std::mutex> lock(m_);
                cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
                job = job_;
            }
            (*job)();
            {
                std::lock_guard<std::mutex> lock(m_);
                --pending_;
            }
            done_.notify_one();
        }
    }
    std::vector<std::thread> threads_;
    std::mutex m_;
    std::condition_variable cv_, done_;
    const std::function<void()>* job_ = nullptr;
    std::uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
};

std::string launch_error(const LaunchRequest& r) {
    const dim3 g = r.grid, b = r.block;
    const unsigned long long threads = 1ull * b.x * b.y * b.z;
    std::ostringstream out;
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
        out << "a grid or block dimension is 0 (grid " << coords(g) << ", block " << coords(b) << ")";
    else if (threads > unsigned(kMaxThreadsPerBlock))
        out << threads << " threads per block (block " << coords(b) << "); the limit is " << kMaxThreadsPerBlock;
    else if (b.x > unsigned(kMaxBlockDimX) || b.y > unsigned(kMaxBlockDimY) || b.z > unsigned(kMaxBlockDimZ))
        out << "block " << coords(b) << " exceeds the per-dimension limits (" << kMaxBlockDimX << ", " << kMaxBlockDimY
            << ", " << kMaxBlockDimZ << ")";
    else if (g.x > kMaxGridDimX || g.y > kMaxGridDimY || g.z > kMaxGridDimZ)
        out << "grid " << coords(g) << " exceeds the limits (" << kMaxGridDimX << ", " << kMaxGridDimY << ", "
            << kMaxGridDimZ << ")";
    return out.str();
}

/// Dynamic shared memory above the kernel's limit (48 KiB, or what cudaFuncSetAttribute set):
/// a GPU rejects the launch with cudaErrorInvalidValue.
std::string shared_memory_error(const LaunchRequest& r) {
    const std::optional<std::size_t> attribute = max_dynamic_shared(r.kernel);
    const std::size_t limit = attribute.value_or(kSharedPerBlock);
    if (r.shared_bytes <= limit) return {};
    std::ostringstream out;
    out << r.shared_bytes << " bytes of dynamic shared memory; this kernel's limit is " << limit
        << (attribute ? " (set by cudaFuncSetAttribute)"
                      : " (raise it up to " + std::to_string(settings().device.shared_optin) +
                            " with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                            "bytes))");
    return out.str();
}

}  // namespace

// ---- entry points called from kernels and launches ------------------------------------------

int block_barrier(BarrierKind kind, int predicate, const std::source_location& loc) {
    Slot& s = self();
    s.wait = Wait::Barrier;
    s.barrier_kind = kind;
    s.predicate = predicate;
    s.loc = loc;
    suspend(s);
    return s.barrier_result;
}

std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int param, int width,
                              const std::source_location& loc) {
    Slot& s = self();
    BlockRun& b = *running_block;
    const int lane = s.linear % kWarpSize, warp = s.linear / kWarpSize;
    const int lanes = b.lanes_in_warp(warp);
    const unsigned existing = lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1);
    // Messages are built only on a fault: this function is on every collective's hot path.
    auto who = [&] {
        const char* name = op == WarpOp::Instruction ? s.instruction : warp_op_name(op);
        return thread_label(b, s) + " at " + name + " (" + where(loc) + ")";
    };
    if (!(mask & (1u << lane)))
        fault_and_stop(cudaErrorLaunchFailure, who() + ": the mask " + hex(mask) +
                                                   " does not include the calling lane " + std::to_string(lane));
    if (mask & ~existing)
        fault_and_stop(cudaErrorLaunchFailure,
                       who() + ": the mask " + hex(mask) + " names lanes that do not exist (warp " +
                           std::to_string(warp) + " has " + std::to_string(lanes) + " threads, because the block has " +
                           std::to_string(b.slots.size()) + ")");
    if (!is_power_of_two(width) || width > kWarpSize)
        fault_and_stop(cudaErrorLaunchFailure,
                       who() + ": width " + std::to_string(width) + " is not a power of two between 1 and 32");
    // (a scan of the warp's lanes only when one has exited: this runs once per lane per collective)
    for (int k = 0; k < kWarpSize && b.exited_in_warp[std::size_t(warp)] > 0; ++k) {
        if (!(mask & (1u << k))) continue;
        const Slot& o = b.slots[std::size_t(warp * kWarpSize + k)];
        if (o.wait == Wait::Exited)
            fault_and_stop(cudaErrorLaunchFailure, who() + ": lane " + std::to_string(k) + " named in the mask " +
                                                       hex(mask) + " has already exited");
    }
    s.wait = Wait::Warp;
    s.op = op;
    s.internal = take_internal_collective();
    s.mask = mask;
    s.value = value;
    s.param = param;
    s.width = width;
    s.loc = loc;
    suspend(s);
    return s.result;
}

unsigned active_mask(const std::source_location& loc) {
    Slot& s = self();
    s.wait = Wait::Warp;
    s.op = WarpOp::ActiveMask;
    s.mask = 0;
    s.loc = loc;
    suspend(s);
    return unsigned(s.result);
}

void warp_instruction(const char* name, void (*execute)(void* const* lane_args), void* args,
                      const std::source_location& loc) {
    if (current == nullptr) {
        std::fprintf(stderr, "pd::sim: %s called outside a kernel at %s:%u (it is a device instruction)\n", name,
                     loc.file_name(), unsigned(loc.line()));
        std::abort();
    }
    Slot& s = self();
    s.instruction = name;
    s.execute = execute;
    s.instruction_args = args;
    warp_collective(WarpOp::Instruction, 0xffffffffu, 0, 0, kWarpSize, loc);  // .aligned: the whole warp
}

void* shared_variable(void* address, std::size_t bytes, const char* name, const std::source_location& loc) {
    if (current == nullptr) return address;  // a __shared__ declaration run outside a kernel: nothing to track
    BlockRun& b = *running_block;
    for (const SharedVariable& v : b.shared_variables)
        if (v.address == address) return address;  // poisoned already in this block
    // The first thread of the block to get here: garbage in, as on a GPU, where shared memory
    // holds whatever the previous block on that SM left (0xFF bytes read as NaN in a float).
    std::memset(address, 0xFF, bytes);
    b.shared_variables.push_back({address, bytes});
    profile_shared_variable(address, bytes);
    b.static_shared_bytes += bytes;
    if (b.static_shared_bytes > kSharedPerBlock) {
        std::ostringstream text;
        text << "static shared memory over the limit: `" << name << "` (" << bytes << " bytes) brings the __shared__ "
             << "variables of this kernel to " << b.static_shared_bytes << " bytes; the limit is " << kSharedPerBlock
             << " bytes (48 KiB), and nvcc (ptxas) refuses such a kernel when building for a GPU. Above 48 KiB use "
             << "dynamic shared memory (extern __shared__) with cudaFuncSetAttribute(kernel, "
             << "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)";
        kernel_fault(cudaErrorLaunchOutOfResources, text.str().c_str(), loc);
    }
    return address;
}

void kernel_fault(cudaError_t code, const char* message, const std::source_location& loc) {
    fault_and_stop(code, thread_label(*running_block, self()) + ": " + message + " at " + where(loc));
}

void require_compute_capability(int needed, const char* instruction, const std::source_location& loc) {
    const int cc = device_compute_capability();
    if (cc >= needed) return;
    const std::string text = std::string(instruction) + " needs compute capability " + std::to_string(needed / 10) +
                             "." + std::to_string(needed % 10) +
                             "; the simulated device (PD_SIM_DEVICE=" + settings().device.name + ") has " +
                             std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
                             ", where a kernel built for it has a trap in its place";
    kernel_fault(cudaErrorIllegalInstruction, text.c_str(), loc);
}

void* dynamic_shared_memory() {
    return dynamic_shared.data();
}

void launch(const LaunchRequest& req) {
    if (sticky_error() != cudaSuccess) return;  // the context is unusable after a fault, as on a GPU
    if (current != nullptr)
        fault_and_stop(cudaErrorNotSupported,
                       thread_label(*running_block, self()) +
                           ": launching a kernel from device code (dynamic parallelism) is not supported by the "
                           "simulator");
    const std::string bad = launch_error(req);
    if (!bad.empty()) {
        set_last_diagnostic("invalid launch configuration: " + bad);
        set_error(cudaErrorInvalidConfiguration);
        return;
    }
    const std::string wrong_device = launch_device_error(req);
    if (!wrong_device.empty()) {
        // On a GPU this is an illegal memory access inside the kernel (or an invalid stream
        // handle); the simulator refuses the launch before it runs, naming the argument.
        set_last_diagnostic("invalid launch: " + wrong_device);
        std::fprintf(stderr, "pd::sim: invalid launch: %s\n", wrong_device.c_str());
        set_error(cudaErrorIllegalAddress);
        return;
    }
    const std::string too_much_shared = shared_memory_error(req);
    if (!too_much_shared.empty()) {
        set_last_diagnostic("invalid launch: " + too_much_shared);
        set_error(cudaErrorInvalidValue);
        return;
    }
    // a stream that captures records the launch (graphs.cpp); its graph's replays run it
    bool recording = false;
    if (const cudaError_t e = capture_status(req.stream, recording)) {
        set_error(e);
        return;
    }
    if (recording) {
        if (const cudaError_t e = record_launch(req)) set_error(e);
        return;
    }
    if (legacy_stream_work(req.stream, "a kernel launch") != cudaSuccess) return;
    // A launch a GPU runs in seconds can take the simulator days: refused past the work budget.
    const double threads =
        double(req.grid.x) * req.grid.y * req.grid.z * double(req.block.x) * req.block.y * req.block.z;
    if (600 * threads > settings().launch_work_budget) {
        std::ostringstream text;
        text << "launch of " << kernel_name(req.kernel) << " refused: its " << threads << " threads would take about "
             << 600 * threads / 1e9
             << " GFLOP of simulator work (600 per thread started) before their own, more than its budget of "
             << settings().launch_work_budget / 1e9
             << " GFLOP (PD_SIM_WORK_GFLOP raises it); a GPU runs it, the simulator would take hours";
        set_last_diagnostic(text.str());
        std::fprintf(stderr, "pd::sim: %s\n", text.str().c_str());
        set_error(cudaErrorLaunchTimeout);
        return;
    }
    // Host threads (one per virtual device, as NCCL programs run) launch one at a time: each
    // launch uses every worker.
    static std::mutex launch_mutex;
    const std::lock_guard<std::mutex> one_launch(launch_mutex);
    static std::once_flag watch_once;
    std::call_once(watch_once, [] {
        install_fault_handler();
        if (settings().watchdog_seconds > 0) std::thread(watchdog_loop, settings().watchdog_seconds).detach();
    });
    auto l = std::make_unique<Launch>();
    l->req = req;
    l->total_blocks = std::size_t(req.grid.x) * req.grid.y * req.grid.z;
    l->profiled = profile_launch_begin(req.kernel, req.grid, req.block, req.shared_bytes);
    const std::function<void()> job = [&l] {
        for (;;) {
            const std::size_t i = l->next.fetch_add(1);
            if (i >= l->total_blocks || l->failed) return;
            run_block(*l, i);
        }
    };
    static WorkerPool pool(settings().workers);
    if (settings().workers == 1 || l->total_blocks == 1)
        job();
    else
        pool.run(job);
    if (l->profiled) profile_launch_end();
    if (l->failed) {
        set_last_diagnostic(l->diagnostic);
        std::fprintf(stderr, "pd::sim: kernel failed: %s\n", l->diagnostic.c_str());
        set_sticky_error(l->error);
    }
    check_device_memory_guards(req.kernel);  // stops the program if the kernel wrote out of bounds
}

const void* running_kernel() {
    return running_block != nullptr ? running_block->launch->req.kernel : nullptr;
}

}  // namespace pd::sim::detail

namespace pd::sim {
void set_schedule(bool random, std::uint64_t seed) {
    detail::settings().random_schedule = random;
    detail::settings().seed = seed;
}
}  // namespace pd::sim

long long clock64() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// An assert() in a kernel stops the launch with cudaErrorAssert, as on a GPU; elsewhere it
// behaves as the C library's (message, then abort).
extern "C" void __assert_fail(const char* assertion, const char* file, unsigned int line,
                              const char* function) noexcept {
    using namespace pd::sim::detail;
    if (current != nullptr) {
        std::ostringstream msg;
        msg << file << ":" << line << ": " << function << ": " << thread_label(*running_block, self())
            << ": Assertion `" << assertion << "` failed.";
        fault_and_stop(cudaErrorAssert, msg.str());  // printed with the launch's failure
    }
    std::fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, function, assertion);
    std::abort();
}
