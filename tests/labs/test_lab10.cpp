// Lab 10: the ring all-reduce (ring_all_reduce, in <lab tree>/10_tensor_parallel/ring_allreduce.cpp)
// on a ring of host threads: each rank's RingLinks exchange through mailboxes between barriers,
// so every rank must take the same steps. Checked: every rank ends with the exact sum (inputs
// that are multiples of 1/4, so any order of the additions gives the same bits) for 1 to 8
// ranks and counts they do not divide, fewer elements than ranks included; each rank takes
// 2 (n - 1) steps, n - 1 adds and n - 1 stores, and the ring sends 2 (n - 1) x count elements
// in all; each chunk received is the size its step announced.
#include "pd/serving/ring_allreduce.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sv = pd::serving;

namespace {

constexpr const char* kWhere = "lab 10: ring_all_reduce in <lab tree>/10_tensor_parallel/ring_allreduce.cpp";

/// Element i of rank r's data: a multiple of 1/4 in [-3.5, 3.5].
float input(int r, std::size_t i) {
    return float(int((std::size_t(r) * 7 + i * 13) % 29) - 14) * 0.25f;
}

/// What one run of the ring did.
struct RingRun {
    std::vector<std::vector<float>> data;  // each rank's data afterwards
    std::vector<int> exchanges, accumulates, stores;
    std::vector<std::size_t> sent;  // elements each rank sent
    std::vector<std::string> errors;
};

/// n host threads, one per rank, each running ring_all_reduce on its data; the exchanges meet at
/// barriers (a rank that stops exchanging while others wait ends the run after 5 s, as an error).
RingRun run_ring(int n, std::size_t count) {
    RingRun run;
    const std::size_t N = static_cast<std::size_t>(n);
    run.data.resize(N);
    run.exchanges.assign(N, 0);
    run.accumulates.assign(N, 0);
    run.stores.assign(N, 0);
    run.sent.assign(N, 0);
    run.errors.assign(N, "");
    for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < count; ++i) run.data[std::size_t(r)].push_back(input(r, i));
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    long generation = 0;
    bool broken = false;
    std::vector<std::vector<float>> mailbox(N);
    const auto barrier = [&] {
        std::unique_lock<std::mutex> lock(m);
        const long g = generation;
        if (++arrived == n) {
            arrived = 0;
            ++generation;
            cv.notify_all();
            return;
        }
        if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return generation != g || broken; })) broken = true;
        cv.notify_all();
        if (broken)
            throw std::runtime_error(
                "a rank waited 5 s for the others' exchange: the ranks took different numbers "
                "of steps (each must take 2 (n - 1))");
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            const std::size_t R = std::size_t(r);
            std::vector<float>& data = run.data[R];
            std::vector<float> scratch(count + 1);
            sv::RingLinks links;
            links.rank = r;
            links.ranks = n;
            links.exchange = [&](sv::RingChunk send, std::size_t receive_count) {
                if (send.offset + send.count > count)
                    throw std::runtime_error("exchange: sends elements " + std::to_string(send.offset) + " ... " +
                                             std::to_string(send.offset + send.count) + " of " + std::to_string(count));
                ++run.exchanges[R];
                run.sent[R] += send.count;
                {
                    std::lock_guard<std::mutex> lock(m);
                    mailbox[(R + 1) % N].assign(data.begin() + std::ptrdiff_t(send.offset),
                                                data.begin() + std::ptrdiff_t(send.offset + send.count));
                }
                barrier();  // every rank has sent
                std::vector<float> got;
                {
                    std::lock_guard<std::mutex> lock(m);
                    got = mailbox[R];
                }
                if (got.size() != receive_count)
                    throw std::runtime_error("step " + std::to_string(run.exchanges[R]) + ": rank " +
                                             std::to_string((r + n - 1) % n) + " sent " + std::to_string(got.size()) +
                                             " elements, rank " + std::to_string(r) + " expected " +
                                             std::to_string(receive_count));
                std::copy(got.begin(), got.end(), scratch.begin());
                barrier();  // every rank has received: the mailboxes may be written again
            };
            links.accumulate = [&](sv::RingChunk into) {
                if (into.offset + into.count > count) throw std::runtime_error("accumulate past the data");
                ++run.accumulates[R];
                for (std::size_t i = 0; i < into.count; ++i) data[into.offset + i] += scratch[i];
            };
            links.store = [&](sv::RingChunk into) {
                if (into.offset + into.count > count) throw std::runtime_error("store past the data");
                ++run.stores[R];
                for (std::size_t i = 0; i < into.count; ++i) data[into.offset + i] = scratch[i];
            };
            try {
                sv::ring_all_reduce(count, links);
            } catch (const std::exception& e) {
                run.errors[R] = e.what();
                std::lock_guard<std::mutex> lock(m);
                broken = true;
                cv.notify_all();
            }
        });
    for (std::thread& t : threads) t.join();
    return run;
}

/// Checks every rank's data against the sum, and that no rank failed.
void check_sums(int n, std::size_t count) {
    INFO(kWhere);
    INFO(n << " ranks, " << count << " elements");
    const RingRun run = run_ring(n, count);
    for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        REQUIRE(run.errors[std::size_t(r)] == "");
        int wrong = 0;
        std::size_t first = 0;
        for (std::size_t i = 0; i < count; ++i) {
            float want = 0;
            for (int q = 0; q < n; ++q) want += input(q, i);
            if (run.data[std::size_t(r)][i] != want && wrong++ == 0) first = i;
        }
        INFO("first wrong element " << first << " (its chunk: the count cut into " << n << " chunks)");
        CHECK(wrong == 0);
    }
}

}  // namespace

TEST_CASE("lab10: every rank ends with the sum, for 1 to 8 ranks and counts they do not divide", "[lab10]") {
    for (int n : {1, 2, 3, 4, 5, 8})
        for (std::size_t count :
             {std::size_t(2), std::size_t(7), std::size_t(64), std::size_t(1000), std::size_t(4099)})
            check_sums(n, count);
}

TEST_CASE("lab10: fewer elements than ranks (some chunks empty) and one element", "[lab10]") {
    check_sums(8, 3);
    check_sums(4, 1);
    check_sums(3, 3);
}

TEST_CASE("lab10: each rank takes 2 (n - 1) steps and sends 2 (n - 1) / n of the data", "[lab10]") {
    INFO(kWhere);
    const std::size_t count = 4099;
    for (int n : {1, 2, 3, 4, 8}) {
        INFO(n << " ranks, " << count << " elements");
        const RingRun run = run_ring(n, count);
        std::size_t total = 0;
        for (int r = 0; r < n; ++r) {
            INFO("rank " << r);
            REQUIRE(run.errors[std::size_t(r)] == "");
            CHECK(run.exchanges[std::size_t(r)] == 2 * (n - 1));
            CHECK(run.accumulates[std::size_t(r)] == n - 1);
            CHECK(run.stores[std::size_t(r)] == n - 1);
            // n - 1 chunks in each phase, each at most ceil(count / n)
            CHECK(run.sent[std::size_t(r)] <= 2 * std::size_t(n - 1) * ((count + n - 1) / std::size_t(n)));
            total += run.sent[std::size_t(r)];
        }
        CHECK(total == 2 * std::size_t(n - 1) * count);  // every chunk travels n - 1 links in each phase
    }
}

TEST_CASE("lab10: a case the grader gives", "[.][lab10-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("case: " << c.text());
    check_sums(c.integer("ranks"), std::size_t(c.integer("count")));
}
