// Diagnostics of cooperative groups whose threads do not all reach a group's barrier or
// collective (undefined behaviour on a GPU: a hang or garbage; on the simulator:
// cudaErrorLaunchFailure and a diagnostic naming the thread and the line of the group call, as
// for the warp intrinsics the groups are built on). Cases: a tile.sync() that half of each tile
// never reaches (they returned); a tile whose threads wait at tile.sync() and block.sync(); a
// cg::reduce called by 20 of the 32 threads of a tile; a tile of 32 in a block of 48 threads,
// whose second tile has 16; the threads of one tile at two different collectives; a coalesced
// group whose rank 0 leaves before g.sync(); a run-time tiled_partition of 3 threads. After
// each, cudaDeviceReset() and a valid launch runs. The words checked hold under every schedule
// (PD_SIM_SCHEDULE=random may report another thread).
#include "diag.cuh"

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

constexpr int kExitLine = __LINE__ + 6;
__global__ void tile_sync_after_exit(int* out) {
    cg::thread_block_tile<8> tile = cg::tiled_partition<8>(cg::this_thread_block());
    // Bug: the upper half of each tile returns, so it never reaches the tile's barrier.
    if (tile.thread_rank() >= 4) return;
    out[threadIdx.x] = 1;
    tile.sync();
}

constexpr int kTileSyncLine = __LINE__ + 6, kBlockSyncLine = __LINE__ + 8;
__global__ void tile_sync_and_block_sync(int* out) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    // Bug: only the lower half of each tile waits at the tile's barrier.
    if (tile.thread_rank() < 8) {
        tile.sync();
    }
    block.sync();
    out[threadIdx.x] = 1;
}

constexpr int kReduceLine = __LINE__ + 5;
__global__ void reduce_in_branch(const int* in, int* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int v = in[threadIdx.x];
    // Bug: 12 threads of the tile skip the reduction.
    if (tile.thread_rank() < 20) v = cg::reduce(tile, v, cg::plus<int>());
    out[threadIdx.x] = v;
}

constexpr int kPartialLine = __LINE__ + 6;
__global__ void partial_tile(const int* in, int* out) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int v = in[threadIdx.x];
    // Bug: launched with 48 threads, so the second tile has 16 threads, not 32.
    for (unsigned offset = 16; offset > 0; offset /= 2) {
        v += tile.shfl_down(v, offset);
    }
    out[threadIdx.x] = v;
}

constexpr int kSyncLine = __LINE__ + 6, kShflLine = __LINE__ + 8;
__global__ void different_collectives(int* out) {
    cg::thread_block_tile<8> tile = cg::tiled_partition<8>(cg::this_thread_block());
    int v = int(threadIdx.x);
    // Bug: the two halves of a tile call different collectives.
    if (tile.thread_rank() < 4) {
        tile.sync();
    } else {
        v = tile.shfl(v, 0);
    }
    out[threadIdx.x] = v;
}

constexpr int kCoalescedLine = __LINE__ + 8;
__global__ void coalesced_leaver(int* out) {
    const int lane = threadIdx.x % 32;
    if (lane < 10) {
        cg::coalesced_group g = cg::coalesced_threads();
        out[threadIdx.x] = 1;
        // Bug: rank 0 of the group leaves before the group's barrier.
        if (g.thread_rank() == 0) return;
        g.sync();
    }
}

constexpr int kTileSizeLine = __LINE__ + 4;
__global__ void odd_tile_size(int* out) {
    cg::thread_block block = cg::this_thread_block();
    // Bug: a tile of 3 threads; tiles have 1, 2, 4, 8, 16 or 32.
    cg::thread_group tile = cg::tiled_partition(block, 3);
    out[threadIdx.x] = int(tile.thread_rank());
}

int main() {
    using conformance::at;
    int *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, 64 * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, 64 * sizeof(int)));
    CUDA_OK(cudaMemset(d_in, 0, 64 * sizeof(int)));

    tile_sync_after_exit<<<1, 32>>>(d_out);
    conformance::expect_fault("tile.sync() after half the tile returned", cudaErrorLaunchFailure,
                              {"block (0,0,0) thread (", "__syncwarp", at(__FILE__, kExitLine), "exited"});
    check_recovered("tile.sync() after half the tile returned");

    tile_sync_and_block_sync<<<1, 64>>>(d_out);
    conformance::expect_fault("tile.sync() and block.sync()", cudaErrorLaunchFailure,
                              {"deadlock", "block (0,0,0) thread (0,0,0)", "__syncwarp", at(__FILE__, kTileSyncLine),
                               "__syncthreads", at(__FILE__, kBlockSyncLine)});
    check_recovered("tile.sync() and block.sync()");

    reduce_in_branch<<<1, 32>>>(d_in, d_out);
    conformance::expect_fault("cg::reduce in a branch", cudaErrorLaunchFailure,
                              {"thread (", "__shfl_xor_sync", at(__FILE__, kReduceLine), "exited"});
    check_recovered("cg::reduce in a branch");

    partial_tile<<<1, 48>>>(d_in, d_out);
    conformance::expect_fault("a tile of 32 in a block of 48", cudaErrorLaunchFailure,
                              {"thread (", "__shfl_down_sync", at(__FILE__, kPartialLine), "0xffffffff", "do not exist",
                               "warp 1 has 16 threads", "48"});
    check_recovered("a tile of 32 in a block of 48");

    different_collectives<<<1, 8>>>(d_out);
    conformance::expect_fault(
        "different collectives in one tile", cudaErrorLaunchFailure,
        {"different warp collectives", "__syncwarp", at(__FILE__, kSyncLine), "__shfl_sync", at(__FILE__, kShflLine)});
    check_recovered("different collectives in one tile");

    coalesced_leaver<<<1, 32>>>(d_out);
    conformance::expect_fault("a coalesced group's rank 0 leaves", cudaErrorLaunchFailure,
                              {"thread (", "__syncwarp", at(__FILE__, kCoalescedLine), "exited"});
    check_recovered("a coalesced group's rank 0 leaves");

    odd_tile_size<<<1, 32>>>(d_out);
    conformance::expect_fault("tiled_partition(block, 3)", cudaErrorLaunchFailure,
                              {"thread (", "tiled_partition(parent, 3)", "power of two", at(__FILE__, kTileSizeLine)});
    check_recovered("tiled_partition(block, 3)");

    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    return conformance::finish();
}
