// The CUDA runtime API subset of the simulator, with the toolkit's own declarations, types and
// error codes. Device memory is host memory; streams and events run in order, so every call
// completes before it returns, and events read the host clock.
//
// Every cudaMalloc allocation sits between two guard zones filled with a pattern. After each
// launch the guards of every live allocation are compared with their pattern, so a kernel that
// wrote past the end (or before the start) of a buffer is named, with the allocation, before
// the program can print a wrong "success". In the sanitizer build there are no guard zones:
// AddressSanitizer's own redzones around each allocation report the access itself, and
// __asan_on_error() (below) first names the kernel, block and thread that made it.
#include "sim_internal.hpp"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define PD_SIM_ASAN 1
#endif

// The opaque handle types the runtime declares; the simulator defines them (CUstream_st in
// sim_internal.hpp, which graphs.cpp shares).
struct CUevent_st {
    std::chrono::steady_clock::time_point time{};
    bool recorded = false;
    cudaStream_t captured_in = nullptr;  ///< last recorded in this stream's capture (graphs.cpp)
};

namespace pd::sim::detail {

// The architecture the program's device code was compiled for (cuda_sim.hpp registers it).
std::atomic<int> modelled_architecture{900};

int model_architecture(int arch) {
    modelled_architecture = arch;
    return arch;
}

int device_compute_capability() {
    const int preset = settings().device.compute_capability;
    return preset > 0 ? preset : modelled_architecture / 10;
}

namespace {

std::mutex state_mutex;
cudaError_t sticky = cudaSuccess;
thread_local cudaError_t last_error = cudaSuccess;
std::string diagnostic;
std::map<const void*, std::size_t> dynamic_shared_limits;
std::map<const void*, std::size_t> host_allocations;
/// Bytes allocated on each virtual device (PD_SIM_DEVICES of them).
std::vector<std::size_t> allocated_bytes(kMaxDevices, 0);
/// The device of this host thread's calls, as cudaSetDevice sets it per thread on a GPU.
thread_local int current_device = 0;
/// peer_access[d][p]: device d's kernels may read device p's memory (cudaDeviceEnablePeerAccess).
bool peer_access[kMaxDevices][kMaxDevices] = {};

// ---- device allocations and their guard zones ------------------------------------------------

#if defined(PD_SIM_ASAN)
constexpr std::size_t kGuardBytes = 0;  // AddressSanitizer's redzones guard the allocations
#else
constexpr std::size_t kGuardBytes = 256;  // before the start; after the end, past the slack to 256
#endif
constexpr std::size_t kAlignment = 256;  // what cudaMalloc guarantees

std::size_t round_up(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
}

/// One cudaMalloc (or cudaMallocManaged) allocation. In memory: `kGuardBytes` of guard, the
/// `bytes` the program asked for (256-byte aligned), then the guard after the end: the slack up
/// to the next multiple of 256, plus `kGuardBytes`.
struct DeviceAllocation {
    unsigned char* block = nullptr;  ///< what device_block() returned
    std::size_t bytes = 0;           ///< as requested
    std::size_t tail = 0;            ///< guard bytes after the end
    std::uint64_t pattern = 0;       ///< the guard's contents, one 8-byte word repeated
    std::uint64_t number = 0;        ///< 1 for the program's first device allocation, ...
    std::size_t guard_index = 0;     ///< its entry in guard_zones
    const char* function = "cudaMalloc";
    std::source_location site{};  ///< where it was called, if known (file_name() "" if not)
    int device = 0;               ///< the virtual device it was made on

    unsigned char* begin() const { return block + kGuardBytes; }
    unsigned char* end() const { return begin() + bytes; }
};
std::map<const void*, DeviceAllocation> device_allocations;  // by the pointer the program got

/// 16 bytes, compared at once (one SSE2 instruction).
typedef std::uint64_t Chunk __attribute__((vector_size(16)));

/// The guard zones of one live allocation, as the check after each launch reads them: the
/// front guard, and the tail guard from the 16-byte boundary at or before the end of the
/// program's data, whose bytes in the first chunk `first_mask` leaves out.
struct GuardZones {
    const Chunk* front;
    const Chunk* tail;
    std::size_t tail_chunks;
    Chunk first_mask;
    Chunk pattern;
    const void* data;  ///< the allocation's key in device_allocations
};
/// The guard zones of every live allocation, in one array: they are checked after every launch.
std::vector<GuardZones> guard_zones;
std::uint64_t device_allocation_count = 0;

/// The guard pattern of the @p number-th allocation. Each 16-bit half of each word reads as a
/// number between 2 and 8 in magnitude, whether as part of a float or a double, or as a __half or
/// a __nv_bfloat16: not a NaN, because arithmetic on a NaN keeps its bits, so `x[i] += 1.0f` one
/// element past the end would store the pattern back unnoticed, and not a huge number, which
/// adding a small one leaves unchanged. The sign and the low 7 bits of each half depend on the
/// allocation, so a value read from one buffer's guard and stored into another's still differs.
std::uint64_t guard_pattern(std::uint64_t number) {
    std::uint64_t h = number * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    std::uint64_t word = 0;
    for (int half = 0; half < 4; ++half) {
        const std::uint64_t bits = (h >> (8 * half)) & 0xFF;
        const std::uint64_t unit = 0x4080 | (bits & 0x7F) | ((bits & 0x80) << 8);
        word |= unit << (16 * half);
    }
    return word;
}

/// The pattern's byte at address @p a (the word is laid down on 8-byte aligned addresses).
unsigned char pattern_byte(std::uint64_t pattern, const unsigned char* a) {
    return static_cast<unsigned char>(pattern >> (8 * (reinterpret_cast<std::uintptr_t>(a) % 8)));
}

void fill_guard(unsigned char* from, unsigned char* to, std::uint64_t pattern) {
    for (unsigned char* a = from; a < to; ++a) *a = pattern_byte(pattern, a);
}

/// True if [from, to) still holds the pattern; @p to is 8-byte aligned. This runs after every
/// launch over every live allocation, so it compares whole words without branches: the bytes
/// of the first word that lie before @p from (the end of the program's data) are masked out.
bool guard_intact(const unsigned char* from, const unsigned char* to, std::uint64_t pattern) {
    const std::size_t skip = reinterpret_cast<std::uintptr_t>(from) % 8;
    const unsigned char* word = from - skip;
    std::uint64_t w;
    std::memcpy(&w, word, 8);
    std::uint64_t differ = (w ^ pattern) & (~std::uint64_t{0} << (8 * skip));
    for (word += 8; word < to; word += 8) {
        std::memcpy(&w, word, 8);
        differ |= w ^ pattern;
    }
    return differ == 0;
}

/// True if both guard zones of @p g still hold the pattern: the check after every launch, over
/// every live allocation, so it reads whole 16-byte chunks and branches once.
bool guards_intact(const GuardZones& g) {
    Chunk differ = (g.tail[0] ^ g.pattern) & g.first_mask;
    for (std::size_t i = 0; i < kGuardBytes / sizeof(Chunk); ++i) differ |= g.front[i] ^ g.pattern;
    for (std::size_t i = 1; i < g.tail_chunks; ++i) differ |= g.tail[i] ^ g.pattern;
    return (differ[0] | differ[1]) == 0;
}

GuardZones guard_zones_of(const DeviceAllocation& a) {
    GuardZones g{};
    const auto end = reinterpret_cast<std::uintptr_t>(a.end());
    const std::size_t skip = end % sizeof(Chunk);  // bytes of the program's data in the first chunk
    g.front = reinterpret_cast<const Chunk*>(a.block);
    g.tail = reinterpret_cast<const Chunk*>(a.end() - skip);
    g.tail_chunks = (a.tail + skip) / sizeof(Chunk);
    for (int i = 0; i < 2; ++i) {
        g.pattern[i] = a.pattern;
        const std::size_t from = 8 * std::size_t(i);  // byte offset of this word in the chunk
        g.first_mask[i] =
            skip <= from ? ~std::uint64_t{0} : (skip >= from + 8 ? 0 : ~std::uint64_t{0} << (8 * (skip - from)));
    }
    g.data = a.begin();
    return g;
}

/// The first and last byte of [from, to) that no longer hold the pattern, as offsets from @p from.
std::pair<std::size_t, std::size_t> changed_range(const unsigned char* from, const unsigned char* to,
                                                  std::uint64_t pattern) {
    std::size_t first = SIZE_MAX, last = 0;
    for (const unsigned char* a = from; a < to; ++a)
        if (*a != pattern_byte(pattern, a)) {
            first = std::min(first, std::size_t(a - from));
            last = std::size_t(a - from);
        }
    return {first, last};
}

/// "a 4000-byte allocation made by cudaMalloc at prog.cu:12 (device allocation #2)".
std::string describe(const DeviceAllocation& a) {
    std::ostringstream out;
    out << "a " << a.bytes << "-byte allocation made by " << a.function;
    if (a.site.file_name()[0] != '\0') out << " at " << a.site.file_name() << ":" << a.site.line();
    out << " (device allocation #" << a.number;
    if (settings().devices > 1) out << ", on device " << a.device;
    out << ")";
    return out.str();
}

/// What is wrong with the guards of @p a ("" if they are intact): where the changed bytes are,
/// counted from the allocation as AddressSanitizer counts (the byte just past the end is 0 bytes
/// past it, the byte just before the start 1 byte before it), widened to whole 4-byte words: the
/// guard shows which bytes changed, not how wide the write was (`x[n] += 1.0f` changes 1 or 2).
std::string guard_damage(const DeviceAllocation& a) {
    std::string text;
    const auto word_start = [](unsigned char* p) { return p - reinterpret_cast<std::uintptr_t>(p) % 4; };
    if (!guard_intact(a.block, a.begin(), a.pattern)) {
        const auto [first, last] = changed_range(a.block, a.begin(), a.pattern);
        const unsigned char* far = word_start(a.block + first);
        const unsigned char* near = std::min(word_start(a.block + last) + 4, a.begin());
        text += "wrote at bytes " + std::to_string(a.begin() - (near - 1)) + " to " + std::to_string(a.begin() - far) +
                " before the start of " + describe(a);
    }
    if (!guard_intact(a.end(), a.end() + a.tail, a.pattern)) {
        const auto [first, last] = changed_range(a.end(), a.end() + a.tail, a.pattern);
        const unsigned char* near = std::max(word_start(a.end() + first), a.end());
        const unsigned char* far = word_start(a.end() + last) + 3;
        if (!text.empty()) text += ", and ";
        text += "wrote at bytes " + std::to_string(near - a.end()) + " to " + std::to_string(far - a.end()) +
                " past the end of " + describe(a);
    }
    return text;
}

/// The allocation that @p p points into, or into whose guard zones it points (null if none).
/// In the sanitizer build, where there are no guard zones, the 16 bytes on either side (the
/// smallest redzone AddressSanitizer leaves around an allocation) count as its guards.
/// Called with state_mutex held.
const DeviceAllocation* allocation_around(const void* p) {
    constexpr std::size_t kNear = kGuardBytes > 0 ? kGuardBytes : 16;
    if (device_allocations.empty()) return nullptr;
    const auto q = reinterpret_cast<std::uintptr_t>(p);
    auto next = device_allocations.upper_bound(p);
    if (next != device_allocations.begin()) {
        const DeviceAllocation& a = std::prev(next)->second;
        if (q < reinterpret_cast<std::uintptr_t>(a.end()) + std::max(a.tail, kNear)) return &a;
    }
    if (next != device_allocations.end() && q + kNear >= reinterpret_cast<std::uintptr_t>(next->second.begin()))
        return &next->second;
    return nullptr;
}

/// Checks that a copy or memset of @p bytes at @p p stays inside the device allocation that
/// @p p points into (if it points into one); otherwise records why in the diagnostic.
bool copy_in_bounds(const char* call, const char* role, const void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(state_mutex);
    const DeviceAllocation* a = allocation_around(p);
    if (a == nullptr) return true;
    const auto* q = static_cast<const unsigned char*>(p);
    std::ostringstream why;
    why << call << ": the " << role << " range of " << bytes << " bytes ";
    if (q < a->begin())
        why << "starts " << (a->begin() - q) << " bytes before the start of " << describe(*a);
    else if (q >= a->end() && bytes > 0)
        why << "starts " << (q - a->end()) << " bytes past the end of " << describe(*a);
    else if (std::size_t(a->end() - q) < bytes)
        why << "at offset " << (q - a->begin()) << " runs " << (bytes - std::size_t(a->end() - q))
            << " bytes past the end of " << describe(*a);
    else
        return true;
    diagnostic = why.str();
    return false;
}

/// The device allocation that holds @p p (inside its bytes), or nullptr: a host pointer.
const DeviceAllocation* allocation_holding(const void* p) {
    auto next = device_allocations.upper_bound(p);
    if (next == device_allocations.begin()) return nullptr;
    const DeviceAllocation& a = std::prev(next)->second;
    const auto* q = static_cast<const unsigned char*>(p);
    return q >= a.begin() && q < a.end() ? &a : nullptr;
}

/// Checks that a copy's direction @p kind does not contradict its pointers: a side the kind
/// names as host memory must not be a cudaMalloc'd allocation (swapped arguments, or the wrong
/// kind). CUDA leaves that undefined (on a GPU it may copy garbage or fault); the simulator
/// refuses it, naming the side. A side named as device memory is not checked the other way:
/// memory the simulator cannot tell from host memory (a thrust::device_vector's, a symbol's)
/// is device memory there. cudaMemcpyDefault, and managed memory on either side, take any pointers.
bool direction_matches(const char* call, void* dst, const void* src, cudaMemcpyKind kind) {
    if (kind == cudaMemcpyDefault) return true;
    std::lock_guard<std::mutex> lock(state_mutex);
    const DeviceAllocation* d = allocation_holding(dst);
    const DeviceAllocation* s = allocation_holding(src);
    auto managed = [](const DeviceAllocation* a) {
        return a != nullptr && std::string_view(a->function) == "cudaMallocManaged";
    };
    if (managed(d) || managed(s)) return true;
    const bool dst_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyDeviceToHost;
    const bool src_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyHostToDevice;
    static constexpr const char* kKinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                             "cudaMemcpyDeviceToDevice"};
    const bool bad_dst = dst_host && d != nullptr, bad_src = src_host && s != nullptr;
    if (!bad_dst && !bad_src) return true;
    std::ostringstream why;
    why << call << " with " << kKinds[int(kind)] << ": the " << (bad_dst ? "destination" : "source")
        << " is device memory, " << describe(bad_dst ? *d : *s)
        << ", where the kind names host memory; the kind must match the pointers (or use cudaMemcpyDefault)";
    diagnostic = why.str();
    return false;
}

// ---- the name of a kernel, from its address: looked up only to write a message -------------------

struct LoadedObject {
    const void* address;
    std::uintptr_t bias = 0;
    std::string path;
    bool found = false;
};

/// The executable or shared library that holds @p address, and where it was loaded.
LoadedObject object_holding(const void* address) {
    LoadedObject o{address};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
            auto& o = *static_cast<LoadedObject*>(data);
            const auto a = reinterpret_cast<std::uintptr_t>(o.address);
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD && a >= start && a < start + ph.p_memsz) {
                    o.bias = info->dlpi_addr;
                    o.path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
                    o.found = true;
                    return 1;
                }
            }
            return 0;
        },
        &o);
    return o;
}

/// The mangled name of the function symbol that holds @p address, from the symbol table of the
/// file it was loaded from (the static one, which also lists functions that are not exported).
std::string symbol_at(const void* address) {
    const LoadedObject o = object_holding(address);
    if (!o.found) return {};
    const int fd = open(o.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    struct stat st {};
    void* map =
        fstat(fd, &st) == 0 ? mmap(nullptr, std::size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) return {};
    const std::size_t size = std::size_t(st.st_size);
    const auto* file = static_cast<const unsigned char*>(map);
    std::string name;
    const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(file);
    const bool valid = size >= sizeof(ElfW(Ehdr)) && std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
                       eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_shoff + eh->e_shnum * sizeof(ElfW(Shdr)) <= size;
    if (valid) {
        const auto* sections = reinterpret_cast<const ElfW(Shdr)*>(file + eh->e_shoff);
        const std::uintptr_t target = reinterpret_cast<std::uintptr_t>(address) - o.bias;
        for (unsigned type : {unsigned(SHT_SYMTAB), unsigned(SHT_DYNSYM)}) {
            for (int i = 0; i < eh->e_shnum && name.empty(); ++i) {
                const ElfW(Shdr)& sh = sections[i];
                if (sh.sh_type != type || sh.sh_link >= eh->e_shnum || sh.sh_offset + sh.sh_size > size) continue;
                const ElfW(Shdr)& strings = sections[sh.sh_link];
                const auto* syms = reinterpret_cast<const ElfW(Sym)*>(file + sh.sh_offset);
                for (std::size_t k = 0; k < sh.sh_size / sizeof(ElfW(Sym)); ++k) {
                    const ElfW(Sym)& sym = syms[k];
                    if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_name >= strings.sh_size) continue;
                    if (target >= sym.st_value && target < sym.st_value + std::max<ElfW(Xword)>(sym.st_size, 1)) {
                        name = reinterpret_cast<const char*>(file + strings.sh_offset + sym.st_name);
                        break;
                    }
                }
            }
            if (!name.empty()) break;
        }
    }
    munmap(map, size);
    return name;
}

}  // namespace

std::string source_name(const std::string& mangled) {
    if (mangled.empty()) return {};
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                     std::free);
    if (status != 0 || !demangled) return mangled;  // an extern "C" kernel
    std::string name = demangled.get();
    // Drop the parameter list: the parenthesis that closes the name, and its match.
    if (!name.empty() && name.back() == ')') {
        int depth = 0;
        for (std::size_t i = name.size(); i-- > 0;) {
            if (name[i] == ')')
                ++depth;
            else if (name[i] == '(' && --depth == 0) {
                name.erase(i);
                break;
            }
        }
    }
    // A template's name starts with its return type, which a kernel's is: void.
    if (name.rfind("void ", 0) == 0) name.erase(0, 5);
    return name;
}

namespace {

/// The source name of the function at @p address, without its parameters ("ramp",
/// "tiled_gemm<float>", "pd::kernels::gemv::decode_warp_per_row"), or "" if it is not found.
std::string function_symbol(const void* address) {
    return source_name(symbol_at(address));
}

/// Reports damaged guards (one line each, naming @p culprit) and stops the program.
[[noreturn]] void stop_on_damaged_guards(const std::vector<std::string>& damage, const std::string& culprit,
                                         const char* advice) {
    std::fflush(stdout);
    for (const std::string& d : damage) std::fprintf(stderr, "pd::sim: %s %s\n", culprit.c_str(), d.c_str());
    std::fprintf(stderr, "pd::sim: %s\n", advice);
    std::exit(EXIT_FAILURE);
}

/// Memory of each virtual device: half the machine's memory, at most 16 GiB, shared out among the
/// PD_SIM_DEVICES devices, so that eight of them still fit a small machine.
std::size_t simulated_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const std::size_t physical = pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : (8ull << 30);
    return std::min<std::size_t>(physical / 2, 16ull << 30) / std::size_t(settings().devices);
}

/// True for a device number of this run (0 ... PD_SIM_DEVICES - 1).
bool valid_device(int device) {
    return device >= 0 && device < settings().devices;
}

/// Returns @p code after recording it as the last error (success is not recorded).
cudaError_t fail(cudaError_t code) {
    set_error(code);
    return code;
}

void* aligned_block(std::size_t bytes) {
    return ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
}

// Device allocations of 64 KiB and more get pages of their own (mmap), and cudaFree keeps
// their addresses reserved and inaccessible for a while (the last 256 freed, up to 64 GiB of
// address space, no memory): a kernel that uses a freed pointer then faults, and the fault
// handler names it, instead of writing into whatever the next allocation or fiber stack put
// there. Smaller ones come from the heap, where such a write goes unnoticed. The sanitizer
// build uses the heap for all: AddressSanitizer's own quarantine reports a use after free.
#if defined(PD_SIM_ASAN)
constexpr std::size_t kOwnPagesFrom = ~std::size_t(0);
#else
constexpr std::size_t kOwnPagesFrom = 64 * 1024;
#endif

std::size_t page_rounded(std::size_t bytes) {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
}

void* device_block(std::size_t bytes) {
    if (bytes < kOwnPagesFrom) return aligned_block(bytes);
    void* p =
        mmap(nullptr, page_rounded(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void release_device_block(void* block, std::size_t bytes) {
    if (bytes < kOwnPagesFrom) {
        ::operator delete(block, std::align_val_t(256));
        return;
    }
    struct Freed {
        void* block;
        std::size_t bytes;
    };
    static std::mutex m;
    static std::vector<Freed> quarantine;  // oldest first
    static std::size_t quarantined = 0;
    const std::size_t len = page_rounded(bytes);
    // The same addresses, now without access and without memory behind them.
    if (mmap(block, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
        munmap(block, len);
        return;
    }
    std::lock_guard<std::mutex> lock(m);
    quarantine.push_back({block, len});
    quarantined += len;
    while (quarantine.size() > 256 || quarantined > (64ull << 30)) {
        munmap(quarantine.front().block, quarantine.front().bytes);
        quarantined -= quarantine.front().bytes;
        quarantine.erase(quarantine.begin());
    }
}

}  // namespace

void set_error(cudaError_t code) {
    if (code != cudaSuccess) last_error = code;
}
void set_sticky_error(cudaError_t code) {
    std::lock_guard<std::mutex> lock(state_mutex);
    sticky = code;
    last_error = code;
}
cudaError_t sticky_error() {
    std::lock_guard<std::mutex> lock(state_mutex);
    return sticky;
}
cudaError_t take_last_error() {
    const cudaError_t s = sticky_error();
    if (s != cudaSuccess) return s;
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t peek_last_error() {
    const cudaError_t s = sticky_error();
    return s != cudaSuccess ? s : last_error;
}
void reset_errors() {
    std::lock_guard<std::mutex> lock(state_mutex);
    sticky = cudaSuccess;
    last_error = cudaSuccess;
    diagnostic.clear();
}
std::optional<std::size_t> max_dynamic_shared(const void* kernel) {
    std::lock_guard<std::mutex> lock(state_mutex);
    const auto it = dynamic_shared_limits.find(kernel);
    if (it == dynamic_shared_limits.end()) return std::nullopt;
    return it->second;
}
void set_max_dynamic_shared(const void* kernel, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(state_mutex);
    dynamic_shared_limits[kernel] = bytes;
}
void set_last_diagnostic(const std::string& text) {
    std::lock_guard<std::mutex> lock(state_mutex);
    diagnostic = text;
}

}  // namespace pd::sim::detail

namespace pd::sim {
std::string last_diagnostic() {
    std::lock_guard<std::mutex> lock(detail::state_mutex);
    return detail::diagnostic;
}
int worker_count() {
    return detail::settings().workers;
}
std::uint64_t device_allocations() {
    std::lock_guard<std::mutex> lock(detail::state_mutex);
    return detail::device_allocation_count;
}
}  // namespace pd::sim

using namespace pd::sim::detail;

// ---- errors ----------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
    return take_last_error();
}
cudaError_t cudaPeekAtLastError() {
    return peek_last_error();
}

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define PD_SIM_ERROR(name) \
    case name:             \
        return #name;
        PD_SIM_ERROR(cudaSuccess)
        PD_SIM_ERROR(cudaErrorInvalidValue)
        PD_SIM_ERROR(cudaErrorMemoryAllocation)
        PD_SIM_ERROR(cudaErrorInitializationError)
        PD_SIM_ERROR(cudaErrorInvalidConfiguration)
        PD_SIM_ERROR(cudaErrorInvalidDevice)
        PD_SIM_ERROR(cudaErrorInvalidDevicePointer)
        PD_SIM_ERROR(cudaErrorInvalidMemcpyDirection)
        PD_SIM_ERROR(cudaErrorInvalidDeviceFunction)
        PD_SIM_ERROR(cudaErrorInvalidResourceHandle)
        PD_SIM_ERROR(cudaErrorInvalidSymbol)
        PD_SIM_ERROR(cudaErrorNotReady)
        PD_SIM_ERROR(cudaErrorNoDevice)
        PD_SIM_ERROR(cudaErrorInsufficientDriver)
        PD_SIM_ERROR(cudaErrorNotSupported)
        PD_SIM_ERROR(cudaErrorIllegalAddress)
        PD_SIM_ERROR(cudaErrorMisalignedAddress)
        PD_SIM_ERROR(cudaErrorLaunchOutOfResources)
        PD_SIM_ERROR(cudaErrorAssert)
        PD_SIM_ERROR(cudaErrorIllegalInstruction)
        PD_SIM_ERROR(cudaErrorLaunchFailure)
        PD_SIM_ERROR(cudaErrorPeerAccessAlreadyEnabled)
        PD_SIM_ERROR(cudaErrorPeerAccessNotEnabled)
        PD_SIM_ERROR(cudaErrorPeerAccessUnsupported)
        PD_SIM_ERROR(cudaErrorLaunchTimeout)
        PD_SIM_ERROR(cudaErrorIllegalState)
        PD_SIM_ERROR(cudaErrorStreamCaptureUnsupported)
        PD_SIM_ERROR(cudaErrorStreamCaptureInvalidated)
        PD_SIM_ERROR(cudaErrorStreamCaptureImplicit)
        PD_SIM_ERROR(cudaErrorStreamCaptureWrongThread)
        PD_SIM_ERROR(cudaErrorCapturedEvent)
        PD_SIM_ERROR(cudaErrorUnknown)
#undef PD_SIM_ERROR
        default:
            return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
            return "no error";
        case cudaErrorInvalidValue:
            return "invalid argument";
        case cudaErrorMemoryAllocation:
            return "out of memory";
        case cudaErrorInvalidConfiguration:
            return "invalid configuration argument";
        case cudaErrorInvalidDevice:
            return "invalid device ordinal";
        case cudaErrorInvalidDevicePointer:
            return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection:
            return "invalid copy direction for memcpy";
        case cudaErrorInvalidDeviceFunction:
            return "invalid device function";
        case cudaErrorInvalidResourceHandle:
            return "invalid resource handle";
        case cudaErrorNotReady:
            return "device not ready";
        case cudaErrorNotSupported:
            return "operation not supported";
        case cudaErrorAssert:
            return "device-side assert triggered";
        case cudaErrorMisalignedAddress:
            return "misaligned address";
        case cudaErrorIllegalAddress:
            return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure:
            return "unspecified launch failure";
        case cudaErrorPeerAccessAlreadyEnabled:
            return "peer access is already enabled";
        case cudaErrorPeerAccessNotEnabled:
            return "peer access has not been enabled";
        case cudaErrorPeerAccessUnsupported:
            return "peer access is not supported between these two devices";
        case cudaErrorIllegalInstruction:
            return "an illegal instruction was encountered";
        case cudaErrorLaunchTimeout:
            return "the launch timed out and was terminated";
        case cudaErrorIllegalState:
            return "operation not permitted in current state";
        case cudaErrorStreamCaptureUnsupported:
            return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated:
            return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureImplicit:
            return "operation would make the legacy stream depend on a capturing blocking stream";
        case cudaErrorStreamCaptureWrongThread:
            return "attempt to terminate a thread-local capture sequence from another thread";
        case cudaErrorCapturedEvent:
            return "operation not permitted on an event last recorded in a capturing stream";
        default:
            return "unknown error";
    }
}

// ---- device -----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
    if (count == nullptr) return fail(cudaErrorInvalidValue);
    *count = settings().devices;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    if (device == nullptr) return fail(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (prop == nullptr) return fail(cudaErrorInvalidValue);
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    const DevicePreset& preset = settings().device;
    const std::string as =
        preset.name.empty() ? "" : ", as a " + preset.name;  // "pd::sim CPU simulator, as a T4 (...)"
    if (settings().devices > 1)
        std::snprintf(prop->name, sizeof prop->name,
                      "pd::sim CPU simulator%s, virtual device %d of %d (%d worker threads)", as.c_str(), device,
                      settings().devices, settings().workers);
    else
        std::snprintf(prop->name, sizeof prop->name, "pd::sim CPU simulator%s (%d worker threads)", as.c_str(),
                      settings().workers);
    prop->pciDeviceID = device;
    prop->totalGlobalMem = simulated_memory_bytes();
    prop->sharedMemPerBlock = kSharedPerBlock;
    prop->sharedMemPerBlockOptin = preset.shared_optin;
    prop->sharedMemPerMultiprocessor = preset.shared_per_sm;
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->warpSize = pd::sim::kWarpSize;
    prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
    prop->maxThreadsDim[0] = kMaxBlockDimX;
    prop->maxThreadsDim[1] = kMaxBlockDimY;
    prop->maxThreadsDim[2] = kMaxBlockDimZ;
    prop->maxGridSize[0] = int(kMaxGridDimX);
    prop->maxGridSize[1] = int(kMaxGridDimY);
    prop->maxGridSize[2] = int(kMaxGridDimZ);
    prop->totalConstMem = 64 * 1024;
    prop->major = device_compute_capability() / 10;  // PD_SIM_CUDA_ARCH of the program (9.0), or the preset's
    prop->minor = device_compute_capability() % 10;
    prop->multiProcessorCount = preset.sms > 0 ? preset.sms : settings().workers;
    prop->maxThreadsPerMultiProcessor = preset.threads_per_sm;
    prop->maxBlocksPerMultiProcessor = preset.blocks_per_sm;
    prop->l2CacheSize = 0;  // no cache is simulated
    prop->unifiedAddressing = 1;
    prop->managedMemory = 1;
    prop->concurrentKernels = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (value == nullptr) return fail(cudaErrorInvalidValue);
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock:
            *value = kMaxThreadsPerBlock;
            break;
        case cudaDevAttrMaxBlockDimX:
            *value = kMaxBlockDimX;
            break;
        case cudaDevAttrMaxBlockDimY:
            *value = kMaxBlockDimY;
            break;
        case cudaDevAttrMaxBlockDimZ:
            *value = kMaxBlockDimZ;
            break;
        case cudaDevAttrMaxGridDimX:
            *value = int(kMaxGridDimX);
            break;
        case cudaDevAttrMaxGridDimY:
            *value = int(kMaxGridDimY);
            break;
        case cudaDevAttrMaxGridDimZ:
            *value = int(kMaxGridDimZ);
            break;
        case cudaDevAttrMaxSharedMemoryPerBlock:
            *value = int(kSharedPerBlock);
            break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = int(settings().device.shared_optin);
            break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
            *value = int(settings().device.shared_per_sm);
            break;
        case cudaDevAttrWarpSize:
            *value = pd::sim::kWarpSize;
            break;
        case cudaDevAttrMultiProcessorCount:
            *value = settings().device.sms > 0 ? settings().device.sms : settings().workers;
            break;
        case cudaDevAttrComputeCapabilityMajor:
            *value = device_compute_capability() / 10;
            break;
        case cudaDevAttrComputeCapabilityMinor:
            *value = device_compute_capability() % 10;
            break;
        case cudaDevAttrMaxThreadsPerMultiProcessor:
            *value = settings().device.threads_per_sm;
            break;
        case cudaDevAttrMaxBlocksPerMultiprocessor:
            *value = settings().device.blocks_per_sm;
            break;
        case cudaDevAttrMaxRegistersPerBlock:
            *value = 65536;
            break;
        default:
            *value = 0;
            break;  // clocks, bus width, cache sizes: not simulated
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    if (const cudaError_t e = capture_sync(nullptr, true, "cudaDeviceSynchronize")) return e;
    return sticky_error();
}
cudaError_t cudaDeviceReset() {
    reset_errors();
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(state_mutex);
    *total_bytes = simulated_memory_bytes();
    const std::size_t used = allocated_bytes[std::size_t(current_device)];
    *free_bytes = *total_bytes > used ? *total_bytes - used : 0;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
    if (v == nullptr) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
    if (v == nullptr) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || std::size_t(value) > settings().device.shared_optin) return fail(cudaErrorInvalidValue);
        set_max_dynamic_shared(func, std::size_t(value));
    }
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    if (attr == nullptr || func == nullptr) return fail(cudaErrorInvalidValue);
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
    attr->maxDynamicSharedSizeBytes = int(max_dynamic_shared(func).value_or(kSharedPerBlock));
    attr->numRegs = 0;          // not simulated
    attr->sharedSizeBytes = 0;  // static shared memory is not measured by the simulator
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          std::size_t dynamic_shared) {
    if (blocks == nullptr || func == nullptr || block_size < 1) return fail(cudaErrorInvalidValue);
    // Threads and shared memory only: the simulator knows no register counts.
    const DevicePreset& d = settings().device;
    int by_threads = d.threads_per_sm / block_size;
    const int by_shared = dynamic_shared > 0 ? int(d.shared_per_sm / dynamic_shared) : d.blocks_per_sm;
    *blocks = std::max(0, std::min({by_threads, by_shared, d.blocks_per_sm}));
    return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------

namespace {

/// cudaMalloc and cudaMallocManaged: the allocation between its guard zones, recorded with
/// the call site @p site when the caller's file was compiled for the simulator.
cudaError_t allocate_device(void** ptr, std::size_t bytes, const char* function, const std::source_location& site) {
    if (ptr == nullptr) return fail(cudaErrorInvalidValue);
    if (const cudaError_t s = sticky_error()) return s;
    if (const cudaError_t e = capture_unsafe_call(function)) return e;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (allocated_bytes[std::size_t(current_device)] + bytes > simulated_memory_bytes()) {
            *ptr = nullptr;
            return fail(cudaErrorMemoryAllocation);
        }
    }
    DeviceAllocation a;
    a.bytes = bytes;
    a.tail = kGuardBytes == 0 ? 0 : round_up(bytes, kAlignment) - bytes + kGuardBytes;
    a.block = static_cast<unsigned char*>(device_block(kGuardBytes + bytes + a.tail));
    if (a.block == nullptr) {
        *ptr = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    a.function = function;
    a.site = site;
    a.device = current_device;
    std::lock_guard<std::mutex> lock(state_mutex);
    a.number = ++device_allocation_count;
    a.pattern = guard_pattern(a.number);
    fill_guard(a.block, a.begin(), a.pattern);
    fill_guard(a.end(), a.end() + a.tail, a.pattern);
    if (kGuardBytes > 0) {
        a.guard_index = guard_zones.size();
        guard_zones.push_back(guard_zones_of(a));
    }
    device_allocations[a.begin()] = a;
    allocated_bytes[std::size_t(a.device)] += bytes;
    *ptr = a.begin();
    return cudaSuccess;
}

}  // namespace

namespace pd::sim::detail {

std::vector<std::pair<std::uintptr_t, std::size_t>> device_allocation_ranges() {
    std::lock_guard<std::mutex> lock(state_mutex);
    std::vector<std::pair<std::uintptr_t, std::size_t>> out;
    out.reserve(device_allocations.size());
    for (const auto& [key, a] : device_allocations)
        out.emplace_back(reinterpret_cast<std::uintptr_t>(a.begin()), a.bytes);
    return out;
}

std::string kernel_name(const void* kernel) {
    std::string name = function_symbol(kernel);
    if (name.empty()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%p", kernel);
        return std::string("at ") + buf;
    }
    return name;
}

void check_device_memory_guards(const void* kernel) {
    if (kGuardBytes == 0) return;
    std::vector<std::string> damage;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        for (const GuardZones& g : guard_zones)
            if (!guards_intact(g)) damage.push_back(guard_damage(device_allocations.at(g.data)));
    }
    if (damage.empty()) return;
    stop_on_damaged_guards(damage, "kernel '" + kernel_name(kernel) + "'",
                           "an index of that kernel went out of bounds (a bounds check such as `if (i < n)` missing "
                           "or off by one?); scripts/simcc --sanitize names the line, the block and the thread "
                           "of the access");
}

int current_device_of_thread() {
    return current_device;
}

int device_of_pointer(const void* p) {
    std::lock_guard<std::mutex> lock(state_mutex);
    const DeviceAllocation* a = allocation_holding(p);
    return a != nullptr ? a->device : -1;
}

std::string launch_device_error(const LaunchRequest& req) {
    const int here = current_device;
    const auto stream = reinterpret_cast<std::uintptr_t>(req.stream);
    // cudaStreamLegacy (1) and cudaStreamPerThread (2) are handles of every device
    if (stream > 2 && req.stream->device != here)
        return "kernel '" + kernel_name(req.kernel) + "' is launched on a stream of device " +
               std::to_string(req.stream->device) + " while device " + std::to_string(here) +
               " is current (cudaSetDevice first: a stream belongs to the device it was created on)";
    if (settings().devices == 1) return "";
    std::lock_guard<std::mutex> lock(state_mutex);
    for (int i = 0; i < req.arguments; ++i) {
        const DeviceAllocation* a = req.pointers[i] != nullptr ? allocation_holding(req.pointers[i]) : nullptr;
        if (a == nullptr || a->device == here || peer_access[here][a->device]) continue;
        return "kernel '" + kernel_name(req.kernel) + "' runs on device " + std::to_string(here) +
               ", but its argument " + std::to_string(i + 1) + " points into " + describe(*a) +
               ", without peer access from device " + std::to_string(here) +
               " (copy it with cudaMemcpyPeer, or call cudaDeviceEnablePeerAccess(" + std::to_string(a->device) +
               ", 0) on device " + std::to_string(here) + ")";
    }
    return "";
}

}  // namespace pd::sim::detail

cudaError_t pd_sim_cudaMalloc(const std::source_location& site, void** ptr, std::size_t bytes) {
    return allocate_device(ptr, bytes, "cudaMalloc", site);
}
cudaError_t pd_sim_cudaMallocManaged(const std::source_location& site, void** ptr, std::size_t bytes, unsigned int) {
    return allocate_device(ptr, bytes, "cudaMallocManaged", site);
}
cudaError_t(cudaMalloc)(void** ptr, std::size_t bytes) {
    return allocate_device(ptr, bytes, "cudaMalloc", std::source_location{});
}
cudaError_t(cudaMallocManaged)(void** ptr, std::size_t bytes, unsigned int) {
    return allocate_device(ptr, bytes, "cudaMallocManaged", std::source_location{});
}
cudaError_t cudaFree(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    if (const cudaError_t e = capture_unsafe_call("cudaFree")) return e;
    DeviceAllocation a;
    std::string damage;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        const auto it = device_allocations.find(ptr);
        if (it == device_allocations.end()) return fail(cudaErrorInvalidValue);
        a = it->second;
        if (kGuardBytes > 0) damage = guard_damage(a);
        allocated_bytes[std::size_t(a.device)] -= a.bytes;
        device_allocations.erase(it);
        if (kGuardBytes > 0) {
            guard_zones[a.guard_index] = guard_zones.back();
            guard_zones.pop_back();
            if (a.guard_index < guard_zones.size())
                device_allocations.at(guard_zones[a.guard_index].data).guard_index = a.guard_index;
        }
    }
    // Every launch checks the guards when it ends, so only host code can have changed them
    // since: device memory is host memory here, and host code can write through a device pointer.
    if (!damage.empty())
        stop_on_damaged_guards({damage}, "cudaFree: host code",
                               "device memory is host memory on the simulator, so host code can write it through "
                               "a device pointer (on a GPU that access crashes); every kernel launch checks the "
                               "guard zones when it ends, so no kernel wrote these bytes");
    release_device_block(a.block, kGuardBytes + a.bytes + a.tail);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
    if (ptr == nullptr) return fail(cudaErrorInvalidValue);
    if (const cudaError_t e = capture_unsafe_call("cudaMallocHost")) return e;
    void* p = aligned_block(bytes);
    if (p == nullptr) return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(state_mutex);
    host_allocations[p] = bytes;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned int) {
    return cudaMallocHost(ptr, bytes);
}
cudaError_t cudaFreeHost(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    if (const cudaError_t e = capture_unsafe_call("cudaFreeHost")) return e;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (host_allocations.erase(ptr) == 0) return fail(cudaErrorInvalidValue);
    }
    ::operator delete(ptr, std::align_val_t(256));
    return cudaSuccess;
}

namespace {
/// cudaMemcpy and the symbol copies (whose symbol is a variable, not a cudaMalloc'd allocation:
/// no direction check).
cudaError_t copy_error(const char* call, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       bool check_direction) {
    if (const cudaError_t s = sticky_error()) return s;
    if (int(kind) < 0 || int(kind) > int(cudaMemcpyDefault)) return fail(cudaErrorInvalidMemcpyDirection);
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
    if (!copy_in_bounds(call, "destination", dst, bytes) || !copy_in_bounds(call, "source", src, bytes))
        return fail(cudaErrorInvalidValue);
    if (check_direction && !direction_matches(call, dst, src, kind)) return fail(cudaErrorInvalidMemcpyDirection);
    return cudaSuccess;
}
cudaError_t copy(const char* call, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                 bool check_direction) {
    if (const cudaError_t e = copy_error(call, dst, src, bytes, kind, check_direction)) return e;
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (const cudaError_t e = legacy_stream_work(nullptr, "cudaMemcpy")) return e;
    return copy("cudaMemcpy", dst, src, bytes, kind, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    bool recording = false;
    if (const cudaError_t e = capture_status(stream, recording)) return fail(e);
    if (recording) {  // checked now, run at each replay of the graph
        if (const cudaError_t e = copy_error("cudaMemcpyAsync", dst, src, bytes, kind, true)) return e;
        record_copy(stream, dst, src, bytes, kind);
        return cudaSuccess;
    }
    if (const cudaError_t e = legacy_stream_work(stream, "cudaMemcpyAsync")) return e;
    return copy("cudaMemcpyAsync", dst, src, bytes, kind, true);
}

// ---- several virtual devices: peer copies and peer access -------------------------------------

namespace {
/// Checks that @p p, the @p role of a cudaMemcpyPeer, is memory of @p device (a cudaMalloc
/// allocation there, or memory the simulator cannot tell from host memory); otherwise records why.
bool on_device(const char* role, const void* p, int device) {
    std::lock_guard<std::mutex> lock(state_mutex);
    const DeviceAllocation* a = allocation_holding(p);
    if (a == nullptr || a->device == device) return true;
    diagnostic = std::string("cudaMemcpyPeer: the ") + role + " is said to be on device " + std::to_string(device) +
                 " but points into " + describe(*a);
    return false;
}
}  // namespace

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) {
    if (const cudaError_t s = sticky_error()) return s;
    if (!valid_device(dst_device) || !valid_device(src_device)) return fail(cudaErrorInvalidDevice);
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
    if (!on_device("destination", dst, dst_device) || !on_device("source", src, src_device))
        return fail(cudaErrorInvalidValue);
    return copy("cudaMemcpyPeer", dst, src, bytes, cudaMemcpyDeviceToDevice, false);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                                cudaStream_t) {
    return cudaMemcpyPeer(dst, dst_device, src, src_device, bytes);
}
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
    if (can_access == nullptr) return fail(cudaErrorInvalidValue);
    if (!valid_device(device) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
    // every pair of virtual devices, as on an NVLink machine; none with PD_SIM_PEER_ACCESS=0
    *can_access = device != peer && settings().peer_access ? 1 : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int src, int dst) {
    if (value == nullptr) return fail(cudaErrorInvalidValue);
    if (!valid_device(src) || !valid_device(dst) || src == dst) return fail(cudaErrorInvalidDevice);
    const int access = settings().peer_access ? 1 : 0;
    switch (attr) {
        case cudaDevP2PAttrPerformanceRank:
            *value = 0;  // one kind of link between every pair: all rank alike
            break;
        case cudaDevP2PAttrAccessSupported:
        case cudaDevP2PAttrNativeAtomicSupported:
            *value = access;
            break;
        default:
            *value = 0;
            break;
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
    if (flags != 0) return fail(cudaErrorInvalidValue);
    if (!valid_device(peer) || peer == current_device) return fail(cudaErrorInvalidDevice);
    if (!settings().peer_access) return fail(cudaErrorPeerAccessUnsupported);
    std::lock_guard<std::mutex> lock(state_mutex);
    if (peer_access[current_device][peer]) {
        last_error = cudaErrorPeerAccessAlreadyEnabled;
        return cudaErrorPeerAccessAlreadyEnabled;
    }
    peer_access[current_device][peer] = true;
    return cudaSuccess;
}
cudaError_t cudaDeviceDisablePeerAccess(int peer) {
    if (!valid_device(peer)) return fail(cudaErrorInvalidDevice);
    std::lock_guard<std::mutex> lock(state_mutex);
    if (!peer_access[current_device][peer]) {
        last_error = cudaErrorPeerAccessNotEnabled;
        return cudaErrorPeerAccessNotEnabled;
    }
    peer_access[current_device][peer] = false;
    return cudaSuccess;
}
namespace {
cudaError_t set_error_of(const char* call, void* dst, std::size_t bytes) {
    if (const cudaError_t s = sticky_error()) return s;
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr) return fail(cudaErrorInvalidValue);
    if (!copy_in_bounds(call, "destination", dst, bytes)) return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}
}  // namespace
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
    if (const cudaError_t e = legacy_stream_work(nullptr, "cudaMemset")) return e;
    if (const cudaError_t e = set_error_of("cudaMemset", dst, bytes)) return e;
    if (bytes > 0) std::memset(dst, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
    bool recording = false;
    if (const cudaError_t e = capture_status(stream, recording)) return fail(e);
    if (const cudaError_t e = set_error_of("cudaMemsetAsync", dst, bytes)) return e;
    if (recording) {
        record_set(stream, dst, value, bytes);
        return cudaSuccess;
    }
    if (const cudaError_t e = legacy_stream_work(stream, "cudaMemsetAsync")) return e;
    if (bytes > 0) std::memset(dst, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, std::size_t bytes, std::size_t offset,
                               cudaMemcpyKind kind) {
    return copy("cudaMemcpyToSymbol", static_cast<char*>(const_cast<void*>(symbol)) + offset, src, bytes, kind, false);
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, std::size_t bytes, std::size_t offset,
                                 cudaMemcpyKind kind) {
    return copy("cudaMemcpyFromSymbol", dst, static_cast<const char*>(symbol) + offset, bytes, kind, false);
}

// ---- streams and events: executed in order; events read the host clock ------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    if (stream == nullptr) return fail(cudaErrorInvalidValue);
    *stream = new CUstream_st{};
    (*stream)->device = current_device;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    const cudaError_t e = cudaStreamCreate(stream);
    if (e == cudaSuccess) (*stream)->flags = flags;
    return e;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
    forget_capture(stream);
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (const cudaError_t e = capture_sync(stream, false, "cudaStreamSynchronize")) return e;
    if (const cudaError_t e = legacy_stream_work(stream, "cudaStreamSynchronize")) return e;
    return sticky_error();
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    if (const cudaError_t e = capture_sync(stream, false, "cudaStreamQuery")) return e;
    return sticky_error();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    bool recording = false;
    if (event != nullptr && event->captured_in != nullptr && event->captured_in != stream &&
        capture_status(event->captured_in, recording) == cudaSuccess && recording) {
        set_last_diagnostic(
            "cudaStreamWaitEvent on an event recorded in another stream's capture: a capture across "
            "streams (fork and join) is not modelled by the simulator; capture on one stream");
        return fail(cudaErrorNotSupported);
    }
    return sticky_error();
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    if (event == nullptr) return fail(cudaErrorInvalidValue);
    *event = new CUevent_st{};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
    return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    bool recording = false;
    if (const cudaError_t e = capture_status(stream, recording)) return fail(e);
    if (recording) {  // a node of the capture on a GPU; here only a mark (one stream per capture)
        event->captured_in = stream;
        return cudaSuccess;
    }
    event->captured_in = nullptr;
    event->time = std::chrono::steady_clock::now();
    event->recorded = true;
    return sticky_error();
}
namespace {
/// cudaErrorCapturedEvent for an event last recorded in a capture, which has no time to wait for.
cudaError_t captured_event(cudaEvent_t event, const char* call) {
    bool recording = false;
    if (event->captured_in == nullptr || capture_status(event->captured_in, recording) != cudaSuccess || !recording)
        return cudaSuccess;
    set_last_diagnostic(std::string(call) + " on an event last recorded in a capturing stream");
    return fail(cudaErrorCapturedEvent);
}
}  // namespace
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (const cudaError_t e = captured_event(event, "cudaEventSynchronize")) return e;
    return sticky_error();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (const cudaError_t e = captured_event(event, "cudaEventQuery")) return e;
    return sticky_error();
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == nullptr) return fail(cudaErrorInvalidValue);
    if (start == nullptr || end == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
    return cudaSuccess;
}

#if defined(PD_SIM_ASAN)
// AddressSanitizer calls this just before it prints a report. Its report names the OS thread
// ("thread T1"); when the bad access was made by a kernel, this line first names the CUDA
// thread, as compute-sanitizer does.
extern "C" void __asan_on_error() {
    const ThreadState* thread = current;
    const BlockInfo* block = current_block;
    const void* kernel = running_kernel();
    if (thread == nullptr || block == nullptr || kernel == nullptr) return;
    const uint3 b = block->block_idx, t = thread->thread_idx;
    std::fprintf(stderr,
                 "pd::sim: the access AddressSanitizer reports below was made by kernel '%s', block (%u,%u,%u) "
                 "thread (%u,%u,%u)\n",
                 kernel_name(kernel).c_str(), b.x, b.y, b.z, t.x, t.y, t.z);
}
#endif
