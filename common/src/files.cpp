// Output files written whole or not at all, the checks of the output options, the dump directory.
#include "pd/files.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <vector>

namespace pd {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDumpList = ".pd-dump";

// The temporary file being written, for the signal handler (which may only call
// async-signal-safe functions: unlink, signal, raise).
char temp_being_written[4096] = {};
using Handler = void (*)(int);
Handler previous_sigint = SIG_DFL, previous_sigterm = SIG_DFL;

extern "C" void remove_temp_and_reraise(int sig) {
    if (temp_being_written[0] != '\0') unlink(temp_being_written);
    std::signal(sig, sig == SIGINT ? previous_sigint : previous_sigterm);  // then what it did before
    std::raise(sig);
}

/// Puts the handler in place for SIGINT and SIGTERM, before each write (so that it is there
/// again when something replaced it); an ignored signal stays ignored.
void install_handlers() {
    for (int sig : {SIGINT, SIGTERM}) {
        const Handler previous = std::signal(sig, remove_temp_and_reraise);
        if (previous == remove_temp_and_reraise || previous == SIG_ERR) continue;
        if (previous == SIG_IGN) {
            std::signal(sig, SIG_IGN);
            continue;
        }
        (sig == SIGINT ? previous_sigint : previous_sigterm) = previous;
    }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    const fs::path target(path);
    const fs::path temp =
        target.parent_path() / ("." + target.filename().string() + ".tmp-" + std::to_string(getpid()));
    const std::string temp_name = temp.string();
    if (temp_name.size() >= sizeof temp_being_written)
        throw std::runtime_error("cannot write " + path + ": the path is too long");
    install_handlers();
    std::memcpy(temp_being_written, temp_name.c_str(), temp_name.size() + 1);
    auto remove_temp = [&] {
        std::error_code ignored;
        fs::remove(temp, ignored);
        temp_being_written[0] = '\0';
    };
    auto give_up = [&](const std::string& why) {
        remove_temp();
        throw std::runtime_error("cannot write " + path + ": " + why);
    };
    {
        std::ofstream f(temp, std::ios::binary | std::ios::trunc);
        if (!f) give_up("cannot create " + temp_name);
        try {
            write(f);
        } catch (...) {  // the writer's own error, after the temporary file is gone
            f.close();
            remove_temp();
            throw;
        }
        f.flush();
        if (!f) give_up("error while writing");
    }
    std::error_code ec;
    fs::rename(temp, target, ec);
    if (ec) give_up(ec.message());
    temp_being_written[0] = '\0';
}

std::string check_output_options(const CLI::App& app) {
    std::vector<std::pair<std::string, fs::path>> seen;  // (flag, absolute path)
    const auto options = app.get_options([](const CLI::Option* o) { return o->get_group() == kOutputGroup; });
    for (const CLI::Option* o : options) {
        if (o->count() == 0) continue;
        const std::string flag = o->get_name(), value = o->results().empty() ? "" : o->results().back();
        const bool directory = o->get_type_name() == "DIR";
        if (value.empty()) return flag + " \"\": name a " + (directory ? "directory" : "file");
        if (value == "-") continue;  // stdout, where the option allows it (its own check)
        if (!directory && (value.back() == '/' || fs::is_directory(value)))
            return flag + " " + value + ": is a directory; name a file";
        const fs::path parent = fs::path(value).parent_path();
        if (!directory && !parent.empty() && !fs::is_directory(parent))
            return flag + " " + value + ": directory " + parent.string() + " does not exist";
        const fs::path at = fs::absolute(value).lexically_normal();
        for (const auto& [other, path] : seen)
            if (path == at) return flag + " " + value + ": the same path as " + other + "; each output needs its own";
        seen.emplace_back(flag, at);
    }
    return {};
}

void prepare_dump_directory(const std::string& dir, const std::string& flag) {
    std::error_code ec;
    if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec)) {
        const fs::path list = fs::path(dir) / kDumpList;
        std::ifstream in(list);
        if (!in)
            throw std::invalid_argument(flag + " " + dir +
                                        ": the directory is not empty and holds no earlier dump of these programs "
                                        "(no .pd-dump file); name an empty or a new directory");
        std::set<std::string> names;
        for (std::string name; std::getline(in, name);)
            if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..") names.insert(name);
        for (const std::string& name : names) fs::remove(fs::path(dir) / name, ec);
        fs::remove(list, ec);
    }
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw std::invalid_argument(flag + " " + dir + ": cannot create the directory" +
                                    (ec ? " (" + ec.message() + ")" : ""));
    std::ofstream(fs::path(dir) / kDumpList, std::ios::trunc);  // this run's list, empty so far
}

void record_dump_file(const std::string& dir, const std::string& name) {  // before the file is written
    std::ofstream(fs::path(dir) / kDumpList, std::ios::app) << name << "\n";
}

}  // namespace pd
