// NCCL's collectives against their definitions, on every rank count from 1 to the devices
// present (up to 8): all-reduce (sum, prod, max, min, avg), broadcast, all-gather and
// reduce-scatter, in fp32, bf16 and int32, in place and not, with counts that the ranks do not
// divide (1, 7, 4099), each driven two ways: one host thread per rank (ncclCommInitRank) and one
// thread for all of them (ncclCommInitAll, the calls grouped); then send/receive around a ring.
// The inputs are multiples of 1/4 small enough that every sum is exact in any order, so NCCL's
// own order on a GPU gives the same bits (avg is compared to 1e-6). On the simulator, also what
// NCCL leaves undefined and the simulator names: ranks that disagree on the collective, its count,
// type or operation; a rank that never joins (PD_SIM_NCCL_TIMEOUT_SECONDS); one thread driving two
// ranks without a group; two ranks on one device; a buffer of another device; the message cap.
// Built against the real NCCL with nvcc; needs 2 devices (exits 77 with fewer).
#include "check.cuh"

#include <cuda_bf16.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#define NCCL_OK(call)                                                                                         \
    do {                                                                                                      \
        const ncclResult_t r_ = (call);                                                                       \
        if (r_ != ncclSuccess) {                                                                              \
            std::printf("NCCL error %s in %s at %s:%d\n", ncclGetErrorString(r_), #call, __FILE__, __LINE__); \
            std::exit(1);                                                                                     \
        }                                                                                                     \
    } while (0)

enum class Kind { all_reduce, broadcast, all_gather, reduce_scatter };
const char* kKindNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"};
const char* kOpNames[] = {"sum", "prod", "max", "min", "avg"};

/// The input of element i of rank r: a multiple of 1/4 in [-3.5, 3.5] (prod: -1, 0 or 1).
__host__ __device__ inline float input(int rank, std::size_t i, bool prod) {
    if (prod) return float(int((i + std::size_t(rank) * 5) % 3) - 1);
    return float(int((std::size_t(rank) * 7 + i * 13) % 29) - 14) * 0.25f;
}

template <typename T>
__host__ __device__ T from_float(float v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16(v);
    else if constexpr (std::is_same_v<T, int>)
        return int(v * 4);  // the integer inputs are 4x the float ones
    else
        return v;
}
template <typename T>
float to_float(T v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat162float(v);
    else
        return float(v);
}

template <typename T>
__global__ void fill(T* x, std::size_t n, int rank, bool prod) {
    const std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = from_float<T>(input(rank, i, prod));
}

template <typename T>
ncclDataType_t type_of() {
    if constexpr (std::is_same_v<T, float>)
        return ncclFloat32;
    else if constexpr (std::is_same_v<T, int>)
        return ncclInt32;
    else
        return ncclBfloat16;
}

struct Case {
    Kind kind;
    ncclRedOp_t op;
    std::size_t count;
    bool in_place;
    int root;
};

/// One rank's buffers for a case.
template <typename T>
struct RankBuffers {
    T* send = nullptr;
    T* recv = nullptr;
    T* base = nullptr;  // what was allocated
    std::vector<T> result;
};

template <typename T>
void setup(const Case& c, int n, int rank, RankBuffers<T>& b) {
    const std::size_t send_n = c.kind == Kind::reduce_scatter ? c.count * std::size_t(n) : c.count;
    const std::size_t recv_n = c.kind == Kind::all_gather ? c.count * std::size_t(n) : c.count;
    const std::size_t total = c.in_place ? std::max(send_n, recv_n) : send_n + recv_n;
    CUDA_OK(cudaMalloc(&b.base, total * sizeof(T)));
    CUDA_OK(cudaMemset(b.base, 0xFF, total * sizeof(T)));
    if (!c.in_place) {
        b.send = b.base;
        b.recv = b.base + send_n;
    } else if (c.kind == Kind::all_gather) {  // NCCL's in-place forms
        b.recv = b.base;
        b.send = b.base + std::size_t(rank) * c.count;
    } else if (c.kind == Kind::reduce_scatter) {
        b.send = b.base;
        b.recv = b.base + std::size_t(rank) * c.count;
    } else {
        b.send = b.recv = b.base;
    }
    fill<T><<<unsigned((send_n + 255) / 256), 256>>>(b.send, send_n, rank, c.op == ncclProd);
    CUDA_OK(cudaGetLastError());
}

template <typename T>
ncclResult_t issue(const Case& c, ncclComm_t comm, RankBuffers<T>& b) {
    switch (c.kind) {
        case Kind::all_reduce:
            return ncclAllReduce(b.send, b.recv, c.count, type_of<T>(), c.op, comm, nullptr);
        case Kind::broadcast:
            return ncclBroadcast(b.send, b.recv, c.count, type_of<T>(), c.root, comm, nullptr);
        case Kind::all_gather:
            return ncclAllGather(b.send, b.recv, c.count, type_of<T>(), comm, nullptr);
        case Kind::reduce_scatter:
            return ncclReduceScatter(b.send, b.recv, c.count, type_of<T>(), c.op, comm, nullptr);
    }
    return ncclInvalidArgument;
}

template <typename T>
void finish(const Case& c, int n, RankBuffers<T>& b) {
    CUDA_OK(cudaDeviceSynchronize());
    const std::size_t recv_n = c.kind == Kind::all_gather ? c.count * std::size_t(n) : c.count;
    b.result.resize(recv_n);
    CUDA_OK(cudaMemcpy(b.result.data(), b.recv, recv_n * sizeof(T), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(b.base));
}

/// The definition: element i of rank r's output.
float expected(const Case& c, int n, int rank, std::size_t i) {
    const bool prod = c.op == ncclProd;
    if (c.kind == Kind::broadcast) return input(c.root, i, false);
    if (c.kind == Kind::all_gather) return input(int(i / c.count), i % c.count, false);
    const std::size_t at = c.kind == Kind::reduce_scatter ? std::size_t(rank) * c.count + i : i;
    double acc = input(0, at, prod);
    for (int r = 1; r < n; ++r) {
        const double v = input(r, at, prod);
        if (c.op == ncclSum || c.op == ncclAvg)
            acc += v;
        else if (c.op == ncclProd)
            acc *= v;
        else if (c.op == ncclMax)
            acc = std::max(acc, v);
        else
            acc = std::min(acc, v);
    }
    return float(c.op == ncclAvg ? acc / n : acc);
}

template <typename T>
int compare(const Case& c, int n, const std::vector<RankBuffers<T>>& ranks, const char* mode) {
    int bad = 0;
    for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < ranks[std::size_t(r)].result.size(); ++i) {
            float want = expected(c, n, r, i);
            const float got = to_float(ranks[std::size_t(r)].result[i]);
            if constexpr (std::is_same_v<T, int>) want *= 4.f;  // the integer inputs are 4x the float ones
            // avg divides (fp32 only here); every other result is exact
            const bool ok = c.op == ncclAvg && c.kind != Kind::broadcast && c.kind != Kind::all_gather
                                ? std::fabs(got - want) <= 1e-6f * (1.f + std::fabs(want))
                                : got == want;
            if (!ok && bad++ < 3)
                std::printf("  %s %s %s count %zu%s ranks %d (%s): rank %d [%zu] = %g, want %g\n",
                            kKindNames[int(c.kind)], kOpNames[int(c.op)],
                            std::is_same_v<T, float> ? "fp32"
                            : std::is_same_v<T, int> ? "int32"
                                                     : "bf16",
                            c.count, c.in_place ? " in place" : "", n, mode, r, i, got, want);
        }
    return bad;
}

/// One case on n ranks, one thread per rank.
template <typename T>
int run_threads(const Case& c, int n) {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    std::vector<RankBuffers<T>> ranks(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            CUDA_OK(cudaSetDevice(r));
            ncclComm_t comm;
            NCCL_OK(ncclCommInitRank(&comm, n, id, r));
            setup(c, n, r, ranks[std::size_t(r)]);
            NCCL_OK(issue(c, comm, ranks[std::size_t(r)]));
            finish(c, n, ranks[std::size_t(r)]);
            NCCL_OK(ncclCommDestroy(comm));
        });
    for (std::thread& t : threads) t.join();
    return compare(c, n, ranks, "threads");
}

/// One case on n ranks from this thread (ncclCommInitAll, grouped calls).
template <typename T>
int run_group(const Case& c, int n) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
    NCCL_OK(ncclCommInitAll(comms.data(), n, nullptr));
    std::vector<RankBuffers<T>> ranks(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(r));
        setup(c, n, r, ranks[std::size_t(r)]);
        CUDA_OK(cudaDeviceSynchronize());
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) NCCL_OK(issue(c, comms[std::size_t(r)], ranks[std::size_t(r)]));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(r));
        finish(c, n, ranks[std::size_t(r)]);
        NCCL_OK(ncclCommDestroy(comms[std::size_t(r)]));
    }
    CUDA_OK(cudaSetDevice(0));
    return compare(c, n, ranks, "group");
}

template <typename T>
void run_all(int devices) {
    const std::vector<ncclRedOp_t> ops = std::is_same_v<T, float>
                                             ? std::vector{ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}
                                             : std::vector{ncclSum, ncclMax};
    for (int n : {1, 2, 3, 4, 8}) {
        if (n > devices) continue;
        int cases = 0, bad = 0;
        for (Kind kind : {Kind::all_reduce, Kind::broadcast, Kind::all_gather, Kind::reduce_scatter})
            for (ncclRedOp_t op : ops) {
                if ((kind == Kind::broadcast || kind == Kind::all_gather) && op != ncclSum) continue;
                for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(4099)})
                    for (bool in_place : {false, true}) {
                        const Case c{kind, op, count, in_place, n - 1};
                        const bool threads = (cases++ % 2) == 0;  // alternate the two ways of driving the ranks
                        bad += threads ? run_threads<T>(c, n) : run_group<T>(c, n);
                    }
            }
        CHECK_MSG(bad == 0, "%d ranks, %s: %d wrong elements over %d cases", n,
                  std::is_same_v<T, float> ? "fp32"
                  : std::is_same_v<T, int> ? "int32"
                                           : "bf16",
                  bad, cases);
    }
}

/// Each rank sends a buffer to the next one around the ring and receives the previous one's.
void ring(int n) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
    NCCL_OK(ncclCommInitAll(comms.data(), n, nullptr));
    const std::size_t count = 1001;
    std::vector<float*> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaMalloc(&send[std::size_t(r)], count * sizeof(float)));
        CUDA_OK(cudaMalloc(&recv[std::size_t(r)], count * sizeof(float)));
        fill<float><<<4, 256>>>(send[std::size_t(r)], count, r, false);
        CUDA_OK(cudaDeviceSynchronize());
    }
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
        NCCL_OK(ncclSend(send[std::size_t(r)], count, ncclFloat32, (r + 1) % n, comms[std::size_t(r)], nullptr));
        NCCL_OK(ncclRecv(recv[std::size_t(r)], count, ncclFloat32, (r + n - 1) % n, comms[std::size_t(r)], nullptr));
    }
    NCCL_OK(ncclGroupEnd());
    int bad = 0;
    for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(count), want(count);
        CUDA_OK(cudaMemcpy(got.data(), recv[std::size_t(r)], count * sizeof(float), cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < count; ++i) want[i] = input((r + n - 1) % n, i, false);
        bad += conformance::bit_mismatches("ring receive", got.data(), want.data(), count);
        CUDA_OK(cudaFree(send[std::size_t(r)]));
        CUDA_OK(cudaFree(recv[std::size_t(r)]));
        NCCL_OK(ncclCommDestroy(comms[std::size_t(r)]));
    }
    CUDA_OK(cudaSetDevice(0));
    CHECK_MSG(bad == 0, "send/receive around a ring of %d ranks", n);
}

#if defined(PD_SIM_NCCL)
/// Two ranks, one thread each; rank r runs call(r, comm, buffer) and returns its result and the
/// last error message of its thread.
template <typename F>
void two_ranks(F call, ncclResult_t results[2], std::string messages[2]) {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            CUDA_OK(cudaSetDevice(r));
            ncclComm_t comm;
            NCCL_OK(ncclCommInitRank(&comm, 2, id, r));
            float* buf = nullptr;
            CUDA_OK(cudaMalloc(&buf, 64 * sizeof(float)));
            results[r] = call(r, comm, buf);
            messages[r] = ncclGetLastError(comm);
            CUDA_OK(cudaFree(buf));
            NCCL_OK(ncclCommDestroy(comm));
        });
    for (std::thread& t : threads) t.join();
}

bool has(const std::string& text, const char* part) {
    const bool ok = text.find(part) != std::string::npos;
    if (!ok) std::printf("    message: %s\n    lacks: %s\n", text.c_str(), part);
    return ok;
}

void errors() {
    ncclResult_t res[2];
    std::string msg[2];
    two_ranks([](int r, ncclComm_t c,
                 float* b) { return ncclAllReduce(b, b, r == 0 ? 8 : 9, ncclFloat32, ncclSum, c, nullptr); },
              res, msg);
    CHECK(res[0] == ncclInvalidUsage && res[1] == ncclInvalidUsage);
    CHECK(has(msg[0] + msg[1],
              "ncclAllReduce #1 of a clique of 2 ranks: the ranks disagree: rank 0 gave count 8, rank 1 9"));
    two_ranks(
        [](int r, ncclComm_t c, float* b) {
            return r == 0 ? ncclAllReduce(b, b, 8, ncclFloat32, ncclSum, c, nullptr)
                          : ncclAllGather(b, b, 4, ncclFloat32, c, nullptr);
        },
        res, msg);
    CHECK(res[0] == ncclInvalidUsage && res[1] == ncclInvalidUsage);
    CHECK(has(msg[0] + msg[1], "called ncclAllReduce") && has(msg[0] + msg[1], "ncclAllGather"));
    two_ranks([](int r, ncclComm_t c,
                 float* b) { return ncclAllReduce(b, b, 8, r == 0 ? ncclFloat32 : ncclBfloat16, ncclSum, c, nullptr); },
              res, msg);
    CHECK(has(msg[0] + msg[1], "gave type ncclFloat32, rank 1 ncclBfloat16") ||
          has(msg[0] + msg[1], "gave type ncclBfloat16, rank 0 ncclFloat32"));
    two_ranks([](int r, ncclComm_t c,
                 float* b) { return ncclAllReduce(b, b, 8, ncclFloat32, r == 0 ? ncclSum : ncclMax, c, nullptr); },
              res, msg);
    CHECK(has(msg[0] + msg[1], "operation ncclSum") && has(msg[0] + msg[1], "ncclMax"));
    // rank 1 never joins: rank 0 waits PD_SIM_NCCL_TIMEOUT_SECONDS, then names it
    two_ranks([](int r, ncclComm_t c,
                 float* b) { return r == 0 ? ncclAllReduce(b, b, 8, ncclFloat32, ncclSum, c, nullptr) : ncclSuccess; },
              res, msg);
    CHECK(res[0] == ncclSystemError && res[1] == ncclSuccess);
    CHECK(has(msg[0], "ncclAllReduce #1 of a clique of 2 ranks: rank 0 waited") &&
          has(msg[0], "rank 1 never called it"));
    // one thread, two ranks, no group
    ncclComm_t comms[2];
    NCCL_OK(ncclCommInitAll(comms, 2, nullptr));
    float* b = nullptr;
    CUDA_OK(cudaMalloc(&b, 64));
    CHECK(ncclAllReduce(b, b, 8, ncclFloat32, ncclSum, comms[0], nullptr) == ncclSystemError);
    CHECK(has(ncclGetLastError(comms[0]), "must put their calls in ncclGroupStart/ncclGroupEnd"));
    // a buffer of another device
    CUDA_OK(cudaSetDevice(1));
    float* other = nullptr;
    CUDA_OK(cudaMalloc(&other, 64));
    CHECK(ncclAllReduce(other, other, 8, ncclFloat32, ncclSum, comms[0], nullptr) == ncclInvalidArgument);
    CHECK(has(ncclGetLastError(comms[0]), "rank 0 runs on device 0, but its sendbuff is memory of device 1"));
    CUDA_OK(cudaFree(other));
    CUDA_OK(cudaSetDevice(0));
    // the message cap
    CHECK(ncclAllReduce(b, b, (std::size_t(64) << 20) / 4 + 1, ncclFloat32, ncclSum, comms[0], nullptr) ==
          ncclInvalidArgument);
    CHECK(has(ncclGetLastError(comms[0]), "caps a message at 64 MiB per rank"));
    CHECK(ncclBroadcast(b, b, 8, ncclFloat32, 2, comms[0], nullptr) == ncclInvalidArgument);
    CHECK(has(ncclGetLastError(comms[0]), "root = 2 must be a rank, 0 ... 1"));
    CUDA_OK(cudaFree(b));
    NCCL_OK(ncclCommDestroy(comms[0]));
    NCCL_OK(ncclCommDestroy(comms[1]));
    // two ranks on one device
    const int same[2] = {0, 0};
    CHECK(ncclCommInitAll(comms, 2, same) == ncclInvalidUsage);
    CHECK(has(ncclGetLastError(nullptr), "ranks 0 and 1 are both on device 0"));
}
#endif

int main() {
    const int devices = conformance::devices_or_skip(2);
    run_all<float>(devices);
    run_all<__nv_bfloat16>(devices);
    run_all<int>(devices);
    for (int n = 1; n <= devices && n <= 8; n *= 2) ring(n);
    ring(devices < 3 ? devices : 3);
#if defined(PD_SIM_NCCL)
    errors();
#endif
    return conformance::finish();
}
