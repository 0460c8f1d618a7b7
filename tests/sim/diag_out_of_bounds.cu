// Out-of-bounds writes to cudaMalloc memory. In the plain build each allocation sits between
// guard zones that are checked when a kernel ends: a write past the end or before the start
// stops the program (exit status 1) with a message naming the kernel, the allocation's size,
// where it was made, and where the write landed. In the sanitizer build AddressSanitizer stops
// the program at the access, and the simulator's line before its report names the kernel, the
// block and the thread.
//
// Each faulty kernel runs in a child process (this program, run again with the case's name),
// whose exit status and output are checked. In-process, kernels that stay in bounds run as
// before: every byte of buffers of awkward sizes, 16-byte vector accesses on the 256-byte
// aligned pointers, and host copies, which are refused (not blamed on a kernel) when they run
// past an allocation.
#include "diag.cuh"
#include "pd/buffer.hpp"

#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif

// ---- the faulty kernels, each run by one case -------------------------------------------------

// The classic off-by-one, as a learner writes it: `<=` where `<` was meant. The read-modify-write
// matters: on a value read from the guard, `+ 1.0f` must still change what is stored there.
__global__ void add_one(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = x[i] + 1.0f;
}

// A copy with the same bug: the value stored past the end of `out` is the one read past the end
// of `in`, from in's guard zone.
__global__ void copy_off_by_one(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = in[i];
}

namespace oob {
// Each element takes its left neighbour's place; thread 0 writes one element before the start.
template <typename T>
__global__ void shift_left(T* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i - 1] = T(i);
}
}  // namespace oob

// One thread writes 40 elements (160 bytes) past the end: still inside the guard zone.
__global__ void write_far(int* x, int n) {
    if (threadIdx.x == 5) x[n + 40] = 7;
}

/// The child's last line, printed only if the program was not stopped.
constexpr const char* kNotStopped = "the program was not stopped";

constexpr int kN = 1000;  // floats: a 4000-byte allocation, whose end is not 256-byte aligned

constexpr int kOffByOneMalloc = __LINE__ + 5;  // the allocation the message names
int case_off_by_one() {
    float* d;
    CUDA_OK(cudaMalloc(&d, 512));  // allocation #1, untouched: only #2 must be named
    float* x;
    CUDA_OK(cudaMalloc(&x, kN * sizeof(float)));
    CUDA_OK(cudaMemset(x, 0, kN * sizeof(float)));
    add_one<<<(kN + 255) / 256, 256>>>(x, kN);
    std::vector<float> h(kN);
    cudaMemcpy(h.data(), x, kN * sizeof(float), cudaMemcpyDeviceToHost);
    std::printf("%s\n", kNotStopped);
    return 0;
}

constexpr int kCopyMalloc = __LINE__ + 4;  // the allocation the message names
int case_copy() {
    float *in, *out;
    CUDA_OK(cudaMalloc(&in, kN * sizeof(float)));
    CUDA_OK(cudaMalloc(&out, kN * sizeof(float)));
    copy_off_by_one<<<(kN + 255) / 256, 256>>>(in, out, kN);
    CUDA_OK(cudaDeviceSynchronize());
    std::printf("%s\n", kNotStopped);
    return 0;
}

constexpr int kBeforeStartMalloc = __LINE__ + 3;  // the allocation the message names
int case_before_start() {
    float* x;
    CUDA_OK(cudaMallocManaged(&x, 300 * sizeof(float)));
    oob::shift_left<float><<<2, 256>>>(x, 300);
    CUDA_OK(cudaDeviceSynchronize());
    std::printf("%s\n", kNotStopped);
    return 0;
}

constexpr int kFarMalloc = __LINE__ + 3;  // the allocation the message names
int case_far() {
    int* x;
    CUDA_OK(cudaMalloc(&x, kN * sizeof(int)));
    write_far<<<1, 32>>>(x, kN);
    CUDA_OK(cudaDeviceSynchronize());
    std::printf("%s\n", kNotStopped);
    return 0;
}

// Host code writes through the device pointer (which works only because device memory is
// host memory here): no kernel did it, and cudaFree says so.
constexpr int kHostWriteMalloc = __LINE__ + 3;  // the allocation the message names
int case_host_write() {
    float* x;
    CUDA_OK(cudaMalloc(&x, kN * sizeof(float)));
    x[kN] = 1.0f;
    CUDA_OK(cudaFree(x));
    std::printf("%s\n", kNotStopped);
    return 0;
}

// The project's RAII buffer (pd/buffer.hpp) allocates for its caller: the message names the
// line that made the buffer, not the cudaMalloc inside buffer.hpp.
constexpr int kDeviceBufferLine = __LINE__ + 2;  // the allocation the message names
int case_device_buffer() {
    pd::DeviceBuffer<float> x(kN);
    add_one<<<(kN + 255) / 256, 256>>>(x.data(), kN);
    CUDA_OK(cudaDeviceSynchronize());
    std::printf("%s\n", kNotStopped);
    return 0;
}

/// Runs case @p name and checks that it stopped with exit status 1 and printed every one of
/// @p words (and none of @p absent).
void expect_stop(const char* name, std::initializer_list<std::string> words,
                 std::initializer_list<std::string> absent = {}) {
    const conformance::Outcome o = conformance::run_case(name);
    using conformance::check;
    bool ok = check(o.status == 1, "the program stops with exit status 1", __FILE__, __LINE__);
    if (o.status != 1) std::printf("    %s: exit status %d\n", name, o.status);
    ok &= check(o.output.find(kNotStopped) == std::string::npos, "the program stops before it goes on", __FILE__,
                __LINE__);
    for (const std::string& w : words) {
        const bool found = o.output.find(w) != std::string::npos;
        ok &= check(found, "the message names what went wrong", __FILE__, __LINE__);
        if (!found) std::printf("    %s: the output lacks \"%s\"\n", name, w.c_str());
    }
    for (const std::string& w : absent) {
        const bool found = o.output.find(w) != std::string::npos;
        ok &= check(!found, "the message names no wrong culprit", __FILE__, __LINE__);
        if (found) std::printf("    %s: the output has \"%s\"\n", name, w.c_str());
    }
    if (!ok) std::printf("    %s: the output was:\n%s\n", name, o.output.c_str());
}

// ---- in bounds: unaffected ----------------------------------------------------------------------

__global__ void fill_bytes(unsigned char* x, int n, int seed) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = static_cast<unsigned char>(i * 7 + seed);
}

__global__ void scale_float4(const float4* in, float4* out, int n4) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        const float4 v = in[i];
        out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w);
    }
}

void in_bounds() {
    // Every byte of buffers whose ends fall at every offset in a 16-byte chunk and around the
    // 256-byte boundaries, written by a kernel: none of it is taken for a guard.
    std::vector<int> sizes;
    for (int n = 1; n <= 40; ++n) sizes.push_back(n);
    for (int n : {255, 256, 257, 1000, 1001, 4095, 4096, 4097}) sizes.push_back(n);
    std::vector<unsigned char*> buffers;
    for (int n : sizes) {
        unsigned char* d;
        CUDA_OK(cudaMalloc(&d, n));
        CHECK_MSG(reinterpret_cast<std::uintptr_t>(d) % 256 == 0, "cudaMalloc(%d) is 256-byte aligned", n);
        buffers.push_back(d);
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        const int n = sizes[k];
        fill_bytes<<<(n + 127) / 128, 128>>>(buffers[k], n, int(k));
        CUDA_OK(cudaGetLastError());
    }
    CUDA_OK(cudaDeviceSynchronize());
    int wrong = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        std::vector<unsigned char> h(std::size_t(sizes[k]));
        CUDA_OK(cudaMemcpy(h.data(), buffers[k], h.size(), cudaMemcpyDeviceToHost));
        for (int i = 0; i < sizes[k]; ++i) wrong += h[std::size_t(i)] != static_cast<unsigned char>(i * 7 + int(k));
        CUDA_OK(cudaFree(buffers[k]));
    }
    CHECK_MSG(wrong == 0, "%d bytes written in bounds read back wrong", wrong);

    // 16-byte loads and stores over whole buffers.
    const int n4 = 333;
    std::vector<float> h_in(4 * n4), h_out(4 * n4), want(4 * n4);
    conformance::Lcg rng(11);
    for (std::size_t i = 0; i < h_in.size(); ++i) {
        h_in[i] = rng.uniform(-1.0f, 1.0f);
        want[i] = 2 * h_in[i];
    }
    float4 *in, *out;
    CUDA_OK(cudaMalloc(&in, n4 * sizeof(float4)));
    CUDA_OK(cudaMalloc(&out, n4 * sizeof(float4)));
    CUDA_OK(cudaMemcpy(in, h_in.data(), n4 * sizeof(float4), cudaMemcpyHostToDevice));
    scale_float4<<<(n4 + 63) / 64, 64>>>(in, out, n4);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(h_out.data(), out, n4 * sizeof(float4), cudaMemcpyDeviceToHost));
    CHECK_MSG(conformance::bit_mismatches("float4 out", h_out.data(), want.data(), want.size()) == 0,
              "16-byte accesses in bounds give the right result");

    // Host copies that run past an allocation are refused, so they cannot be blamed on the next
    // kernel; the ones that fit still work.
    std::vector<float> big(kN + 1, 1.0f);
    float* d = nullptr;
    const int malloc_line = __LINE__ + 1;
    CUDA_OK(cudaMalloc(&d, kN * sizeof(float)));
    const cudaError_t past = cudaMemcpy(d, big.data(), (kN + 1) * sizeof(float), cudaMemcpyHostToDevice);
    CHECK_MSG(past == cudaErrorInvalidValue, "a copy past the end gives cudaErrorInvalidValue (got %s)",
              cudaGetErrorName(past));
    CHECK_MSG(cudaGetLastError() == cudaErrorInvalidValue, "cudaGetLastError() returns it once");
    const std::string why = pd::sim::last_diagnostic();
    const std::string made = "a 4000-byte allocation made by cudaMalloc at " + conformance::at(__FILE__, malloc_line);
    CHECK_MSG(why.find("cudaMemcpy: the destination range of 4004 bytes at offset 0 runs 4 bytes past the end of " +
                       made) != std::string::npos,
              "the diagnostic explains the refused copy: %s", why.c_str());
    const cudaError_t before = cudaMemset(d - 1, 0, 8);
    CHECK_MSG(before == cudaErrorInvalidValue, "a memset from before the start gives cudaErrorInvalidValue (got %s)",
              cudaGetErrorName(before));
    CHECK_MSG(pd::sim::last_diagnostic().find("cudaMemset: the destination range of 8 bytes starts 4 bytes before "
                                              "the start of " +
                                              made) != std::string::npos,
              "the diagnostic explains the refused memset: %s", pd::sim::last_diagnostic().c_str());
    const cudaError_t from_past = cudaMemcpy(big.data(), d + kN, 4, cudaMemcpyDeviceToHost);
    CHECK_MSG(from_past == cudaErrorInvalidValue, "a copy from past the end gives cudaErrorInvalidValue (got %s)",
              cudaGetErrorName(from_past));
    CHECK_MSG(pd::sim::last_diagnostic().find("the source range of 4 bytes starts 0 bytes past the end of " + made) !=
                  std::string::npos,
              "the diagnostic explains the refused copy: %s", pd::sim::last_diagnostic().c_str());
    cudaGetLastError();
    CUDA_OK(cudaMemcpy(d + kN - 1, big.data(), sizeof(float), cudaMemcpyHostToDevice));  // the last element
    add_one<<<(kN + 255) / 256, 256>>>(d, kN - 1);  // in bounds: n - 1 elements, so i <= n - 1
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaFree(in));
    CUDA_OK(cudaFree(out));
}

// A copy whose kind names host memory where it is given a cudaMalloc'd pointer (swapped
// arguments, the wrong kind) is refused with cudaErrorInvalidMemcpyDirection and a diagnostic
// naming the side (CUDA leaves it undefined; the simulator chooses to be strict);
// cudaMemcpyDefault and managed memory take any pointers.
void copy_directions() {
    std::vector<float> h(64, 2.0f), back(64, 0.0f);
    float *d = nullptr, *e = nullptr, *m = nullptr;
    const int malloc_line = __LINE__ + 1;
    CUDA_OK(cudaMalloc(&d, 64 * sizeof(float)));
    CUDA_OK(cudaMalloc(&e, 64 * sizeof(float)));
    CUDA_OK(cudaMallocManaged(&m, 64 * sizeof(float)));
    struct Case {
        void* dst;
        const void* src;
        cudaMemcpyKind kind;
        const char* words;  // "" when the copy is right
    };
    const std::string made = "a 256-byte allocation made by cudaMalloc at " + conformance::at(__FILE__, malloc_line);
    const Case cases[] = {
        {d, h.data(), cudaMemcpyHostToDevice, ""},
        {e, d, cudaMemcpyDeviceToDevice, ""},
        {back.data(), e, cudaMemcpyDeviceToHost, ""},
        {back.data(), h.data(), cudaMemcpyHostToHost, ""},
        {h.data(), d, cudaMemcpyDefault, ""},
        {m, h.data(), cudaMemcpyDeviceToHost, ""},  // managed: any kind
        {h.data(), d, cudaMemcpyHostToDevice, "cudaMemcpyHostToDevice: the source is device memory, "},
        {d, h.data(), cudaMemcpyDeviceToHost, "cudaMemcpyDeviceToHost: the destination is device memory, "},
        {back.data(), d, cudaMemcpyHostToHost, "cudaMemcpyHostToHost: the source is device memory, "},
        {d, h.data(), cudaMemcpyHostToHost, "cudaMemcpyHostToHost: the destination is device memory, "},
    };
    for (const Case& c : cases) {
        const cudaError_t got = cudaMemcpy(c.dst, c.src, 64 * sizeof(float), c.kind);
        const cudaError_t want = c.words[0] ? cudaErrorInvalidMemcpyDirection : cudaSuccess;
        CHECK_MSG(got == want, "a copy %s gives %s (got %s)", c.words[0] ? c.words : "that matches its pointers",
                  cudaGetErrorName(want), cudaGetErrorName(got));
        cudaGetLastError();
        if (c.words[0])
            CHECK_MSG(pd::sim::last_diagnostic().find(c.words) != std::string::npos,
                      "the diagnostic names the side and the kind: %s", pd::sim::last_diagnostic().c_str());
    }
    CHECK_MSG(pd::sim::last_diagnostic().find(made) != std::string::npos, "and the allocation: %s",
              pd::sim::last_diagnostic().c_str());
    CHECK_MSG(back[0] == 2.0f, "the copies that match went through (%g)", back[0]);
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaFree(e));
    CUDA_OK(cudaFree(m));
}

int main(int argc, char** argv) {
    if (argc > 1) {
        const std::string name = argv[1];
        if (name == "off_by_one") return case_off_by_one();
        if (name == "copy") return case_copy();
        if (name == "before_start") return case_before_start();
        if (name == "far") return case_far();
        if (name == "host_write") return case_host_write();
        if (name == "device_buffer") return case_device_buffer();
        std::printf("unknown case %s\n", argv[1]);
        return 2;
    }
    using conformance::at;
    in_bounds();
    copy_directions();
    const std::string file = __FILE__;
    if (!kSanitizer) {
        const std::string advice = "an index of that kernel went out of bounds";
        expect_stop("off_by_one",
                    {"pd::sim: kernel 'add_one' wrote at bytes 0 to 3 past the end of a 4000-byte "
                     "allocation made by cudaMalloc at " +
                         at(__FILE__, kOffByOneMalloc) + " (device allocation #2)",
                     advice},
                    {"device allocation #1)"});
        // The value stored past the end of `out` was read from in's guard zone: still noticed.
        expect_stop("copy",
                    {"pd::sim: kernel 'copy_off_by_one' wrote at bytes 0 to 3 past the end of a 4000-byte "
                     "allocation made by cudaMalloc at " +
                     at(__FILE__, kCopyMalloc) + " (device allocation #2)"},
                    {"device allocation #1)"});
        expect_stop("before_start", {"pd::sim: kernel 'oob::shift_left<float>' wrote at bytes 1 to 4 before the "
                                     "start of a 1200-byte allocation made by cudaMallocManaged at " +
                                     at(__FILE__, kBeforeStartMalloc) + " (device allocation #1)"});
        expect_stop("far", {"pd::sim: kernel 'write_far' wrote at bytes 160 to 163 past the end of a 4000-byte "
                            "allocation made by cudaMalloc at " +
                            at(__FILE__, kFarMalloc)});
        expect_stop("host_write",
                    {"pd::sim: cudaFree: host code wrote at bytes 0 to 3 past the end of a 4000-byte "
                     "allocation made by cudaMalloc at " +
                         at(__FILE__, kHostWriteMalloc),
                     "no kernel wrote these bytes"},
                    {"kernel '"});
        expect_stop("device_buffer", {"pd::sim: kernel 'add_one' wrote at bytes 0 to 3 past the end of a 4000-byte "
                                      "allocation made by cudaMalloc at " +
                                      at(__FILE__, kDeviceBufferLine)});
    } else {
        // AddressSanitizer reports the access itself, reads included; the simulator's line first
        // names the kernel, the block and the thread (i = 1000 is block 3, thread 232).
        const std::string by = "pd::sim: the access AddressSanitizer reports below was made by kernel ";
        expect_stop("off_by_one",
                    {by + "'add_one', block (3,0,0) thread (232,0,0)", "AddressSanitizer: heap-buffer-overflow",
                     "READ of size 4", "0 bytes to the right of 4000-byte region"});
        expect_stop("copy", {by + "'copy_off_by_one', block (3,0,0) thread (232,0,0)",
                             "AddressSanitizer: heap-buffer-overflow", "READ of size 4"});
        expect_stop("before_start", {by + "'oob::shift_left<float>', block (0,0,0) thread (0,0,0)",
                                     "AddressSanitizer: heap-buffer-overflow", "WRITE of size 4",
                                     "4 bytes to the left of 1200-byte region"});
        // Host code is not a kernel: no simulator line.
        expect_stop("host_write", {"AddressSanitizer: heap-buffer-overflow", "WRITE of size 4"}, {by});
    }
    return conformance::finish();
}
