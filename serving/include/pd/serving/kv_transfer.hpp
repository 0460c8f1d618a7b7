/// @file kv_transfer.hpp
/// @brief Chapter 11's lab: scheduling the KV cache transfers of a disaggregated setup on its
/// links. Host C++ with no backend, built into pd_serving from the lab tree
/// (11_disaggregation/kv_transfer.cpp of solutions/ or exercises/), so chapter 11's cost model
/// (pd::serving::serve()) runs the learner's schedule.
///
/// When a request's prompt is done on a prefill GPU, its K and V (bytes per token x prompt
/// tokens) must reach the decode GPU before its first decode step. A link carries one transfer
/// at a time, taking latency_s + bytes / bytes_per_s. Two ways to use it:
///  - after the prefill: the transfer is ready when the prefill ends;
///  - layer by layer (Splitwise, DistServe): layer l's K and V are done at
///    prefill_start + (l + 1) / L x (prefill_end - prefill_start), and each layer's part
///    (bytes / L) leaves as soon as it is done and the link is free, so most of the transfer
///    hides under the prefill.
#pragma once

#include <vector>

namespace pd::serving {

/// One link's speed.
struct LinkModel {
    double bytes_per_s = 1;  ///< bandwidth in one direction (> 0)
    double latency_s = 0;    ///< fixed cost of one transfer (>= 0)
};

/// One request's KV cache to move.
struct TransferJob {
    int link = 0;                ///< the link it takes (its prefill instance's), 0 ... links - 1
    double prefill_start_s = 0;  ///< when the step that finished its prompt began
    double prefill_end_s = 0;    ///< when that step ended: all its K and V are done (>= prefill_start_s)
    double bytes = 0;            ///< its K and V, every layer (>= 0)
    int layers = 1;              ///< L: the parts of a layer-by-layer transfer (>= 1)
};

/// When a transfer ran.
struct TransferTime {
    double start_s = 0;  ///< the link started on it (its latency begins)
    double end_s = 0;    ///< its last byte arrived
};

/// Lab 11: when each job's transfer runs. Each link takes its jobs one at a time, first come
/// first served by prefill_end_s (ties in the order of @p jobs), and is never idle while a job
/// it could send waits. With d = jobs[i].bytes / bytes_per_s and done_l =
/// prefill_start_s + (l + 1) / L x (prefill_end_s - prefill_start_s):
///  - @p layerwise false: start = max(prefill_end_s, the link's previous end),
///    end = start + latency_s + d;
///  - @p layerwise true: start = max(prefill_start_s, the link's previous end); after
///    start + latency_s, part l (d / L seconds) is sent once it is done and part l - 1 is
///    through: t = start + latency_s, then for l = 0 ... L - 1, t = max(t, done_l) + d / L;
///    end = t.
/// @param jobs the transfers  @param link every link's speed  @param layerwise overlap with the prefill
/// @return one time per job, in the order of @p jobs
/// @throws std::invalid_argument naming the job and the field out of range (a negative link,
///         bytes < 0, layers < 1, prefill_end_s < prefill_start_s) or the link
///         (bytes_per_s <= 0, latency_s < 0)
std::vector<TransferTime> schedule_transfers(const std::vector<TransferJob>& jobs, const LinkModel& link,
                                             bool layerwise);

}  // namespace pd::serving
