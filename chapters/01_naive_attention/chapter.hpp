// Chapter 01: what the lesson (main.cu) and its further studies (studies.cu) share.
#pragma once

#include "pd/bench.hpp"

#include "attention/attention.hpp"

#include <cstdint>
#include <vector>

namespace ch01 {

namespace att = pd::kernels::attention;

/// One problem: Q, K, V (seeded, uniform in [-1, 1)) on the device, O, the score-matrix
/// workspace, and the reference.
struct Problem {
    att::Shape s;
    std::vector<float> q, k, v;
    pd::DeviceBuffer<float> dq, dk, dv, out, work;
    pd::Expected expected;
};

// main.cu
/// The problem of shape @p s, its inputs drawn from @p seed's stream @p stream; the reference of
/// every row when @p all_rows, else of sampled rows when the problem is large.
Problem make_problem(const att::Shape& s, std::uint64_t seed, std::uint64_t stream, bool all_rows);
/// The score matrix's bytes.
double score_bytes(const att::Shape& s);
/// What a problem holds on the device.
double problem_bytes(const att::Shape& s);
/// Every selected version on @p p, validated then timed; @p point goes into each row.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const nlohmann::json& point);

// studies.cu
/// Each kernel of every timed version on its own, printed and returned as JSON.
nlohmann::json time_per_kernel(pd::Bench& bench, Problem& p, const std::vector<pd::Row>& rows);
/// --sweep: every version over S = Sq = Sk at @p shape's B, H and d.
std::vector<pd::Row> sweep_versions(pd::Bench& bench, const att::Shape& shape);

}  // namespace ch01
