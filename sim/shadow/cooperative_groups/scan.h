// Shadows the toolkit's cooperative_groups/scan.h for the simulator build.
#error \
    "cooperative_groups/scan.h (cg::inclusive_scan, cg::exclusive_scan) does not run on the pd::sim CPU simulator: write the scan with tile.shfl_up (cooperative_groups.h and cg::reduce from cooperative_groups/reduce.h do run)"
