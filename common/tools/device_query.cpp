// pd_device_query [--quiet]: reports the CUDA devices, or exits 77 when there are none.
#include "pd/device.hpp"

#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
    const bool quiet = argc > 1 && std::strcmp(argv[1], "--quiet") == 0;
    const pd::DeviceProbe probe = pd::probe_devices();
    if (probe.count == 0) {
        std::cerr << "no CUDA device: " << probe.reason << "\n";
        return 77;
    }
    if (!quiet)
        for (int i = 0; i < probe.count; ++i) std::cout << pd::describe(pd::query_device(i));
    return 0;
}
