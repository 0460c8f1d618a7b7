/// @file tensor_parallel.hpp
/// @brief Chapter 10: the model's collectives on NCCL, timed, and the all-reduce benchmark that
/// nccl-tests defines (algbw, busbw), with its latency-bandwidth fit. Library
/// pd_collectives_<backend>: on GPUs it links NCCL (left out of the cuda build where NCCL is
/// missing); on the simulator NCCL's API is the simulator's own (sim/shadow/nccl.h), over
/// PD_SIM_DEVICES virtual devices.
///
/// Megatron-LM's split (Shoeybi et al., 2019), as pd::model::Model runs it with
/// ParallelOptions::ranks = N: Wq, Wk, Wv, Wgate and Wup column-parallel (each rank computes
/// its heads' and its FFN columns' outputs from the whole input), Wo and Wdown row-parallel (each
/// rank multiplies its part of the inputs, so each holds a partial sum of the whole output): one
/// all-reduce after attention and one after the MLP, per layer; the embedding and the LM head
/// split by vocabulary rows (an all-reduce of the looked-up rows, an all-gather of the logits).
#pragma once
#include "pd/model/model.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pd::model {

/// How an all-reduce runs: NCCL's ncclAllReduce, or lab 10's ring (serving::ring_all_reduce) on
/// ncclSend and ncclRecv, with the adds on the device.
enum class AllReduceAlgorithm { nccl, ring };
/// "nccl", "ring". @param a the algorithm
const char* to_string(AllReduceAlgorithm a);

/// NCCL's all-reduce and all-gather as the model's Collectives: one communicator per rank
/// (ncclCommInitAll over devices 0 ... N - 1), each rank calling from its own thread.
class NcclCollectives : public Collectives {
public:
    /// @param ranks N (at most the devices present)  @param timed time each call (see seconds())
    /// @param algorithm how the all-reduces run
    /// @throws std::runtime_error with NCCL's message when the communicators cannot be made
    NcclCollectives(int ranks, bool timed, AllReduceAlgorithm algorithm = AllReduceAlgorithm::nccl);
    ~NcclCollectives() override;
    NcclCollectives(const NcclCollectives&) = delete;
    NcclCollectives& operator=(const NcclCollectives&) = delete;
    int size() const override { return ranks_; }
    void all_reduce_sum(int rank, float* data, std::size_t count) override;
    /// Out of place: recv [count] = the sum over the ranks of send [count] (the benchmark's form).
    /// @param rank the caller  @param send [count]  @param recv [count]  @param count elements
    void all_reduce_sum(int rank, const float* send, float* recv, std::size_t count);
    void all_gather(int rank, const float* send, float* recv, std::size_t count) override;
    /// With timing: the seconds of the collectives since reset(). Each call waits for the rank's
    /// queued work before it starts and for its result after it; the last rank to arrive waits
    /// for no other rank, so the least of the ranks' times is the collective's own, and these are
    /// summed over the calls.
    double seconds() const;
    /// With timing: each call's seconds since reset(), the least over the ranks, in call order.
    std::vector<double> call_seconds() const;
    /// Forgets the times.
    void reset();

private:
    void record(int rank, double seconds);
    void ring(int rank, float* data, std::size_t count);
    int ranks_;
    bool timed_;
    AllReduceAlgorithm algorithm_;
    std::vector<float*> scratch_;             // the ring's receive buffer of each rank, on its device
    std::vector<std::size_t> scratch_count_;  // its elements
    std::vector<void*> comms_;                // ncclComm_t, by rank
    std::vector<std::vector<double>> times_;  // by rank, by call since reset()
};

/// Rank count N and timing: a shared NcclCollectives for ParallelOptions::collectives.
/// @param ranks N  @param timed whether it times its calls  @param algorithm how the all-reduces run
std::shared_ptr<NcclCollectives> nccl_collectives(int ranks, bool timed = false,
                                                  AllReduceAlgorithm algorithm = AllReduceAlgorithm::nccl);

/// One message size of the all-reduce benchmark.
struct AllReduceRow {
    double bytes = 0;      ///< per rank
    double seconds = 0;    ///< per call: the mean over the timed calls, the slowest rank's
    double algbw = 0;      ///< bytes / seconds (nccl-tests' algorithm bandwidth), bytes/s
    double busbw = 0;      ///< algbw x 2 (N - 1) / N (nccl-tests' bus bandwidth), bytes/s
    bool correct = false;  ///< every rank's result, after the timed calls, is the sum of the inputs
};

/// nccl-tests' all-reduce benchmark: for each size, @p warmup untimed then @p iters timed
/// out-of-place fp32 sum all-reduces on @p ranks ranks (one host thread each), each rank timing
/// its loop between device synchronizations; then every rank's result is checked against the
/// sum of the inputs (multiples of 1/4, so the sum is exact in any order).
/// @param ranks N (2 ... the devices present)  @param sizes bytes per rank (multiples of 4)
/// @param warmup untimed calls  @param iters timed calls  @param algorithm NCCL's or lab 10's ring
/// @throws std::invalid_argument on a size or count out of range, std::runtime_error from NCCL
std::vector<AllReduceRow> all_reduce_bench(int ranks, const std::vector<double>& sizes, int warmup, int iters,
                                           AllReduceAlgorithm algorithm = AllReduceAlgorithm::nccl);

/// The latency-bandwidth (alpha-beta) model of a collective: seconds = alpha + bytes / beta.
struct AlphaBeta {
    double alpha_s = 0;           ///< latency of one call
    double beta_bytes_per_s = 0;  ///< the bandwidth the bytes move at
};
/// Least squares of seconds against bytes over @p rows. @param rows a benchmark's rows (>= 2 sizes)
AlphaBeta fit_alpha_beta(const std::vector<AllReduceRow>& rows);

}  // namespace pd::model
