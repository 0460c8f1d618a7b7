/// @file timer.hpp
/// @brief Timing with CUDA events: warm-up runs, then N timed runs, summarized by the median.
#pragma once

#include "pd/cuda_check.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace pd {

/// Summary of N timed runs, in milliseconds.
struct TimingStats {
    /// Median of the runs.
    double median_ms = 0;
    /// Fastest run.
    double min_ms = 0;
    /// Slowest run.
    double max_ms = 0;
    /// Number of timed runs.
    int runs = 0;
};

/// Summarizes a list of per-run times (median, min, max). @pre !times_ms.empty()
TimingStats summarize_times(std::vector<double> times_ms);

/// An owned CUDA event (RAII).
class CudaEvent {
public:
    CudaEvent() { PD_CHECK_CUDA(cudaEventCreate(&event_)); }
    ~CudaEvent() {
        if (event_ != nullptr) cudaEventDestroy(event_);
    }
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;
    /// Takes over @p o's event; @p o is left empty.
    CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
    CudaEvent& operator=(CudaEvent&&) = delete;

    /// Records the event on @p stream.
    void record(cudaStream_t stream = nullptr) { PD_CHECK_CUDA(cudaEventRecord(event_, stream)); }
    /// Milliseconds from @p start to this event; waits for this event to complete.
    float elapsed_since(const CudaEvent& start) const {
        PD_CHECK_CUDA(cudaEventSynchronize(event_));
        float ms = 0;
        PD_CHECK_CUDA(cudaEventElapsedTime(&ms, start.event_, event_));
        return ms;
    }

private:
    cudaEvent_t event_ = nullptr;
};

/// Times @p run (which enqueues device work on @p stream): @p warmup untimed runs, then
/// @p iters runs each bracketed by two events. Launch errors inside @p run must throw.
/// @pre iters >= 1, warmup >= 0
template <typename Fn>
TimingStats time_device(Fn&& run, int warmup, int iters, cudaStream_t stream = nullptr) {
    if (iters < 1) throw std::invalid_argument("time_device: iters must be >= 1");
    for (int i = 0; i < warmup; ++i) run();
    PD_CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> times;
    times.reserve(static_cast<std::size_t>(iters));
    CudaEvent start, stop;
    for (int i = 0; i < iters; ++i) {
        start.record(stream);
        run();
        stop.record(stream);
        times.push_back(stop.elapsed_since(start));
    }
    return summarize_times(std::move(times));
}

}  // namespace pd
