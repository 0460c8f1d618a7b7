// Main of the host-only tests: Catch2's runner (tests/catch_session.cpp).
#include "../catch_session.hpp"

int main(int argc, char** argv) {
    return pd::testing::run_catch(argc, argv);
}
