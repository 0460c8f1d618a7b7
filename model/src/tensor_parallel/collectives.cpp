/// @file collectives.cpp
/// @brief Chapter 10's collectives on NCCL (tensor_parallel.hpp): the model's all-reduce and
/// all-gather, timed, and the all-reduce benchmark with its alpha-beta fit.
#include "pd/model/tensor_parallel.hpp"

#include "layers/layers.hpp"
#include "pd/cuda_check.hpp"
#include "pd/serving/ring_allreduce.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

namespace pd::model {

namespace {

/// Throws std::runtime_error naming the call and NCCL's message when @p r is not ncclSuccess.
void nccl_check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess)
        throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) +
                                 ")");
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ncclComm_t comm_of(void* c) {
    return static_cast<ncclComm_t>(c);
}

}  // namespace

const char* to_string(AllReduceAlgorithm a) {
    return a == AllReduceAlgorithm::ring ? "ring" : "nccl";
}

NcclCollectives::NcclCollectives(int ranks, bool timed, AllReduceAlgorithm algorithm)
    : ranks_(ranks), timed_(timed), algorithm_(algorithm) {
    int devices = 0;
    PD_CHECK_CUDA(cudaGetDeviceCount(&devices));
    if (ranks < 1 || ranks > devices)
        throw std::invalid_argument("NcclCollectives: " + std::to_string(ranks) + " ranks, must be in 1 .. the " +
                                    std::to_string(devices) + " devices present");
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks));
    nccl_check(ncclCommInitAll(comms.data(), ranks, nullptr), "ncclCommInitAll");
    comms_.assign(comms.begin(), comms.end());
    times_.resize(std::size_t(ranks));
    scratch_.assign(std::size_t(ranks), nullptr);
    scratch_count_.assign(std::size_t(ranks), 0);
}

NcclCollectives::~NcclCollectives() {
    for (void* c : comms_) ncclCommDestroy(comm_of(c));
    for (float* p : scratch_) cudaFree(p);
}

// [ring_links]
/// Lab 10's ring on this rank: its RingLinks bound to NCCL's send and receive (one group per
/// step, so that every rank's send meets its neighbour's receive) and to the device's add and copy.
void NcclCollectives::ring(int rank, float* data, std::size_t count) {
    const std::size_t r = std::size_t(rank), chunk = count / std::size_t(ranks_) + 1;
    if (scratch_count_[r] < chunk) {  // one chunk at most, on this rank's device (its thread's)
        PD_CHECK_CUDA(cudaFree(scratch_[r]));
        PD_CHECK_CUDA(cudaMalloc(&scratch_[r], chunk * sizeof(float)));
        scratch_count_[r] = chunk;
    }
    float* scratch = scratch_[r];
    const ncclComm_t comm = comm_of(comms_[r]);
    serving::RingLinks links;
    links.rank = rank;
    links.ranks = ranks_;
    links.exchange = [&](serving::RingChunk send, std::size_t receive_count) {
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        if (send.count > 0)
            nccl_check(ncclSend(data + send.offset, send.count, ncclFloat32, (rank + 1) % ranks_, comm, nullptr),
                       "ncclSend");
        if (receive_count > 0)
            nccl_check(ncclRecv(scratch, receive_count, ncclFloat32, (rank + ranks_ - 1) % ranks_, comm, nullptr),
                       "ncclRecv");
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    };
    links.accumulate = [&](serving::RingChunk into) {
        if (into.count > 0) kernels::layers::add(data + into.offset, scratch, into.count);
    };
    links.store = [&](serving::RingChunk into) {
        if (into.count > 0)
            PD_CHECK_CUDA(
                cudaMemcpyAsync(data + into.offset, scratch, into.count * sizeof(float), cudaMemcpyDeviceToDevice));
    };
    serving::ring_all_reduce(count, links);
}
// [ring_links]

void NcclCollectives::record(int rank, double seconds) {
    times_[std::size_t(rank)].push_back(seconds);
}

void NcclCollectives::all_reduce_sum(int rank, float* data, std::size_t count) {
    const double t0 = timed_ ? (PD_CHECK_CUDA(cudaDeviceSynchronize()), now_s()) : 0;
    if (algorithm_ == AllReduceAlgorithm::ring)
        ring(rank, data, count);
    else
        nccl_check(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_of(comms_[std::size_t(rank)]), nullptr),
                   "ncclAllReduce");
    if (timed_) {
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        record(rank, now_s() - t0);
    }
}

void NcclCollectives::all_reduce_sum(int rank, const float* send, float* recv, std::size_t count) {
    if (algorithm_ == AllReduceAlgorithm::ring) {  // the ring works in place, on recv
        PD_CHECK_CUDA(cudaMemcpyAsync(recv, send, count * sizeof(float), cudaMemcpyDeviceToDevice));
        return ring(rank, recv, count);
    }
    nccl_check(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm_of(comms_[std::size_t(rank)]), nullptr),
               "ncclAllReduce");
}

void NcclCollectives::all_gather(int rank, const float* send, float* recv, std::size_t count) {
    const double t0 = timed_ ? (PD_CHECK_CUDA(cudaDeviceSynchronize()), now_s()) : 0;
    nccl_check(ncclAllGather(send, recv, count, ncclFloat32, comm_of(comms_[std::size_t(rank)]), nullptr),
               "ncclAllGather");
    if (timed_) {
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        record(rank, now_s() - t0);
    }
}

std::vector<double> NcclCollectives::call_seconds() const {
    std::size_t calls = times_.front().size();
    for (const std::vector<double>& t : times_) calls = std::min(calls, t.size());
    std::vector<double> least(calls);
    for (std::size_t k = 0; k < calls; ++k) {
        least[k] = times_.front()[k];
        for (const std::vector<double>& t : times_) least[k] = std::min(least[k], t[k]);
    }
    return least;
}

double NcclCollectives::seconds() const {
    double total = 0;
    for (double t : call_seconds()) total += t;
    return total;
}

void NcclCollectives::reset() {
    for (std::vector<double>& t : times_) t.clear();
}

std::shared_ptr<NcclCollectives> nccl_collectives(int ranks, bool timed, AllReduceAlgorithm algorithm) {
    return std::make_shared<NcclCollectives>(ranks, timed, algorithm);
}

std::vector<AllReduceRow> all_reduce_bench(int ranks, const std::vector<double>& sizes, int warmup, int iters,
                                           AllReduceAlgorithm algorithm) {
    if (ranks < 2) throw std::invalid_argument("all_reduce_bench: ranks = " + std::to_string(ranks) + " must be >= 2");
    if (iters < 1 || warmup < 0)
        throw std::invalid_argument("all_reduce_bench: iters = " + std::to_string(iters) +
                                    " must be >= 1, warmup >= 0");
    for (double b : sizes)
        if (!(b >= 4) || std::fmod(b, 4.0) != 0)
            throw std::invalid_argument("all_reduce_bench: a size of " + std::to_string(b) +
                                        " bytes is not a positive multiple of 4 (fp32 elements)");
    NcclCollectives comms(ranks, false, algorithm);
    std::vector<AllReduceRow> rows;
    for (double bytes : sizes) {
        const std::size_t count = std::size_t(bytes / 4);
        std::vector<double> seconds(static_cast<std::size_t>(ranks), 0.0);
        std::vector<char> correct(static_cast<std::size_t>(ranks), 0);
        std::vector<std::thread> threads;
        std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
        // rank r's element i: (r + 1) x a multiple of 1/4, so the sum is exact in any order
        const auto input = [](int r, std::size_t i) { return float(r + 1) * float(int(i % 13) - 6) * 0.25f; };
        for (int r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    PD_CHECK_CUDA(cudaSetDevice(r));
                    std::vector<float> host(count);
                    for (std::size_t i = 0; i < count; ++i) host[i] = input(r, i);
                    float *send = nullptr, *recv = nullptr;
                    PD_CHECK_CUDA(cudaMalloc(&send, count * sizeof(float)));
                    PD_CHECK_CUDA(cudaMalloc(&recv, count * sizeof(float)));
                    PD_CHECK_CUDA(cudaMemcpy(send, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
                    PD_CHECK_CUDA(cudaMemset(recv, 0xFF, count * sizeof(float)));  // NaN until written
                    for (int i = 0; i < warmup; ++i) comms.all_reduce_sum(r, send, recv, count);
                    PD_CHECK_CUDA(cudaDeviceSynchronize());
                    const double t0 = now_s();
                    for (int i = 0; i < iters; ++i) comms.all_reduce_sum(r, send, recv, count);
                    PD_CHECK_CUDA(cudaDeviceSynchronize());
                    seconds[std::size_t(r)] = (now_s() - t0) / iters;
                    PD_CHECK_CUDA(cudaMemcpy(host.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost));
                    const float ranks_sum = float(ranks) * float(ranks + 1) / 2;  // sum of r + 1
                    bool ok = true;
                    for (std::size_t i = 0; i < count && ok; ++i) ok = host[i] == input(0, i) * ranks_sum;
                    correct[std::size_t(r)] = ok;
                    PD_CHECK_CUDA(cudaFree(send));
                    PD_CHECK_CUDA(cudaFree(recv));
                } catch (...) {
                    errors[std::size_t(r)] = std::current_exception();
                }
            });
        for (std::thread& t : threads) t.join();
        for (const std::exception_ptr& e : errors)
            if (e) std::rethrow_exception(e);
        AllReduceRow row;
        row.bytes = bytes;
        row.seconds = *std::max_element(seconds.begin(), seconds.end());
        row.algbw = bytes / row.seconds;
        row.busbw = row.algbw * 2.0 * (ranks - 1) / ranks;
        row.correct = std::all_of(correct.begin(), correct.end(), [](char c) { return c != 0; });
        rows.push_back(row);
    }
    return rows;
}

AlphaBeta fit_alpha_beta(const std::vector<AllReduceRow>& rows) {
    if (rows.size() < 2) throw std::invalid_argument("fit_alpha_beta: needs 2 sizes or more");
    // weighted least squares, each row weighted by 1 / seconds^2: the relative errors count alike,
    // so the small messages fix the latency and the large ones the bandwidth
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const AllReduceRow& r : rows) {
        const double w = 1.0 / (r.seconds * r.seconds);
        sw += w;
        sx += w * r.bytes;
        sy += w * r.seconds;
        sxx += w * r.bytes * r.bytes;
        sxy += w * r.bytes * r.seconds;
    }
    const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);  // seconds per byte
    AlphaBeta f;
    f.alpha_s = (sy - slope * sx) / sw;
    f.beta_bytes_per_s = slope > 0 ? 1.0 / slope : 0;
    return f;
}

}  // namespace pd::model
