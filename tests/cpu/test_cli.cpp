// The shared options: valid values parse, bad ones return exit code 2 with the option named.
#include "pd/cli.hpp"
#include "pd/files.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using Catch::Matchers::Contains;

namespace {

struct ParseOutcome {
    std::optional<int> code;
    std::string err;
    pd::CommonOptions options;
};

ParseOutcome parse(std::vector<std::string> args) {
    ParseOutcome out;
    CLI::App app{"test program", "chXX_test"};
    pd::add_common_options(app, out.options, {"v1", "v2"});
    args.insert(args.begin(), "chXX_test");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream captured_err, captured_out;
    auto* old_err = std::cerr.rdbuf(captured_err.rdbuf());
    auto* old_out = std::cout.rdbuf(captured_out.rdbuf());
    out.code = pd::parse_command_line(app, int(argv.size()), argv.data());
    std::cerr.rdbuf(old_err);
    std::cout.rdbuf(old_out);
    out.err = captured_err.str();
    return out;
}

}  // namespace

TEST_CASE("valid shared options parse", "[cli]") {
    const auto r = parse({"--kernel", "v2", "--seed", "7", "--iters", "5", "--warmup", "0", "--check-only"});
    CHECK_FALSE(r.code);
    CHECK(r.options.kernel == "v2");
    CHECK(r.options.seed == 7);
    CHECK(r.options.iters == 5);
    CHECK(r.options.warmup == 0);
    CHECK(r.options.check_only);
    CHECK(r.options.selects("v2"));
    CHECK_FALSE(r.options.selects("v1"));
    const auto all = parse({});
    CHECK(all.options.selects("v1"));
    CHECK(all.options.kernel == "all");
}

TEST_CASE("bad shared options exit with code 2 and name the option", "[cli][errors]") {
    struct Case {
        std::vector<std::string> args;
        const char* names;
    };
    const auto file = std::filesystem::temp_directory_path() / "pd_test_cli_file";
    std::ofstream(file) << "x";
    const std::vector<Case> cases = {
        {{"--iters", ""}, "--iters"},          {{"--iters", "0"}, "--iters"},
        {{"--iters", "-3"}, "--iters"},        {{"--iters", "many"}, "--iters"},
        {{"--warmup", "-1"}, "--warmup"},      {{"--kernel", "v9"}, "--kernel"},
        {{"--seed", "-1"}, "--seed"},          {{"--json", "/nonexistent-dir/out.json"}, "--json"},
        {{"--dump", file.string()}, "--dump"}, {{"--no-such-option"}, "--no-such-option"},
    };
    for (const auto& c : cases) {
        INFO(c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : ""));
        const auto r = parse(c.args);
        REQUIRE(r.code);
        CHECK(*r.code == pd::kExitBadInput);
        CHECK_THAT(r.err, Contains(c.names));
        CHECK_THAT(r.err, Contains("chXX_test: error:"));
    }
    std::filesystem::remove(file);
}

TEST_CASE("--help exits 0", "[cli]") {
    const auto r = parse({"--help"});
    REQUIRE(r.code);
    CHECK(*r.code == 0);
}

TEST_CASE("JSON to stdout moves the text to stderr", "[cli]") {
    pd::CommonOptions o;
    CHECK(&pd::text_out(o) == &std::cout);
    o.json = "-";
    CHECK(&pd::text_out(o) == &std::cerr);
    o.json = "out.json";
    CHECK(&pd::text_out(o) == &std::cout);
}

TEST_CASE("the dump directory is created", "[cli]") {
    const auto dir = std::filesystem::temp_directory_path() / "pd_test_dump" / "nested";
    std::filesystem::remove_all(dir.parent_path());
    {
        pd::DumpDirectory d;
        d.open(dir.string(), "--dump");
        CHECK(d.dir() == dir.string() + "/");
        CHECK(std::filesystem::is_directory(dir));
    }  // committed at the normal end of its scope
    CHECK(std::filesystem::exists(dir / ".pd-dump"));
    std::filesystem::remove_all(dir.parent_path());
}
