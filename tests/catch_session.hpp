/// @file catch_session.hpp
/// @brief Catch2's runner, compiled once (tests/catch_session.cpp) for every test binary: the
/// mains of the CPU, kernel, lab and model tests call it instead of each compiling Catch2's
/// implementation again (about half a minute of compile each).
#pragma once

namespace pd::testing {

/// Runs the tests Catch2's command line @p argv selects and returns Catch2's exit code.
int run_catch(int argc, char** argv);

}  // namespace pd::testing
