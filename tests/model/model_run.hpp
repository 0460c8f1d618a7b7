/// @file model_run.hpp
/// @brief Shared by the model tests that run a model on several devices (chapters 10 and 11):
/// what a pass left behind (its logits and greedy tokens), how far two passes' logits differ,
/// and the skip for a machine with too few devices.
#pragma once

#include "pd/buffer.hpp"
#include "pd/model/model.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace pd::test {

using pd::model::max_rel_diff;  ///< largest |a - b| / (1 + |b|) (1e30 where a is not finite)

/// The logits of @p m's last pass: rows x V (on the current device).
inline std::vector<float> logits_of(const pd::model::Model& m) {
    std::vector<float> all = m.logits().download();
    all.resize(std::size_t(m.logit_rows()) * std::size_t(m.config().vocab));
    return all;
}

/// The greedy tokens of @p m's last pass (on the current device).
inline std::vector<int> argmax_of(const pd::model::Model& m) {
    pd::DeviceBuffer<int> out(std::size_t(m.logit_rows()));
    m.argmax(out.data());
    return out.download();
}

/// Ends the test with exit code 77 (CTest: skipped, never passed) on a machine with fewer than
/// @p n devices: a GPU machine with one, or the simulator without PD_SIM_DEVICES.
inline void need_devices(int n) {
    int have = 0;
    if (cudaGetDeviceCount(&have) != cudaSuccess) have = 0;
    if (have >= n) return;
    std::fprintf(stderr, "SKIPPED: %d devices, this test needs %d\n", have, n);
    std::exit(77);
}

}  // namespace pd::test
