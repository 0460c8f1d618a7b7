// Results table and JSON report: schema of DESIGN.md section 4, nulls for what does not apply.
#include "pd/report.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

using Catch::Matchers::Contains;

namespace {

pd::KernelResult row(const std::string& name, bool passed) {
    pd::KernelResult r;
    r.kernel = name;
    r.time_ms = 1.5;
    r.gbps = 2000;
    r.max_abs_err = 0;
    r.passed = passed;
    return r;
}

}  // namespace

TEST_CASE("a result row becomes JSON with nulls for missing fields", "[report][json]") {
    const nlohmann::json j = pd::to_json(row("v1", true));
    CHECK(j["kernel"] == "v1");
    CHECK(j["time_ms"] == 1.5);
    CHECK(j["gbps"] == 2000.0);
    CHECK(j["tflops"].is_null());
    CHECK(j["roofline_fraction"].is_null());
    CHECK(j["vs_baseline"].is_null());
    CHECK(j["max_rel_err"].is_null());
    CHECK(j["passed"] == true);
    for (const char* key : {"kernel", "time_ms", "gbps", "tflops", "roofline_fraction", "vs_baseline", "max_abs_err",
                            "max_rel_err", "passed"})
        CHECK(j.contains(key));
}

TEST_CASE("the report has every top-level field and passes only if every row passed", "[report][json]") {
    const nlohmann::json dev = {{"name", "Test GPU"}};
    const nlohmann::json prob = {{"seed", 42}, {"n", 17}};
    nlohmann::json rep = pd::make_report("00_roofline", "cuda", dev, prob, {row("a", true), row("b", true)});
    CHECK(rep["chapter"] == "00_roofline");
    CHECK(rep["backend"] == "cuda");
    CHECK(rep["device"]["name"] == "Test GPU");
    CHECK(rep["problem"]["seed"] == 42);
    CHECK(rep["results"].size() == 2);
    CHECK(rep["passed"] == true);
    rep = pd::make_report("x", "sim", dev, prob, {row("a", true), row("b", false)});
    CHECK(rep["passed"] == false);
}

TEST_CASE("write_json writes a file that parses back to the same object", "[report][json]") {
    const auto dir = std::filesystem::temp_directory_path() / "pd_test_report";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "out.json").string();
    const nlohmann::json rep = pd::make_report("c", "cuda", {{"name", nullptr}}, {{"seed", 1}}, {row("k", true)});
    pd::write_json(rep, path);
    std::ifstream f(path);
    const nlohmann::json back = nlohmann::json::parse(f);
    CHECK(back == rep);
    CHECK_THROWS_AS(pd::write_json(rep, (dir / "missing" / "x.json").string()), std::runtime_error);
    std::filesystem::remove_all(dir);
}

TEST_CASE("the table aligns columns and rejects ragged rows", "[report][table]") {
    pd::Table t({"kernel", "time ms"});
    t.add_row({"v1_naive", "12.5"});
    t.add_row({"v2", "3"});
    const std::string s = t.render();
    std::istringstream lines(s);
    std::string header, rule, r1, r2;
    std::getline(lines, header);
    std::getline(lines, rule);
    std::getline(lines, r1);
    std::getline(lines, r2);
    CHECK(header == "kernel    time ms");
    CHECK(rule == std::string(header.size(), '-'));
    CHECK(r1 == "v1_naive     12.5");  // numbers right-aligned
    CHECK(r2 == "v2              3");
    CHECK_THROWS_AS(t.add_row({"only one"}), std::invalid_argument);
    const std::string results = pd::results_table({row("v1", true), row("v2", false)}).render();
    CHECK_THAT(results, Contains("FAILED"));
    CHECK_THAT(results, Contains("ok"));
}

TEST_CASE("numbers, bytes and FLOPs are formatted with units", "[report]") {
    CHECK(pd::format_number(std::nullopt) == "-");
    CHECK(pd::format_number(1234.5678, 4) == "1235");
    CHECK(pd::format_bytes(512) == "512 B");
    CHECK(pd::format_bytes(1.5 * 1024 * 1024 * 1024) == "1.50 GiB");
    CHECK(pd::format_flops(2.8e13) == "28.00 TFLOP");
}

TEST_CASE("fmt formats one number with a printf format", "[report]") {
    CHECK(pd::fmt("%.1f", 206.125) == "206.1");
    CHECK(pd::fmt("%.0f GB/s", 4321.6) == "4322 GB/s");
    CHECK(pd::fmt("%.3g", 0.000123456) == "0.000123");
}
