// Compile-only input of the test sim.unsupported.grid_group (not a conformance program): a
// grid-wide group cannot run on the simulator, which runs each block to completion, so building
// this file for it must fail with the simulator's message naming grid-wide groups (nvcc builds
// it; on a GPU it needs a cooperative launch).
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

__global__ void two_phases(int* data) {
    cg::grid_group grid = cg::this_grid();
    data[grid.thread_rank()] += 1;
    grid.sync();
    data[grid.thread_rank()] *= 2;
}

int main() {
    two_phases<<<4, 128>>>(nullptr);
    return 0;
}
