// What a chapter reports: the roofline floor and bound of a cost against this run's roofs, the
// JSON of a result row (schema in CONTRIBUTING.md's conventions of a chapter program, nulls for what does not apply,
// the baseline alias and the sweep point merged in), the table columns and their formatting, the rendered table and the
// chapter report.
#include "pd/report.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
using pd::DType;
using pd::Units;

namespace {

pd::KernelResult result(const std::string& name, bool passed) {
    pd::KernelResult r;
    r.kernel = name;
    r.time_ms = 1.5;
    r.gbps = 2000;
    r.max_abs_err = 0;
    r.passed = passed;
    return r;
}

pd::Row row(const std::string& name, bool passed) {
    pd::Row r;
    r.result = result(name, passed);
    return r;
}

/// The lines of @p text.
std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

/// Roofs of a made-up device: 1 TB/s, 10 TFLOP/s fp32, 1000 TFLOP/s bf16 (round numbers, so the
/// floors below are exact powers of ten up to rounding).
pd::Roofs made_up_roofs() {
    pd::Roofs r;
    r.bytes_per_s = 1e12;
    r.fp32_flops = 1e13;
    r.bf16_flops = 1e15;
    r.bf16_source = "made up";
    return r;
}

}  // namespace

// ---- roofs --------------------------------------------------------------------------------

TEST_CASE("Roofs: the floor is the larger of the compute and memory times", "[report][roofs]") {
    const pd::Roofs roofs = made_up_roofs();
    CHECK(roofs.peak(Units::simt) == 1e13);
    CHECK(roofs.peak(Units::tensor_cores) == 1e15);

    // A decode-like cost: 2 GFLOP over 4 GB. fp32: compute 2e9 / 1e13 = 0.2 ms, memory
    // 4e9 / 1e12 = 4 ms: memory-bound, floor 4 ms. bf16: compute 2 us, still memory-bound.
    const pd::Cost decode{2e9, 4e9};
    CHECK(decode.intensity() == 0.5);
    REQUIRE(roofs.floor_s(decode, Units::simt));
    CHECK(*roofs.floor_s(decode, Units::simt) == Approx(4e-3));
    CHECK(*roofs.floor_s(decode, Units::tensor_cores) == Approx(4e-3));
    CHECK(roofs.bound(decode, Units::simt) == pd::roofline::Bound::Memory);
    CHECK(roofs.bound(decode, Units::tensor_cores) == pd::roofline::Bound::Memory);

    // A prefill-like cost: 1 TFLOP over 1 GB (1000 FLOP/byte). fp32: compute 1e12 / 1e13 =
    // 0.1 s, memory 1 ms: compute-bound, floor 0.1 s. bf16: compute 1e12 / 1e15 = 1 ms against
    // memory 1 ms; with 2 GB the memory term (2 ms) wins: the same cost is compute-bound in fp32
    // and memory-bound in bf16, as the ridge point moves from 10 to 1000 FLOP/byte.
    const pd::Cost prefill{1e12, 1e9};
    CHECK(*roofs.floor_s(prefill, Units::simt) == Approx(0.1));
    CHECK(roofs.bound(prefill, Units::simt) == pd::roofline::Bound::Compute);
    const pd::Cost prefill_2gb{1e12, 2e9};
    CHECK(*roofs.floor_s(prefill_2gb, Units::tensor_cores) == Approx(2e-3));
    CHECK(roofs.bound(prefill_2gb, Units::tensor_cores) == pd::roofline::Bound::Memory);
    const pd::Cost prefill_big{1e13, 2e9};  // bf16: compute 10 ms > memory 2 ms
    CHECK(*roofs.floor_s(prefill_big, Units::tensor_cores) == Approx(1e-2));
    CHECK(roofs.bound(prefill_big, Units::tensor_cores) == pd::roofline::Bound::Compute);

    // A copy has bytes only (no compute roof needed); an FMA loop FLOPs only (no bandwidth needed).
    const pd::Cost copy{0, 8e9};
    CHECK(copy.intensity() == 0);
    CHECK(*roofs.floor_s(copy, Units::simt) == Approx(8e-3));
    CHECK(roofs.bound(copy, Units::simt) == pd::roofline::Bound::Memory);
    const pd::Cost fma{5e12, 0};
    CHECK(fma.intensity() == 0);  // no bytes: 0, not inf
    CHECK(*roofs.floor_s(fma, Units::simt) == Approx(0.5));
    CHECK(roofs.bound(fma, Units::simt) == pd::roofline::Bound::Compute);
}

TEST_CASE("Roofs: a floor that needs an unknown roof is empty, never invented", "[report][roofs]") {
    const pd::Cost both{2e9, 4e9}, copy{0, 8e9}, fma{5e12, 0};
    // No roofs at all (the simulator, or --check-only): nothing.
    const pd::Roofs none;
    CHECK_FALSE(none.peak(Units::simt));
    CHECK_FALSE(none.floor_s(both, Units::simt));
    CHECK_FALSE(none.bound(both, Units::simt));
    CHECK_FALSE(none.floor_s(copy, Units::simt));
    CHECK_FALSE(none.floor_s(fma, Units::simt));

    // Bandwidth measured, no bf16 preset: fp32 and byte-only costs have floors, bf16 compute not.
    pd::Roofs no_bf16 = made_up_roofs();
    no_bf16.bf16_flops.reset();
    CHECK(no_bf16.floor_s(both, Units::simt));
    CHECK_FALSE(no_bf16.floor_s(both, Units::tensor_cores));
    CHECK_FALSE(no_bf16.bound(both, Units::tensor_cores));
    CHECK(*no_bf16.floor_s(copy, Units::tensor_cores) == Approx(8e-3));  // needs only the bandwidth

    // Peaks known, bandwidth not measured (--check-only on a GPU): only FLOP-only costs.
    pd::Roofs no_bandwidth = made_up_roofs();
    no_bandwidth.bytes_per_s.reset();
    CHECK_FALSE(no_bandwidth.floor_s(both, Units::simt));
    CHECK_FALSE(no_bandwidth.floor_s(copy, Units::simt));
    CHECK(*no_bandwidth.floor_s(fma, Units::simt) == Approx(0.5));

    // A cost of nothing has no floor.
    CHECK_FALSE(made_up_roofs().floor_s(pd::Cost{}, Units::simt));
    CHECK_FALSE(made_up_roofs().bound(pd::Cost{}, Units::simt));
}

// ---- JSON ----------------------------------------------------------------------------------

TEST_CASE("a kernel result becomes JSON with nulls for missing fields", "[report][json]") {
    const nlohmann::json j = pd::to_json(result("v1", true));
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
    // A non-finite value is not a number JSON can hold: null.
    pd::KernelResult inf = result("v2", true);
    inf.tflops = std::numeric_limits<double>::infinity();
    CHECK(pd::to_json(inf)["tflops"].is_null());
}

TEST_CASE("a row's JSON: every key, nulls where nothing applies", "[report][json]") {
    // A failed, untimed row with no cost, tokens or baseline: the KernelResult keys plus the row's
    // keys, all null but kernel, dtype, passed and max_abs_err.
    pd::Row bare;
    bare.result.kernel = "v3";
    bare.result.max_abs_err = 0.5;
    bare.dtype = DType::bf16;
    const nlohmann::json j = pd::to_json(bare);
    for (const char* key : {"kernel",
                            "time_ms",
                            "gbps",
                            "tflops",
                            "roofline_fraction",
                            "vs_baseline",
                            "max_abs_err",
                            "max_rel_err",
                            "passed",
                            "dtype",
                            "units",
                            "flops",
                            "bytes",
                            "arithmetic_intensity",
                            "floor_ms",
                            "bound",
                            "copy_fraction",
                            "tokens_per_s",
                            "baseline",
                            "profile",
                            "not_run"}) {
        INFO(key);
        CHECK(j.contains(key));
    }
    CHECK(j.size() == 21);  // nothing else: no alias, no point
    CHECK(j["kernel"] == "v3");
    CHECK(j["dtype"] == "bf16");
    CHECK(j["passed"] == false);
    CHECK(j["max_abs_err"] == 0.5);
    for (const char* key :
         {"time_ms", "flops", "bytes", "arithmetic_intensity", "floor_ms", "copy_fraction", "tokens_per_s", "baseline",
          "vs_baseline", "profile", "not_run"}) {  // profile: without --profile
        INFO(key);
        CHECK(j[key].is_null());
    }
}

TEST_CASE("a row that did not run has no verdict and fails no report", "[report][json]") {
    // a version the device is too old for (a T4 and the bf16 tensor cores): passed null, the
    // reason in not_run and the status column, and the report passes on the rows that ran
    pd::Row ran, skipped;
    ran.result = result("v6", true);
    skipped.result.kernel = "v7";
    skipped.result.not_run = "needs compute capability 8.0";
    const nlohmann::json j = pd::to_json(skipped);
    CHECK(j["passed"].is_null());
    CHECK(j["not_run"] == "needs compute capability 8.0");
    CHECK(pd::to_json(ran)["passed"] == true);
    const std::string table = pd::render({ran, skipped}, {"kernel", "time ms", "status"});
    CHECK_THAT(table, Contains("not run: needs compute capability 8.0"));
    CHECK_THAT(table, !Contains("FAILED"));
    CHECK(pd::make_report("02_prefill_gemm", "sim", {}, {}, {ran, skipped})["passed"] == true);
    pd::Row wrong = ran;
    wrong.result.passed = false;
    CHECK(pd::make_report("02_prefill_gemm", "sim", {}, {}, {wrong, skipped})["passed"] == false);
}

TEST_CASE("a row's JSON: cost, intensity, tokens/s, the baseline alias and the sweep point", "[report][json]") {
    // 2 GFLOP over 4e8 bytes: 5 FLOP/byte. 64 tokens in 2 ms: 32000 tokens/s.
    pd::Row r;
    r.result = result("v5", true);
    r.result.time_ms = 2.0;
    r.result.vs_baseline = 0.8;
    r.cost = {2e9, 4e8};
    r.tokens = 64;
    r.floor_ms = 0.4;
    r.copy_fraction = 0.25;
    r.baseline = "cublas";
    r.point = {{"tokens", 16}, {"n", 128}, {"label", "T=16"}};
    const nlohmann::json j = pd::to_json(r, "vs_cublas");
    CHECK(j["flops"] == 2e9);
    CHECK(j["bytes"] == 4e8);
    CHECK(j["arithmetic_intensity"] == 5.0);
    CHECK(j["tokens_per_s"] == Approx(32000));
    CHECK(j["floor_ms"] == 0.4);
    CHECK(j["copy_fraction"] == 0.25);
    CHECK(j["baseline"] == "cublas");
    CHECK(j["dtype"] == "fp32");
    // The alias repeats vs_baseline under the chapter's name for it.
    CHECK(j["vs_baseline"] == 0.8);
    CHECK(j["vs_cublas"] == 0.8);
    // The point's keys sit next to the row's own, with their JSON types.
    CHECK(j["tokens"] == 16);
    CHECK(j["tokens"].is_number_integer());
    CHECK(j["n"] == 128);
    CHECK(j["label"] == "T=16");
    CHECK(j.size() == 21 + 1 + 3);
    // Without an alias there is no extra key; an alias of a missing vs_baseline is null.
    CHECK_FALSE(pd::to_json(r).contains("vs_cublas"));
    r.result.vs_baseline.reset();
    const nlohmann::json k = pd::to_json(r, "vs_cublas");
    REQUIRE(k.contains("vs_cublas"));
    CHECK(k["vs_cublas"].is_null());
    // Tokens counted but the row untimed: no tokens/s.
    r.result.time_ms.reset();
    CHECK(pd::to_json(r)["tokens_per_s"].is_null());
    CHECK_FALSE(r.tokens_per_s());
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
    CHECK(rep["results"][1]["kernel"] == "b");
    CHECK(rep["passed"] == true);
    CHECK(rep.size() == 6);
    rep = pd::make_report("x", "sim", dev, prob, {row("a", true), row("b", false)});
    CHECK(rep["passed"] == false);
    // An empty list passes; the alias reaches every row.
    CHECK(pd::make_report("x", "sim", dev, prob, {})["passed"] == true);
    pd::Row timed = row("v7", true);
    timed.result.vs_baseline = 1.25;
    rep = pd::make_report("02_prefill_gemm", "cuda", dev, prob, {timed}, "vs_cublas");
    CHECK(rep["results"][0]["vs_cublas"] == 1.25);
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

// ---- tables ---------------------------------------------------------------------------------

TEST_CASE("the table aligns columns and rejects ragged rows", "[report][table]") {
    pd::Table t({"kernel", "time ms"});
    t.add_row({"v1_naive", "12.5"});
    t.add_row({"v2", "3"});
    const std::vector<std::string> lines = lines_of(t.render());
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "kernel    time ms");
    CHECK(lines[1] == std::string(lines[0].size(), '-'));
    CHECK(lines[2] == "v1_naive     12.5");  // numbers right-aligned
    CHECK(lines[3] == "v2              3");
    CHECK_THROWS_AS(t.add_row({"only one"}), std::invalid_argument);
}

TEST_CASE("standard columns write each cell from the row", "[report][table]") {
    // A timed bf16 row: 1.5 ms, 2000 GB/s; 2e9 FLOPs over 4e8 bytes = 5 FLOP/byte; 64 tokens in
    // 1.5 ms = 42666.7 tokens/s; memory-bound; 0.8 of the baseline's speed.
    pd::Row r = row("v7", true);
    r.dtype = DType::bf16;
    r.cost = {2e9, 4e8};
    r.tokens = 64;
    r.floor_ms = 0.75;
    r.bound = pd::roofline::Bound::Memory;
    r.copy_fraction = 0.6666666;
    r.result.tflops = 1.3333333;
    r.result.roofline_fraction = 0.5;
    r.result.vs_baseline = 0.8;
    auto cell = [&](const char* header) { return pd::Column(header).cell(r); };
    CHECK(cell("kernel") == "v7");
    CHECK(cell("dtype") == "bf16");
    CHECK(cell("time ms") == "1.5");
    CHECK(cell("step ms") == "1.5");
    CHECK(cell("GB/s") == "2000");
    CHECK(cell("TFLOP/s") == "1.333");   // 4 significant digits
    CHECK(cell("FLOP/byte") == "5.00");  // below 10: two decimals
    CHECK(cell("floor ms") == "0.75");
    CHECK(cell("of roofline") == "0.5");
    CHECK(cell("of copy") == "0.667");  // 3 significant digits
    CHECK(cell("bound") == "memory-bound");
    CHECK(cell("tokens/s") == "4.267e+04");
    CHECK(cell("vs baseline") == "0.8");
    CHECK(cell("vs cuBLAS") == "0.8");
    CHECK(cell("max abs err") == "0");
    CHECK(cell("status") == "ok");
    // The header is the text given.
    CHECK(pd::Column("GB/s").header == "GB/s");

    // Intensity formats: 1 decimal from 10, none from 100; no bytes: "-".
    r.cost = {2.56e10, 1e9};
    CHECK(cell("FLOP/byte") == "25.6");
    r.cost = {1e12, 1e9};
    CHECK(cell("FLOP/byte") == "1000");
    r.cost = {5e12, 0};
    CHECK(cell("FLOP/byte") == "-");

    // A failed row: its time says FAILED (no time is shown for a wrong answer), missing values "-".
    pd::Row failed;
    failed.result.kernel = "v2";
    auto fcell = [&](const char* header) { return pd::Column(header).cell(failed); };
    CHECK(fcell("time ms") == "FAILED");
    CHECK(fcell("status") == "FAILED");
    for (const char* header :
         {"GB/s", "TFLOP/s", "floor ms", "of roofline", "of copy", "bound", "tokens/s", "vs baseline", "max abs err"}) {
        INFO(header);
        CHECK(fcell(header) == "-");
    }
}

TEST_CASE("a column header that is not a standard one needs a cell function", "[report][table]") {
    CHECK_THROWS_AS(pd::Column("time"), std::invalid_argument);
    CHECK_THROWS_WITH(pd::Column("GFLOP/s"), Contains("'GFLOP/s' is not a standard column"));
    CHECK_THROWS_AS(pd::Column(""), std::invalid_argument);
    // A custom column takes any header.
    const pd::Column custom("GFLOP/s", [](const pd::Row& r) { return pd::fmt("%.0f", r.cost.flops / 1e9); });
    pd::Row r = row("v1", true);
    r.cost.flops = 3e9;
    CHECK(custom.header == "GFLOP/s");
    CHECK(custom.cell(r) == "3");
}

TEST_CASE("a point column shows the sweep point's value, formatted by type", "[report][table]") {
    pd::Row r = row("v5", true);
    r.point = {{"batch", 16}, {"ratio", 0.123456}, {"big", 123456.0}, {"label", "B=16"}, {"none", nullptr}};
    CHECK(pd::Column::point("B", "batch").header == "B");
    CHECK(pd::Column::point("B", "batch").cell(r) == "16");     // integers as integers
    CHECK(pd::Column::point("r", "ratio").cell(r) == "0.123");  // other numbers: 3 digits
    CHECK(pd::Column::point("x", "big").cell(r) == "1.23e+05");
    CHECK(pd::Column::point("l", "label").cell(r) == "B=16");  // strings as they are
    CHECK(pd::Column::point("n", "none").cell(r) == "-");      // null
    CHECK(pd::Column::point("m", "missing").cell(r) == "-");   // not in the point
}

TEST_CASE("render: a table of rows with standard, point and custom columns", "[report][table]") {
    pd::Row a = row("v1", true), b = row("v2_long", false);
    a.point = {{"T", 1}};
    b.point = {{"T", 256}};
    const std::string text =
        pd::render({a, b}, {"kernel", pd::Column::point("T", "T"), "time ms", "status",
                            pd::Column("note", [](const pd::Row& r) { return r.result.kernel.substr(0, 2); })});
    const std::vector<std::string> lines = lines_of(text);
    REQUIRE(lines.size() == 4);
    // Widths: kernel 7 (v2_long), T 3, time ms 7, status 6 (FAILED), note 4; two spaces apart.
    // Headers are left-aligned; numeric cells right-aligned, text cells left-aligned.
    CHECK(lines[0] == "kernel   T    time ms  status  note");
    CHECK(lines[1] == std::string(lines[0].size(), '-'));
    CHECK(lines[2] == "v1         1      1.5  ok      v1");
    CHECK(lines[3] == "v2_long  256  FAILED   FAILED  v2");
    // No rows: the header and the rule only.
    CHECK(lines_of(pd::render({}, {"kernel", "status"})).size() == 2);
}

TEST_CASE("render, check-only: the untimed columns give way to the check's own", "[report][table]") {
    // Validated, not timed: no time, and rates only where the run measured them.
    pd::Row a = row("v1", true), b = row("v2", true);
    for (pd::Row* r : {&a, &b}) {
        r->result.time_ms.reset();
        r->result.gbps.reset();
        r->point = {{"T", r == &a ? 1 : 2}};
    }
    b.result.max_abs_err = 0.25;
    const std::vector<pd::Column> columns = {pd::Column::point("T", "T"), "kernel", "time ms", "GB/s"};
    // The same columns when timing, dashes and all.
    CHECK(lines_of(pd::render({a, b}, columns))[0] == "T  kernel  time ms  GB/s");
    const std::vector<std::string> lines = lines_of(pd::render({a, b}, columns, true));
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "T  kernel  max abs err  status");
    CHECK(lines[2] == "1  v1                0  ok");
    CHECK(lines[3] == "2  v2             0.25  ok");
    // A failed row writes FAILED in its time cell: that column is not all dashes, and stays.
    b.result.passed = false;
    CHECK(lines_of(pd::render({a, b}, columns, true))[0] == "T  kernel  time ms  max abs err  status");
}

TEST_CASE("numbers, bytes and FLOPs are formatted with units", "[report]") {
    CHECK(pd::format_number(std::nullopt) == "-");
    CHECK(pd::format_number(std::numeric_limits<double>::quiet_NaN()) == "-");
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

TEST_CASE("a tie between the two roofs is compute-bound, as roofline::bound_at() says", "[report][roofline]") {
    // 1e9 FLOPs at 1e12 FLOP/s = 1 ms; 1e6 bytes at 1e9 bytes/s = 1 ms: intensity 1000 = ridge 1000.
    const pd::Roofs roofs{.bytes_per_s = 1e9, .fp32_flops = 1e12};
    const pd::Cost tie{1e9, 1e6};
    CHECK(roofs.bound(tie, pd::Units::simt) == pd::roofline::Bound::Compute);
    CHECK(pd::roofline::bound_at(tie.intensity(), 1e12 / 1e9) == pd::roofline::Bound::Compute);
}

TEST_CASE("a point key that would replace a row field is refused", "[report][json]") {
    pd::Row r;
    r.result.kernel = "v1";
    r.point = {{"kernel", "not a kernel"}};
    CHECK_THROWS_WITH(pd::to_json(r), Catch::Matchers::Contains("point key 'kernel'"));
    r.point = {{"tokens", 4}};
    CHECK(pd::to_json(r)["tokens"] == 4);
}

TEST_CASE("percentile: linear interpolation between the closest ranks, as numpy", "[report]") {
    CHECK(pd::percentile({}, 50) == 0);
    CHECK(pd::percentile({7}, 99) == 7);
    CHECK(pd::percentile({4, 1, 3, 2}, 50) == Approx(2.5));  // unsorted input: ranks of 1 2 3 4
    CHECK(pd::percentile({1, 2, 3, 4}, 0) == 1);
    CHECK(pd::percentile({1, 2, 3, 4}, 100) == 4);
    std::vector<double> hundred;
    for (int i = 0; i <= 100; ++i) hundred.push_back(i);
    CHECK(pd::percentile(hundred, 99) == Approx(99));
    CHECK(pd::percentile({10, 20}, 99) == Approx(19.9));  // 10 + 0.99 x 10
}
