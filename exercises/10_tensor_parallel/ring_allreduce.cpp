/// @file ring_allreduce.cpp
/// @brief Lab 10: the ring all-reduce (pd/serving/ring_allreduce.hpp). Rank r of n cuts the data
/// into n chunks; in the reduce-scatter it passes partial sums around the ring, each step adding
/// the chunk it receives into its own, until it holds the whole sum of one chunk; in the
/// all-gather it passes the summed chunks around until every rank holds all of them. Each rank
/// sends 2 (n - 1) chunks: 2 (n - 1) / n of the data, whatever n is.
///
/// Host C++, built into pd_serving from the lab tree (as labs 05 and 09 are), so chapter 10's
/// model with `--allreduce ring`, its benchmark and the lab's tests run this code: on NCCL's send
/// and receive and the device's adds, or on host arrays.
#include "pd/serving/ring_allreduce.hpp"

#include <stdexcept>
#include <string>

namespace pd::serving {

// [ring_all_reduce]
void ring_all_reduce(std::size_t count, const RingLinks& links) {
    const int n = links.ranks, r = links.rank;
    if (n < 1 || r < 0 || r >= n)
        throw std::invalid_argument("ring_all_reduce: rank " + std::to_string(r) + " of " + std::to_string(n) +
                                    " ranks: needs ranks >= 1 and 0 <= rank < ranks");
    // chunk(i): chunk i mod n (i may be negative)
    const auto chunk = [&](int i) { return ring_chunk(count, n, ((i % n) + n) % n); };
    // 1. The reduce-scatter: after step s, rank r's chunk (r - s - 1) mod n holds the sum over
    // s + 2 ranks; after n - 1 steps its chunk (r + 1) mod n holds the sum over all of them.
    // TODO(student): 1. the reduce-scatter: for s = 0 ... n - 2, links.exchange(chunk(r - s), chunk(r - s - 1).count), then links.accumulate(chunk(r - s - 1)) (~4 lines)
    // 2. The all-gather: rank r sends its summed chunk (r + 1) mod n on, and each step passes on
    // the chunk it stored in the step before.
    // TODO(student): 2. the all-gather: for s = 0 ... n - 2, links.exchange(chunk(r + 1 - s), chunk(r - s).count), then links.store(chunk(r - s)) (~4 lines)
    (void)chunk;
}
// [ring_all_reduce]

}  // namespace pd::serving
