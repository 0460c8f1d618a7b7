// The simulator's profiler (pd/sim/profile.hpp): the memory requests, sectors, wavefronts and
// warp operations of the kernels it runs, per kernel and per source line.
//
// Where the counts come from. The kernels of a profiling build are compiled with GCC's
// thread-sanitizer instrumentation, which calls __tsan_read4(address) (and the other
// sizes) before every load and store of their code; this file defines those functions (it is
// itself not instrumented). An access inside a cudaMalloc allocation is a global access, inside
// the running block's shared memory a shared one; anything else (a thread's stack, the host's
// memory) is not counted. The instructions the simulator emulates (cp.async, ldmatrix, WMMA
// loads and stores) report their accesses themselves, with the pattern of the hardware, and the
// accesses inside their emulation are not counted.
//
// How lanes form a request. A warp's lanes run one after another here, each until it waits, so
// the k-th time lane 3 executes an access (the instruction at one address of the program) is
// paired with the k-th time lane 7 executes it: the lanes that execute the same access for the
// k-th time since the warp last met (a barrier, or a collective of all its live lanes) form one
// request, as a warp that executes the instruction together issues one. Where a GPU's warp
// diverges and reconverges differently (a lane skipping an iteration that the others run), the
// pairing can differ from the hardware's; docs/simulator.md says more.
#include "sim_internal.hpp"

#include "pd/sim/profile.hpp"

#if defined(PD_SIM_HAVE_BACKTRACE)
#include <backtrace.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if !defined(PD_SIM_SOURCE_ROOT)
#define PD_SIM_SOURCE_ROOT ""
#endif
#if !defined(PD_KERNEL_RESOURCES_DIR)
#define PD_KERNEL_RESOURCES_DIR ""
#endif
#if !defined(PD_SIM_NVCC_VERSION)
#define PD_SIM_NVCC_VERSION ""
#endif

namespace pd::sim {

void AccessCounts::add(const AccessCounts& o) {
    requests += o.requests;
    sectors += o.sectors;
    lines += o.lines;
    bytes += o.bytes;
    unique_bytes += o.unique_bytes;
    ideal += o.ideal;
    wavefronts += o.wavefronts;
}

void WarpOps::add(const WarpOps& o) {
    shuffles += o.shuffles;
    votes += o.votes;
    reductions += o.reductions;
    syncwarps += o.syncwarps;
    barriers += o.barriers;
    mma += o.mma;
    ldmatrix += o.ldmatrix;
    cp_async += o.cp_async;
    wmma_load += o.wmma_load;
    wmma_store += o.wmma_store;
    wmma_mma += o.wmma_mma;
}

const char* to_string(AccessKind k) {
    switch (k) {
        case AccessKind::global_load:
            return "global load";
        case AccessKind::global_store:
            return "global store";
        case AccessKind::global_atomic:
            return "global atomic";
        case AccessKind::shared_load:
            return "shared load";
        case AccessKind::shared_store:
            return "shared store";
        case AccessKind::shared_atomic:
            return "shared atomic";
    }
    return "?";
}

namespace {

bool is_shared(AccessKind k) {
    return k == AccessKind::shared_load || k == AccessKind::shared_store || k == AccessKind::shared_atomic;
}

AccessCounts& counts_of(KernelProfile& p, AccessKind k) {
    switch (k) {
        case AccessKind::global_load:
            return p.global_load;
        case AccessKind::global_store:
            return p.global_store;
        case AccessKind::global_atomic:
            return p.global_atomic;
        case AccessKind::shared_load:
            return p.shared_load;
        case AccessKind::shared_store:
            return p.shared_store;
        case AccessKind::shared_atomic:
            return p.shared_atomic;
    }
    return p.global_load;
}

}  // namespace

bool SiteProfile::same_access(const SiteProfile& o) const {
    return file == o.file && line == o.line && via == o.via && kind == o.kind && instruction == o.instruction &&
           access_bytes == o.access_bytes && uniform == o.uniform && lane_stride == o.lane_stride &&
           active_lanes == o.active_lanes;
}

void KernelProfile::add(const KernelProfile& o) {
    launches += o.launches;
    blocks += o.blocks;
    threads += o.threads;
    block_threads = o.block_threads;
    dynamic_shared_bytes = o.dynamic_shared_bytes;
    static_shared_bytes = std::max(static_shared_bytes, o.static_shared_bytes);
    global_load.add(o.global_load);
    global_store.add(o.global_store);
    global_atomic.add(o.global_atomic);
    shared_load.add(o.shared_load);
    shared_store.add(o.shared_store);
    shared_atomic.add(o.shared_atomic);
    ops.add(o.ops);
    unique_sectors += o.unique_sectors;
    unique_store_sectors += o.unique_store_sectors;
    requested_sectors += o.requested_sectors;
    dram_bytes_estimate =
        dram_bytes_estimate < 0 || o.dram_bytes_estimate < 0 ? -1 : dram_bytes_estimate + o.dram_bytes_estimate;
    for (const SiteProfile& s : o.sites) {
        auto it = std::find_if(sites.begin(), sites.end(), [&](const SiteProfile& t) { return t.same_access(s); });
        if (it == sites.end())
            sites.push_back(s);
        else
            it->counts.add(s.counts);
    }
    if (sass_arch.empty()) {
        sass_arch = o.sass_arch;
        sass_sha256 = o.sass_sha256;
        sass_tool = o.sass_tool;
    }
    for (const LineFold& f : o.folds) {
        auto it = std::find_if(folds.begin(), folds.end(), [&](const LineFold& g) {
            return g.file == f.file && g.line == f.line && g.kind == f.kind;
        });
        if (it == folds.end()) {
            folds.push_back(f);
            continue;
        }
        it->source.add(f.source);
        it->folded.add(f.folded);
        if (it->exact && !f.exact) it->why = f.why;
        it->exact = it->exact && f.exact;
    }
}

AccessCounts emulated_counts(const KernelProfile& k, AccessKind kind, const char* instruction) {
    AccessCounts c;
    for (const SiteProfile& s : k.sites)
        if (s.kind == kind && s.instruction == instruction) c.add(s.counts);
    return c;
}

AccessCounts folded_counts(const KernelProfile& k, AccessKind kind) {
    AccessCounts c = counts_of(const_cast<KernelProfile&>(k), kind), source, folded;
    for (const LineFold& f : k.folds)
        if (f.kind == kind) {
            source.add(f.source);
            folded.add(f.folded);
        }
    // ldmatrix (LDSM) and cp.async (LDGSTS) are counted under metrics of their own on a GPU
    source.add(emulated_counts(k, kind, "ldmatrix"));
    source.add(emulated_counts(k, kind, "cp.async"));
    auto minus = [](std::uint64_t& a, std::uint64_t b) { a = a > b ? a - b : 0; };
    minus(c.requests, source.requests);
    minus(c.sectors, source.sectors);
    minus(c.lines, source.lines);
    minus(c.bytes, source.bytes);
    minus(c.unique_bytes, source.unique_bytes);
    minus(c.ideal, source.ideal);
    minus(c.wavefronts, source.wavefronts);
    c.add(folded);
    return c;
}

const char* nvcc_version() {
    return PD_SIM_NVCC_VERSION;
}

}  // namespace pd::sim

namespace pd::sim::detail {

namespace {

// ---- sites ------------------------------------------------------------------------------------

/// Where an access is: the address of the instrumented instruction (pc), or, for the accesses an
/// emulated instruction reports, its call site (file, line) and name.
struct SiteKey {
    std::uintptr_t pc = 0;
    const char* file = nullptr;
    unsigned line = 0;
    const char* instruction = nullptr;
    AccessKind kind = AccessKind::global_load;
    bool operator==(const SiteKey& o) const {
        return pc == o.pc && file == o.file && line == o.line && instruction == o.instruction && kind == o.kind;
    }
};
struct SiteKeyHash {
    std::size_t operator()(const SiteKey& k) const {
        std::uint64_t h = k.pc * 0x9E3779B97F4A7C15ull;
        h ^= reinterpret_cast<std::uintptr_t>(k.file) + (std::uint64_t(k.line) << 20) + (h << 6) + (h >> 2);
        h ^= reinterpret_cast<std::uintptr_t>(k.instruction) + std::uint64_t(k.kind) * 0x632BE59BD9B4E019ull;
        return std::size_t(h);
    }
};

/// A site's counters and the shape of its first request.
struct SiteAccum {
    AccessCounts counts;
    int access_bytes = 0, active_lanes = 0;
    long long lane_stride = 0;
    bool uniform = false, sampled = false;
    void add(const SiteAccum& o) {
        counts.add(o.counts);
        if (!sampled && o.sampled) {
            access_bytes = o.access_bytes;
            active_lanes = o.active_lanes;
            lane_stride = o.lane_stride;
            uniform = o.uniform;
            sampled = true;
        }
    }
};
using SiteMap = std::unordered_map<SiteKey, SiteAccum, SiteKeyHash>;

// ---- what nvcc emitted: the CUDA build's SASS tables ---------------------------------------------

/// One kind of memory instruction nvcc emitted for a line: its opcode as scripts/sass spells it
/// ("LDS.128"), the bytes one lane moves with it, and how many of it the line has.
struct Emitted {
    std::string op;
    int width = 4;
    unsigned count = 0;
};

/// One kernel's table (scripts/sass --table): its memory instructions per line of its source.
struct SassKernel {
    std::string arch, source, sha256, tool;
    std::map<int, std::vector<Emitted>> lines;
};

/// A line's fold of one kind of access, while the blocks run.
struct FoldAccum {
    AccessCounts folded;         // the accesses as the emitted instructions group them
    std::uint64_t leftover = 0;  // lane accesses that filled no aligned chunk of an emitted width
    std::uint64_t uneven = 0;    // passes whose requests did not divide among the instructions
    std::string example;         // the first such pass, said
    bool missing = false;        // the line has no instruction of this kind
    void add(const FoldAccum& o) {
        folded.add(o.folded);
        leftover += o.leftover;
        uneven += o.uneven;
        if (example.empty()) example = o.example;
        missing = missing || o.missing;
    }
};
using FoldKey = std::pair<int, AccessKind>;  // the kernel's line, the kind of access
using FoldMap = std::map<FoldKey, FoldAccum>;

/// The kernel's own source line of an instrumented access (its outermost frame outside the
/// simulator's headers: a helper inlined into the kernel counts at the kernel's line).
struct Location {
    std::string file;
    int line = 0;
};

// ---- a launch's counters ----------------------------------------------------------------------

/// Distinct sectors of one allocation touched by a launch: one bit per 32-byte sector, set by
/// any worker (atomically), and one more for the written ones.
struct SectorBits {
    std::size_t words = 0;
    std::unique_ptr<std::atomic<std::uint64_t>[]> any, stored;
};

struct Allocation {
    std::uintptr_t begin, end;
    std::size_t index;
};

/// Entries of the sector streams a launch keeps for the L2 model (8 bytes each): beyond this,
/// its DRAM estimate is not made.
constexpr std::size_t kMaxStream = std::size_t(16) << 20;

struct LaunchAccum {
    const void* kernel = nullptr;
    dim3 grid, block;
    std::size_t dynamic_shared = 0;
    std::vector<Allocation> allocations;  // by address
    std::mutex mutex;                     // what follows is merged from the workers under it
    std::vector<SectorBits> sectors;      // per allocation, made when first touched
    SiteMap sites;
    const SassKernel* sass = nullptr;  // the kernel's SASS table, if the build has one
    FoldMap folds;
    WarpOps ops;
    std::uint64_t blocks = 0, threads = 0, static_shared = 0;
    std::map<std::size_t, std::vector<std::uint64_t>> streams;  // per block: sector << 1 | stored
    std::size_t stream_entries = 0;
    bool stream_overflow = false;
};

// ---- one worker's block in flight -------------------------------------------------------------

/// One access of one lane, waiting for its request.
struct Record {
    std::uintptr_t address;
    std::uint32_t occurrence;
    std::uint8_t lane;
    std::uint8_t size;
};

/// A warp's accesses at one site since the warp last met.
struct Pending {
    SiteKey key;
    std::uint32_t count[kWarpSize] = {};
    std::vector<Record> records;
};

struct WarpState {
    std::vector<Pending> pending;
    std::unordered_map<SiteKey, std::size_t, SiteKeyHash> index;
    std::size_t last = ~std::size_t{0};  // the site used last: loops repeat a few
};

struct Worker {
    LaunchAccum* launch = nullptr;
    std::vector<SectorBits*> bits;  // the launch's, per allocation, once looked up
    std::vector<WarpState> warps;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shared;  // the block's shared memory
    std::size_t last_allocation = 0;
    SiteMap sites;
    FoldMap folds;
    std::unordered_map<std::uintptr_t, const Location*> locations;  // by pc, once looked up
    WarpOps ops;
    std::vector<std::uint64_t> stream;
    std::size_t threads = 0;
    int suppress = 0;
};

__thread Worker* worker = nullptr;  // non-null while this OS thread runs a profiled block
thread_local Worker worker_storage;

// ---- scopes -----------------------------------------------------------------------------------

struct Scope {
    double l2_bytes = 0;
    std::vector<const void*> order;  // kernels by first launch
    std::map<const void*, KernelProfile> kernels;
    std::map<const void*, std::vector<std::pair<SiteKey, SiteAccum>>> sites;  // resolved at the end
    std::map<const void*, FoldMap> folds;
    std::map<const void*, const SassKernel*> sass;
};

/// The profiler's shared state, made on first use and never destroyed: the instrumented
/// translation units register (and PD_SIM_PROFILE opens its scope) while the program's static
/// objects are still being constructed, and the whole-run report is written while they are being
/// destroyed, so this state must not depend on their order.
struct SharedState {
    std::mutex scopes_mutex;
    std::vector<std::unique_ptr<Scope>> scopes;
    std::unique_ptr<LaunchAccum> current_launch;  // one launch at a time (launches are synchronous)
};
SharedState& shared_state() {
    static SharedState* s = new SharedState;
    return *s;
}
std::atomic<int> instrumented_units{0};
__thread int internal_collective = 0;

// ---- classification ---------------------------------------------------------------------------

/// The allocation holding @p a, or null.
const Allocation* global_allocation(Worker& w, std::uintptr_t a) {
    const std::vector<Allocation>& all = w.launch->allocations;
    if (all.empty()) return nullptr;
    const Allocation& last = all[w.last_allocation];
    if (a >= last.begin && a < last.end) return &last;
    auto it =
        std::upper_bound(all.begin(), all.end(), a, [](std::uintptr_t x, const Allocation& r) { return x < r.begin; });
    if (it == all.begin()) return nullptr;
    --it;
    if (a >= it->end) return nullptr;
    w.last_allocation = std::size_t(it - all.begin());
    return &*it;
}

bool in_shared(const Worker& w, std::uintptr_t a) {
    for (const auto& [begin, end] : w.shared)
        if (a >= begin && a < end) return true;
    return false;
}

// ---- requests -----------------------------------------------------------------------------------

/// The sector bits of allocation @p a in this launch (made when first touched).
SectorBits& bits_for(Worker& w, const Allocation& a) {
    SectorBits*& cached = w.bits[a.index];
    if (cached != nullptr) return *cached;
    LaunchAccum& l = *w.launch;
    std::lock_guard<std::mutex> lock(l.mutex);
    SectorBits& b = l.sectors[a.index];
    if (!b.any) {
        b.words = ((a.end - a.begin + 31) / 32 + 63) / 64;
        b.any.reset(new std::atomic<std::uint64_t>[b.words]());
        b.stored.reset(new std::atomic<std::uint64_t>[b.words]());
    }
    cached = &b;
    return b;
}

/// Marks @p sector as touched by the launch and returns its name in the L2 model's stream: the
/// allocation's rank (by address) and the sector's offset in it, not the address, so that the
/// model's sets (a hash of the name) do not change with where the host's allocator put the
/// buffers in this run.
std::uint64_t mark_sector(Worker& w, std::uint64_t sector, bool stored) {
    const Allocation* a = global_allocation(w, std::uintptr_t(sector * 32));
    if (a == nullptr) return sector;
    SectorBits& b = bits_for(w, *a);
    const std::uint64_t i = sector - a->begin / 32;
    const std::uint64_t name = (std::uint64_t(a->index) << 40) | i;
    if (i / 64 >= b.words) return name;
    b.any[i / 64].fetch_or(1ull << (i % 64), std::memory_order_relaxed);
    if (stored) b.stored[i / 64].fetch_or(1ull << (i % 64), std::memory_order_relaxed);
    return name;
}

/// The wavefronts of a shared-memory request: lanes are served in phases of 128 bytes (32 lanes
/// of 4-byte accesses, 16 of 8-byte, 8 of 16-byte); in a phase, a bank holding d distinct 4-byte
/// words takes d wavefronts (the same word to several lanes is one broadcast).
std::uint64_t wavefronts(const Record* r, std::size_t n) {
    int size = 4;
    for (std::size_t i = 0; i < n; ++i) size = std::max<int>(size, r[i].size);
    const int per_phase = std::max(1, 128 / std::min(size, 16));
    std::uint64_t total = 0;
    for (int phase = 0; phase * per_phase < kWarpSize; ++phase) {
        std::array<std::uint32_t, 32 * 4> words{};  // at most 4 words per lane of a phase
        std::size_t count = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (r[i].lane / per_phase != phase) continue;
            const std::uint64_t w0 = r[i].address / 4, w1 = (r[i].address + r[i].size - 1) / 4;
            for (std::uint64_t w = w0; w <= w1 && count < words.size(); ++w) words[count++] = std::uint32_t(w);
        }
        if (count == 0) continue;
        std::sort(words.begin(), words.begin() + std::ptrdiff_t(count));
        const std::size_t distinct =
            std::size_t(std::unique(words.begin(), words.begin() + std::ptrdiff_t(count)) - words.begin());
        int per_bank[32] = {};
        int worst = 0;
        for (std::size_t i = 0; i < distinct; ++i) worst = std::max(worst, ++per_bank[words[i] % 32]);
        total += std::uint64_t(worst);
    }
    return total;
}

/// Counts one warp-level request made of the lanes' records r[0, n) into @p c: the request, the
/// bytes asked and the distinct ones, and the wavefronts of a shared one or the sectors and lines
/// of a global one, with the fewest its bytes need. Returns the distinct bytes; a global
/// request's sectors are left in sectors[0, ns).
std::uint64_t count_request(AccessCounts& c, bool shared, const Record* r, std::size_t n,
                            std::array<std::uint64_t, 2 * kWarpSize>& sectors, std::size_t& ns) {
    c.requests += 1;
    ns = 0;
    // distinct bytes: the lanes' intervals, merged
    std::array<std::pair<std::uintptr_t, std::uintptr_t>, kWarpSize> spans;
    for (std::size_t i = 0; i < n; ++i) {
        spans[i] = {r[i].address, r[i].address + r[i].size};
        c.bytes += r[i].size;
    }
    std::sort(spans.begin(), spans.begin() + std::ptrdiff_t(n));
    std::uint64_t unique = 0;
    std::uintptr_t covered = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uintptr_t from = std::max(spans[i].first, covered);
        if (spans[i].second > from) unique += spans[i].second - from;
        covered = std::max(covered, spans[i].second);
    }
    c.unique_bytes += unique;
    if (shared) {
        c.wavefronts += wavefronts(r, n);
        // the fewest: the phases the lanes' access size needs (8-byte: 2 half-warps, 16-byte: 4
        // quarter-warps, each at least one wavefront), or the bytes over 128 per wavefront
        int size = 4;
        unsigned phases = 0;
        for (std::size_t i = 0; i < n; ++i) size = std::max<int>(size, r[i].size);
        const int per_phase = std::max(1, 128 / std::min(size, 16));
        for (std::size_t i = 0; i < n; ++i) phases |= 1u << (r[i].lane / per_phase);
        c.ideal += std::max<std::uint64_t>(std::uint64_t(std::popcount(phases)), (unique + 127) / 128);
        return unique;
    }
    // global: the 32-byte sectors and 128-byte lines the lanes touch
    std::array<std::uint64_t, 2 * kWarpSize> lines;
    std::size_t nl = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uintptr_t first = r[i].address, last = r[i].address + r[i].size - 1;
        for (std::uintptr_t s = first / 32; s <= last / 32 && ns < sectors.size(); ++s) sectors[ns++] = s;
        for (std::uintptr_t l = first / 128; l <= last / 128 && nl < lines.size(); ++l) lines[nl++] = l;
    }
    std::sort(sectors.begin(), sectors.begin() + std::ptrdiff_t(ns));
    ns = std::size_t(std::unique(sectors.begin(), sectors.begin() + std::ptrdiff_t(ns)) - sectors.begin());
    std::sort(lines.begin(), lines.begin() + std::ptrdiff_t(nl));
    nl = std::size_t(std::unique(lines.begin(), lines.begin() + std::ptrdiff_t(nl)) - lines.begin());
    c.sectors += ns;
    c.lines += nl;
    c.ideal += (unique + 31) / 32;
    return unique;
}

/// One warp-level request: the lanes' records of one site and one occurrence.
void request(Worker& w, const SiteKey& key, const Record* r, std::size_t n) {
    SiteAccum& site = w.sites[key];
    std::array<std::uint64_t, 2 * kWarpSize> sectors;
    std::size_t ns = 0;
    count_request(site.counts, is_shared(key.kind), r, n, sectors, ns);
    if (!site.sampled) {
        site.sampled = true;
        site.access_bytes = r[0].size;
        site.active_lanes = int(n);
        site.lane_stride = 0;
        if (n > 1) {
            // neighbouring lanes in lane order
            std::array<std::pair<int, std::uintptr_t>, kWarpSize> by_lane;
            for (std::size_t i = 0; i < n; ++i) by_lane[i] = {r[i].lane, r[i].address};
            std::sort(by_lane.begin(), by_lane.begin() + std::ptrdiff_t(n));
            const long long stride = (long long)by_lane[1].second - (long long)by_lane[0].second;
            bool uniform = by_lane[1].first == by_lane[0].first + 1;
            for (std::size_t i = 2; i < n && uniform; ++i)
                uniform = by_lane[i].first == by_lane[i - 1].first + 1 &&
                          (long long)by_lane[i].second - (long long)by_lane[i - 1].second == stride;
            site.lane_stride = uniform ? stride : 0;
            site.uniform = uniform;
        }
    }
    const bool stored = key.kind != AccessKind::global_load;
    for (std::size_t i = 0; i < ns; ++i)
        w.stream.push_back(mark_sector(w, sectors[i], stored) << 1 | (stored ? 1u : 0u));
}

void fold_warp(Worker& w, WarpState& ws);

/// Turns a warp's pending accesses into requests (and, where the kernel has a SASS table, folds
/// them into its instructions).
void flush_warp(Worker& w, WarpState& ws) {
    for (Pending& p : ws.pending) {
        if (p.records.empty()) continue;
        std::stable_sort(p.records.begin(), p.records.end(),
                         [](const Record& a, const Record& b) { return a.occurrence < b.occurrence; });
        std::size_t start = 0;
        for (std::size_t i = 1; i <= p.records.size(); ++i) {
            if (i < p.records.size() && p.records[i].occurrence == p.records[start].occurrence) continue;
            request(w, p.key, p.records.data() + start, i - start);
            start = i;
        }
    }
    if (w.launch->sass != nullptr) fold_warp(w, ws);
    for (Pending& p : ws.pending) {
        p.records.clear();
        std::fill(std::begin(p.count), std::end(p.count), 0u);
    }
}

/// Records lane @p lane's access of @p size bytes at @p a for @p key.
void record(Worker& w, const SiteKey& key, std::uintptr_t a, unsigned size) {
    const int linear = current->linear, lane = linear % kWarpSize, warp = linear / kWarpSize;
    WarpState& ws = w.warps[std::size_t(warp)];
    Pending* p = nullptr;
    if (ws.last < ws.pending.size() && ws.pending[ws.last].key == key) {
        p = &ws.pending[ws.last];
    } else {
        auto [it, fresh] = ws.index.try_emplace(key, ws.pending.size());
        if (fresh) {
            ws.pending.emplace_back();
            ws.pending.back().key = key;
        }
        ws.last = it->second;
        p = &ws.pending[it->second];
    }
    p->records.push_back({a, p->count[lane]++, std::uint8_t(lane), std::uint8_t(std::min(size, 255u))});
}

/// The kind of an access at @p a by the running thread, or false when it is not counted.
bool classify(Worker& w, std::uintptr_t a, bool store, bool atomic, AccessKind& kind) {
    if (global_allocation(w, a) != nullptr)
        kind = atomic ? AccessKind::global_atomic : store ? AccessKind::global_store : AccessKind::global_load;
    else if (in_shared(w, a))
        kind = atomic ? AccessKind::shared_atomic : store ? AccessKind::shared_store : AccessKind::shared_load;
    else
        return false;
    return true;
}

inline void hook(const void* p, unsigned size, bool store, const void* pc) {
    Worker* w = worker;
    if (w == nullptr || w->suppress != 0 || current == nullptr) return;
    SiteKey key;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (!classify(*w, a, store, false, key.kind)) return;
    key.pc = reinterpret_cast<std::uintptr_t>(pc);
    record(*w, key, a, size);
}

// ---- the L2 model ---------------------------------------------------------------------------------

/// Load sectors that miss a 16-way set-associative LRU cache of @p l2_bytes over 32-byte
/// sectors, the streams visited in block order (stores allocate without a read).
std::uint64_t l2_load_misses(const std::map<std::size_t, std::vector<std::uint64_t>>& streams, double l2_bytes) {
    constexpr int kWays = 16;
    const std::size_t sets = std::max<std::size_t>(1, std::size_t(l2_bytes / 32 / kWays));
    std::vector<std::uint64_t> tags(sets * kWays, ~0ull);
    std::vector<std::uint32_t> age(sets * kWays, 0);
    std::uint32_t clock = 0;
    std::uint64_t misses = 0;
    for (const auto& [block, stream] : streams) {
        for (std::uint64_t e : stream) {
            const std::uint64_t sector = e >> 1;
            const bool stored = e & 1;
            const std::size_t set = std::size_t((sector * 0x9E3779B97F4A7C15ull) >> 20) % sets;
            std::uint64_t* t = &tags[set * kWays];
            std::uint32_t* g = &age[set * kWays];
            int hit = -1, victim = 0;
            for (int i = 0; i < kWays; ++i) {
                if (t[i] == sector) hit = i;
                if (g[i] < g[victim]) victim = i;
            }
            if (hit < 0) {
                if (!stored) ++misses;
                t[victim] = sector;
                hit = victim;
            }
            g[hit] = ++clock;
        }
    }
    return misses;
}

// ---- symbols ----------------------------------------------------------------------------------

struct Frame {
    std::string file, function;
    int line = 0;
};

#if defined(PD_SIM_HAVE_BACKTRACE)
void backtrace_error(void*, const char*, int) {}

int collect_frame(void* data, std::uintptr_t, const char* file, int line, const char* function) {
    if (file != nullptr) static_cast<std::vector<Frame>*>(data)->push_back({file, function ? function : "", line});
    return 0;
}
#endif

/// The source frames of @p pc, innermost first (several when helpers were inlined).
std::vector<Frame> frames_of([[maybe_unused]] std::uintptr_t pc) {
    std::vector<Frame> frames;
#if defined(PD_SIM_HAVE_BACKTRACE)
    static backtrace_state* state = backtrace_create_state(nullptr, 1, backtrace_error, nullptr);
    if (state != nullptr) backtrace_pcinfo(state, pc - 1, collect_frame, backtrace_error, &frames);
#endif
    return frames;
}

/// @p file relative to the project's root when it is under it.
std::string shorter(const std::string& file) {
    const std::string root = PD_SIM_SOURCE_ROOT;
    if (!root.empty() && file.rfind(root + "/", 0) == 0) return file.substr(root.size() + 1);
    return file;
}

bool simulator_header(const std::string& file) {
    return file.find("/pd/sim/") != std::string::npos || file.find("/c++/") != std::string::npos ||
           file.find("/bits/") != std::string::npos;
}

SiteProfile resolve(const SiteKey& key, const SiteAccum& a) {
    SiteProfile s;
    s.kind = key.kind;
    s.instruction = key.instruction ? key.instruction : "";
    s.counts = a.counts;
    s.access_bytes = a.access_bytes;
    s.active_lanes = a.active_lanes;
    s.lane_stride = a.lane_stride;
    s.uniform = a.uniform;
    if (key.file != nullptr) {
        s.file = shorter(key.file);
        s.line = int(key.line);
        return s;
    }
    const std::vector<Frame> frames = frames_of(key.pc);
    const Frame* own = nullptr;
    for (const Frame& f : frames)
        if (!simulator_header(f.file)) {
            own = &f;
            break;
        }
    if (own == nullptr) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, key.pc);
        s.file = std::string("(no line information: pc ") + buf + ")";
        return s;
    }
    s.file = shorter(own->file);
    s.line = own->line;
    s.function = own->function;
    const Frame& outer = frames.back();
    if (&outer != own && !simulator_header(outer.file)) s.via = shorter(outer.file) + ":" + std::to_string(outer.line);
    return s;
}

// ---- the fold: the source's accesses grouped as nvcc's instructions group them ------------------

/// The kind of access an emitted opcode makes: LDG (and the generic LD) loads global memory, STG
/// and ST store it, LDS and STS shared memory; ldmatrix (LDSM), cp.async (LDGSTS) and atomics
/// are counted apart and not folded.
bool emitted_kind(const std::string& op, AccessKind kind) {
    const std::string base = op.substr(0, op.find('.'));
    switch (kind) {
        case AccessKind::global_load:
            return base == "LDG" || base == "LD";
        case AccessKind::global_store:
            return base == "STG" || base == "ST";
        case AccessKind::shared_load:
            return base == "LDS";
        case AccessKind::shared_store:
            return base == "STS";
        default:
            return false;
    }
}

/// The bytes one lane moves with @p op: .128 16, .64 8, .U16/.S16 2, .U8/.S8 1, else 4.
int emitted_width(const std::string& op) {
    for (const auto& [suffix, bytes] :
         {std::pair<const char*, int>{".128", 16}, {".64", 8}, {".U16", 2}, {".S16", 2}, {".U8", 1}, {".S8", 1}})
        if (op.find(suffix) != std::string::npos) return bytes;
    return 4;
}

/// The tables the CUDA build wrote beside its resource reports (DIR/OBJ.sass), by kernel.
std::map<std::string, SassKernel> load_sass_tables() {
    std::map<std::string, SassKernel> found;
    const char* env = std::getenv("PD_SIM_KERNEL_RESOURCES");
    const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : PD_KERNEL_RESOURCES_DIR;
    std::error_code ec;
    if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return found;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() != ".sass") continue;
        std::ifstream in(entry.path());
        std::string row, arch, source, tool;
        SassKernel* k = nullptr;
        while (std::getline(in, row)) {
            std::istringstream words(row);
            std::string what;
            words >> what;
            if (what == "arch") {
                words >> arch;
            } else if (what == "source") {
                words >> source;
            } else if (what == "tool") {
                std::getline(words >> std::ws, tool);
            } else if (what == "kernel") {
                std::string mangled, sha;
                words >> mangled >> sha;
                auto [at, fresh] = found.try_emplace(source_name(mangled));
                k = fresh ? &at->second : nullptr;  // the first object's, where a template is in several
                if (k != nullptr) *k = {arch, source, sha, tool, {}};
            } else if (what == "line" && k != nullptr) {
                int line = 0;
                words >> line;
                Emitted e;
                while (words >> e.op >> e.count) {
                    e.width = emitted_width(e.op);
                    k->lines[line].push_back(e);
                }
            }
        }
    }
    return found;
}

/// The SASS table of the kernel named @p name (as kernel_name() gives it), or null.
const SassKernel* sass_kernel(const std::string& name) {
    static const std::map<std::string, SassKernel>* all = new std::map<std::string, SassKernel>(load_sass_tables());
    const auto it = all->find(name);
    return it == all->end() ? nullptr : &it->second;
}

/// Where the instrumented access at @p pc is, in the kernel's own lines (looked up once per pc).
const Location* location_of(Worker& w, std::uintptr_t pc) {
    if (const auto it = w.locations.find(pc); it != w.locations.end()) return it->second;
    static std::mutex mutex;
    static auto* all = new std::unordered_map<std::uintptr_t, std::unique_ptr<Location>>;
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<Location>& slot = (*all)[pc];
    if (!slot) {
        slot = std::make_unique<Location>();
        const std::vector<Frame> frames = frames_of(pc);
        for (auto f = frames.rbegin(); f != frames.rend(); ++f)
            if (!simulator_header(f->file)) {
                slot->file = shorter(f->file);
                slot->line = f->line;
                break;
            }
    }
    return w.locations[pc] = slot.get();
}

/// One warp-level request of the source in a pass (the lanes' records of one site and one
/// occurrence), as the fold takes them.
struct SourceRequest {
    const Record* r;
    std::size_t n;
    unsigned size;  // the lanes' access size (the largest)
    bool used;
};

/// The address of each lane of @p q (0 for a lane not in it), and whether every lane's is a
/// multiple of @p width.
bool lane_addresses(const SourceRequest& q, unsigned width, std::array<std::uintptr_t, kWarpSize>& at) {
    at.fill(0);
    bool aligned = true;
    for (std::size_t i = 0; i < q.n; ++i) {
        at[q.r[i].lane] = q.r[i].address;
        aligned = aligned && q.r[i].address % width == 0 && q.r[i].size == q.size;
    }
    return aligned;
}

/// Folds a pass's requests of one line and kind (the sites ws.pending[members[...]]) into the
/// line's emitted instructions. A wider instruction takes W/s requests of s bytes together where
/// every lane's s-byte accesses in them lie side by side in one W-aligned chunk (a lane's
/// a[k], a[k+1], a[k+2], a[k+3] of one LDS.128); the widest width is tried first, in the order
/// the warp made the requests; the rest stay as the source made them (or are split into the
/// widest width where the source's access is wider than any instruction of the line).
void fold_group(Worker& w, WarpState& ws, const FoldKey& key, const std::vector<std::size_t>& members) {
    FoldAccum& acc = w.folds[key];
    std::vector<std::pair<unsigned, unsigned>> widths;  // (bytes, instructions), widest first
    if (const auto line = w.launch->sass->lines.find(key.first); line != w.launch->sass->lines.end())
        for (const Emitted& e : line->second) {
            if (!emitted_kind(e.op, key.second)) continue;
            auto same =
                std::find_if(widths.begin(), widths.end(), [&](const auto& x) { return x.first == unsigned(e.width); });
            if (same == widths.end())
                widths.emplace_back(unsigned(e.width), e.count);
            else
                same->second += e.count;
        }
    if (widths.empty()) {
        acc.missing = true;
        return;
    }
    std::sort(widths.begin(), widths.end(), std::greater<>());
    // the pass's requests, in the order the warp made them (sites by first use, then occurrence)
    std::vector<SourceRequest> requests;
    std::map<std::pair<int, std::uintptr_t>, std::vector<std::size_t>> by_lowest;  // (lowest lane, its address)
    for (const std::size_t m : members) {
        const std::vector<Record>& records = ws.pending[m].records;
        for (std::size_t start = 0, i = 1; i <= records.size(); ++i) {
            if (i < records.size() && records[i].occurrence == records[start].occurrence) continue;
            SourceRequest q{records.data() + start, i - start, 0, false};
            const Record* lowest = q.r;
            for (std::size_t j = 0; j < q.n; ++j) {
                q.size = std::max<unsigned>(q.size, q.r[j].size);
                if (q.r[j].lane < lowest->lane) lowest = q.r + j;
            }
            by_lowest[{lowest->lane, lowest->address}].push_back(requests.size());
            requests.push_back(q);
            start = i;
        }
    }
    std::map<unsigned, std::uint64_t> made;  // the pass's requests by width
    std::array<Record, kWarpSize> out;
    std::array<std::uint64_t, 2 * kWarpSize> sectors;
    std::array<std::uintptr_t, kWarpSize> at, other;
    for (SourceRequest& q : requests) {
        if (q.used) continue;
        q.used = true;
        unsigned width = q.size;
        for (const auto& [wide, count] : widths) {
            if (wide <= q.size || wide % q.size != 0 || !lane_addresses(q, wide, at)) continue;
            int lowest = kWarpSize;
            for (std::size_t i = 0; i < q.n; ++i) lowest = std::min<int>(lowest, q.r[i].lane);
            std::vector<SourceRequest*> parts;  // the requests of the chunks' other slots
            for (unsigned j = 1; j < wide / q.size; ++j) {
                SourceRequest* found = nullptr;
                const auto candidates = by_lowest.find({lowest, at[std::size_t(lowest)] + j * q.size});
                if (candidates != by_lowest.end())
                    for (const std::size_t c : candidates->second) {
                        SourceRequest& o = requests[c];
                        if (o.used || o.n != q.n || o.size != q.size ||
                            std::find(parts.begin(), parts.end(), &o) != parts.end())
                            continue;
                        lane_addresses(o, q.size, other);
                        bool beside = true;
                        for (std::size_t i = 0; i < q.n && beside; ++i)
                            beside = other[q.r[i].lane] == q.r[i].address + j * q.size;
                        if (beside) {
                            found = &o;
                            break;
                        }
                    }
                if (found == nullptr) break;
                parts.push_back(found);
            }
            if (parts.size() + 1 == wide / q.size) {
                for (SourceRequest* o : parts) o->used = true;
                width = wide;
                break;
            }
        }
        // the instructions' requests: one of the chosen width, or the source's split into the widest
        const unsigned widest = widths.front().first;
        const unsigned piece = q.size > widest && q.size % widest == 0 ? widest : width;
        for (unsigned offset = 0; offset < std::max(width, q.size); offset += piece) {
            for (std::size_t i = 0; i < q.n; ++i)
                out[i] = {q.r[i].address + offset, 0, q.r[i].lane, std::uint8_t(piece)};
            std::size_t ns = 0;
            count_request(acc.folded, is_shared(key.second), out.data(), q.n, sectors, ns);
            made[piece] += 1;
            if (std::none_of(widths.begin(), widths.end(), [&](const auto& x) { return x.first == piece; }))
                acc.leftover += 1;
        }
    }
    // even (where the line has several widths): the pass made as many requests of each width as
    // the line has instructions of it, times one number (the times the line ran in the pass)
    if (widths.size() == 1) return;
    bool even = made.size() == widths.size();
    std::uint64_t runs = 0;
    for (const auto& [width, count] : widths) {
        const auto it = made.find(width);
        const std::uint64_t r = it == made.end() ? 0 : it->second;
        even = even && r % count == 0 && (runs == 0 || r / count == runs);
        runs = r / count;
    }
    if (!even && acc.leftover == 0) {
        acc.uneven += 1;
        if (acc.example.empty()) {
            std::string pass;
            for (auto it = made.rbegin(); it != made.rend(); ++it)
                pass += (pass.empty() ? "" : ", ") + std::to_string(it->second) + " of " + std::to_string(it->first) +
                        " bytes";
            acc.example = "one warp's pass made " + pass + " requests";
        }
    }
}

void fold_warp(Worker& w, WarpState& ws) {
    std::map<FoldKey, std::vector<std::size_t>> groups;  // the pending sites of each line and kind
    for (std::size_t i = 0; i < ws.pending.size(); ++i) {
        const Pending& p = ws.pending[i];
        if (p.records.empty() || p.key.file != nullptr || p.key.kind == AccessKind::global_atomic ||
            p.key.kind == AccessKind::shared_atomic)
            continue;
        const Location* at = location_of(w, p.key.pc);
        if (at->line > 0 && at->file == w.launch->sass->source) groups[{at->line, p.key.kind}].push_back(i);
    }
    for (const auto& [key, members] : groups) fold_group(w, ws, key, members);
}

// ---- the report ---------------------------------------------------------------------------------

std::string number(double v, const char* format = "%.3g") {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\')
            out += std::string("\\") + c;
        else if (static_cast<unsigned char>(c) < 0x20)
            out += number(c, "\\u%04x");
        else
            out += c;
    }
    return out + "\"";
}

std::string element_name(int bytes) {
    return bytes == 4 ? "floats" : bytes == 2 ? "16-bit values" : bytes == 8 ? "8-byte values" : "";
}

// ---- PD_SIM_PROFILE=FILE: the whole run, written at exit --------------------------------------

struct WholeRun {
    std::string path;
    bool open = false;
    ~WholeRun();
};

}  // namespace

int register_instrumented_unit(bool report_at_exit) {
    const int n = ++instrumented_units;
    if (n == 1) profile_program_start(report_at_exit);
    return n;
}

bool profile_active() {
    return worker != nullptr && current != nullptr;
}

void profile_suppress(int delta) {
    if (worker != nullptr) worker->suppress += delta;
}

void profile_next_collective_internal() {
    internal_collective = 1;
}

void profile_access(const void* p, unsigned size, bool store, const char* file, unsigned line,
                    const char* instruction) {
    Worker* w = worker;
    if (w == nullptr || current == nullptr) return;
    SiteKey key;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (!classify(*w, a, store, false, key.kind)) return;
    key.file = file;
    key.line = line;
    key.instruction = instruction;
    record(*w, key, a, size);
}

__attribute__((noinline)) void profile_atomic(const void* p, unsigned size) {
    Worker* w = worker;
    if (w == nullptr || current == nullptr) return;
    SiteKey key;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (!classify(*w, a, true, true, key.kind)) return;
    key.pc = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
    record(*w, key, a, size);
}

bool profile_launch_begin(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_shared) {
    {
        std::lock_guard<std::mutex> lock(shared_state().scopes_mutex);
        if (shared_state().scopes.empty() || instrumented_units.load() == 0) return false;
    }
    shared_state().current_launch = std::make_unique<LaunchAccum>();
    LaunchAccum& l = *shared_state().current_launch;
    l.kernel = kernel;
    l.grid = grid;
    l.block = block;
    l.dynamic_shared = dynamic_shared;
    l.sass = sass_kernel(kernel_name(kernel));
    for (const auto& [begin, bytes] : device_allocation_ranges())
        l.allocations.push_back({begin, begin + bytes, l.allocations.size()});
    l.sectors.resize(l.allocations.size());
    return true;
}

void profile_block_begin(std::size_t threads, const void* dynamic_shared, std::size_t dynamic_bytes) {
    if (!shared_state().current_launch) return;
    Worker& w = worker_storage;
    w.launch = shared_state().current_launch.get();
    w.warps.resize((threads + kWarpSize - 1) / kWarpSize);
    for (WarpState& ws : w.warps) {
        ws.pending.clear();
        ws.index.clear();
        ws.last = ~std::size_t{0};
    }
    w.shared.clear();
    if (dynamic_bytes > 0) {
        const auto d = reinterpret_cast<std::uintptr_t>(dynamic_shared);
        w.shared.push_back({d, d + dynamic_bytes});
    }
    w.last_allocation = 0;
    w.bits.assign(w.launch->allocations.size(), nullptr);
    w.sites.clear();
    w.folds.clear();
    w.ops = {};
    w.stream.clear();
    w.threads = threads;
    w.suppress = 0;
    worker = &w;
}

void profile_shared_variable(const void* address, std::size_t bytes) {
    if (worker == nullptr) return;
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    worker->shared.push_back({a, a + bytes});
}

void profile_sync(int warp) {
    Worker* w = worker;
    if (w == nullptr) return;
    if (warp >= 0) {
        flush_warp(*w, w->warps[std::size_t(warp)]);
        return;
    }
    for (WarpState& ws : w->warps) flush_warp(*w, ws);
}

void profile_warp_op(WarpOp op, const char* instruction) {
    Worker* w = worker;
    if (w == nullptr) return;
    WarpOps& o = w->ops;
    switch (op) {
        case WarpOp::Shfl:
        case WarpOp::ShflUp:
        case WarpOp::ShflDown:
        case WarpOp::ShflXor:
            ++o.shuffles;
            break;
        case WarpOp::Ballot:
        case WarpOp::Any:
        case WarpOp::All:
        case WarpOp::Match:
        case WarpOp::ActiveMask:
            ++o.votes;
            break;
        case WarpOp::SyncWarp:
            ++o.syncwarps;
            break;
        case WarpOp::Instruction:
            if (instruction != nullptr && std::strncmp(instruction, "mma", 3) == 0) ++o.mma;
            if (instruction != nullptr && std::strncmp(instruction, "ldmatrix", 8) == 0) ++o.ldmatrix;
            break;
        case WarpOp::Wmma:
            break;  // counted by the WMMA calls themselves
        default:
            ++o.reductions;
            break;
    }
}

void profile_wmma(int what) {
    Worker* w = worker;
    if (w == nullptr || current == nullptr || current->linear % kWarpSize != 0) return;  // once per warp
    (what == 0 ? w->ops.wmma_load : what == 1 ? w->ops.wmma_store : w->ops.wmma_mma) += 1;
}

void profile_barrier(int warps) {
    if (worker != nullptr) worker->ops.barriers += std::uint64_t(warps);
}

bool take_internal_collective() {
    const bool internal = internal_collective != 0;
    internal_collective = 0;
    return internal;
}

void profile_block_end(std::size_t linear_block, std::size_t static_shared) {
    Worker* w = worker;
    if (w == nullptr) return;
    for (WarpState& ws : w->warps) flush_warp(*w, ws);
    LaunchAccum& l = *w->launch;
    {
        std::lock_guard<std::mutex> lock(l.mutex);
        for (const auto& [key, a] : w->sites) l.sites[key].add(a);
        for (const auto& [key, a] : w->folds) l.folds[key].add(a);
        l.ops.add(w->ops);
        // cp.async: its global side's requests are its instructions
        l.blocks += 1;
        l.threads += w->threads;
        l.static_shared = std::max<std::uint64_t>(l.static_shared, static_shared);
        if (!l.stream_overflow) {
            if (l.stream_entries + w->stream.size() > kMaxStream) {
                l.stream_overflow = true;
                l.streams.clear();
            } else {
                l.stream_entries += w->stream.size();
                l.streams[linear_block] = std::move(w->stream);
            }
        }
    }
    w->stream.clear();
    worker = nullptr;
}

void profile_launch_end() {
    if (!shared_state().current_launch) return;
    std::unique_ptr<LaunchAccum> lp = std::move(shared_state().current_launch);
    LaunchAccum& l = *lp;
    KernelProfile k;
    k.kernel = kernel_name(l.kernel);
    k.launches = 1;
    k.blocks = l.blocks;
    k.threads = l.threads;
    k.block_threads = int(l.block.x * l.block.y * l.block.z);
    k.dynamic_shared_bytes = l.dynamic_shared;
    k.static_shared_bytes = l.static_shared;
    k.ops = l.ops;
    for (const auto& [key, a] : l.sites) {
        counts_of(k, key.kind).add(a.counts);
        if (key.instruction != nullptr && std::strcmp(key.instruction, "cp.async") == 0 &&
            key.kind == AccessKind::global_load)
            k.ops.cp_async += a.counts.requests;
    }
    k.requested_sectors = k.global_load.sectors + k.global_store.sectors + k.global_atomic.sectors;
    for (const SectorBits& b : l.sectors) {
        if (!b.any) continue;
        for (std::size_t i = 0; i < b.words; ++i) {
            k.unique_sectors += std::uint64_t(std::popcount(b.any[i].load()));
            k.unique_store_sectors += std::uint64_t(std::popcount(b.stored[i].load()));
        }
    }
    std::lock_guard<std::mutex> lock(shared_state().scopes_mutex);
    std::map<double, std::uint64_t> misses;  // per L2 size
    for (const auto& scope : shared_state().scopes) {
        KernelProfile mine = k;
        if (l.stream_overflow) {
            mine.dram_bytes_estimate = -1;
        } else {
            auto it = misses.find(scope->l2_bytes);
            if (it == misses.end())
                it = misses.emplace(scope->l2_bytes, l2_load_misses(l.streams, scope->l2_bytes)).first;
            mine.dram_bytes_estimate = 32.0 * double(it->second + k.unique_store_sectors);
        }
        auto [at, fresh] = scope->kernels.try_emplace(l.kernel);
        if (fresh) {
            at->second.kernel = mine.kernel;
            scope->order.push_back(l.kernel);
        }
        at->second.add(mine);
        for (const auto& [key, a] : l.folds) scope->folds[l.kernel][key].add(a);
        if (l.sass != nullptr) scope->sass[l.kernel] = l.sass;
        std::vector<std::pair<SiteKey, SiteAccum>>& sites = scope->sites[l.kernel];
        for (const auto& [key, a] : l.sites) {
            auto same = std::find_if(sites.begin(), sites.end(), [&](const auto& s) { return s.first == key; });
            if (same == sites.end())
                sites.emplace_back(key, a);
            else
                same->second.add(a);
        }
    }
}

namespace {

/// The kernel's folded lines, from the blocks' fold of each line and kind: each beside the
/// source's counts of the same line (its plain loads and stores; the emulated instructions'
/// are not folded), with whether the fold is exact and, if not, why.
void add_folds(KernelProfile& k, const SassKernel& sass, const FoldMap& folds) {
    // none: the kernel's accesses are in another file than the one its table was made from (a
    // lab's kernel compiled from a submission, with the reference's name): no fold
    if (folds.empty()) return;
    k.sass_arch = sass.arch;
    k.sass_sha256 = sass.sha256;
    k.sass_tool = sass.tool;
    for (const auto& [key, a] : folds) {
        LineFold f;
        f.file = sass.source;
        f.line = key.first;
        f.kind = key.second;
        if (const auto line = sass.lines.find(key.first); line != sass.lines.end())
            for (const Emitted& e : line->second)
                if (emitted_kind(e.op, key.second))
                    f.emitted += (f.emitted.empty() ? "" : ", ") + e.op + " x" + std::to_string(e.count);
        const std::string here = f.file + ":" + std::to_string(f.line);
        for (const SiteProfile& s : k.sites)
            if (s.kind == f.kind && s.instruction.empty() &&
                (s.via.empty() ? s.file + ":" + std::to_string(s.line) : s.via) == here)
                f.source.add(s.counts);
        f.folded = a.missing ? f.source : a.folded;
        f.exact = !a.missing && a.leftover == 0 && a.uneven == 0;
        const std::string kind = is_shared(f.kind) ? (f.kind == AccessKind::shared_load ? "LDS" : "STS")
                                                   : (f.kind == AccessKind::global_load ? "LDG" : "STG");
        if (a.missing)
            f.why = "nvcc emitted no " + kind + " for this line on " + sass.arch +
                    " (ptxas's line table charges its accesses to another line, or nvcc keeps the values in "
                    "registers): the source's counts are kept";
        else if (a.leftover > 0)
            f.why = std::to_string(a.leftover) + " requests have a width none of " + f.emitted +
                    " has (nvcc merged the accesses differently, or the line table split them): counted as the source "
                    "makes them";
        else if (a.uneven > 0)
            f.why = std::to_string(a.uneven) + " warp passes did not divide among " + f.emitted + " evenly (" +
                    a.example +
                    ": a loop nvcc unrolled with a remainder, or a line table that charges some of the "
                    "line's instructions to another line, leaves which accesses each width took uncertain)";
        k.folds.push_back(std::move(f));
    }
}

std::vector<KernelProfile> finish(Scope& scope) {
    std::vector<KernelProfile> out;
    for (const void* kernel : scope.order) {
        KernelProfile k = scope.kernels.at(kernel);
        k.sites.clear();
        for (const auto& [key, a] : scope.sites[kernel]) {
            const SiteProfile s = resolve(key, a);
            // one site for the copies of one access (an unrolled loop's), another for another
            // access on the same line (x[...] * w[...])
            auto same =
                std::find_if(k.sites.begin(), k.sites.end(), [&](const SiteProfile& t) { return t.same_access(s); });
            if (same == k.sites.end())
                k.sites.push_back(s);
            else
                same->counts.add(s.counts);
        }
        std::sort(k.sites.begin(), k.sites.end(), [](const SiteProfile& a, const SiteProfile& b) {
            return std::tie(a.file, a.line, a.via) < std::tie(b.file, b.line, b.via);
        });
        if (const auto sass = scope.sass.find(kernel); sass != scope.sass.end())
            add_folds(k, *sass->second, scope.folds[kernel]);
        out.push_back(std::move(k));
    }
    return out;
}

WholeRun::~WholeRun() {
    if (!open) return;
    std::vector<KernelProfile> kernels;
    double l2 = 0;
    {
        std::lock_guard<std::mutex> lock(shared_state().scopes_mutex);
        if (shared_state().scopes.empty()) return;
        l2 = shared_state().scopes.front()->l2_bytes;
        kernels = finish(*shared_state().scopes.front());
    }
    if (path == "-") {
        std::fputs(describe(kernels).c_str(), stderr);
        return;
    }
    FILE* f = std::fopen((path + ".tmp").c_str(), "w");
    if (f == nullptr) {
        std::fprintf(stderr, "pd::sim: PD_SIM_PROFILE=%s: cannot write the profile there\n", path.c_str());
        return;
    }
    const std::string text = to_json_text(kernels, l2);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::rename((path + ".tmp").c_str(), path.c_str());
}

/// The L2 of the H200 (50 MiB, NVIDIA's H100/H200 specifications): the default model.
constexpr double kDefaultL2 = 50.0 * 1024 * 1024;

WholeRun& whole_run() {
    static WholeRun run = [] {
        WholeRun r;
        const char* v = std::getenv("PD_SIM_PROFILE");
        if (v != nullptr && *v != '\0') {
            r.path = v;
            r.open = true;
        }
        return r;
    }();
    return run;
}

}  // namespace

void profile_program_start(bool report_at_exit) {
    WholeRun& r = whole_run();
    if (!r.open && report_at_exit) {
        r.path = "-";  // scripts/simcc --profile: the report on stderr at exit
        r.open = true;
    }
    if (!r.open) return;
    if (instrumented_units.load() == 0) {
        std::fprintf(stderr,
                     "pd::sim: PD_SIM_PROFILE is set, but this program's kernels were not compiled for the profiler "
                     "(build it with scripts/simcc --profile, or run a chapter's -sim-profile twin): no profile\n");
        r.open = false;
        return;
    }
    std::lock_guard<std::mutex> lock(shared_state().scopes_mutex);
    auto s = std::make_unique<Scope>();
    s->l2_bytes = kDefaultL2;
    shared_state().scopes.insert(shared_state().scopes.begin(), std::move(s));
}

}  // namespace pd::sim::detail

namespace pd::sim {

bool profiler_available() {
    return detail::instrumented_units.load() > 0;
}

void profile_begin(double l2_bytes) {
    std::lock_guard<std::mutex> lock(detail::shared_state().scopes_mutex);
    auto s = std::make_unique<detail::Scope>();
    s->l2_bytes = l2_bytes;
    detail::shared_state().scopes.push_back(std::move(s));
}

std::vector<KernelProfile> profile_end() {
    std::unique_ptr<detail::Scope> s;
    {
        std::lock_guard<std::mutex> lock(detail::shared_state().scopes_mutex);
        const std::size_t keep = detail::whole_run().open ? 1 : 0;  // the whole run's scope stays first
        if (detail::shared_state().scopes.size() <= keep) return {};
        s = std::move(detail::shared_state().scopes.back());
        detail::shared_state().scopes.pop_back();
    }
    return detail::finish(*s);
}

std::optional<KernelResources> kernel_resources(const std::string& kernel, int cc) {
    // ptxas's lines, as nvcc --resource-usage writes them:
    //   ptxas info    : Compiling entry function '_ZN2pd...' for 'sm_90'
    //   ptxas info    : Function properties for _ZN2pd...
    //       256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    //   ptxas info    : Used 21 registers, used 1 barriers, 4096 bytes smem, ...
    static const std::map<std::pair<std::string, int>, KernelResources> all = [] {
        std::map<std::pair<std::string, int>, KernelResources> found;
        const char* env = std::getenv("PD_SIM_KERNEL_RESOURCES");
        const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : PD_KERNEL_RESOURCES_DIR;
        std::error_code ec;
        if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return found;
        for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
            if (entry.path().extension() != ".txt") continue;  // (the .sass files are the fold's)
            std::ifstream in(entry.path());
            std::string line, entry_name, props_for;
            int arch = 0;
            while (std::getline(in, line)) {
                if (const std::size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
                    const std::size_t from = at + 26, to = line.find('\'', from);
                    const std::size_t sm = line.find("'sm_", to + 1);
                    if (to == std::string::npos || sm == std::string::npos) continue;
                    entry_name = line.substr(from, to - from);
                    arch = std::atoi(line.c_str() + sm + 4);
                    found[{detail::source_name(entry_name), arch}] = {};
                } else if (const std::size_t at2 = line.find("Function properties for "); at2 != std::string::npos) {
                    props_for = line.substr(at2 + 24);
                    while (!props_for.empty() && (props_for.back() == ':' || std::isspace(props_for.back())))
                        props_for.pop_back();
                } else if (line.find("bytes stack frame") != std::string::npos && props_for == entry_name) {
                    KernelResources& r = found[{detail::source_name(entry_name), arch}];
                    std::sscanf(line.c_str(), " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads",
                                &r.stack_bytes, &r.spill_stores, &r.spill_loads);
                } else if (const std::size_t used = line.find("Used ");
                           used != std::string::npos && !entry_name.empty()) {
                    KernelResources& r = found[{detail::source_name(entry_name), arch}];
                    r.registers = std::atoi(line.c_str() + used + 5);
                    if (const std::size_t smem = line.find(" bytes smem"); smem != std::string::npos) {
                        std::size_t b = smem;
                        while (b > 0 && std::isdigit(static_cast<unsigned char>(line[b - 1]))) --b;
                        r.shared_bytes = std::atoi(line.c_str() + b);
                    }
                }
            }
        }
        return found;
    }();
    const auto it = all.find({kernel, cc});
    if (it == all.end()) return std::nullopt;
    return it->second;
}

std::uint64_t excess(const SiteProfile& s) {
    const std::uint64_t have = is_shared(s.kind) ? s.counts.wavefronts : s.counts.sectors;
    return have > s.counts.ideal ? have - s.counts.ideal : 0;
}

std::string reading(const SiteProfile& s) {
    using detail::element_name;
    using detail::number;
    const AccessCounts& c = s.counts;
    if (c.requests == 0 || excess(s) == 0) return "";
    const double per = double(is_shared(s.kind) ? c.wavefronts : c.sectors) / double(c.requests);
    const double ideal = double(c.ideal) / double(c.requests);
    std::string text = number(per, "%.3g") + (is_shared(s.kind) ? " wavefronts" : " sectors") + " per request where " +
                       number(ideal, "%.3g") + " would do";
    const long long stride = s.lane_stride < 0 ? -s.lane_stride : s.lane_stride;
    const std::string elements = element_name(s.access_bytes);
    if (s.active_lanes <= 1) {
        text += ": one lane per request";
    } else if (!s.uniform) {
        text += is_shared(s.kind) ? ": the lanes' addresses fall in the same banks" : ": the lanes' addresses scatter";
    } else if (stride == 0) {
        text += ": every lane the same address";
    } else if (stride == s.access_bytes) {
        text += is_shared(s.kind) ? ": consecutive lanes, but several phases share banks"
                                  : ": consecutive lanes, but not aligned to 32 bytes";
    } else {
        text += ": the lanes of a warp are " + std::to_string(stride) + " bytes apart";
        if (!elements.empty() && stride % s.access_bytes == 0)
            text += " (" + std::to_string(stride / s.access_bytes) + " " + elements + ")";
        if (is_shared(s.kind)) text += ", so several fall in one bank";
    }
    return text;
}

std::string fold_line(const LineFold& f) {
    using detail::number;
    const bool shared = is_shared(f.kind);
    auto said = [&](const AccessCounts& c) {
        return std::to_string(c.requests) + " requests, " + std::to_string(shared ? c.wavefronts : c.sectors) +
               (shared ? " wavefronts" : " sectors");
    };
    std::string text = f.file + ":" + std::to_string(f.line) + " " + to_string(f.kind) + ": ";
    if (f.emitted.empty()) return text + "no such instruction emitted; " + said(f.source) + " as the source makes them";
    text += f.emitted + ": " + said(f.folded) + " (the source's accesses: " + said(f.source) + ")";
    return text + (f.exact ? ", exact" : ", approximate: " + f.why);
}

std::string to_json_text(const std::vector<KernelProfile>& kernels, double l2_bytes) {
    using detail::json_string;
    using detail::number;
    auto global = [](const AccessCounts& c) {
        return "{\"requests\": " + std::to_string(c.requests) + ", \"sectors\": " + std::to_string(c.sectors) +
               ", \"lines\": " + std::to_string(c.lines) + ", \"bytes\": " + std::to_string(c.bytes) +
               ", \"unique_bytes\": " + std::to_string(c.unique_bytes) +
               ", \"ideal_sectors\": " + std::to_string(c.ideal) + "}";
    };
    auto shared = [](const AccessCounts& c) {
        return "{\"requests\": " + std::to_string(c.requests) + ", \"wavefronts\": " + std::to_string(c.wavefronts) +
               ", \"ideal_wavefronts\": " + std::to_string(c.ideal) + ", \"bytes\": " + std::to_string(c.bytes) + "}";
    };
    std::string out = "[";
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const KernelProfile& k = kernels[i];
        const WarpOps& o = k.ops;
        out +=
            std::string(i ? ",\n " : "\n ") + "{\"kernel\": " + json_string(k.kernel) +
            ", \"launches\": " + std::to_string(k.launches) + ", \"blocks\": " + std::to_string(k.blocks) +
            ", \"threads\": " + std::to_string(k.threads) + ", \"block_threads\": " + std::to_string(k.block_threads) +
            ", \"static_shared_bytes\": " + std::to_string(k.static_shared_bytes) +
            ", \"dynamic_shared_bytes\": " + std::to_string(k.dynamic_shared_bytes) +
            ",\n  \"global_load\": " + global(k.global_load) + ",\n  \"global_store\": " + global(k.global_store) +
            ",\n  \"global_atomic\": " + global(k.global_atomic) + ",\n  \"shared_load\": " + shared(k.shared_load) +
            ",\n  \"shared_store\": " + shared(k.shared_store) + ",\n  \"shared_atomic\": " + shared(k.shared_atomic) +
            ",\n  \"ops\": {\"shuffles\": " + std::to_string(o.shuffles) + ", \"votes\": " + std::to_string(o.votes) +
            ", \"reductions\": " + std::to_string(o.reductions) + ", \"syncwarps\": " + std::to_string(o.syncwarps) +
            ", \"barriers\": " + std::to_string(o.barriers) + ", \"mma\": " + std::to_string(o.mma) +
            ", \"ldmatrix\": " + std::to_string(o.ldmatrix) + ", \"cp_async\": " + std::to_string(o.cp_async) +
            ", \"wmma_load\": " + std::to_string(o.wmma_load) + ", \"wmma_store\": " + std::to_string(o.wmma_store) +
            ", \"wmma_mma\": " + std::to_string(o.wmma_mma) +
            "},\n  \"unique_sectors\": " + std::to_string(k.unique_sectors) +
            ", \"requested_sectors\": " + std::to_string(k.requested_sectors) + ", \"dram_bytes_estimate\": " +
            (k.dram_bytes_estimate < 0 ? std::string("null") : number(k.dram_bytes_estimate, "%.17g")) +
            ", \"l2_bytes_modelled\": " + number(l2_bytes, "%.17g") + ",\n  \"sites\": [";
        for (std::size_t j = 0; j < k.sites.size(); ++j) {
            const SiteProfile& s = k.sites[j];
            out += std::string(j ? ",\n   " : "\n   ") + "{\"file\": " + json_string(s.file) +
                   ", \"line\": " + std::to_string(s.line) + ", \"via\": " + json_string(s.via) +
                   ", \"op\": " + json_string(to_string(s.kind)) + ", \"instruction\": " + json_string(s.instruction) +
                   ", \"requests\": " + std::to_string(s.counts.requests) +
                   ", \"sectors\": " + std::to_string(s.counts.sectors) +
                   ", \"wavefronts\": " + std::to_string(s.counts.wavefronts) +
                   ", \"bytes\": " + std::to_string(s.counts.bytes) + ", \"ideal\": " + std::to_string(s.counts.ideal) +
                   ", \"reading\": " + json_string(reading(s)) + "}";
        }
        out += "]";
        if (!k.sass_arch.empty()) {
            out += ",\n  \"sass\": {\"arch\": " + json_string(k.sass_arch) +
                   ", \"sha256\": " + json_string(k.sass_sha256) + ", \"nvdisasm\": " + json_string(k.sass_tool) +
                   ", \"nvcc\": " + json_string(nvcc_version()) +
                   "},\n  \"folded\": {\"global_load\": " + global(folded_counts(k, AccessKind::global_load)) +
                   ", \"global_store\": " + global(folded_counts(k, AccessKind::global_store)) +
                   ", \"shared_load\": " + shared(folded_counts(k, AccessKind::shared_load)) +
                   ", \"shared_store\": " + shared(folded_counts(k, AccessKind::shared_store)) +
                   ", \"ldmatrix\": " + shared(emulated_counts(k, AccessKind::shared_load, "ldmatrix")) +
                   ", \"cp_async_global\": " + global(emulated_counts(k, AccessKind::global_load, "cp.async")) +
                   ", \"cp_async_shared\": " + shared(emulated_counts(k, AccessKind::shared_store, "cp.async")) +
                   "},\n  \"folds\": [";
            auto counts = [](const LineFold& f, const AccessCounts& c) {
                return "{\"requests\": " + std::to_string(c.requests) + ", \"sectors\": " + std::to_string(c.sectors) +
                       ", \"wavefronts\": " + std::to_string(c.wavefronts) + ", \"ideal\": " + std::to_string(c.ideal) +
                       (is_shared(f.kind) ? "" : ", \"lines\": " + std::to_string(c.lines)) + "}";
            };
            for (std::size_t j = 0; j < k.folds.size(); ++j) {
                const LineFold& f = k.folds[j];
                out += std::string(j ? ",\n   " : "\n   ") + "{\"file\": " + json_string(f.file) +
                       ", \"line\": " + std::to_string(f.line) + ", \"op\": " + json_string(to_string(f.kind)) +
                       ", \"emitted\": " + json_string(f.emitted) + ", \"source\": " + counts(f, f.source) +
                       ", \"folded\": " + counts(f, f.folded) + ", \"exact\": " + (f.exact ? "true" : "false") +
                       ", \"why\": " + json_string(f.why) + "}";
            }
            out += "]";
        }
        out += "}";
    }
    return out + "\n]\n";
}

std::string describe(const std::vector<KernelProfile>& kernels) {
    using detail::number;
    std::ostringstream out;
    out << "pd::sim profile (counted on the simulator, for the hardware rules in docs/simulator.md):\n";
    for (const KernelProfile& k : kernels) {
        out << "kernel " << k.kernel << ": " << k.launches << (k.launches == 1 ? " launch, " : " launches, ")
            << k.blocks << " blocks, " << k.threads << " threads\n";
        auto global = [&](const char* what, const AccessCounts& c) {
            if (c.requests == 0) return;
            out << "  " << what << ": " << c.requests << " requests, " << number(double(c.sectors) / c.requests)
                << " sectors per request (ideal " << number(double(c.ideal) / c.requests) << "), efficiency "
                << number(c.sectors ? double(c.unique_bytes) / (32.0 * c.sectors) : 0, "%.2f") << ", " << c.bytes
                << " bytes asked\n";
        };
        auto shared = [&](const char* what, const AccessCounts& c) {
            if (c.requests == 0) return;
            out << "  " << what << ": " << c.requests << " requests, " << number(double(c.wavefronts) / c.requests)
                << " wavefronts per request (ideal " << number(double(c.ideal) / c.requests) << ")\n";
        };
        global("global loads", k.global_load);
        global("global stores", k.global_store);
        global("global atomics", k.global_atomic);
        shared("shared loads", k.shared_load);
        shared("shared stores", k.shared_store);
        shared("shared atomics", k.shared_atomic);
        out << "  distinct sectors: " << k.unique_sectors << " (" << k.unique_sectors * 32 << " bytes, DRAM at least); "
            << "requested: " << k.requested_sectors << " (" << k.requested_sectors * 32 << " bytes, DRAM at most)";
        if (k.dram_bytes_estimate >= 0) out << "; L2 model: " << number(k.dram_bytes_estimate, "%.0f") << " bytes";
        out << "\n";
        const WarpOps& o = k.ops;
        out << "  warp operations: " << o.shuffles << " shuffles, " << o.votes << " votes, " << o.reductions
            << " reductions, " << o.barriers << " barriers, " << o.mma << " mma.sync, " << o.ldmatrix << " ldmatrix, "
            << o.cp_async << " cp.async, " << o.wmma_load << "/" << o.wmma_store << "/" << o.wmma_mma
            << " wmma load/store/mma\n";
        std::vector<const SiteProfile*> worst;
        for (const SiteProfile& s : k.sites)
            if (excess(s) > 0) worst.push_back(&s);
        std::sort(worst.begin(), worst.end(),
                  [](const SiteProfile* a, const SiteProfile* b) { return excess(*a) > excess(*b); });
        for (std::size_t i = 0; i < worst.size() && i < 3; ++i)
            out << "  worst: " << worst[i]->file << ":" << worst[i]->line
                << (worst[i]->via.empty() ? "" : " (in " + worst[i]->via + ")") << " " << to_string(worst[i]->kind)
                << ": " << reading(*worst[i]) << "\n";
        if (k.sass_arch.empty()) continue;
        out << "  what " << k.sass_arch << " issues (nvcc " << nvcc_version() << "'s SASS "
            << k.sass_sha256.substr(0, 12) << "), per line:\n";
        for (const LineFold& f : k.folds) out << "    " << fold_line(f) << "\n";
    }
    return out.str();
}

}  // namespace pd::sim

// ---- the instrumentation's entry points: every load and store of an instrumented kernel -------

// GCC's thread-sanitizer instrumentation (-fsanitize=thread, compiled but not linked with its
// runtime) calls these: __tsan_read4(address) before a 4-byte load, __tsan_write16 before a
// 16-byte store, the _range forms for aggregate copies, and the __tsan_atomic* functions in
// place of the atomic operations themselves, which they must perform (the simulator's atomics
// report themselves to the profiler: ProfiledAtomic in cuda_sim.hpp). Not in a program that
// links ThreadSanitizer's runtime, which defines them.
#if !defined(__SANITIZE_THREAD__)
extern "C" {
#define PD_SIM_PROFILE_HOOKS(n)                                          \
    void __tsan_read##n(void* p) {                                       \
        pd::sim::detail::hook(p, n, false, __builtin_return_address(0)); \
    }                                                                    \
    void __tsan_write##n(void* p) {                                      \
        pd::sim::detail::hook(p, n, true, __builtin_return_address(0));  \
    }
PD_SIM_PROFILE_HOOKS(1)
PD_SIM_PROFILE_HOOKS(2)
PD_SIM_PROFILE_HOOKS(4)
PD_SIM_PROFILE_HOOKS(8)
PD_SIM_PROFILE_HOOKS(16)
#undef PD_SIM_PROFILE_HOOKS
#define PD_SIM_PROFILE_HOOKS(n)                                          \
    void __tsan_unaligned_read##n(void* p) {                             \
        pd::sim::detail::hook(p, n, false, __builtin_return_address(0)); \
    }                                                                    \
    void __tsan_unaligned_write##n(void* p) {                            \
        pd::sim::detail::hook(p, n, true, __builtin_return_address(0));  \
    }
PD_SIM_PROFILE_HOOKS(2)
PD_SIM_PROFILE_HOOKS(4)
PD_SIM_PROFILE_HOOKS(8)
PD_SIM_PROFILE_HOOKS(16)
#undef PD_SIM_PROFILE_HOOKS
void __tsan_read_range(void* p, std::size_t n) {
    pd::sim::detail::hook(p, unsigned(n), false, __builtin_return_address(0));
}
void __tsan_write_range(void* p, std::size_t n) {
    pd::sim::detail::hook(p, unsigned(n), true, __builtin_return_address(0));
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

// The atomics: performed here, as the instrumented code asked (the memory order is an
// argument, which GCC's builtins take as the strongest, sequentially consistent).
#define PD_SIM_TSAN_ATOMICS(bits, T)                                                                \
    T __tsan_atomic##bits##_load(const volatile T* a, int mo) {                                     \
        return __atomic_load_n(a, mo);                                                              \
    }                                                                                               \
    void __tsan_atomic##bits##_store(volatile T* a, T v, int mo) {                                  \
        __atomic_store_n(a, v, mo);                                                                 \
    }                                                                                               \
    T __tsan_atomic##bits##_exchange(volatile T* a, T v, int mo) {                                  \
        return __atomic_exchange_n(a, v, mo);                                                       \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int mo) {                                 \
        return __atomic_fetch_add(a, v, mo);                                                        \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int mo) {                                 \
        return __atomic_fetch_sub(a, v, mo);                                                        \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int mo) {                                 \
        return __atomic_fetch_and(a, v, mo);                                                        \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int mo) {                                  \
        return __atomic_fetch_or(a, v, mo);                                                         \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int mo) {                                 \
        return __atomic_fetch_xor(a, v, mo);                                                        \
    }                                                                                               \
    T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int mo) {                                \
        return __atomic_fetch_nand(a, v, mo);                                                       \
    }                                                                                               \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int mo, int fail) { \
        return __atomic_compare_exchange_n(a, c, v, false, mo, fail);                               \
    }                                                                                               \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int mo, int fail) {   \
        return __atomic_compare_exchange_n(a, c, v, true, mo, fail);                                \
    }                                                                                               \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int mo, int fail) {       \
        __atomic_compare_exchange_n(a, &c, v, false, mo, fail);                                     \
        return c;                                                                                   \
    }
PD_SIM_TSAN_ATOMICS(8, char)
PD_SIM_TSAN_ATOMICS(16, short)
PD_SIM_TSAN_ATOMICS(32, int)
PD_SIM_TSAN_ATOMICS(64, long)
#undef PD_SIM_TSAN_ATOMICS
void __tsan_atomic_thread_fence(int mo) {
    __atomic_thread_fence(mo);
}
void __tsan_atomic_signal_fence(int mo) {
    __atomic_signal_fence(mo);
}
}
#endif
