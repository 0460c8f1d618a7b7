// Shadows the toolkit's cooperative_groups/memcpy_async.h for the simulator build.
#error \
    "cooperative_groups/memcpy_async.h (cg::memcpy_async, cg::wait, cg::wait_prior) does not run on the pd::sim CPU simulator: copy with plain loads and stores followed by block.sync(), or use pd::cp_async from pd/warp_mma.cuh"
