/// @file files.hpp
/// @brief The files the programs write (`--json`, `--dump`, `--timeline`): each is written
/// whole or not at all, and the options that name them are checked together before any work.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace pd {

/// Writes the file @p path whole or not at all: @p write fills a temporary file in the same
/// directory (`.NAME.tmp-PID`), which is renamed to @p path once it is complete and flushed. A
/// reader, or a run interrupted by SIGINT or SIGTERM (whose handler removes the temporary
/// file), never finds a half-written file under the final name.
/// Throws std::runtime_error naming @p path when it cannot be written.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

/// Throws std::invalid_argument naming @p path unless it is a regular file that exists: a
/// directory, a pipe (whose open would wait for a writer), a device or a missing path is refused
/// before a reader opens it.
void require_regular_file(const std::string& path);

/// A CLI11 check for an option that names a file the program reads: an existing regular file
/// (require_regular_file()), so that the refusal names the option when the options are parsed.
CLI::Validator input_file();

/// The help group of every option that names a file or directory the program writes.
inline constexpr const char* kOutputGroup = "Outputs";

/// Checks the options of @p app in kOutputGroup that were given, before any work: none is empty;
/// a file option (type name other than DIR) names a regular file or a new path, never a
/// directory, a device, a pipe or a file of /proc (whose rename would replace the node), does not
/// end in '/', lies in a directory that exists and in which the program can create a file (the
/// output is written beside it, then renamed); a directory option names a directory or a new path
/// that can be created; no two name the same path, and no output is a file that another option of
/// the same run reads (an input, such as `--checkpoint`). Returns "" when they are fine, else the
/// message naming the options.
std::string check_output_options(const CLI::App& app);

/// A `--dump` directory written whole or not at all. The directory must be new, empty, or hold an
/// earlier dump of these programs (its `.pd-dump` file lists that dump's files). The run writes
/// its files into a staging directory inside it (`DIR/.pd-dump-new-PID/`); commit() then replaces
/// the earlier dump's files with them and lists them in `.pd-dump`. A run that ends otherwise
/// (refused with exit code 2 after the dump was opened, stopped by an exception, interrupted by a
/// signal) leaves the earlier dump as it was: the destructor removes the staging directory (and
/// the directory itself when the run created it and it stayed empty), unless it runs at the
/// normal end of a scope, which commits; a staging directory left by a killed run is removed by
/// the next run's open().
class DumpDirectory {
public:
    DumpDirectory() = default;
    DumpDirectory(const DumpDirectory&) = delete;
    DumpDirectory& operator=(const DumpDirectory&) = delete;
    /// Commits at the normal end of its scope; discards when the scope is left by an exception.
    ~DumpDirectory();

    /// Checks @p dir and opens the staging directory (creating @p dir when it is new). Throws
    /// std::invalid_argument naming @p flag when it cannot be used: a directory that holds
    /// files of no earlier dump, a path that is not a directory, one that cannot be created.
    /// @param dir the directory  @param flag the option, for messages ("--dump")
    void open(const std::string& dir, const std::string& flag);
    /// True once open() succeeded (and until commit() or discard()).
    bool active() const { return !staging_.empty(); }
    /// The directory, with a trailing '/' (what the run's messages name).
    const std::string& dir() const { return dir_; }
    /// Where the run writes the file @p name now: its staging directory.
    std::string path(const std::string& name) const;
    /// Replaces the earlier dump's files by this run's and lists them in `.pd-dump`.
    void commit();
    /// Removes this run's files; the earlier dump stays.
    void discard();

private:
    std::string dir_, staging_;
    bool created_ = false;
    int exceptions_ = 0;  // std::uncaught_exceptions() at open(): more at the destructor means unwinding
};

}  // namespace pd
