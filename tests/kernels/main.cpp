// Main of the kernel test binaries: exits 77 (CTest: skipped) when no device is present,
// except when Catch2 is only asked to list the tests, which needs no device.
#include "../catch_session.hpp"
#include "pd/device.hpp"

#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
    bool listing = false;
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-l") == 0) listing = true;
    if (!listing) {
        const pd::DeviceProbe probe = pd::probe_devices();
        if (probe.count == 0) {
            std::cerr << "SKIPPED: no CUDA device (" << probe.reason << "); these tests need one\n";
            return 77;
        }
    }
    return pd::testing::run_catch(argc, argv);
}
