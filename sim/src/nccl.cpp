// NCCL's API on the simulator (sim/shadow/nccl.h declares it).
//
// A clique is the ranks that share one ncclUniqueId (or one ncclCommInitAll); each rank is a
// communicator on one virtual device. Every collective a rank calls gets the next number of its
// communicator; the n-th collective of each rank of a clique is one operation, which runs when
// the last rank has called it: that rank's thread checks that every rank asked for the same
// thing (collective, count, type, operation, root) and moves the data on the host, reading every
// send buffer before writing any receive buffer (so in-place calls work), reducing in rank order
// (fp16 and bf16 accumulate in fp32 and are rounded once). ncclSend and ncclRecv pair in order per
// (sender, receiver). A call returns when its operation is done; inside ncclGroupStart/End the
// calls are issued at ncclGroupEnd, which waits for them all, so one thread can drive every rank.
// A rank that has not joined within PD_SIM_NCCL_TIMEOUT_SECONDS fails the call, naming it.
#include "sim_internal.hpp"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace pd::sim::detail;

namespace {

/// Messages are capped per rank so that eight virtual devices fit a small machine.
constexpr std::size_t kMaxMessageBytes = std::size_t(64) << 20;

enum class Kind { all_reduce, broadcast, all_gather, reduce_scatter, send, recv };

const char* name_of(Kind k) {
    switch (k) {
        case Kind::all_reduce:
            return "ncclAllReduce";
        case Kind::broadcast:
            return "ncclBroadcast";
        case Kind::all_gather:
            return "ncclAllGather";
        case Kind::reduce_scatter:
            return "ncclReduceScatter";
        case Kind::send:
            return "ncclSend";
        case Kind::recv:
            return "ncclRecv";
    }
    return "?";
}
const char* name_of(ncclDataType_t t) {
    static constexpr const char* kNames[] = {"ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                             "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
    return int(t) >= 0 && int(t) <= int(ncclBfloat16) ? kNames[int(t)] : "an unsupported type";
}
const char* name_of(ncclRedOp_t op) {
    static constexpr const char* kNames[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    return int(op) >= 0 && int(op) < int(ncclNumOps) ? kNames[int(op)] : "an unknown operation";
}
std::size_t size_of(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
            return 1;
        case ncclFloat16:
        case ncclBfloat16:
            return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32:
            return 4;
        default:
            return 8;
    }
}

/// The calling thread's last error message (ncclGetLastError).
thread_local std::string last_message;

ncclResult_t fail(ncclResult_t code, const std::string& message) {
    last_message = message;
    std::fflush(stdout);
    std::fprintf(stderr, "pd::sim NCCL: %s\n", message.c_str());
    return code;
}

/// One rank's part of an operation.
struct Part {
    bool joined = false;
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t count = 0;
    ncclDataType_t type = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    int root = 0;
    Kind kind = Kind::all_reduce;
};

/// One collective (the n-th of every rank), or one send paired with its receive.
struct Operation {
    std::vector<Part> parts;  // by rank (a point-to-point pair: [sender, receiver])
    int joined = 0;
    bool done = false;
    ncclResult_t result = ncclSuccess;
    std::string error;
};

struct Clique {
    int nranks = 0;
    std::mutex m;
    std::condition_variable changed;
    int joined = 0;            // ranks that called ncclCommInitRank
    std::vector<int> devices;  // by rank, once joined (-1 before)
    std::string init_error;
    std::map<std::uint64_t, std::shared_ptr<Operation>> collectives;  // by number
    /// Point to point, by (sender, receiver): the n-th send and the n-th receive are one operation.
    std::map<std::pair<int, int>, std::map<std::uint64_t, std::shared_ptr<Operation>>> pairs;
};

}  // namespace

struct ncclComm {
    std::shared_ptr<Clique> clique;
    int rank = 0;
    int device = 0;
    std::uint64_t collectives = 0;              // issued so far
    std::map<int, std::uint64_t> sends, recvs;  // issued so far, by peer
};

namespace {

std::mutex registry_mutex;
std::map<std::uint64_t, std::weak_ptr<Clique>> registry;  // the cliques ncclCommInitRank is forming
std::atomic<std::uint64_t> next_id{1};
constexpr char kMagic[] = "pd::sim nccl id";

double timeout_seconds() {
    return settings().collective_timeout_seconds;
}

std::string rank_list(const std::vector<int>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size(); ++i)
        s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
    return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

// ---- the data movement -----------------------------------------------------------------------

float to_float(__half v) {
    return __half2float(v);
}
float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

/// The reduction of element i over every rank's copy of the send buffers, in rank order.
template <typename T>
void reduce(const std::vector<std::vector<unsigned char>>& sends, std::size_t first, std::size_t count, ncclRedOp_t op,
            void* out) {
    constexpr bool narrow = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
    using Acc = std::conditional_t<narrow, float, T>;
    const int n = int(sends.size());
    for (std::size_t i = 0; i < count; ++i) {
        Acc acc{};
        for (int r = 0; r < n; ++r) {
            T v;
            std::memcpy(&v, sends[std::size_t(r)].data() + (first + i) * sizeof(T), sizeof(T));
            Acc a;
            if constexpr (narrow)
                a = to_float(v);
            else
                a = v;
            if (r == 0)
                acc = a;
            else if (op == ncclSum || op == ncclAvg)
                acc = Acc(acc + a);
            else if (op == ncclProd)
                acc = Acc(acc * a);
            else if (op == ncclMax)
                acc = std::max(acc, a);
            else
                acc = std::min(acc, a);
        }
        if (op == ncclAvg) acc = Acc(acc / Acc(n));
        T result;
        if constexpr (std::is_same_v<T, __half>)
            result = __float2half(acc);
        else if constexpr (std::is_same_v<T, __nv_bfloat16>)
            result = __float2bfloat16(acc);
        else
            result = acc;
        std::memcpy(static_cast<unsigned char*>(out) + i * sizeof(T), &result, sizeof(T));
    }
}

void reduce_typed(ncclDataType_t t, const std::vector<std::vector<unsigned char>>& sends, std::size_t first,
                  std::size_t count, ncclRedOp_t op, void* out) {
    switch (t) {
        case ncclInt8:
            return reduce<std::int8_t>(sends, first, count, op, out);
        case ncclUint8:
            return reduce<std::uint8_t>(sends, first, count, op, out);
        case ncclInt32:
            return reduce<std::int32_t>(sends, first, count, op, out);
        case ncclUint32:
            return reduce<std::uint32_t>(sends, first, count, op, out);
        case ncclInt64:
            return reduce<std::int64_t>(sends, first, count, op, out);
        case ncclUint64:
            return reduce<std::uint64_t>(sends, first, count, op, out);
        case ncclFloat16:
            return reduce<__half>(sends, first, count, op, out);
        case ncclFloat32:
            return reduce<float>(sends, first, count, op, out);
        case ncclFloat64:
            return reduce<double>(sends, first, count, op, out);
        case ncclBfloat16:
            return reduce<__nv_bfloat16>(sends, first, count, op, out);
        default:
            return;
    }
}

/// Runs a collective whose every part has joined and agrees (called with the clique's lock held).
void execute(Operation& o) {
    const Part& p0 = o.parts.front();
    const std::size_t n = o.parts.size(), bytes = p0.count * size_of(p0.type);
    // every send buffer is read before any receive buffer is written
    std::vector<std::vector<unsigned char>> sends(n);
    const std::size_t send_bytes = p0.kind == Kind::reduce_scatter ? bytes * n : bytes;
    for (std::size_t r = 0; r < n; ++r) {
        if ((p0.kind == Kind::broadcast && int(r) != p0.root) || (p0.kind == Kind::send && r > 0)) continue;
        const auto* s = static_cast<const unsigned char*>(o.parts[r].send);
        sends[r].assign(s, s + send_bytes);
    }
    switch (p0.kind) {
        case Kind::all_reduce: {
            std::vector<unsigned char> out(bytes);
            reduce_typed(p0.type, sends, 0, p0.count, p0.op, out.data());
            for (const Part& p : o.parts) std::memcpy(p.recv, out.data(), bytes);
            break;
        }
        case Kind::broadcast:
            for (const Part& p : o.parts) std::memcpy(p.recv, sends[std::size_t(p0.root)].data(), bytes);
            break;
        case Kind::all_gather:
            for (const Part& p : o.parts)
                for (std::size_t r = 0; r < n; ++r)
                    std::memcpy(static_cast<unsigned char*>(p.recv) + r * bytes, sends[r].data(), bytes);
            break;
        case Kind::reduce_scatter:
            for (std::size_t r = 0; r < n; ++r)
                reduce_typed(p0.type, sends, r * p0.count, p0.count, p0.op, o.parts[r].recv);
            break;
        case Kind::send:
        case Kind::recv:
            std::memcpy(o.parts[1].recv, sends[0].data(), bytes);
            break;
    }
}

/// Why @p a (rank @p ra) and @p b (rank @p rb) are not parts of one operation, or "".
std::string disagreement(const Part& a, int ra, const Part& b, int rb) {
    std::ostringstream why;
    const auto pair = [&](const char* what, const auto& va, const auto& vb) {
        why << "rank " << ra << " gave " << what << " " << va << ", rank " << rb << " " << vb;
    };
    if (a.kind != b.kind)
        why << "rank " << ra << " called " << name_of(a.kind) << ", rank " << rb << " " << name_of(b.kind);
    else if (a.count != b.count)
        pair("count", a.count, b.count);
    else if (a.type != b.type)
        pair("type", name_of(a.type), name_of(b.type));
    else if (a.kind != Kind::broadcast && a.kind != Kind::all_gather && a.kind != Kind::send && a.op != b.op)
        pair("operation", name_of(a.op), name_of(b.op));
    else if (a.kind == Kind::broadcast && a.root != b.root)
        pair("root", a.root, b.root);
    return why.str();
}

/// A call issued by a rank: where its part goes.
struct Issued {
    std::shared_ptr<Clique> clique;
    std::shared_ptr<Operation> op;
    std::string label;  // "ncclAllReduce #3 of a clique of 4 ranks"
    int rank = 0;
};

/// Adds @p part of rank @p slot to @p o (lock held); runs @p o when it is the last part.
void join(Operation& o, int slot, const Part& part, const std::string& label, const std::vector<int>& ranks) {
    if (o.done) return;  // failed already
    o.parts[std::size_t(slot)] = part;
    o.parts[std::size_t(slot)].joined = true;
    ++o.joined;
    for (std::size_t r = 0; r < o.parts.size(); ++r) {
        if (int(r) == slot || !o.parts[r].joined) continue;
        // named in rank order, whichever came first
        const std::string why = int(r) < slot ? disagreement(o.parts[r], ranks[r], part, ranks[std::size_t(slot)])
                                              : disagreement(part, ranks[std::size_t(slot)], o.parts[r], ranks[r]);
        if (why.empty()) break;
        o.result = ncclInvalidUsage;
        o.error = label + ": the ranks disagree: " + why;
        o.done = true;
        return;
    }
    if (o.joined == int(o.parts.size())) {
        execute(o);
        o.done = true;
    }
}

/// Issues one rank's part of a collective or of a send/receive pair, without waiting.
Issued issue(ncclComm_t comm, const Part& part, int peer) {
    Issued is;
    is.clique = comm->clique;
    is.rank = comm->rank;
    Clique& c = *comm->clique;
    std::lock_guard<std::mutex> lock(c.m);
    if (part.kind == Kind::send || part.kind == Kind::recv) {
        const bool sending = part.kind == Kind::send;
        const std::pair<int, int> key = sending ? std::pair{comm->rank, peer} : std::pair{peer, comm->rank};
        const std::uint64_t number = ++(sending ? comm->sends : comm->recvs)[peer];
        std::shared_ptr<Operation>& op = c.pairs[key][number];
        if (!op) op = std::make_shared<Operation>(), op->parts.resize(2);
        is.op = op;
        is.label = std::string(name_of(part.kind)) + " #" + std::to_string(number) + " from rank " +
                   std::to_string(key.first) + " to rank " + std::to_string(key.second);
        Part p = part;
        p.kind = Kind::send;  // the pair agrees on count and type; the roles are its slots
        join(*op, sending ? 0 : 1, p, is.label, {key.first, key.second});
        if (op->joined == 2) c.pairs[key].erase(number);
    } else {
        const std::uint64_t number = ++comm->collectives;
        std::shared_ptr<Operation>& op = c.collectives[number];
        if (!op) op = std::make_shared<Operation>(), op->parts.resize(std::size_t(c.nranks));
        is.op = op;
        is.label = std::string(name_of(part.kind)) + " #" + std::to_string(number) + " of a clique of " +
                   std::to_string(c.nranks) + " ranks";
        std::vector<int> ranks(std::size_t(c.nranks));
        for (int r = 0; r < c.nranks; ++r) ranks[std::size_t(r)] = r;
        join(*op, comm->rank, part, is.label, ranks);
        if (op->joined == c.nranks) c.collectives.erase(number);
    }
    if (is.op->done) c.changed.notify_all();
    return is;
}

/// Waits until @p is has completed; fails naming the ranks missing after the timeout.
ncclResult_t wait(const Issued& is, bool grouped) {
    Clique& c = *is.clique;
    std::unique_lock<std::mutex> lock(c.m);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
    while (!is.op->done)
        if (c.changed.wait_until(lock, deadline) == std::cv_status::timeout && !is.op->done) {
            std::vector<int> missing;
            const bool pair = is.op->parts.size() == 2 && is.label.find(" from rank ") != std::string::npos;
            for (std::size_t r = 0; r < is.op->parts.size(); ++r)
                if (!is.op->parts[r].joined) missing.push_back(int(r));
            std::string who;
            if (pair)
                who = missing.front() == 0 ? "the sender never called ncclSend" : "the receiver never called ncclRecv";
            else
                who = rank_list(missing) + " never called it";
            is.op->done = true;
            is.op->result = ncclSystemError;
            is.op->error = is.label + ": rank " + std::to_string(is.rank) + " waited " +
                           std::to_string(int(timeout_seconds())) + " s and " + who +
                           (grouped ? ""
                                    : " (a rank skipped the call or called collectives in another order; one "
                                      "thread driving several ranks must put their calls in "
                                      "ncclGroupStart/ncclGroupEnd)");
            c.changed.notify_all();
        }
    if (is.op->result != ncclSuccess) return fail(is.op->result, is.op->error);
    return ncclSuccess;
}

// ---- groups --------------------------------------------------------------------------------------

struct Pending {
    ncclComm_t comm;
    Part part;
    int peer;
};
thread_local int group_depth = 0;
thread_local std::vector<Pending> group_calls;

/// Checks a call's arguments, then issues and waits for it (or queues it inside a group).
ncclResult_t call(Kind kind, const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                  int root_or_peer, ncclComm_t comm) {
    const char* name = name_of(kind);
    if (comm == nullptr) return fail(ncclInvalidArgument, std::string(name) + ": comm is NULL");
    const int n = comm->clique->nranks;
    if (int(type) < 0 || int(type) > int(ncclBfloat16))
        return fail(ncclInvalidArgument, std::string(name) + ": datatype " + std::to_string(int(type)) +
                                             " is not one of the simulator's (8- to 64-bit integers, fp16, bf16, fp32, "
                                             "fp64; no fp8)");
    if (kind != Kind::broadcast && kind != Kind::all_gather && kind != Kind::send && kind != Kind::recv &&
        (int(op) < 0 || int(op) >= int(ncclNumOps)))
        return fail(ncclInvalidArgument,
                    std::string(name) + ": op " + std::to_string(int(op)) + " is not a built-in one");
    if ((kind == Kind::broadcast || kind == Kind::send || kind == Kind::recv) &&
        (root_or_peer < 0 || root_or_peer >= n))
        return fail(ncclInvalidArgument, std::string(name) + ": " + (kind == Kind::broadcast ? "root" : "peer") +
                                             " = " + std::to_string(root_or_peer) + " must be a rank, 0 ... " +
                                             std::to_string(n - 1));
    const std::size_t bytes = count * size_of(type);
    const std::size_t widest =
        kind == Kind::all_gather || kind == Kind::reduce_scatter ? bytes * std::size_t(n) : bytes;
    if (widest > kMaxMessageBytes)
        return fail(ncclInvalidArgument, std::string(name) + ": " + std::to_string(widest) +
                                             " bytes per rank: the simulator caps a message at 64 MiB per rank");
    const bool sends = kind != Kind::recv && !(kind == Kind::broadcast && comm->rank != root_or_peer);
    const bool receives = kind != Kind::send;
    if (count > 0 && ((sends && send == nullptr) || (receives && recv == nullptr)))
        return fail(ncclInvalidArgument,
                    std::string(name) + ": a NULL " + (sends && send == nullptr ? "sendbuff" : "recvbuff"));
    for (const void* p : {send, static_cast<const void*>(recv)}) {
        const int d = p != nullptr ? device_of_pointer(p) : -1;
        if (d >= 0 && d != comm->device)
            return fail(ncclInvalidArgument, std::string(name) + ": rank " + std::to_string(comm->rank) +
                                                 " runs on device " + std::to_string(comm->device) + ", but its " +
                                                 (p == send ? "sendbuff" : "recvbuff") + " is memory of device " +
                                                 std::to_string(d));
    }
    Part part;
    part.kind = kind;
    part.send = send;
    part.recv = recv;
    part.count = count;
    part.type = type;
    part.op = op;
    part.root = kind == Kind::broadcast ? root_or_peer : 0;
    if (group_depth > 0) {
        group_calls.push_back({comm, part, root_or_peer});
        return ncclSuccess;
    }
    return wait(issue(comm, part, root_or_peer), false);
}

/// Joins a clique: records this rank's device; fails when two ranks share one.
ncclResult_t check_devices(Clique& c, const char* call) {
    for (int a = 0; a < c.nranks; ++a)
        for (int b = a + 1; b < c.nranks; ++b)
            if (c.devices[std::size_t(a)] == c.devices[std::size_t(b)])
                return fail(ncclInvalidUsage, std::string(call) + ": ranks " + std::to_string(a) + " and " +
                                                  std::to_string(b) + " are both on device " +
                                                  std::to_string(c.devices[std::size_t(a)]) +
                                                  " (NCCL refuses two ranks on one GPU: give the simulator "
                                                  "PD_SIM_DEVICES virtual devices and cudaSetDevice(rank) first)");
    return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    std::memset(id->internal, 0, sizeof id->internal);
    std::memcpy(id->internal, kMagic, sizeof kMagic);
    const std::uint64_t n = next_id++;
    std::memcpy(id->internal + sizeof kMagic, &n, sizeof n);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *comm = nullptr;
    if (std::memcmp(id.internal, kMagic, sizeof kMagic) != 0)
        return fail(ncclInvalidArgument, "ncclCommInitRank: commId was not made by ncclGetUniqueId");
    if (nranks < 1 || nranks > settings().devices)
        return fail(ncclInvalidArgument, "ncclCommInitRank: nranks = " + std::to_string(nranks) + " must be 1 ... " +
                                             std::to_string(settings().devices) +
                                             " (the virtual devices: set PD_SIM_DEVICES for more)");
    if (rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRank: rank = " + std::to_string(rank) + " must be 0 ... " +
                                             std::to_string(nranks - 1));
    std::uint64_t key = 0;
    std::memcpy(&key, id.internal + sizeof kMagic, sizeof key);
    std::shared_ptr<Clique> clique;
    {
        std::lock_guard<std::mutex> lock(registry_mutex);
        clique = registry[key].lock();
        if (!clique) {
            clique = std::make_shared<Clique>();
            clique->nranks = nranks;
            clique->devices.assign(std::size_t(nranks), -1);
            registry[key] = clique;
        }
    }
    Clique& c = *clique;
    std::unique_lock<std::mutex> lock(c.m);
    if (c.nranks != nranks)
        return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " gave nranks = " +
                                          std::to_string(nranks) + ", another rank " + std::to_string(c.nranks));
    if (c.devices[std::size_t(rank)] >= 0)
        return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
    c.devices[std::size_t(rank)] = current_device_of_thread();
    if (++c.joined == nranks) {
        c.changed.notify_all();
        std::lock_guard<std::mutex> registry_lock(registry_mutex);
        registry.erase(key);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
    while (c.joined < nranks)
        if (c.changed.wait_until(lock, deadline) == std::cv_status::timeout && c.joined < nranks) {
            std::vector<int> missing;
            for (int r = 0; r < nranks; ++r)
                if (c.devices[std::size_t(r)] < 0) missing.push_back(r);
            return fail(ncclSystemError, "ncclCommInitRank: rank " + std::to_string(rank) + " waited " +
                                             std::to_string(int(timeout_seconds())) + " s and " + rank_list(missing) +
                                             " of " + std::to_string(nranks) + " never joined");
        }
    if (const ncclResult_t r = check_devices(c, "ncclCommInitRank")) return r;
    *comm = new ncclComm{clique, rank, c.devices[std::size_t(rank)], 0, {}, {}};
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
    if (comms == nullptr) return fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
    if (ndev < 1 || ndev > settings().devices)
        return fail(ncclInvalidArgument, "ncclCommInitAll: ndev = " + std::to_string(ndev) + " must be 1 ... " +
                                             std::to_string(settings().devices) +
                                             " (the virtual devices: set PD_SIM_DEVICES for more)");
    auto clique = std::make_shared<Clique>();
    clique->nranks = ndev;
    clique->joined = ndev;
    for (int r = 0; r < ndev; ++r) {
        const int d = devlist != nullptr ? devlist[r] : r;
        if (d < 0 || d >= settings().devices)
            return fail(ncclInvalidArgument, "ncclCommInitAll: devlist[" + std::to_string(r) +
                                                 "] = " + std::to_string(d) + " is not a device");
        clique->devices.push_back(d);
    }
    if (const ncclResult_t r = check_devices(*clique, "ncclCommInitAll")) return r;
    for (int r = 0; r < ndev; ++r) comms[r] = new ncclComm{clique, r, clique->devices[std::size_t(r)], 0, {}, {}};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == nullptr || count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = comm->clique->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    if (comm == nullptr || device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
    *device = comm->device;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == nullptr || rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = comm->rank;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess:
            return "no error";
        case ncclUnhandledCudaError:
            return "unhandled cuda error";
        case ncclSystemError:
            return "unhandled system error (a rank did not join in time, on the simulator)";
        case ncclInternalError:
            return "internal error";
        case ncclInvalidArgument:
            return "invalid argument";
        case ncclInvalidUsage:
            return "invalid usage";
        case ncclRemoteError:
            return "remote process exited or there was a network error";
        case ncclInProgress:
            return "NCCL operation in progress";
        default:
            return "unknown result code";
    }
}
const char* ncclGetLastError(ncclComm_t) {
    return last_message.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
    return call(Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0, comm);
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
    return call(Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm);
}
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
    return call(Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm);
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    return call(Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm);
}
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
    return call(Kind::send, sendbuff, nullptr, count, datatype, ncclSum, peer, comm);
}
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t) {
    return call(Kind::recv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm);
}

ncclResult_t ncclGroupStart(void) {
    ++group_depth;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Pending> calls;
    calls.swap(group_calls);
    std::vector<Issued> issued;
    issued.reserve(calls.size());
    for (const Pending& p : calls) issued.push_back(issue(p.comm, p.part, p.peer));
    ncclResult_t result = ncclSuccess;
    for (const Issued& is : issued)
        if (const ncclResult_t r = wait(is, true); r != ncclSuccess && result == ncclSuccess) result = r;
    return result;
}

}  // extern "C"
