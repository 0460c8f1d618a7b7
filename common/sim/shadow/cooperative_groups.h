// Shadows cooperative groups for the simulator build.
#error "cooperative groups do not run on the pd::sim CPU simulator (use __syncthreads, __syncwarp and the *_sync warp intrinsics)"
