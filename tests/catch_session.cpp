// Catch2's implementation and its session, compiled once for every test binary (see
// catch_session.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

namespace pd::testing {

int run_catch(int argc, char** argv) {
    return Catch::Session().run(argc, argv);
}

}  // namespace pd::testing
