// Output files written whole or not at all, the checks of the output options, the dump directory.
#include "pd/files.hpp"

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
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

namespace {

/// True when a file can be created in @p dir by this process (a probe, removed at once).
std::string cannot_create_in(const fs::path& dir) {
    const fs::path probe = dir / (".pd-probe-" + std::to_string(getpid()));
    const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) return std::strerror(errno);
    ::close(fd);
    ::unlink(probe.c_str());
    return {};
}

/// The nearest existing directory at or above @p p.
fs::path existing_ancestor(fs::path p) {
    std::error_code ec;
    p = fs::absolute(p).lexically_normal();
    while (!p.empty() && !fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
    return p;
}

constexpr const char* kStagingPrefix = ".pd-dump-new-";

}  // namespace

void require_regular_file(const std::string& path) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) throw std::invalid_argument(path + ": no such file");
    if (st.type() == fs::file_type::directory) throw std::invalid_argument(path + ": is a directory, not a file");
    if (st.type() != fs::file_type::regular)
        throw std::invalid_argument(path + ": not a regular file (a pipe, a device or a socket)");
}

CLI::Validator input_file() {
    return CLI::Validator(
        [](std::string& path) -> std::string {
            try {
                require_regular_file(path);
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
            return {};
        },
        "FILE");
}

std::string check_output_options(const CLI::App& app) {
    std::vector<std::pair<std::string, fs::path>> seen;  // (flag, absolute path)
    const auto options = app.get_options([](const CLI::Option* o) { return o->get_group() == kOutputGroup; });
    std::error_code ec;
    for (const CLI::Option* o : options) {
        if (o->count() == 0) continue;
        const std::string flag = o->get_name(), value = o->results().empty() ? "" : o->results().back();
        const bool directory = o->get_type_name() == "DIR";
        if (value.empty()) return flag + " \"\": name a " + (directory ? "directory" : "file");
        if (value == "-") continue;  // stdout, where the option allows it (its own check)
        if (!directory && (value.back() == '/' || fs::is_directory(value, ec)))
            return flag + " " + value + ": is a directory; name a file";
        const fs::file_status status = fs::status(value, ec);
        if (!directory && fs::exists(status) && status.type() != fs::file_type::regular)
            return flag + " " + value +
                   ": not a regular file (a device, a pipe or a socket); name a new file or a "
                   "regular one";
        const fs::path parent = fs::path(value).parent_path();
        if (!directory && !parent.empty() && !fs::is_directory(parent, ec))
            return flag + " " + value + ": directory " + parent.string() + " does not exist";
        const fs::path where = directory ? existing_ancestor(value) : (parent.empty() ? fs::path(".") : parent);
        if (directory && fs::exists(value, ec) && !fs::is_directory(value, ec))
            return flag + " " + value + ": exists and is not a directory";
        if (const std::string why =
                cannot_create_in(directory && fs::is_directory(value, ec) ? fs::path(value) : where);
            !why.empty())
            return flag + " " + value + ": cannot create a file in " + where.string() + " (" + why + ")";
        const fs::path at = fs::absolute(value).lexically_normal();
        for (const auto& [other, path] : seen)
            if (path == at) return flag + " " + value + ": the same path as " + other + "; each output needs its own";
        seen.emplace_back(flag, at);
        // an output must not replace what this run reads: any other option naming the same file
        if (directory || !fs::exists(value, ec)) continue;
        for (const CLI::Option* in : app.get_options()) {
            if (in->get_group() == kOutputGroup) continue;
            for (const std::string& v : in->results())
                if (!v.empty() && fs::exists(v, ec) && fs::equivalent(v, value, ec))
                    return flag + " " + value + ": the file " + in->get_name() +
                           " reads; an output must not replace an input of the same run";
        }
    }
    return {};
}

DumpDirectory::~DumpDirectory() {
    if (!active()) return;
    try {
        if (std::uncaught_exceptions() > exceptions_)
            discard();
        else
            commit();
    } catch (...) {  // (no throw from a destructor: the earlier dump stays as it is)
    }
}

void DumpDirectory::open(const std::string& dir, const std::string& flag) {
    std::error_code ec;
    const fs::path d(dir);
    if (fs::exists(d, ec) && !fs::is_directory(d, ec))
        throw std::invalid_argument(flag + " " + dir + ": exists and is not a directory");
    if (fs::is_directory(d, ec)) {
        bool earlier = false, foreign = false;
        for (const auto& e : fs::directory_iterator(d, ec)) {
            const std::string name = e.path().filename().string();
            if (name.starts_with(kStagingPrefix)) {  // left by a killed run: never committed
                fs::remove_all(e.path(), ec);
                continue;
            }
            (name == kDumpList ? earlier : foreign) = true;
        }
        if (foreign && !earlier)
            throw std::invalid_argument(flag + " " + dir +
                                        ": the directory is not empty and holds no earlier dump of these programs "
                                        "(no .pd-dump file); name an empty or a new directory");
    } else {
        fs::create_directories(d, ec);
        if (ec || !fs::is_directory(d))
            throw std::invalid_argument(flag + " " + dir + ": cannot create the directory" +
                                        (ec ? " (" + ec.message() + ")" : ""));
        created_ = true;
    }
    dir_ = dir.back() == '/' ? dir : dir + "/";
    const fs::path staging = d / (std::string(kStagingPrefix) + std::to_string(getpid()));
    fs::remove_all(staging, ec);
    fs::create_directory(staging, ec);
    if (ec) throw std::invalid_argument(flag + " " + dir + ": cannot write into the directory (" + ec.message() + ")");
    staging_ = staging.string() + "/";
    exceptions_ = std::uncaught_exceptions();
}

std::string DumpDirectory::path(const std::string& name) const {
    return staging_ + name;
}

void DumpDirectory::commit() {
    if (!active()) return;
    const fs::path d(dir_), list = d / kDumpList;
    std::error_code ec;
    std::set<std::string> earlier;  // the earlier dump's files, as its list names them
    std::ifstream in(list);
    for (std::string name; std::getline(in, name);)
        if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..") earlier.insert(name);
    std::vector<std::string> mine;
    for (const auto& e : fs::directory_iterator(staging_, ec)) mine.push_back(e.path().filename().string());
    std::sort(mine.begin(), mine.end());
    for (const std::string& name : earlier) fs::remove(d / name, ec);
    for (const std::string& name : mine) {
        fs::rename(fs::path(staging_) / name, d / name, ec);
        if (ec) throw std::runtime_error("cannot move " + name + " into " + dir_ + ": " + ec.message());
    }
    write_file_atomically(list.string(), [&](std::ostream& f) {
        for (const std::string& name : mine) f << name << "\n";
    });
    fs::remove_all(staging_, ec);
    staging_.clear();
}

void DumpDirectory::discard() {
    if (!active()) return;
    std::error_code ec;
    fs::remove_all(staging_, ec);
    staging_.clear();
    if (created_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

}  // namespace pd
