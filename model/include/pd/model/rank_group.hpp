/// @file rank_group.hpp
/// @brief Chapter 10: the model's other ranks, each on a host thread of its own (the model's
/// private part, for model.cu and ranks.cpp).
#pragma once

#include "pd/model/model.hpp"

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pd::model {

/// Rank 0's companions: ranks 1 ... N - 1, each built, run and destroyed on its own thread, where
/// its device is current.
struct Model::RankGroup {
    /// One rank: its thread, the job handed to it, and its Model (built on the thread).
    struct Rank {
        std::thread thread;            ///< runs the rank's jobs, with its device current
        std::mutex m;                  ///< guards job, stop and error
        std::condition_variable cv;    ///< signals a new job, its end, or stop
        std::function<void()> job;     ///< the next call to run (empty: none)
        bool stop = false;             ///< the thread ends
        std::exception_ptr error;      ///< what the last job threw, if anything
        std::unique_ptr<Model> model;  ///< the rank's part of the model
    };
    std::vector<std::unique_ptr<Rank>> ranks;  ///< ranks 1 ... N - 1

    /// Starts ranks 1 ... @p n - 1, rank r's thread on device r. @param n the ranks, rank 0 included
    explicit RankGroup(int n) {
        for (int r = 1; r < n; ++r) {
            ranks.push_back(std::make_unique<Rank>());
            Rank* k = ranks.back().get();
            k->thread = std::thread([k, r] {
                PD_CHECK_CUDA(cudaSetDevice(r));
                std::unique_lock<std::mutex> lock(k->m);
                for (;;) {
                    k->cv.wait(lock, [k] { return k->job || k->stop; });
                    if (!k->job) return;
                    try {
                        k->job();
                    } catch (...) {
                        k->error = std::current_exception();
                    }
                    k->job = nullptr;
                    k->cv.notify_all();
                }
            });
        }
    }
    /// Stops every rank's thread and joins it.
    ~RankGroup() {
        for (auto& k : ranks) {
            {
                std::lock_guard<std::mutex> lock(k->m);
                k->stop = true;
            }
            k->cv.notify_all();
            k->thread.join();
        }
    }
    /// Hands @p job to rank @p i + 1's thread. @param i the rank's index in ranks  @param job the call
    void post(std::size_t i, std::function<void()> job) {
        Rank& k = *ranks[i];
        std::lock_guard<std::mutex> lock(k.m);
        k.error = nullptr;
        k.job = std::move(job);
        k.cv.notify_all();
    }
    /// Waits for the job of ranks[@p i]. @param i the rank's index @return its exception, if any
    std::exception_ptr wait(std::size_t i) {
        Rank& k = *ranks[i];
        std::unique_lock<std::mutex> lock(k.m);
        k.cv.wait(lock, [&k] { return !k.job; });
        return k.error;
    }
};

}  // namespace pd::model
