// Cooperative groups (cooperative_groups.h and cooperative_groups/reduce.h) against host models,
// for every thread: the thread_block's ranks, indices and sizes in a 3D grid of 2D blocks; tiles
// of 1, 2, 4, 8, 16 and 32 threads (thread_rank, meta_group_rank/size, shfl with ranks past the
// tile's end, shfl_up, shfl_down, shfl_xor, any, all, ballot, match_any, a 16-byte shuffle, a
// shared-memory exchange across tile.sync(), a tile of a tile, a thread_group made from a tile,
// and cg::reduce with plus, less, greater, bit_and, bit_or and bit_xor); coalesced_threads() in
// both sides of a divergent branch, in a block whose last warp is partial; a block reduction as
// a learner writes it (tile.shfl_down, block.sync(), cg::reduce); and the Programming Guide's
// reduction over a thread_group made by the run-time tiled_partition (block, tiles of 32, tiles
// of 4 made from those).
//
// On a GPU a side of a branch may be split further, so the members of a coalesced group are
// only required to hold the caller, lie on its side of the branch and agree with each other;
// on the simulator they are exactly the lanes of that side. Every other result is checked
// against values computed on the host from the members.
#include "check.cuh"

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <algorithm>
#include <vector>

namespace cg = cooperative_groups;

// ---- the thread_block ----------------------------------------------------------------------

constexpr int kBlockFields = 16;
const dim3 kApiGrid(2, 3, 2), kApiBlock(4, 6, 3);

__global__ void block_api(long long* out) {
    cg::thread_block block = cg::this_thread_block();
    const unsigned linear_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    long long* o = out + (linear_block * block.size() + block.thread_rank()) * kBlockFields;
    const dim3 gi = block.group_index(), ti = block.thread_index(), dt = block.dim_threads(), gd = block.group_dim();
    o[0] = block.thread_rank();
    o[1] = block.size();
    o[2] = block.num_threads();
    o[3] = gi.x, o[4] = gi.y, o[5] = gi.z;
    o[6] = ti.x, o[7] = ti.y, o[8] = ti.z;
    o[9] = dt.x, o[10] = dt.y, o[11] = dt.z;
    o[12] = gd.x * 10000 + gd.y * 100 + gd.z;
    o[13] = cg::thread_rank(block);
    o[14] = cg::group_size(block);
    cg::thread_block_tile<1> self = cg::this_thread();
    o[15] = self.size() * 100 + self.thread_rank() * 10 + self.meta_group_size();
}

void check_block_api() {
    const int blocks = int(kApiGrid.x * kApiGrid.y * kApiGrid.z);
    const int threads = int(kApiBlock.x * kApiBlock.y * kApiBlock.z);
    const std::size_t count = std::size_t(blocks) * threads * kBlockFields;
    std::vector<long long> want(count), got(count);
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) {
            long long* w = want.data() + (std::size_t(b) * threads + t) * kBlockFields;
            const long long tx = t % kApiBlock.x, ty = t / kApiBlock.x % kApiBlock.y,
                            tz = t / (kApiBlock.x * kApiBlock.y);
            const long long w_[kBlockFields] = {t,
                                                threads,
                                                threads,
                                                b % kApiGrid.x,
                                                b / kApiGrid.x % kApiGrid.y,
                                                b / (kApiGrid.x * kApiGrid.y),
                                                tx,
                                                ty,
                                                tz,
                                                kApiBlock.x,
                                                kApiBlock.y,
                                                kApiBlock.z,
                                                kApiBlock.x * 10000 + kApiBlock.y * 100 + kApiBlock.z,
                                                t,
                                                threads,
                                                100 + 0 + 1};
            std::copy(w_, w_ + kBlockFields, w);
        }
    long long* d;
    CUDA_OK(cudaMalloc(&d, count * sizeof(long long)));
    block_api<<<kApiGrid, kApiBlock>>>(d);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), d, count * sizeof(long long), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d));
    CHECK(conformance::mismatches("thread_block (rank, sizes, indices; field = index % 16)", got.data(), want.data(),
                                  count, [](long long a, long long b) { return a == b; }) == 0);
}

// ---- tiles of 1 to 32 threads ----------------------------------------------------------------

// A 2D block of three warps: ranks are x + y * 16.
constexpr int kTileBlockX = 16, kTileBlockY = 6, kTileThreads = kTileBlockX * kTileBlockY;

enum TileField {
    kRank,
    kSize,
    kNumThreads,
    kMetaRank,
    kMetaSize,
    kShfl,
    kShflUp1,
    kShflUp3,
    kShflDown1,
    kShflDown2,
    kShflXor1,
    kShflXorTop,
    kAny,
    kAll,
    kBallot,
    kMatch,
    kSum,
    kMin,
    kMax,
    kAnd,
    kOr,
    kXor,
    kFloatSum,
    kNeighbour,
    kGroupSize,
    kGroupRank,
    kQuadA,
    kQuadC,
    kQuadD,
    kHalfMetaRank,
    kHalfMetaSize,
    kHalfSum,
    kTileFields
};

// 16 bytes: more than one shuffle carries it.
struct Quad {
    int a, b, c, d;
};

template <int N>
__global__ void tile_ops(const int* values, const int* preds, const int* keys, long long* out) {
    __shared__ int exchange[kTileThreads];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
    const int t = block.thread_rank(), r = tile.thread_rank(), v = values[t];
    long long* o = out + t * kTileFields;
    o[kRank] = r;
    o[kSize] = tile.size();
    o[kNumThreads] = cg::group_size(tile);
    o[kMetaRank] = tile.meta_group_rank();
    o[kMetaSize] = tile.meta_group_size();
    o[kShfl] = tile.shfl(v, 3 * r + 1);  // ranks past the end wrap around the tile
    o[kShflUp1] = tile.shfl_up(v, 1);
    o[kShflUp3] = tile.shfl_up(v, 3);
    o[kShflDown1] = tile.shfl_down(v, 1);
    o[kShflDown2] = tile.shfl_down(v, 2);
    o[kShflXor1] = tile.shfl_xor(v, 1 % N);
    o[kShflXorTop] = tile.shfl_xor(v, N - 1);
    o[kAny] = tile.any(preds[t] & 1);
    o[kAll] = tile.all(preds[t] & 2);
    o[kBallot] = tile.ballot(preds[t] & 1);
    o[kMatch] = tile.match_any(keys[t]);
    o[kSum] = cg::reduce(tile, v, cg::plus<int>());
    o[kMin] = cg::reduce(tile, v, cg::less<int>());
    o[kMax] = cg::reduce(tile, v, cg::greater<int>());
    const unsigned bits = unsigned(v) * 2654435761u;
    o[kAnd] = cg::reduce(tile, bits, cg::bit_and<unsigned>());
    o[kOr] = cg::reduce(tile, bits, cg::bit_or<unsigned>());
    o[kXor] = cg::reduce(tile, bits, cg::bit_xor<unsigned>());
    o[kFloatSum] = (long long)cg::reduce(tile, float(v), cg::plus<float>());  // small integers: exact
    // Each thread reads the slot its next neighbour in the tile wrote before the tile's barrier.
    exchange[t] = v;
    tile.sync();
    o[kNeighbour] = exchange[t - r + (r + 1) % N];
    cg::thread_group group = tile;
    o[kGroupSize] = group.size();
    o[kGroupRank] = group.thread_rank();
    const Quad q{v, -v, t, 7 * v};
    const Quad moved = tile.shfl(q, (r + 1) % N);
    o[kQuadA] = moved.a, o[kQuadC] = moved.c, o[kQuadD] = moved.d;
    if constexpr (N >= 2) {
        cg::thread_block_tile<N / 2> half = cg::tiled_partition<N / 2>(tile);
        o[kHalfMetaRank] = half.meta_group_rank();
        o[kHalfMetaSize] = half.meta_group_size();
        o[kHalfSum] = cg::reduce(half, v, cg::plus<int>());
    } else {
        o[kHalfMetaRank] = o[kHalfMetaSize] = o[kHalfSum] = -1;
    }
}

template <int N>
void check_tile(std::uint64_t seed) {
    conformance::Lcg rng(seed);
    std::vector<int> values(kTileThreads), preds(kTileThreads), keys(kTileThreads);
    for (int t = 0; t < kTileThreads; ++t) {
        values[t] = rng.range(-1000, 1000);
        // bit 0 half the time; bit 1 almost always, so all() holds in some tiles and not others
        preds[t] = int(rng.next() % 2) | (rng.next() % 24 != 0 ? 2 : 0);
        keys[t] = rng.range(0, 2);
    }
    const std::size_t count = std::size_t(kTileThreads) * kTileFields;
    std::vector<long long> want(count), got(count);
    for (int t = 0; t < kTileThreads; ++t) {
        const int base = t / N * N, r = t % N, v = values[t];
        long long* w = want.data() + std::size_t(t) * kTileFields;
        auto at = [&](int rank) { return values[base + rank]; };
        w[kRank] = r, w[kSize] = N, w[kNumThreads] = N;
        w[kMetaRank] = t / N, w[kMetaSize] = kTileThreads / N;
        w[kShfl] = at((3 * r + 1) % N);
        w[kShflUp1] = r >= 1 ? at(r - 1) : v;
        w[kShflUp3] = r >= 3 ? at(r - 3) : v;
        w[kShflDown1] = r + 1 < N ? at(r + 1) : v;
        w[kShflDown2] = r + 2 < N ? at(r + 2) : v;
        w[kShflXor1] = at(r ^ (1 % N));
        w[kShflXorTop] = at(r ^ (N - 1));
        long long any = 0, all = 1, ballot = 0, match = 0, sum = 0, mn = v, mx = v;
        unsigned band = ~0u, bor = 0, bxor = 0;
        for (int k = 0; k < N; ++k) {
            const int p = preds[base + k], x = values[base + k];
            const unsigned bits = unsigned(x) * 2654435761u;
            any |= p & 1;
            all &= (p >> 1) & 1;
            ballot |= (long long)(p & 1) << k;
            match |= (long long)(keys[base + k] == keys[t]) << k;
            sum += x, mn = std::min<long long>(mn, x), mx = std::max<long long>(mx, x);
            band &= bits, bor |= bits, bxor ^= bits;
        }
        w[kAny] = any, w[kAll] = all, w[kBallot] = ballot, w[kMatch] = match;
        w[kSum] = sum, w[kMin] = mn, w[kMax] = mx, w[kAnd] = band, w[kOr] = bor, w[kXor] = bxor, w[kFloatSum] = sum;
        w[kNeighbour] = at((r + 1) % N);
        w[kGroupSize] = N, w[kGroupRank] = r;
        const int src = base + (r + 1) % N;
        w[kQuadA] = values[src], w[kQuadC] = src, w[kQuadD] = 7 * values[src];
        if constexpr (N >= 2) {
            const int h = N / 2, hbase = t / h * h;
            long long hsum = 0;
            for (int k = 0; k < h; ++k) hsum += values[hbase + k];
            w[kHalfMetaRank] = r / h, w[kHalfMetaSize] = 2, w[kHalfSum] = hsum;
        } else {
            w[kHalfMetaRank] = w[kHalfMetaSize] = w[kHalfSum] = -1;
        }
    }
    int *d_values, *d_preds, *d_keys;
    long long* d_out;
    CUDA_OK(cudaMalloc(&d_values, kTileThreads * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_preds, kTileThreads * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_keys, kTileThreads * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, count * sizeof(long long)));
    CUDA_OK(cudaMemcpy(d_values, values.data(), kTileThreads * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_preds, preds.data(), kTileThreads * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_keys, keys.data(), kTileThreads * sizeof(int), cudaMemcpyHostToDevice));
    tile_ops<N><<<1, dim3(kTileBlockX, kTileBlockY)>>>(d_values, d_preds, d_keys, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), d_out, count * sizeof(long long), cudaMemcpyDeviceToHost));
    char what[96];
    std::snprintf(what, sizeof what, "tile of %d (seed %llu; field = index %% %d, see TileField)", N,
                  (unsigned long long)seed, int(kTileFields));
    CHECK(conformance::mismatches(what, got.data(), want.data(), count,
                                  [](long long a, long long b) { return a == b; }) == 0);
    CUDA_OK(cudaFree(d_values));
    CUDA_OK(cudaFree(d_preds));
    CUDA_OK(cudaFree(d_keys));
    CUDA_OK(cudaFree(d_out));
}

// ---- coalesced_threads() in a divergent branch ------------------------------------------------

constexpr int kCoalescedThreads = 80;  // the last warp has 16 lanes

enum CoalescedField {
    cMask,
    cSize,
    cRank,
    cMetaRank,
    cMetaSize,
    cShfl,
    cShflDown1,
    cShflUp2,
    cAny,
    cAll,
    cBallot,
    cSum,
    cMin,
    cMax,
    cAnd,
    cOr,
    cXor,
    cNeighbour,
    cGroupSize,
    cGroupRank,
    kCoalescedFields
};

__device__ void record_coalesced(cg::coalesced_group g, const int* values, const int* preds, long long* out) {
    __shared__ int exchange[kCoalescedThreads];
    const int t = threadIdx.x, lane = t % 32, v = values[t];
    long long* o = out + t * kCoalescedFields;
    // The members' lanes, gathered with the group's own shuffle, rank by rank.
    unsigned mask = 0;
    for (unsigned k = 0; k < g.size(); ++k) mask |= 1u << g.shfl(lane, int(k));
    o[cMask] = mask;
    o[cSize] = g.size();
    o[cRank] = g.thread_rank();
    o[cMetaRank] = g.meta_group_rank();
    o[cMetaSize] = g.meta_group_size();
    o[cShfl] = g.shfl(v, int(g.size()) - 1);
    o[cShflDown1] = g.shfl_down(v, 1);
    o[cShflUp2] = g.shfl_up(v, 2);
    o[cAny] = g.any(preds[t] & 1);
    o[cAll] = g.all(preds[t] & 2);
    o[cBallot] = g.ballot(preds[t] & 1);
    o[cSum] = cg::reduce(g, v, cg::plus<int>());
    o[cMin] = cg::reduce(g, v, cg::less<int>());
    o[cMax] = cg::reduce(g, v, cg::greater<int>());
    const unsigned bits = unsigned(v) * 2654435761u;
    o[cAnd] = cg::reduce(g, bits, cg::bit_and<unsigned>());
    o[cOr] = cg::reduce(g, bits, cg::bit_or<unsigned>());
    o[cXor] = cg::reduce(g, bits, cg::bit_xor<unsigned>());
    // Each member reads the slot of the member of the next rank, written before the barrier.
    exchange[t] = v;
    g.sync();
    const unsigned next_rank = (g.thread_rank() + 1) % g.size();
    unsigned next_lane = 0;
    for (unsigned l = 0, k = 0; l < 32; ++l)
        if (mask & (1u << l)) {
            if (k == next_rank) next_lane = l;
            ++k;
        }
    o[cNeighbour] = exchange[t - lane + int(next_lane)];
    cg::thread_group group = g;
    o[cGroupSize] = group.size();
    o[cGroupRank] = group.thread_rank();
}

__global__ void coalesced_branches(const int* values, const int* preds, long long* out) {
    if (threadIdx.x % 3 == 0) {
        cg::coalesced_group every_third = cg::coalesced_threads();
        record_coalesced(every_third, values, preds, out);
    } else {
        cg::coalesced_group the_others = cg::coalesced_threads();
        record_coalesced(the_others, values, preds, out);
    }
}

void check_coalesced(std::uint64_t seed) {
    conformance::Lcg rng(seed);
    std::vector<int> values(kCoalescedThreads), preds(kCoalescedThreads);
    for (int t = 0; t < kCoalescedThreads; ++t) {
        values[t] = rng.range(-1000, 1000);
        preds[t] = int(rng.next() % 2) | (rng.next() % 16 != 0 ? 2 : 0);
    }
    const std::size_t count = std::size_t(kCoalescedThreads) * kCoalescedFields;
    std::vector<long long> got(count), want(count);
    int *d_values, *d_preds;
    long long* d_out;
    CUDA_OK(cudaMalloc(&d_values, kCoalescedThreads * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_preds, kCoalescedThreads * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_out, count * sizeof(long long)));
    CUDA_OK(cudaMemcpy(d_values, values.data(), kCoalescedThreads * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_preds, preds.data(), kCoalescedThreads * sizeof(int), cudaMemcpyHostToDevice));
    coalesced_branches<<<1, kCoalescedThreads>>>(d_values, d_preds, d_out);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), d_out, count * sizeof(long long), cudaMemcpyDeviceToHost));

    int bad_masks = 0;
    for (int t = 0; t < kCoalescedThreads; ++t) {
        const int warp_base = t / 32 * 32, lane = t % 32;
        const int lanes = std::min(32, kCoalescedThreads - warp_base);
        unsigned side = 0;  // the lanes of the warp on the caller's side of the branch
        for (int l = 0; l < lanes; ++l)
            if (((warp_base + l) % 3 == 0) == (t % 3 == 0)) side |= 1u << l;
        const unsigned mask = unsigned(got[std::size_t(t) * kCoalescedFields + cMask]);
        bool ok = (mask >> lane & 1u) && (mask & ~side) == 0;
#ifdef PD_BACKEND_SIM
        ok = ok && mask == side;  // the simulator gathers every lane of the side
#endif
        for (int l = 0; l < 32; ++l)  // every member sees the same members
            if (mask >> l & 1u) ok = ok && unsigned(got[std::size_t(warp_base + l) * kCoalescedFields + cMask]) == mask;
        if (!ok && bad_masks++ < 5)
            std::printf("  thread %d: members 0x%08x, its side of the branch 0x%08x\n", t, mask, side);

        // The model, from the members.
        std::vector<int> members;
        for (int l = 0; l < 32; ++l)
            if (mask >> l & 1u) members.push_back(warp_base + l);
        const int n = int(members.size());
        int rank = 0;
        while (rank < n && members[std::size_t(rank)] != t) ++rank;
        if (rank == n) continue;  // reported above: the caller is not a member
        auto value = [&](int k) { return values[std::size_t(members[std::size_t(k)])]; };
        long long* w = want.data() + std::size_t(t) * kCoalescedFields;
        w[cMask] = mask, w[cSize] = n, w[cRank] = rank, w[cMetaRank] = 0, w[cMetaSize] = 1;
        w[cShfl] = value(n - 1);
        w[cShflDown1] = rank + 1 < n ? value(rank + 1) : values[t];
        w[cShflUp2] = rank >= 2 ? value(rank - 2) : values[t];
        long long any = 0, all = 1, ballot = 0, sum = 0, mn = values[t], mx = values[t];
        unsigned band = ~0u, bor = 0, bxor = 0;
        for (int k = 0; k < n; ++k) {
            const int p = preds[std::size_t(members[std::size_t(k)])], x = value(k);
            const unsigned bits = unsigned(x) * 2654435761u;
            any |= p & 1, all &= (p >> 1) & 1, ballot |= (long long)(p & 1) << k;
            sum += x, mn = std::min<long long>(mn, x), mx = std::max<long long>(mx, x);
            band &= bits, bor |= bits, bxor ^= bits;
        }
        w[cAny] = any, w[cAll] = all, w[cBallot] = ballot;
        w[cSum] = sum, w[cMin] = mn, w[cMax] = mx, w[cAnd] = band, w[cOr] = bor, w[cXor] = bxor;
        w[cNeighbour] = value((rank + 1) % n);
        w[cGroupSize] = n, w[cGroupRank] = rank;
    }
    CHECK_MSG(bad_masks == 0, "%d threads got members that are not a consistent part of their side of the branch",
              bad_masks);
    CHECK(conformance::mismatches("coalesced_threads() (field = index % 20, see CoalescedField)", got.data(),
                                  want.data(), count, [](long long a, long long b) { return a == b; }) == 0);
    CUDA_OK(cudaFree(d_values));
    CUDA_OK(cudaFree(d_preds));
    CUDA_OK(cudaFree(d_out));
}

// ---- a block reduction as a learner writes it ----------------------------------------------

constexpr int kReduceThreads = 256;

__device__ float tile_sum(cg::thread_block_tile<32> tile, float v) {
    for (int offset = tile.size() / 2; offset > 0; offset /= 2) v += tile.shfl_down(v, offset);
    return v;  // the tile's sum, in rank 0
}

__global__ void block_sums(const float* in, float* out, int n) {
    __shared__ float tile_totals[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = tile_sum(tile, i < n ? in[i] : 0.0f);
    if (tile.thread_rank() == 0) tile_totals[tile.meta_group_rank()] = v;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        const float total =
            cg::reduce(tile, tile.thread_rank() < tile.meta_group_size() ? tile_totals[tile.thread_rank()] : 0.0f,
                       cg::plus<float>());
        if (tile.thread_rank() == 0) out[blockIdx.x] = total;
    }
}

void check_block_sums(int n, std::uint64_t seed) {
    conformance::Lcg rng(seed);
    const int blocks = (n + kReduceThreads - 1) / kReduceThreads;
    std::vector<float> in(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(blocks)),
        want(static_cast<std::size_t>(blocks), 0.0f);
    for (int i = 0; i < n; ++i) {
        in[std::size_t(i)] = float(rng.range(-50, 50));  // every partial sum is exact
        want[std::size_t(i / kReduceThreads)] += in[std::size_t(i)];
    }
    float *d_in, *d_out;
    CUDA_OK(cudaMalloc(&d_in, std::size_t(n) * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_out, std::size_t(blocks) * sizeof(float)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
    block_sums<<<blocks, kReduceThreads>>>(d_in, d_out, n);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), d_out, std::size_t(blocks) * sizeof(float), cudaMemcpyDeviceToHost));
    char what[64];
    std::snprintf(what, sizeof what, "block sums (n = %d, seed %llu)", n, (unsigned long long)seed);
    CHECK(conformance::bit_mismatches(what, got.data(), want.data(), std::size_t(blocks)) == 0);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
}

// ---- the Programming Guide's reduction over a thread_group ----------------------------------

constexpr int kGroupThreads = 128;

// Sums val over g through temp (one slot per thread of g); rank 0 of g gets the sum.
__device__ int reduce_sum(cg::thread_group g, int* temp, int val) {
    const int lane = int(g.thread_rank());
    for (int i = int(g.size()) / 2; i > 0; i /= 2) {
        temp[lane] = val;
        g.sync();  // every store before any load
        if (lane < i) val += temp[lane + i];
        g.sync();  // every load before the next store
    }
    return val;
}

__global__ void group_sums(const int* in, int* block_out, int* tile32_out, int* tile4_out) {
    __shared__ int temp[kGroupThreads];
    cg::thread_block block = cg::this_thread_block();
    const int t = int(block.thread_rank()), i = int(blockIdx.x) * kGroupThreads + t;
    const int v = in[i];
    const int block_sum = reduce_sum(block, temp, v);
    if (t == 0) block_out[blockIdx.x] = block_sum;
    cg::sync(block);
    cg::thread_group tile32 = cg::tiled_partition(block, 32);
    const int sum32 = reduce_sum(tile32, temp + t / 32 * 32, v);
    if (tile32.thread_rank() == 0) tile32_out[i / 32] = sum32;
    cg::thread_group tile4 = cg::tiled_partition(tile32, 4);
    const int sum4 = reduce_sum(tile4, temp + t / 4 * 4, v);
    if (tile4.thread_rank() == 0) tile4_out[i / 4] = sum4;
}

void check_group_sums(std::uint64_t seed) {
    constexpr int blocks = 3, n = blocks * kGroupThreads;
    conformance::Lcg rng(seed);
    std::vector<int> in(n), want_block(blocks, 0), want32(n / 32, 0), want4(n / 4, 0);
    for (int i = 0; i < n; ++i) {
        in[i] = rng.range(-1000, 1000);
        want_block[i / kGroupThreads] += in[i], want32[i / 32] += in[i], want4[i / 4] += in[i];
    }
    std::vector<int> got_block(blocks), got32(n / 32), got4(n / 4);
    int *d_in, *d_block, *d32, *d4;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_OK(cudaMalloc(&d_block, blocks * sizeof(int)));
    CUDA_OK(cudaMalloc(&d32, n / 32 * sizeof(int)));
    CUDA_OK(cudaMalloc(&d4, n / 4 * sizeof(int)));
    CUDA_OK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    group_sums<<<blocks, kGroupThreads>>>(d_in, d_block, d32, d4);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got_block.data(), d_block, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got32.data(), d32, n / 32 * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got4.data(), d4, n / 4 * sizeof(int), cudaMemcpyDeviceToHost));
    auto eq = [](int a, int b) { return a == b; };
    CHECK(conformance::mismatches("thread_group sums of blocks", got_block.data(), want_block.data(), blocks, eq) == 0);
    CHECK(conformance::mismatches("thread_group sums of tiles of 32", got32.data(), want32.data(), n / 32, eq) == 0);
    CHECK(conformance::mismatches("thread_group sums of tiles of 4", got4.data(), want4.data(), n / 4, eq) == 0);
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_block));
    CUDA_OK(cudaFree(d32));
    CUDA_OK(cudaFree(d4));
}

int main() {
    check_block_api();
    check_tile<1>(11);
    check_tile<2>(12);
    check_tile<4>(13);
    check_tile<8>(14);
    check_tile<16>(15);
    check_tile<32>(16);
    check_coalesced(21);
    check_coalesced(22);
    for (int n : {1, 31, 33, 256, 1000, 4097}) check_block_sums(n, 100 + std::uint64_t(n));
    check_group_sums(31);
    CUDA_OK(cudaDeviceSynchronize());
    return conformance::finish();
}
