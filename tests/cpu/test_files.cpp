// The files the programs write: whole or not at all (an exception or a SIGTERM mid-write leaves
// no file and no temporary under any name, and an earlier complete file intact), the output
// options checked together (regular files or new paths the program can create, never an input),
// and the dump directory that holds one run's files only and keeps the earlier dump when a run is
// refused, fails or is killed.
#include "pd/cli.hpp"
#include "pd/files.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <stdexcept>

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace files_test {

/// A fresh directory under the system's temporary directory, removed at the end.
struct Scratch {
    fs::path dir;
    Scratch() {
        std::random_device rd;
        dir = fs::temp_directory_path() / ("pd_test_files_" + std::to_string(rd()));
        fs::create_directories(dir);
    }
    ~Scratch() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    std::vector<std::string> names() const {  // every entry, hidden ones included, sorted
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};

std::string contents(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// Parses @p args with --json, --dump and a --timeline like chapters 05 and 06 add; returns
/// check_output_options()'s verdict.
std::string check_outputs(std::vector<std::string> args) {
    CLI::App app{"test program", "chXX_test"};
    pd::CommonOptions o;
    std::string timeline;
    pd::add_common_options(app, o, {"v1"});
    app.add_option("--timeline", timeline)->type_name("FILE")->group(pd::kOutputGroup);
    args.insert(args.begin(), "chXX_test");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    app.parse(int(argv.size()), argv.data());
    return pd::check_output_options(app);
}

}  // namespace files_test

using namespace files_test;

TEST_CASE("files: a file written atomically holds what the writer wrote, and no temporary is left", "[files]") {
    Scratch s;
    const fs::path p = s.dir / "out.json";
    pd::write_file_atomically(p.string(), [](std::ostream& f) { f << "{\"a\": 1}\n"; });
    CHECK(contents(p) == "{\"a\": 1}\n");
    pd::write_file_atomically(p.string(), [](std::ostream& f) { f << "second\n"; });  // replaces it
    CHECK(contents(p) == "second\n");
    CHECK(s.names() == std::vector<std::string>{"out.json"});
}

TEST_CASE("files: a writer that fails leaves the earlier file as it was and nothing else", "[files]") {
    Scratch s;
    const fs::path p = s.dir / "out.npy";
    pd::write_file_atomically(p.string(), [](std::ostream& f) { f << "complete"; });
    CHECK_THROWS_WITH(pd::write_file_atomically(p.string(),
                                                [](std::ostream& f) {
                                                    f << "half of it";
                                                    throw std::runtime_error("the writer failed");
                                                }),
                      Contains("the writer failed"));
    CHECK(contents(p) == "complete");
    CHECK(s.names() == std::vector<std::string>{"out.npy"});
    CHECK_THROWS_WITH(pd::write_file_atomically((s.dir / "no-such-dir" / "x").string(), [](std::ostream&) {}),
                      Contains("cannot write"));
}

TEST_CASE("files: a run killed by SIGTERM or SIGINT in the middle of a write leaves no half-written file", "[files]") {
    for (int sig : {SIGTERM, SIGINT}) {
        INFO("signal " << sig);
        Scratch s;
        const fs::path p = s.dir / "timeline.json", earlier = s.dir / "earlier.json";
        pd::write_file_atomically(earlier.string(), [](std::ostream& f) { f << "an earlier complete run\n"; });
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {                  // writes one file, then is killed in the middle of the second
            std::signal(SIGINT, SIG_DFL);  // a plain program's handlers, not Catch's
            std::signal(SIGTERM, SIG_DFL);
            pd::write_file_atomically(p.string(), [](std::ostream& f) { f << std::string(1 << 20, 'x'); });
            pd::write_file_atomically(earlier.string(), [sig](std::ostream& f) {
                f << std::string(1 << 20, 'y');
                f.flush();
                std::raise(sig);
            });
            _exit(0);  // not reached
        }
        int status = 0;
        REQUIRE(waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == sig);
        CHECK(contents(earlier) == "an earlier complete run\n");                        // not the half-written one
        CHECK(fs::file_size(p) == std::size_t(1) << 20);                                // the file completed before it
        CHECK(s.names() == std::vector<std::string>{"earlier.json", "timeline.json"});  // no temporary left
    }
}

TEST_CASE("files: the output options are checked together, each error naming the options", "[files][cli]") {
    Scratch s;
    const std::string dir = s.dir.string(), file = (s.dir / "r.json").string();
    CHECK(check_outputs({"--json", file, "--dump", dir + "/dump", "--timeline", dir + "/t.json"}).empty());
    CHECK(check_outputs({"--json", "-", "--timeline", file}).empty());
    CHECK_THAT(check_outputs({"--json", ""}), Contains("--json \"\": name a file"));
    CHECK_THAT(check_outputs({"--dump", ""}), Contains("--dump \"\": name a directory"));
    CHECK_THAT(check_outputs({"--json", dir}), Contains("is a directory; name a file"));
    CHECK_THAT(check_outputs({"--timeline", dir + "/new/"}), Contains("--timeline " + dir + "/new/: is a directory"));
    CHECK_THAT(check_outputs({"--timeline", dir + "/missing/t.json"}), Contains("does not exist"));
    CHECK_THAT(check_outputs({"--json", file, "--timeline", file}), Contains("the same path as --json"));
    CHECK_THAT(check_outputs({"--json", dir + "/d", "--dump", dir + "/./d"}), Contains("the same path as"));
}

/// The entries of @p dir, sorted.
std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// A dump of @p names into @p dir, committed.
void dump_files(const std::string& dir, std::initializer_list<const char*> names) {
    pd::DumpDirectory d;
    d.open(dir, "--dump");
    for (const char* name : names) std::ofstream(d.path(name)) << name;
    d.commit();
}

TEST_CASE("files: a dump directory is new, empty, or an earlier dump, whose files are replaced", "[files]") {
    Scratch s;
    const std::string dir = (s.dir / "dump").string();
    dump_files(dir, {"a.npy", "b.npy"});  // created
    CHECK(entries(dir) == std::vector<std::string>{".pd-dump", "a.npy", "b.npy"});
    CHECK(contents(fs::path(dir) / ".pd-dump") == "a.npy\nb.npy\n");
    dump_files(dir, {"c.npy"});  // the earlier dump's files go
    CHECK(entries(dir) == std::vector<std::string>{".pd-dump", "c.npy"});
    CHECK(contents(fs::path(dir) / ".pd-dump") == "c.npy\n");

    const fs::path foreign = s.dir / "foreign";
    fs::create_directories(foreign);
    std::ofstream(foreign / "notes.txt") << "mine";
    pd::DumpDirectory d;
    CHECK_THROWS_WITH(d.open(foreign.string(), "--dump"),
                      Contains("--dump " + foreign.string() + ": the directory is not empty"));
    CHECK(contents(foreign / "notes.txt") == "mine");  // refused, untouched
    CHECK_THROWS_WITH(d.open((foreign / "notes.txt" / "d").string(), "--dump"),
                      Contains("cannot create the directory"));
    CHECK_FALSE(d.active());
}

TEST_CASE("files: a refused, failed or killed run leaves the earlier dump whole", "[files]") {
    Scratch s;
    const std::string dir = (s.dir / "dump").string();
    dump_files(dir, {"out_v1.npy"});
    const std::vector<std::string> earlier = {".pd-dump", "out_v1.npy"};
    // refused after the dump was opened (an exception: exit code 2), with a file half-way
    CHECK_THROWS_AS(
        [&] {
            pd::DumpDirectory d;
            d.open(dir, "--dump");
            std::ofstream(d.path("out_v2.npy")) << "half";
            throw std::invalid_argument("--seq-len too large");
        }(),
        std::invalid_argument);
    CHECK(entries(dir) == earlier);
    CHECK(contents(fs::path(dir) / "out_v1.npy") == "out_v1.npy");
    // killed by a signal in the middle: the staging directory stays, the earlier dump too, and
    // the next run removes what the killed one left
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        std::signal(SIGTERM, SIG_DFL);
        pd::DumpDirectory d;
        d.open(dir, "--dump");
        std::ofstream(d.path("out_v2.npy")) << "half";
        std::raise(SIGTERM);
        _exit(0);  // not reached
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(fs::exists(fs::path(dir) / "out_v1.npy"));
    CHECK(contents(fs::path(dir) / ".pd-dump") == "out_v1.npy\n");
    dump_files(dir, {"out_v3.npy"});
    CHECK(entries(dir) == std::vector<std::string>{".pd-dump", "out_v3.npy"});
    // a new directory that a refused run created is removed again
    const std::string fresh = (s.dir / "fresh").string();
    {
        pd::DumpDirectory d;
        d.open(fresh, "--dump");
        d.discard();
    }
    CHECK_FALSE(fs::exists(fresh));
}

TEST_CASE("files: an output is a regular file or a new path the program can create, never an input", "[files][cli]") {
    Scratch s;
    const std::string input = (s.dir / "model.bin").string();
    std::ofstream(input) << "weights";
    CHECK_THAT(check_outputs({"--json", "/dev/null"}), Contains("--json /dev/null: not a regular file"));
    CHECK_THAT(check_outputs({"--timeline", "/dev/full"}), Contains("not a regular file"));
    if (fs::exists("/proc/self/status"))
        CHECK_THAT(check_outputs({"--json", "/proc/self/status"}), Contains("cannot create a file in /proc/self"));
    CHECK_THAT(check_outputs({"--dump", "/proc/self/pd-dump"}), Contains("--dump /proc/self/pd-dump: cannot create"));
    // the file another option of the run reads
    CLI::App app{"test program", "chXX_test"};
    pd::CommonOptions o;
    std::string checkpoint;
    pd::add_common_options(app, o, {"v1"});
    app.add_option("--checkpoint", checkpoint);
    std::vector<std::string> args = {"chXX_test", "--checkpoint", input, "--json",
                                     (s.dir / "." / "model.bin").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    app.parse(int(argv.size()), argv.data());
    CHECK_THAT(pd::check_output_options(app), Contains("the file --checkpoint reads; an output must not replace"));
    CHECK(contents(input) == "weights");
}
