// Chapter 05's workloads: seeded gamma arrivals (mean gap and burstiness), length distributions
// and clamping, the CSV trace reader and its errors, the long-prompt scenario.
#include "pd/serving/workload.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using pd::serving::LengthDist;
using pd::serving::LengthSpec;
using pd::serving::Request;
using pd::serving::WorkloadSpec;

namespace {

/// Mean and sample standard deviation of @p v.
struct MeanSd {
    double mean = 0;
    double sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
    MeanSd r;
    r.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double ss = 0;
    for (double x : v) ss += (x - r.mean) * (x - r.mean);
    r.sd = std::sqrt(ss / double(v.size() - 1));
    return r;
}

/// The gaps between consecutive arrivals.
std::vector<double> gaps_of(const std::vector<Request>& w) {
    std::vector<double> g;
    for (std::size_t i = 1; i < w.size(); ++i) g.push_back(w[i].arrival_s - w[i - 1].arrival_s);
    return g;
}

std::vector<double> prompts_of(const std::vector<Request>& w) {
    std::vector<double> v;
    for (const Request& r : w) v.push_back(r.prompt_tokens);
    return v;
}

/// A file in a fresh temporary directory, removed with the object.
struct TempFile {
    std::filesystem::path dir;
    std::string path;
    explicit TempFile(const std::string& text) {
        dir = std::filesystem::temp_directory_path() /
              ("pd_test_workload_" + std::to_string(std::hash<std::string>{}(text)) + "_" +
               std::to_string(std::random_device{}()));  // unique across concurrent test runs
        std::filesystem::create_directories(dir);
        path = (dir / "trace.csv").string();
        std::ofstream(path, std::ios::binary) << text;
    }
    ~TempFile() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
};

/// The message of the std::invalid_argument that read_trace throws for @p f, or "" if none.
std::string trace_error(const TempFile& f) {
    try {
        pd::serving::read_trace(f.path);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("poisson_workload is fixed by its seed", "[workload]") {
    WorkloadSpec spec;
    spec.requests = 500;
    spec.rate = 4;
    spec.burstiness = 0.7;
    spec.prompt = {LengthDist::lognormal, 300, 0.8, 1, 4096};
    spec.output = {LengthDist::uniform, 100, 50, 1, 1000};
    spec.seed = 42;
    const auto a = pd::serving::poisson_workload(spec);
    const auto b = pd::serving::poisson_workload(spec);
    REQUIRE(a.size() == 500);
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("request " << i);
        CHECK(a[i].id == int(i));
        CHECK(a[i].arrival_s == b[i].arrival_s);  // bitwise: the same seed, the same numbers
        CHECK(a[i].prompt_tokens == b[i].prompt_tokens);
        CHECK(a[i].output_tokens == b[i].output_tokens);
    }
    CHECK(a.front().arrival_s == 0);  // request 0 is sent at once, as in vLLM's get_request
    CHECK(std::is_sorted(a.begin(), a.end(),
                         [](const Request& x, const Request& y) { return x.arrival_s < y.arrival_s; }));

    spec.seed = 43;
    const auto c = pd::serving::poisson_workload(spec);
    int same_arrival = 0, same_prompt = 0;
    for (std::size_t i = 1; i < a.size(); ++i) {
        same_arrival += a[i].arrival_s == c[i].arrival_s;
        same_prompt += a[i].prompt_tokens == c[i].prompt_tokens;
    }
    CHECK(same_arrival == 0);
    CHECK(same_prompt < 50);  // lognormal lengths of 1..4096 rarely coincide (about 1 in 400)

    // The arrivals come from their own stream: another length distribution leaves them as they were.
    spec.seed = 42;
    spec.prompt = {LengthDist::fixed, 10};
    const auto d = pd::serving::poisson_workload(spec);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(d[i].arrival_s == a[i].arrival_s);
}

TEST_CASE("poisson_workload gaps have mean 1/rate and CV 1/sqrt(burstiness)", "[workload]") {
    // The gaps are gamma(k, 1/(rate k)): mean 1/rate, CV 1/sqrt(k), excess kurtosis 6/k. Over
    // n = 19,999 gaps the sample mean has relative standard error CV/sqrt(n), and the sample SD
    // about sqrt((2 + 6/k) / n) / 2 (from Var(s^2) = sigma^4 (2 + 6/k) / n); the CV's error
    // combines both. Each check allows 5 standard errors: k = 0.5 (Marsaglia-Tsang's boost for
    // shape < 1), 1 (Poisson) and 4 exercise both branches of the sampler.
    for (const double k : {0.5, 1.0, 4.0}) {
        WorkloadSpec spec;
        spec.requests = 20000;
        spec.rate = 8;
        spec.burstiness = k;
        spec.seed = 7;
        const auto g = gaps_of(pd::serving::poisson_workload(spec));
        const double n = double(g.size());
        const MeanSd s = mean_sd(g);
        const double cv_expected = 1 / std::sqrt(k);
        const double se_mean = cv_expected / std::sqrt(n);
        const double se_sd = std::sqrt((2 + 6 / k) / n) / 2;
        const double se_cv = std::sqrt(se_mean * se_mean + se_sd * se_sd);
        INFO("burstiness " << k << ": mean gap " << s.mean << " s, CV " << s.sd / s.mean);
        CHECK(std::fabs(s.mean * spec.rate - 1) < 5 * se_mean);
        CHECK(std::fabs(s.sd / s.mean / cv_expected - 1) < 5 * se_cv);
        CHECK(*std::min_element(g.begin(), g.end()) >= 0);
    }
}

TEST_CASE("poisson_workload at rate 0 or infinity puts every arrival at t = 0", "[workload]") {
    for (const double rate : {0.0, std::numeric_limits<double>::infinity()}) {
        WorkloadSpec spec;
        spec.requests = 50;
        spec.rate = rate;
        spec.prompt = {LengthDist::uniform, 100, 50};
        const auto w = pd::serving::poisson_workload(spec);
        REQUIRE(w.size() == 50);
        for (const Request& r : w) CHECK(r.arrival_s == 0);
        CHECK(w.back().id == 49);
    }
    WorkloadSpec none;
    none.requests = 0;
    CHECK(pd::serving::poisson_workload(none).empty());
}

TEST_CASE("poisson_workload lengths: fixed, uniform and lognormal means, and clamping", "[workload]") {
    WorkloadSpec spec;
    spec.requests = 20000;
    spec.seed = 3;

    SECTION("fixed") {
        spec.prompt = {LengthDist::fixed, 256.4};
        spec.output = {LengthDist::fixed, 5000, 0, 1, 1000};  // clamped to max
        for (const Request& r : pd::serving::poisson_workload(spec)) {
            REQUIRE(r.prompt_tokens == 256);
            REQUIRE(r.output_tokens == 1000);
        }
    }
    SECTION("uniform") {
        // Integers 156..356 equally likely: mean 256, SD 201/sqrt(12) = 58; the mean of 20,000
        // has a standard error of 0.41 tokens (0.16%), so 1% is over 6 standard errors.
        spec.prompt = {LengthDist::uniform, 256, 100};
        const auto w = pd::serving::poisson_workload(spec);
        const auto p = prompts_of(w);
        CHECK(std::fabs(mean_sd(p).mean / 256 - 1) < 0.01);
        CHECK(*std::min_element(p.begin(), p.end()) == 156);  // both ends are reached
        CHECK(*std::max_element(p.begin(), p.end()) == 356);
        // Clamping: 10 +- 20 spans -10..30, and everything below 1 becomes 1.
        spec.prompt = {LengthDist::uniform, 10, 20};
        const auto q = prompts_of(pd::serving::poisson_workload(spec));
        CHECK(*std::min_element(q.begin(), q.end()) == 1);
        const double ones = double(std::count(q.begin(), q.end(), 1.0)) / double(q.size());
        CHECK(std::fabs(ones - 12.0 / 41) < 0.02);  // -10..1 all land on 1: 12 of 41 values
    }
    SECTION("lognormal") {
        // sigma 0.5: SD = mean sqrt(e^0.25 - 1) = 0.53 mean, so the mean of 20,000 has a relative
        // standard error of 0.38%; 2% is over 5. mu = log(256) - 0.125, so the median is
        // 256 e^-0.125 = 225.9: a sampler that put the median at 256 (mu = log(mean)) would have
        // a mean of 256 e^0.125 = 290 and fail both checks.
        spec.prompt = {LengthDist::lognormal, 256, 0.5};
        auto p = prompts_of(pd::serving::poisson_workload(spec));
        CHECK(std::fabs(mean_sd(p).mean / 256 - 1) < 0.02);
        std::nth_element(p.begin(), p.begin() + p.size() / 2, p.end());
        CHECK(std::fabs(p[p.size() / 2] / (256 * std::exp(-0.125)) - 1) < 0.02);

        spec.prompt = {LengthDist::lognormal, 256, 0.5, 200, 300};
        const auto c = prompts_of(pd::serving::poisson_workload(spec));
        CHECK(*std::min_element(c.begin(), c.end()) == 200);  // both bounds are hit and held
        CHECK(*std::max_element(c.begin(), c.end()) == 300);
    }
}

TEST_CASE("poisson_workload rejects specs out of range, naming the field", "[workload]") {
    const auto error = [](WorkloadSpec s) {
        try {
            pd::serving::poisson_workload(s);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    WorkloadSpec s;
    s.rate = -1;
    CHECK_THAT(error(s), Contains("rate"));
    s.rate = std::nan("");
    CHECK_THAT(error(s), Contains("rate"));
    s = {};
    s.burstiness = 0;
    CHECK_THAT(error(s), Contains("burstiness"));
    s = {};
    s.requests = -1;
    CHECK_THAT(error(s), Contains("requests"));
    s = {};
    s.prompt.mean = 0;
    CHECK_THAT(error(s), Contains("prompt.mean"));
    s = {};
    s.output.spread = -1;
    CHECK_THAT(error(s), Contains("output.spread"));
    s = {};
    s.output.min = 0;
    CHECK_THAT(error(s), Contains("output.min"));
    s = {};
    s.prompt.min = 10;
    s.prompt.max = 9;
    CHECK_THAT(error(s), Contains("prompt.max"));
    CHECK(error(WorkloadSpec{}).empty());
}

TEST_CASE("read_trace parses a CSV trace, sorts it by arrival and numbers it", "[workload]") {
    const TempFile f(
        "# a trace\n"
        "arrival_s, prompt_tokens, output_tokens\n"
        "\n"
        "0.5,100,20\n"
        "  0.25 , 3000 , 1   # trailing comment\r\n"
        "0.5,7,8\n"
        "1e-1,1,2\n"
        "+2,40,50\n");
    const auto w = pd::serving::read_trace(f.path);
    REQUIRE(w.size() == 5);
    // Sorted by arrival, ties (the two at 0.5) in file order; ids follow the sorted order; times
    // count from the first arrival (0.1).
    const double arrival[] = {0.1 - 0.1, 0.25 - 0.1, 0.5 - 0.1, 0.5 - 0.1, 2.0 - 0.1};
    const int prompt[] = {1, 3000, 100, 7, 40};
    const int output[] = {2, 1, 20, 8, 50};
    for (int i = 0; i < 5; ++i) {
        INFO("request " << i);
        CHECK(w[i].id == i);
        CHECK(w[i].arrival_s == arrival[i]);
        CHECK(w[i].prompt_tokens == prompt[i]);
        CHECK(w[i].output_tokens == output[i]);
    }
    // Without a header.
    const TempFile g("0,1,1\n");
    CHECK(pd::serving::read_trace(g.path).size() == 1);
}

TEST_CASE("read_trace: absolute timestamps, byte-order marks and every kind of line end", "[workload]") {
    // Unix timestamps replay from 0, with their gaps (0.5 s is exact at this magnitude).
    const TempFile stamps("1700000001.0,10,10\n1700000000.5,20,20\n");
    const auto w = pd::serving::read_trace(stamps.path);
    REQUIRE(w.size() == 2);
    CHECK(w[0].arrival_s == 0);
    CHECK(w[0].prompt_tokens == 20);
    CHECK(w[1].arrival_s == 0.5);
    // A UTF-8 byte-order mark before a header or before the first request.
    CHECK(pd::serving::read_trace(TempFile("\xEF\xBB\xBF"
                                           "arrival,prompt,output\n0,1,1\n")
                                      .path)
              .size() == 1);
    CHECK(pd::serving::read_trace(TempFile("\xEF\xBB\xBF"
                                           "0,1,1\n1,2,2\n")
                                      .path)
              .size() == 2);
    // Classic Mac line ends (a lone \r) and Windows ones, mixed: three requests on lines 2 to 4.
    const TempFile cr("a,b,c\r0,1,1\r1,2,2\r\n2,3,3\n");
    const auto lines = pd::serving::read_trace(cr.path);
    REQUIRE(lines.size() == 3);
    CHECK(lines[2].prompt_tokens == 3);
    CHECK_THAT(trace_error(TempFile("0,1,1\r0,x,1\r")), Contains(":2: bad prompt token count 'x'"));
}

TEST_CASE("read_trace: bounded lines, counts and times, whatever the file", "[workload][limits]") {
    // An endless device is no trace file: refused before it is read (a pipe would block the open).
    try {
        pd::serving::read_trace("/dev/zero");
        FAIL("/dev/zero was accepted");
    } catch (const std::invalid_argument& e) {
        CHECK_THAT(std::string(e.what()), Contains("/dev/zero: not a regular file"));
    }
    // One long line is refused after kMaxTraceLineChars, not read to the end.
    CHECK_THAT(trace_error(TempFile(std::string(5000, '1'))), Contains(":1: line longer than 4096"));
    // The most requests a run takes; one more is refused on its line.
    std::string many;
    for (std::size_t i = 0; i <= pd::serving::kMaxTraceRequests; ++i) many += "0,1,1\n";
    CHECK_THAT(trace_error(TempFile(many)), Contains(":1000001: more than 1000000 requests"));
    many.resize(many.size() - 6);
    CHECK(trace_error(TempFile(many)).empty());
}

TEST_CASE("read_trace errors name the file and the line", "[workload]") {
    struct Case {
        const char* text;
        int line;
        const char* what;
    };
    const Case cases[] = {
        {"arrival,prompt,output\n0,10,10\nx,10,10\n", 3, "bad arrival time 'x'"},
        {"0,10,10\n0,1.5,10\n", 2, "bad prompt token count '1.5'"},
        {"0,10,10\n0,10,\n", 2, "bad output token count ''"},
        {"0,10,10\n1,10,99999999999\n", 2, "bad output token count"},
        {"0,10,10\nnan,10,10\n", 2, "bad arrival time"},
        {"# c\n-0.5,10,10\n", 2, "negative arrival time"},
        {"0,0,10\n", 1, "prompt tokens must be in [1, 10000000], got 0"},
        {"0,10,10\n\n1,10,-3\n", 3, "output tokens must be in [1, 1000000], got -3"},
        // Counts whose sum would overflow an int, and times a double cannot resolve to 1 us.
        {"0,2147483647,2147483647\n", 1, "prompt tokens must be in [1, 10000000], got 2147483647"},
        {"0,10,2147483647\n", 1, "output tokens must be in [1, 1000000], got 2147483647"},
        {"0,10,10\n1e14,10,10\n", 2, "arrival time 1e14 s is past 2^32 s"},
        // Hex is not decimal, and a line of numbers in hex is not a header to skip.
        {"0x1,0x10,0x5\n", 1, "bad arrival time '0x1' (decimal seconds expected)"},
        {"0,0x10,5\n", 1, "bad prompt token count '0x10' (a decimal integer expected)"},
        {"0,10\n", 1, "expected 3 fields"},
        {"0,10,10,10\n", 1, "expected 3 fields"},
        {"0,10,10\n1,10,10,\n", 2, "expected 3 fields"},
        {"", 1, "no requests"},
        {"# only\n\n# comments\n", 3, "no requests"},
        {"arrival,prompt,output\n", 1, "no requests"},
    };
    for (const Case& c : cases) {
        const TempFile f(c.text);
        const std::string msg = trace_error(f);
        INFO("trace:\n" << c.text << "message: " << msg);
        CHECK_THAT(msg, StartsWith(f.path + ":" + std::to_string(c.line) + ": "));
        CHECK_THAT(msg, Contains(c.what));
    }
    const std::string missing = (std::filesystem::temp_directory_path() / "pd_no_such_dir" / "t.csv").string();
    try {
        pd::serving::read_trace(missing);
        FAIL("no exception for a missing file");
    } catch (const std::invalid_argument& e) {
        CHECK_THAT(std::string(e.what()), StartsWith(missing + ": "));
    }
}

TEST_CASE("long_prompt_scenario: streams at t = 0, one long prompt while they stream", "[workload]") {
    const auto w = pd::serving::long_prompt_scenario();
    REQUIRE(w.size() == 17);
    for (int i = 0; i < 16; ++i) {
        CHECK(w[i].id == i);
        CHECK(w[i].arrival_s == 0);
        CHECK(w[i].prompt_tokens == 100);
        CHECK(w[i].output_tokens == 400);
    }
    CHECK(w[16].id == 16);
    CHECK(w[16].arrival_s == 1.0);
    CHECK(w[16].prompt_tokens == 50000);
    CHECK(w[16].output_tokens == 16);

    const auto v = pd::serving::long_prompt_scenario(3, 8000, 0.25, 20, 30, 4);
    REQUIRE(v.size() == 4);
    CHECK(v[2].prompt_tokens == 20);
    CHECK(v[2].output_tokens == 30);
    CHECK(v[3].id == 3);
    CHECK(v[3].arrival_s == 0.25);
    CHECK(v[3].prompt_tokens == 8000);
    CHECK(v[3].output_tokens == 4);

    CHECK_THROWS_WITH(pd::serving::long_prompt_scenario(-1), Contains("users"));
    CHECK_THROWS_WITH(pd::serving::long_prompt_scenario(16, 0), Contains("long_prompt"));
    CHECK_THROWS_WITH(pd::serving::long_prompt_scenario(16, 100, -1), Contains("long_arrival_s"));
    CHECK_THROWS_WITH(pd::serving::long_prompt_scenario(16, 100, 1, 100, 0), Contains("user_output"));
}
