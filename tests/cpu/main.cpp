// Catch2's own main for the host-only tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
