// A learner's kernel that crashes the process or waits forever. In the plain build a crash in a
// kernel (a freed or wild pointer, a stack overflow from a large local array or from unbounded
// recursion, an integer division by zero) is named before the signal ends the program: the
// kernel, the block, the thread, what kind of fault, and how to get the source line (the
// sanitizer build). What the program printed to stdout before the crash is kept, even through a
// pipe. In the sanitizer build AddressSanitizer and UndefinedBehaviorSanitizer report the same
// faults themselves: there the program must only stop with an error.
//
// A thread that spins on a flag a later thread of its block sets cannot be run by the simulator
// (one thread at a time, no preemption): the watchdog ends the program after
// PD_SIM_WATCHDOG_SECONDS with a message that says why and what to write instead.
//
// Each case runs in a child process (this program, run again with the case's name). In-process,
// shared variables declared `volatile` or `const` build and work.
#include "diag.cuh"

#include <csignal>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif

/// Printed to stdout before each faulty launch; stdout is a pipe, so it is still in the buffer
/// when the fault comes.
constexpr const char* kBefore = "printed before the fault";
/// The child's last line, printed only if the program was not stopped.
constexpr const char* kNotStopped = "the program was not stopped";

// ---- the faulty kernels ------------------------------------------------------------------------

__global__ void write_freed(int* x) {
    x[threadIdx.x] = 1;
}

__global__ void write_wild(int* out) {
    if (blockIdx.x == 1 && threadIdx.x == 3) *reinterpret_cast<volatile int*>(std::uintptr_t(16)) = 1;
    out[threadIdx.x] = 0;
}

constexpr int kBigLocal = 256 * 1024;
__global__ void big_local_array(int* out, int n) {
    volatile char big[kBigLocal];  // 256 KiB: four times the simulated thread's default stack
    for (int i = 0; i < n; i += 4096) big[i] = char(i);
    out[threadIdx.x] = big[n / 2];
}

__device__ int deeper(int depth) {
    volatile int frame[16];
    frame[0] = depth;
    return deeper(depth + 1) + frame[0];  // never ends: each call takes another frame
}
__global__ void unbounded_recursion(int* out) {
    out[threadIdx.x] = deeper(0);
}

__global__ void divide(const int* a, const int* b, int* out) {
    out[threadIdx.x] = a[threadIdx.x] / b[threadIdx.x];
}

// Thread 0 waits for thread 1's flag. On a GPU since Volta this may finish; here thread 0 runs
// first and never gives the worker back.
__global__ void spin_on_flag(int* out) {
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        while (flag == 0) {
        }
        out[0] = 1;
    } else if (threadIdx.x == 1) {
        flag = 1;
    }
}

int* device_ints(int n, int value) {
    std::vector<int> h(std::size_t(n), value);
    int* d;
    CUDA_OK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_OK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

int run_faulty(const std::string& name) {
    int* out = device_ints(64, 0);
    std::printf("%s\n", kBefore);
    if (name == "freed") {
        int* x;
        CUDA_OK(cudaMalloc(&x, 16 << 20));  // large enough to be unmapped when freed
        CUDA_OK(cudaFree(x));
        write_freed<<<1, 32>>>(x);
    } else if (name == "wild") {
        write_wild<<<2, 32>>>(out);
    } else if (name == "big_local") {
        big_local_array<<<1, 4>>>(out, kBigLocal);
    } else if (name == "recursion") {
        unbounded_recursion<<<1, 1>>>(out);
    } else if (name == "divide") {
        int* a = device_ints(32, 7);
        int* b = device_ints(32, 1);
        CUDA_OK(cudaMemset(b + 5, 0, sizeof(int)));  // thread 5 divides by zero
        divide<<<1, 32>>>(a, b, out);
    } else if (name == "spin") {
        spin_on_flag<<<1, 2>>>(out);
    } else {
        std::printf("unknown case %s\n", name.c_str());
        return 2;
    }
    cudaDeviceSynchronize();
    std::printf("%s\n", kNotStopped);
    return 0;
}

/// Runs case @p name and checks that it stopped (by @p signal in the plain build, or exit status
/// 1 when @p signal is 0), kept what it printed before, and printed every one of @p words. The
/// sanitizer build reports these faults its own way: only the stop is checked there.
void expect_stop(const char* name, int signal, std::initializer_list<std::string> words, const std::string& env = "") {
    using conformance::check;
    const conformance::Outcome o = conformance::run_case(name, env);
    bool ok = check(o.output.find(kNotStopped) == std::string::npos, "the program stops", __FILE__, __LINE__);
    ok &= check(o.status != 0 || o.signal != 0, "with an error", __FILE__, __LINE__);
    if (!kSanitizer || signal == 0) {
        // a shell may report a child killed by a signal as exit status 128 + signal
        const bool how = signal == 0 ? o.status == 1 : (o.signal == signal || o.status == 128 + signal);
        ok &= check(how, "the program ends as it should (the signal, or exit status 1)", __FILE__, __LINE__);
        if (!how) std::printf("    %s: exit status %d, signal %d\n", name, o.status, o.signal);
        ok &= check(o.output.find(kBefore) != std::string::npos, "what it printed before is kept", __FILE__, __LINE__);
        for (const std::string& w : words) {
            const bool found = o.output.find(w) != std::string::npos;
            ok &= check(found, "the message names what went wrong", __FILE__, __LINE__);
            if (!found) std::printf("    %s: the output lacks \"%s\"\n", name, w.c_str());
        }
    }
    if (!ok) std::printf("    %s: the output was:\n%s\n", name, o.output.c_str());
}

// ---- in-process: volatile and const shared variables build and work ----------------------------

// Each thread of a warp publishes its lane through a volatile shared array and reads its
// neighbour's after a __syncwarp: the declaration forms nvcc accepts.
__global__ void qualified_shared(int* out) {
    __shared__ volatile int published[32];
    volatile __shared__ int count;
    const __shared__ int unused;  // never written: nvcc accepts it, and so must the simulator
    (void)sizeof(unused);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    published[threadIdx.x] = int(threadIdx.x) * 3;
    atomicAdd(const_cast<int*>(&count), 1);
    __syncthreads();
    out[threadIdx.x] = published[(threadIdx.x + 1) % 32] + count;
}

void qualified_shared_works() {
    int* d = device_ints(32, -1);
    qualified_shared<<<1, 32>>>(d);
    CUDA_OK(cudaGetLastError());
    std::vector<int> h(32);
    CUDA_OK(cudaMemcpy(h.data(), d, 32 * sizeof(int), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int t = 0; t < 32; ++t) wrong += h[std::size_t(t)] != ((t + 1) % 32) * 3 + 32;
    CHECK_MSG(wrong == 0, "volatile and const __shared__ declarations: %d of 32 outputs wrong", wrong);
    CUDA_OK(cudaFree(d));
}

int main(int argc, char** argv) {
    if (argc > 1) return run_faulty(argv[1]);
    qualified_shared_works();
    const std::string advice = "Rebuild with `scripts/simcc --sanitize`";
    expect_stop("freed", SIGSEGV,
                {"pd::sim: kernel 'write_freed' crashed in block (0,0,0) thread (0,0,0)", "invalid memory access",
                 "a wild, null or freed pointer", advice});
    expect_stop("wild", SIGSEGV,
                {"pd::sim: kernel 'write_wild' crashed in block (1,0,0) thread (3,0,0)", "at address 0x10", advice});
    expect_stop("big_local", SIGSEGV,
                {"pd::sim: kernel 'big_local_array' crashed in block (0,0,0) thread (0,0,0)", "a stack overflow",
                 "KiB stack (PD_SIM_STACK_KIB)", advice});
    expect_stop(
        "recursion", SIGSEGV,
        {"pd::sim: kernel 'unbounded_recursion' crashed in block (0,0,0) thread (0,0,0)", "a stack overflow", advice});
    expect_stop(
        "divide", SIGFPE,
        {"pd::sim: kernel 'divide' crashed in block (0,0,0) thread (5,0,0)", "SIGFPE", "division by zero", advice});
    expect_stop("spin", 0,
                {"pd::sim: kernel 'spin_on_flag', block (0,0,0) thread (0,0,0), has run for 1 s without reaching a "
                 "barrier",
                 "cannot preempt", "__syncthreads()", "PD_SIM_WATCHDOG_SECONDS"},
                "PD_SIM_WATCHDOG_SECONDS=1");
    return conformance::finish();
}
