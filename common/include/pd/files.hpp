/// @file files.hpp
/// @brief The files the programs write (`--json`, `--dump`, `--timeline`): each is written
/// whole or not at all, and the options that name them are checked together before any work.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace pd {

/// Writes the file @p path whole or not at all: @p write fills a temporary file in the same
/// directory (`.NAME.tmp-PID`), which is renamed to @p path once it is complete and flushed. A
/// reader, or a run interrupted by SIGINT or SIGTERM (whose handler removes the temporary
/// file), never finds a half-written file under the final name.
/// Throws std::runtime_error naming @p path when it cannot be written.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

/// The help group of every option that names a file or directory the program writes.
inline constexpr const char* kOutputGroup = "Outputs";

/// Checks the options of @p app in kOutputGroup that were given: none is empty, a file option
/// (type name other than DIR) names no directory, does not end in '/' and lies in a directory
/// that exists, and no two name the same path. Returns "" when they are fine, else the message naming the options.
std::string check_output_options(const CLI::App& app);

/// Prepares @p dir (with a trailing '/') for a dump: creates it, or, when it exists, requires
/// it to be empty or to hold an earlier dump of these programs (the file `.pd-dump` lists what
/// that dump wrote), whose files are removed, so that the directory holds this run's files
/// only. Throws std::invalid_argument naming @p flag otherwise.
void prepare_dump_directory(const std::string& dir, const std::string& flag);

/// Records @p name, a file about to be written into the dump directory @p dir, in its
/// `.pd-dump` list (before it is written: an interrupted run's files are listed too).
void record_dump_file(const std::string& dir, const std::string& name);

}  // namespace pd
