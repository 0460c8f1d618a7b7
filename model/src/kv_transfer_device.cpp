/// @file kv_transfer_device.cpp
/// @brief Chapter 11's transfer of a paged KV cache between two devices (kv_transfer_device.hpp).
#include "pd/model/kv_transfer_device.hpp"

#include "pd/cuda_check.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pd::model {

namespace {

/// Throws std::invalid_argument "transfer_blocks: <what>".
[[noreturn]] void reject(const std::string& what) {
    throw std::invalid_argument("transfer_blocks: " + what);
}

/// "ModelConfig.kv_heads = 2 on the sender, 4 on the receiver".
std::string differs(const std::string& field, const std::string& a, const std::string& b) {
    return field + " = " + a + " on the sender, " + b + " on the receiver";
}

/// Refuses a pair of models whose caches do not hold the same blocks.
void check_models(const Model& from, const Model& to) {
    const ModelConfig &a = from.config(), &b = to.config();
    const struct {
        const char* field;
        int a, b;
    } sizes[] = {{"vocab", a.vocab, b.vocab},          {"d_model", a.d_model, b.d_model},
                 {"layers", a.layers, b.layers},       {"heads", a.heads, b.heads},
                 {"kv_heads", a.kv_heads, b.kv_heads}, {"head_dim", a.head_dim, b.head_dim},
                 {"ffn_dim", a.ffn_dim, b.ffn_dim}};
    for (const auto& s : sizes)
        if (s.a != s.b)
            reject(differs(std::string("ModelConfig.") + s.field, std::to_string(s.a), std::to_string(s.b)));
    if (a.rope_theta != b.rope_theta)
        reject(differs("ModelConfig.rope_theta", std::to_string(a.rope_theta), std::to_string(b.rope_theta)));
    const ModelOptions &p = from.options(), &q = to.options();
    for (const ModelOptions* o : {&p, &q}) {
        const char* side = o == &p ? "sender" : "receiver";
        if (o->cache.block_size == 0)
            reject(std::string("ModelOptions.cache.block_size = 0 on the ") + side + ": the cache is not paged");
        if (o->parallel.ranks != 1)
            reject("ModelOptions.parallel.ranks = " + std::to_string(o->parallel.ranks) + " on the " + side +
                   ": a split model's cache is not one device's");
    }
    if (p.cache.kv != q.cache.kv)
        reject(differs("ModelOptions.cache.kv", to_string(p.cache.kv), to_string(q.cache.kv)));
    if (p.cache.block_size != q.cache.block_size)
        reject(differs("ModelOptions.cache.block_size", std::to_string(p.cache.block_size),
                       std::to_string(q.cache.block_size)));
}

/// Refuses a block id outside @p m's cache, and (@p distinct) one named twice.
void check_ids(std::span<const int> ids, const Model& m, const char* list, bool distinct) {
    const int n = m.options().cache.num_blocks;
    std::vector<int> seen(std::size_t(n), -1);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const int b = ids[i];
        const std::string at = std::string(list) + "[" + std::to_string(i) + "] = " + std::to_string(b);
        if (b < 0 || b >= n) reject(at + " is not one of the cache's " + std::to_string(n) + " blocks");
        if (distinct && seen[std::size_t(b)] >= 0)
            reject(at + " repeats " + list + "[" + std::to_string(seen[std::size_t(b)]) + "]");
        seen[std::size_t(b)] = int(i);
    }
}

/// Restores the calling thread's current device when it leaves scope.
class DeviceGuard {
public:
    DeviceGuard() { PD_CHECK_CUDA(cudaGetDevice(&device_)); }
    ~DeviceGuard() { cudaSetDevice(device_); }  // no throw from a destructor
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int device_ = 0;
};

/// Enables peer access from device @p a to @p b and back where the runtime allows both: true
/// when both are on (an access enabled earlier counts, its error cleared).
bool enable_peer_access(int a, int b) {
    int ab = 0, ba = 0;
    PD_CHECK_CUDA(cudaDeviceCanAccessPeer(&ab, a, b));
    PD_CHECK_CUDA(cudaDeviceCanAccessPeer(&ba, b, a));
    if (ab == 0 || ba == 0) return false;
    for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        PD_CHECK_CUDA(cudaSetDevice(from));
        const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
            (void)cudaGetLastError();  // on from an earlier transfer: clear the error it left
        else
            PD_CHECK_CUDA(e);
    }
    return true;
}

}  // namespace

// [kv_transfer_device]
KvTransferStats transfer_blocks(Model& from, std::span<const int> from_blocks, Model& to,
                                std::span<const int> to_blocks) {
    check_models(from, to);
    if (from_blocks.size() != to_blocks.size())
        reject("from_blocks has " + std::to_string(from_blocks.size()) + " blocks, to_blocks " +
               std::to_string(to_blocks.size()) + ": one destination per block");
    check_ids(from_blocks, from, "from_blocks", false);
    check_ids(to_blocks, to, "to_blocks", true);

    DeviceGuard guard;
    const int src = from.device(), dst = to.device();
    KvTransferStats stats;
    if (src != dst && enable_peer_access(src, dst)) {  // else each copy goes through host memory
        stats.peer_access = true;
        PD_CHECK_CUDA(cudaDeviceGetP2PAttribute(&stats.performance_rank, cudaDevP2PAttrPerformanceRank, src, dst));
    }
    const auto start = std::chrono::steady_clock::now();
    for (int layer = 0; layer < from.config().layers; ++layer)
        for (std::size_t i = 0; i < from_blocks.size(); ++i) {
            // the same block's K and V (and scales) on each side: different ids, the same layout
            const KvBlockSpan s = from.cache().block_span(layer, from_blocks[i]);
            const KvBlockSpan d = to.cache().block_span(layer, to_blocks[i]);
            PD_CHECK_CUDA(cudaMemcpyPeer(d.k, dst, s.k, src, s.bytes));
            PD_CHECK_CUDA(cudaMemcpyPeer(d.v, dst, s.v, src, s.bytes));
            stats.bytes += 2.0 * double(s.bytes);
            stats.copies += 2;
            if (s.scale_bytes > 0) {  // an 8-bit cache: each row's scale travels with its codes
                PD_CHECK_CUDA(cudaMemcpyPeer(d.k_scales, dst, s.k_scales, src, s.scale_bytes));
                PD_CHECK_CUDA(cudaMemcpyPeer(d.v_scales, dst, s.v_scales, src, s.scale_bytes));
                stats.bytes += 2.0 * double(s.scale_bytes);
                stats.copies += 2;
            }
        }
    // the copies are asynchronous to the host: the transfer ends when the receiver has them
    PD_CHECK_CUDA(cudaSetDevice(dst));
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
}
// [kv_transfer_device]

}  // namespace pd::model
