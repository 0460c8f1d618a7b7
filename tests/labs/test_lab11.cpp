// Lab 11: the KV cache transfers of a disaggregated setup (schedule_transfers, in
// <lab tree>/11_disaggregation/kv_transfer.cpp). Hand-worked schedules, each time a multiple of
// 1/4 s: after the prefill on one link (first come first served by the end of the prefill, ties
// in the jobs' order, a link idle only while nothing waits) and on several links (a queue each);
// layer by layer on a link that keeps up with the prefill (the transfer ends d / L after it) and
// on one that does not (latency + d after it starts). Then seeded random jobs (one job, equal
// prefill ends, zero bytes, L = 1, many links) against the closed forms: after the prefill,
// end = max(prefill_end_s, the link's previous end) + latency_s + d; layer by layer,
// end = max(start + latency_s + d, max over l of done_l + (L - l) d / L). Last, the fields out of
// range (std::invalid_argument naming the field) and the values at their bounds.
#include "pd/rng.hpp"
#include "pd/serving/kv_transfer.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sv = pd::serving;

namespace {

constexpr const char* kWhere = "lab 11: schedule_transfers in <lab tree>/11_disaggregation/kv_transfer.cpp";

/// One job as text, for a failure message.
std::string job_text(const std::vector<sv::TransferJob>& jobs, std::size_t i) {
    const sv::TransferJob& j = jobs[i];
    std::ostringstream os;
    os << "job " << i << " {link " << j.link << ", prefill_start_s " << j.prefill_start_s << ", prefill_end_s "
       << j.prefill_end_s << ", bytes " << j.bytes << ", layers " << j.layers << "}";
    return os.str();
}

/// Runs schedule_transfers and compares each job's time with @p want (within a relative 1e-9:
/// the order of the additions may differ).
void check_times(const std::vector<sv::TransferJob>& jobs, const sv::LinkModel& link, bool layerwise,
                 const std::vector<sv::TransferTime>& want) {
    INFO(kWhere);
    INFO((layerwise ? "layer by layer" : "after the prefill")
         << ", " << jobs.size() << " jobs; link {bytes_per_s " << link.bytes_per_s << ", latency_s " << link.latency_s
         << "}");
    const std::vector<sv::TransferTime> got = sv::schedule_transfers(jobs, link, layerwise);
    REQUIRE(got.size() == jobs.size());
    int wrong = 0;
    std::size_t first = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        const bool same = got[i].start_s == Approx(want[i].start_s).epsilon(1e-9).margin(1e-12) &&
                          got[i].end_s == Approx(want[i].end_s).epsilon(1e-9).margin(1e-12);
        if (!same && wrong++ == 0) first = i;
    }
    if (wrong == 0) return;
    INFO(wrong << " of " << jobs.size() << " jobs wrong; the first: " << job_text(jobs, first));
    INFO("got {start_s " << got[first].start_s << ", end_s " << got[first].end_s << "}, expected {start_s "
                         << want[first].start_s << ", end_s " << want[first].end_s << "}");
    CHECK(wrong == 0);
}

/// The schedule by the closed forms (not the step-by-step rule of the header, which the lab
/// writes): the jobs by prefill_end_s, ties in their order, each link a queue; after the prefill,
/// start = max(prefill_end_s, free), end = start + latency_s + d; layer by layer,
/// start = max(prefill_start_s, free), end = max(start + latency_s + d, max over l of
/// done_l + (L - l) d / L): part l cannot leave before its layer is done, and the L - l parts
/// from it on take (L - l) d / L after that.
std::vector<sv::TransferTime> closed_form(const std::vector<sv::TransferJob>& jobs, const sv::LinkModel& link,
                                          bool layerwise) {
    std::vector<std::size_t> order(jobs.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return jobs[a].prefill_end_s < jobs[b].prefill_end_s; });
    std::vector<double> free;
    std::vector<sv::TransferTime> times(jobs.size());
    for (const std::size_t i : order) {
        const sv::TransferJob& j = jobs[i];
        if (free.size() <= std::size_t(j.link)) free.resize(std::size_t(j.link) + 1, 0.0);
        double& f = free[std::size_t(j.link)];
        const double d = j.bytes / link.bytes_per_s;
        sv::TransferTime& t = times[i];
        if (!layerwise) {
            t.start_s = std::max(j.prefill_end_s, f);
            t.end_s = t.start_s + link.latency_s + d;
        } else {
            const int L = j.layers;
            t.start_s = std::max(j.prefill_start_s, f);
            t.end_s = t.start_s + link.latency_s + d;
            for (int l = 0; l < L; ++l) {
                const double done = j.prefill_start_s + (j.prefill_end_s - j.prefill_start_s) * (l + 1) / L;
                t.end_s = std::max(t.end_s, done + (L - l) * d / L);
            }
        }
        f = t.end_s;
    }
    return times;
}

/// The jobs of a random case.
struct Shape {
    int links = 1;
    int jobs = 1;
    int layers = 1;            ///< every job's L, or the largest when vary_layers
    bool vary_layers = false;  ///< each job's L drawn from 1 ... layers
    bool ties = false;         ///< prefill ends on a 1 ms grid: many equal ones
    bool same_end = false;     ///< every prefill ends at 4 ms
};

/// Seeded jobs of @p s on a link of 1 GB/s: prompts of 0 to 4 MB (about one in six of 0 bytes:
/// nothing but the latency to send) whose prefill takes 0 to 8 ms, starting 1.5 ms apart on
/// each link on average, about the time a transfer takes (queues, and idle gaps between them).
std::vector<sv::TransferJob> random_jobs(const Shape& s, std::uint64_t seed) {
    pd::Rng rng(seed);
    const int span_us = std::max(1, s.jobs * 1500 / s.links);
    std::vector<sv::TransferJob> jobs(static_cast<std::size_t>(s.jobs));
    for (sv::TransferJob& j : jobs) {
        j.link = rng.integer(0, s.links - 1);
        j.layers = s.vary_layers ? rng.integer(1, s.layers) : s.layers;
        j.bytes = rng.integer(0, 5) == 0 ? 0.0 : double(rng.integer(1, 4'000'000));
        if (s.same_end) {
            j.prefill_end_s = 4e-3;
            j.prefill_start_s = 4e-3 - rng.integer(0, 4000) * 1e-6;
        } else if (s.ties) {
            j.prefill_start_s = rng.integer(0, std::max(1, span_us / 1000)) * 1e-3;
            j.prefill_end_s = j.prefill_start_s + rng.integer(0, 8) * 1e-3;
        } else {
            j.prefill_start_s = rng.integer(0, span_us) * 1e-6;
            j.prefill_end_s = j.prefill_start_s + rng.integer(0, 8000) * 1e-6;
        }
    }
    return jobs;
}

}  // namespace

TEST_CASE("lab11: after the prefill, one link: first come first served by the end of the prefill", "[lab11]") {
    // 100 B/s, 0.5 s a transfer: job 1 first (its prefill ends first), then jobs 0 and 2 (a tie:
    // their order), each waiting for the one before; job 3 after the link was idle.
    const sv::LinkModel link{100.0, 0.5};
    const std::vector<sv::TransferJob> jobs = {
        {0, 0.0, 4.0, 200.0, 1},   // d = 2
        {0, 0.0, 1.0, 100.0, 1},   // d = 1
        {0, 1.0, 4.0, 50.0, 1},    // d = 0.5
        {0, 10.0, 20.0, 300.0, 1}  // d = 3
    };
    check_times(jobs, link, false, {{4.0, 6.5}, {1.0, 2.5}, {6.5, 7.5}, {20.0, 23.5}});
    // the same jobs given in another order: the same schedule, job by job
    const std::vector<sv::TransferJob> shuffled = {jobs[3], jobs[2], jobs[1], jobs[0]};
    check_times(shuffled, link, false, {{20.0, 23.5}, {4.0, 5.0}, {1.0, 2.5}, {5.0, 7.5}});
}

TEST_CASE("lab11: after the prefill, several links: each link a queue of its own", "[lab11]") {
    // 1000 B/s, 0.25 s a transfer; links 0 and 2 (link 1 takes no job). Link 0: job 1, then 3,
    // then 4 (0 bytes: the latency only); link 2: job 2, then 0.
    const sv::LinkModel link{1000.0, 0.25};
    const std::vector<sv::TransferJob> jobs = {
        {2, 0.0, 2.0, 1000.0, 1},  // d = 1
        {0, 0.0, 1.0, 3000.0, 1},  // d = 3
        {2, 0.0, 1.5, 2000.0, 1},  // d = 2
        {0, 1.0, 2.0, 500.0, 1},   // d = 0.5
        {0, 2.0, 3.0, 0.0, 1}      // d = 0
    };
    check_times(jobs, link, false, {{3.75, 5.0}, {1.0, 4.25}, {1.5, 3.75}, {4.25, 5.0}, {5.0, 5.25}});
}

TEST_CASE("lab11: layer by layer, a link that keeps up: the transfer ends d / L after the prefill", "[lab11]") {
    // 1000 B/s, 0.25 s a transfer. Job 0: L = 4 layers done at 2, 4, 6, 8 s, 1000 bytes (d = 1,
    // 0.25 s a part): each part leaves when its layer is done, the last at 8, through at 8.25.
    // Job 1 (prefill from 4 to 12 s, L = 2, d = 2) waits for job 0 (start 8.25), part 0 through
    // at 9.5, part 1 (its layer done at 12) at 13.
    const sv::LinkModel link{1000.0, 0.25};
    const std::vector<sv::TransferJob> jobs = {{0, 0.0, 8.0, 1000.0, 4}, {0, 4.0, 12.0, 2000.0, 2}};
    check_times(jobs, link, true, {{0.0, 8.25}, {8.25, 13.0}});
    // after the prefill instead: 8 + 0.25 + 1 and max(12, 9.25) + 0.25 + 2
    check_times(jobs, link, false, {{8.0, 9.25}, {12.0, 14.25}});
}

TEST_CASE("lab11: layer by layer, a slow link: latency + d after the start, or later when a layer is done late",
          "[lab11]") {
    // 100 B/s, 0.5 s a transfer. Job 0: L = 4 layers done at 0.5, 1, 1.5, 2 s, 800 bytes (d = 8,
    // 2 s a part): every part is done before the link can take it, so 0 + 0.5 + 8 = 8.5 (after
    // the prefill: 10.5). Job 1 (L = 1, d = 1) waits for it: 8.5 + 0.5 + 1.
    const sv::LinkModel link{100.0, 0.5};
    const std::vector<sv::TransferJob> jobs = {{0, 0.0, 2.0, 800.0, 4}, {0, 1.0, 3.0, 100.0, 1}};
    check_times(jobs, link, true, {{0.0, 8.5}, {8.5, 10.0}});
    // in between: L = 2 (layers done at 4 and 8 s), d = 10: part 0 from 4 (its layer done) to 9,
    // part 1 from 9 to 14: neither latency + d (10.5) nor the prefill's end + d / L (13), but
    // layer 0's end + d
    const std::vector<sv::TransferJob> between = {{0, 0.0, 8.0, 1000.0, 2}};
    check_times(between, link, true, {{0.0, 14.0}});
}

TEST_CASE("lab11: random jobs against the closed forms (one job, equal prefill ends, zero bytes, L = 1, many links)",
          "[lab11]") {
    struct Case {
        const char* what;
        Shape shape;
        double latency_s;
    };
    const std::vector<Case> cases = {
        {"one job", {1, 1, 8, false, false, false}, 20e-6},
        {"one job, L = 1, no latency", {1, 1, 1, false, false, false}, 0.0},
        {"one link, prefill ends on a 1 ms grid", {1, 12, 32, false, true, false}, 5e-6},
        {"every prefill ends at 4 ms", {3, 30, 16, false, false, true}, 5e-6},
        {"L = 1", {2, 30, 1, false, false, false}, 20e-6},
        {"layers 1 to 32 per job", {3, 40, 32, true, false, false}, 2e-6},
        {"16 links", {16, 100, 80, false, false, false}, 20e-6},
        {"200 jobs on 4 links, ties, no latency", {4, 200, 80, true, true, false}, 0.0},
    };
    std::uint64_t seed = 11;
    for (const Case& c : cases)
        for (const bool layerwise : {false, true}) {
            INFO(c.what << " (seed " << seed << ")");
            const std::vector<sv::TransferJob> jobs = random_jobs(c.shape, seed++);
            const sv::LinkModel link{1e9, c.latency_s};
            check_times(jobs, link, layerwise, closed_form(jobs, link, layerwise));
        }
}

TEST_CASE("lab11: a field out of range throws std::invalid_argument naming it, and values at the bounds are scheduled",
          "[lab11]") {
    INFO(kWhere);
    using Catch::Matchers::Contains;
    const sv::TransferJob good{0, 1.0, 2.0, 100.0, 4};
    for (const bool layerwise : {false, true}) {
        INFO((layerwise ? "layer by layer" : "after the prefill"));
        const auto run = [&](const sv::TransferJob& bad, const sv::LinkModel& link) {
            sv::schedule_transfers({good, bad}, link, layerwise);
        };
        const sv::LinkModel link{100.0, 0.5};
        CHECK_THROWS_AS(run(good, {0.0, 0.5}), std::invalid_argument);
        CHECK_THROWS_WITH(run(good, {0.0, 0.5}), Contains("bytes_per_s"));
        CHECK_THROWS_WITH(run(good, {-100.0, 0.5}), Contains("bytes_per_s"));
        CHECK_THROWS_AS(run(good, {100.0, -0.5}), std::invalid_argument);
        CHECK_THROWS_WITH(run(good, {100.0, -0.5}), Contains("latency_s"));
        sv::TransferJob bad = good;
        bad.link = -1;
        CHECK_THROWS_AS(run(bad, link), std::invalid_argument);
        CHECK_THROWS_WITH(run(bad, link), Contains("job 1") && Contains("link"));
        bad = good;
        bad.bytes = -1.0;
        CHECK_THROWS_AS(run(bad, link), std::invalid_argument);
        CHECK_THROWS_WITH(run(bad, link), Contains("job 1") && Contains("bytes"));
        bad = good;
        bad.layers = 0;
        CHECK_THROWS_AS(run(bad, link), std::invalid_argument);
        CHECK_THROWS_WITH(run(bad, link), Contains("job 1") && Contains("layers"));
        bad = good;
        bad.prefill_end_s = 0.5;  // before its start
        CHECK_THROWS_AS(run(bad, link), std::invalid_argument);
        CHECK_THROWS_WITH(run(bad, link), Contains("job 1") && Contains("prefill_end_s"));
        // at the bounds: no latency, 0 bytes, a prefill of no time, L = 1, links 0 and 3 only:
        // each transfer takes no time, at the end of its prefill
        const std::vector<sv::TransferJob> bounds = {{3, 2.0, 2.0, 0.0, 1}, {0, 1.0, 1.5, 0.0, 1}};
        check_times(bounds, {100.0, 0.0}, layerwise, {{2.0, 2.0}, {layerwise ? 1.0 : 1.5, 1.5}});
    }
}

TEST_CASE("lab11: a case the grader gives", "[.][lab11-case]") {
    // links, jobs, layers (every job's L), layerwise, latency_us, seed. The first two jobs share
    // a link and the end of their prefill (a queue in every case of two jobs or more) and carry
    // bytes, so no case ends every transfer at 0.
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("case: " << c.text());
    Shape s;
    s.links = c.integer("links");
    s.jobs = c.integer("jobs");
    s.layers = c.integer("layers");
    REQUIRE(s.links >= 1);
    REQUIRE(s.jobs >= 1);
    REQUIRE(s.layers >= 1);
    const std::uint64_t seed = c.seed();
    s.ties = seed % 3 == 0;
    std::vector<sv::TransferJob> jobs = random_jobs(s, seed);
    jobs[0].bytes = std::max(jobs[0].bytes, 1000.0);
    if (jobs.size() >= 2) {
        jobs[1].link = jobs[0].link;
        jobs[1].prefill_end_s = jobs[0].prefill_end_s;
        jobs[1].prefill_start_s = std::min(jobs[1].prefill_start_s, jobs[1].prefill_end_s);
        jobs[1].bytes = std::max(jobs[1].bytes, 1000.0);
    }
    const sv::LinkModel link{1e9, c.integer("latency_us") * 1e-6};
    const bool layerwise = c.flag("layerwise", false);
    check_times(jobs, link, layerwise, closed_form(jobs, link, layerwise));
}
