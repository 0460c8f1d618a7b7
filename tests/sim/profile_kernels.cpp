// The profiler on the kernels of chapters 01 to 08 (docs/simulator.md, "The profiler"): each
// kernel's counters against the count worked out from its code, at shapes whose rows, tiles and
// vectors are whole (so every count is exact), with the inputs in cudaMalloc buffers (aligned to
// 256 bytes). Built against the kernels compiled for the profiler (pd_kernels_prof); the values
// of the results are the kernel tests' business (tests/kernels), here only the traffic is.
//
// Each count below is the source's accesses as nvcc issues them: every load and store named is
// one instruction of the kernel's loop per warp, none is hoisted out of a loop by either
// compiler (each reads a new address per iteration), and the vector loads are uint4 or float4
// in the source (one 16-byte access per lane on both).
#include "attention/attention.hpp"
#include "attention/decode_attention.hpp"
#include "attention/flash_attention.hpp"
#include "attention/paged_attention.hpp"
#include "gemm/gemm.hpp"
#include "gemv/gemv.hpp"
#include "pd/buffer.hpp"
#include "pd/sim/profile.hpp"
#include "quant/quant.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
namespace gm = pd::kernels::gemm;
namespace gv = pd::kernels::gemv;
namespace qt = pd::kernels::quant;
using pd::DeviceBuffer;
using pd::sim::KernelProfile;
using u64 = std::uint64_t;

namespace {

/// The kernels @p launch runs, counted (summed over their launches).
std::vector<KernelProfile> profiled(const std::function<void()>& launch) {
    pd::sim::profile_begin(50.0 * 1024 * 1024);
    launch();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    return pd::sim::profile_end();
}

/// The one kernel @p launch runs.
KernelProfile one(const std::function<void()>& launch) {
    const std::vector<KernelProfile> k = profiled(launch);
    REQUIRE(k.size() == 1);
    return k.front();
}

/// Sectors of @p bytes of whole, aligned rows.
constexpr u64 sectors(u64 bytes) {
    return bytes / 32;
}

/// Load efficiency: the bytes asked for over the bytes of the sectors touched.
double efficiency(const pd::sim::AccessCounts& c) {
    return double(c.unique_bytes) / double(32 * c.sectors);
}

}  // namespace

TEST_CASE("the profiler is compiled in", "[profile]") {
    REQUIRE(pd::sim::profiler_available());
}

// Chapter 03. v1: a thread per row, lanes K floats apart on W (32 sectors a request) and all on
// the same float of x (1 sector); v2: a warp per row, 32 consecutive floats of W and of x per
// iteration (4 sectors, efficiency 1); v3: one uint4 per lane, 16 sectors per request.
TEST_CASE("chapter 03: thread per row, warp per row, vectorized", "[profile][gemv]") {
    const gv::Shape s{.batch = 1, .n = 64, .k = 512};
    DeviceBuffer<float> w(s.w_elements()), x(s.x_elements()), y(s.y_elements());
    w.fill_bytes(0);
    x.fill_bytes(0);
    const u64 N = u64(s.n), K = u64(s.k);
    const u64 unique = sectors(4 * N * K) + sectors(4 * K) + sectors(4 * N);  // W, x, y once

    SECTION("v1: thread per row") {
        const KernelProfile p = one([&] { gv::gemv("v1", w.data(), x.data(), y.data(), s); });
        // 2 warps (64 rows), each K iterations of a load of W and one of x
        CHECK(p.global_load.requests == 2 * 2 * K);
        CHECK(p.global_load.sectors == 2 * K * (32 + 1));
        CHECK(p.global_store.requests == 2);
        CHECK(p.global_store.sectors == 2 * 4);
        CHECK(p.unique_sectors == unique);
        CHECK(efficiency(p.global_load) == Approx(2 * K * (128 + 4) / double(32 * 2 * K * 33)));
    }
    SECTION("v2: warp per row") {
        const KernelProfile p = one([&] { gv::gemv("v2", w.data(), x.data(), y.data(), s); });
        // 64 warps, each K / 32 iterations of a load of W and one of x; 5 shuffles; lane 0 stores
        CHECK(p.global_load.requests == N * 2 * (K / 32));
        CHECK(p.global_load.sectors == N * 2 * (K / 32) * 4);
        CHECK(efficiency(p.global_load) == 1.0);
        CHECK(p.global_load.bytes == 4 * N * K + 4 * N * K);  // W once, x once per row
        CHECK(p.ops.shuffles == N * 5);
        CHECK(p.global_store.requests == N);
        CHECK(p.global_store.sectors == N);
        CHECK(p.unique_sectors == unique);
    }
    SECTION("v3: vectorized") {
        const KernelProfile p = one([&] { gv::gemv("v3", w.data(), x.data(), y.data(), s); });
        // per row: K / 128 passes of 4 unrolled uint4 loads of W and 4 of x (K = 512: one pass)
        CHECK(p.global_load.requests == N * 8 * (K / 512));
        CHECK(p.global_load.sectors == p.global_load.requests * 16);
        CHECK(efficiency(p.global_load) == 1.0);
        CHECK(p.global_load.bytes == 8 * N * K);
        CHECK(p.unique_sectors == unique);
    }
    SECTION("v5 reads W once for the batch, v2 once per token") {
        const gv::Shape b{.batch = 8, .n = 64, .k = 512};
        DeviceBuffer<float> xb(b.x_elements()), yb(b.y_elements());
        xb.fill_bytes(0);
        const u64 w_sectors = sectors(4 * N * K);
        const KernelProfile v2 = one([&] { gv::gemv("v2", w.data(), xb.data(), yb.data(), b); });
        const KernelProfile v5 = one([&] { gv::gemv("v5", w.data(), xb.data(), yb.data(), b); });
        CHECK(v2.requested_sectors >= 8 * w_sectors);   // W: every token's pass reads it
        CHECK(v5.requested_sectors < 2 * w_sectors);    // W once for all 8 tokens, and X
        CHECK(v5.unique_sectors == v2.unique_sectors);  // the same data touched
    }
}

// Chapter 02 at T = N = K = 64. v1 and v2: per k, one load of X and one of W per warp, one with
// the lanes K floats apart (32 sectors) and one on a single float (1 sector); v1 stores Y with
// the lanes N floats apart (32 sectors), v2 along a row (4). v3: 32 x 32 tiles, per tile a
// coalesced row of X and of W per warp (4 sectors each) and 32 conflict-free shared loads of
// each (xs[ty][kk]: one word for the warp; ws[tx][kk]: rows of 33 words, every bank once).
TEST_CASE("chapter 02: naive, coalesced, shared-memory tiles", "[profile][gemm]") {
    const gm::Shape s{.tokens = 64, .n = 64, .k = 64};
    DeviceBuffer<float> x(s.x_elements()), w(s.w_elements()), y(s.y_elements());
    x.fill_bytes(0);
    w.fill_bytes(0);
    const u64 T = 64, N = 64, K = 64, warps = T * N / 32;
    const u64 unique = sectors(4 * (T * K + N * K + T * N));
    std::vector<KernelProfile> p;
    for (const char* v : {"v1", "v2", "v3", "v4", "v5", "v6"})
        p.push_back(one([&] { gm::gemm(v, x.data(), w.data(), y.data(), s); }));

    CHECK(p[0].global_load.requests == warps * 2 * K);
    CHECK(p[0].global_load.sectors == warps * K * (32 + 1));
    CHECK(p[0].global_store.sectors == warps * 32);
    CHECK(p[1].global_load.sectors == warps * K * (32 + 1));  // the same loads, the other way round
    CHECK(p[1].global_store.sectors == warps * 4);            // the stores coalesce
    CHECK(p[2].global_load.requests == warps * 2 * (K / 32));
    CHECK(p[2].global_load.sectors == warps * 2 * (K / 32) * 4);
    CHECK(p[2].shared_load.requests == warps * (K / 32) * 2 * 32);
    CHECK(p[2].shared_load.wavefronts == p[2].shared_load.requests);  // no conflicts
    CHECK(p[2].shared_store.wavefronts == warps * (K / 32) * 2);
    CHECK(p[2].ops.barriers == warps * (K / 32) * 2);
    for (const KernelProfile& k : p) CHECK(k.unique_sectors == unique);
    // the sectors requested fall with the tile: 32 x 32 (v3), 64 x 64 (v4), 128 x 128 (v5, v6;
    // one tile covers the problem: X and W read once)
    CHECK(p[2].global_load.sectors < p[0].global_load.sectors / 8);
    CHECK(p[3].global_load.sectors < p[2].global_load.sectors);
    CHECK(p[4].global_load.sectors <= p[3].global_load.sectors);
    CHECK(p[5].global_load.sectors == sectors(4 * (T * K + N * K)));
    for (std::size_t i = 2; i < p.size(); ++i) CHECK(efficiency(p[i].global_load) == 1.0);
}

// Chapter 02's tensor-core versions: the tile's inputs once from global memory, fully used;
// v7 through WMMA, v8 through cp.async, ldmatrix and mma.sync (m16n8k16: 2 T N K / 4096 of them).
TEST_CASE("chapter 02: WMMA and mma.sync", "[profile][gemm]") {
    const gm::Shape s{.tokens = 128, .n = 128, .k = 64};
    DeviceBuffer<__nv_bfloat16> x(s.x_elements()), w(s.w_elements());
    DeviceBuffer<float> y(s.y_elements());
    x.fill_bytes(0);
    w.fill_bytes(0);
    const KernelProfile v7 = one([&] { gm::gemm("v7", x.data(), w.data(), y.data(), s); });
    const KernelProfile v8 = one([&] { gm::gemm("v8", x.data(), w.data(), y.data(), s); });
    CHECK(v7.ops.wmma_mma == u64(s.tokens) * s.n * s.k / (16 * 16 * 16));
    CHECK(v8.ops.mma == u64(s.tokens) * s.n * s.k / (16 * 8 * 16));
    CHECK(v8.ops.ldmatrix > 0);
    CHECK(v8.ops.cp_async > 0);
    const u64 inputs = sectors(2 * (u64(s.tokens) * s.k + u64(s.n) * s.k));
    CHECK(v8.global_load.sectors == inputs);  // one 128 x 128 tile: X and W read once
    CHECK(efficiency(v8.global_load) == 1.0);
    CHECK(v7.unique_sectors == v8.unique_sectors);
}

// Chapter 01: the score matrix goes through memory. scores() writes every one of the B H Sq Sk
// floats once, the softmax reads and writes them (one block per row, its threads on consecutive
// keys), P V reads them again.
TEST_CASE("chapter 01: the score matrix's traffic", "[profile][attention]") {
    const at::Shape s{.batch = 1, .heads = 2, .q_len = 64, .kv_len = 64, .head_dim = 64, .causal = false};
    DeviceBuffer<float> q(s.q_elements()), k(s.kv_elements()), v(s.kv_elements()), sc(s.score_elements()),
        out(s.q_elements());
    q.fill_bytes(0);
    k.fill_bytes(0);
    v.fill_bytes(0);
    const u64 score_sectors = sectors(4 * s.score_elements());
    const KernelProfile scores = one([&] { at::scores(q.data(), k.data(), sc.data(), s); });
    CHECK(scores.unique_store_sectors == score_sectors);
    CHECK(scores.global_store.bytes == 4 * s.score_elements());
    // v2 reads each score three times (the maximum, the exponential, the scaling) and writes it
    // twice (the exponential, then the probability)
    const KernelProfile softmax = one([&] { at::softmax("v2", sc.data(), s); });
    CHECK(softmax.global_load.bytes == 3 * 4 * s.score_elements());
    CHECK(softmax.global_store.bytes == 2 * 4 * s.score_elements());
    CHECK(efficiency(softmax.global_load) == 1.0);
    CHECK(softmax.unique_sectors == score_sectors);
    const KernelProfile pv = one([&] { at::pv(sc.data(), v.data(), out.data(), s); });
    CHECK(pv.global_load.bytes >= 4 * s.score_elements());
}

// Chapter 04 at B = 1, Hq = 8, Hkv = 2 (groups of 4), d = 128, 256 positions, fp32: every K
// and V row is 4 requests of 4 sectors (lane + 32 r). v2: one block per query head, so each
// row is loaded once per query head; v3: one block per KV head, once per group. Besides K and
// V, each warp loads its query rows (v3: the group's 4) and every thread kv_len[b]; v1 also
// writes and reads back its score buffer.
TEST_CASE("chapter 04: decode attention reads K and V once per group in v3", "[profile][decode]") {
    const at::DecodeShape s{.batch = 1, .heads = 8, .kv_heads = 2, .head_dim = 128, .max_seq = 256, .max_kv_len = 256};
    const u64 Hq = 8, Hkv = 2, G = 4, d = 128, len = 256, threads = 128, warps = 4;
    DeviceBuffer<float> q(Hq * d), k(s.cache().elements()), v(s.cache().elements()), out(Hq * d), scores(Hq * len);
    DeviceBuffer<int> kv_len(std::vector<int>{256});
    q.fill_bytes(0);
    k.fill_bytes(0);
    v.fill_bytes(0);
    const u64 kv_row_bytes = 4 * d;
    const auto run = [&](const char* version) {
        return one([&] {
            at::decode_attention(version, q.data(), k.data(), v.data(), kv_len.data(), out.data(), scores.data(), s, 1);
        });
    };
    const KernelProfile v2 = run("v2"), v3 = run("v3");
    CHECK(v2.global_load.bytes == Hq * (2 * len * kv_row_bytes + warps * 4 * d + threads * 4));
    CHECK(v3.global_load.bytes == Hkv * (2 * len * kv_row_bytes + warps * G * 4 * d + threads * 4));
    CHECK(efficiency(v3.global_load) > 0.9);
    // the K and V bytes fall by the group size
    const u64 kv_v2 = Hq * 2 * len * kv_row_bytes, kv_v3 = Hkv * 2 * len * kv_row_bytes;
    CHECK(kv_v2 == G * kv_v3);
    CHECK(v2.unique_sectors == v3.unique_sectors);  // the same data
    const std::vector<KernelProfile> v1 = profiled([&] {
        at::decode_attention("v1", q.data(), k.data(), v.data(), kv_len.data(), out.data(), scores.data(), s, 1);
    });
    u64 v1_stores = 0;
    for (const KernelProfile& p : v1) v1_stores += p.global_store.bytes;
    CHECK(v1_stores >= 4 * Hq * len);  // the scores through memory
}

// Chapter 06: paged v1 is chapter 04's v2 reading each key through the block table: the same K
// and V requests and sectors, plus one table read per key and query head (the warp on one int:
// 1 sector, 128 bytes asked).
TEST_CASE("chapter 06: paged reads the same K and V plus the table", "[profile][paged]") {
    const u64 Hq = 4, Hkv = 4, d = 128, len = 128, bs = 16;
    at::PagedShape s{.batch = 1,
                     .heads = int(Hq),
                     .kv_heads = int(Hkv),
                     .head_dim = int(d),
                     .block_size = int(bs),
                     .num_blocks = int(len / bs),
                     .max_blocks = int(len / bs),
                     .max_kv_len = int(len)};
    DeviceBuffer<float> q(Hq * d), k(s.cache_elements()), v(s.cache_elements()), out(Hq * d);
    q.fill_bytes(0);
    k.fill_bytes(0);
    v.fill_bytes(0);
    std::vector<int> table(len / bs);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = int(table.size() - 1 - i);  // blocks out of order
    DeviceBuffer<int> block_table(table), kv_len(std::vector<int>{int(len)});
    const KernelProfile paged = one([&] {
        at::paged_decode_attention_v1(q.data(), k.data(), v.data(), block_table.data(), kv_len.data(), out.data(), s);
    });
    const at::DecodeShape c = s.contiguous();
    const KernelProfile contiguous = one(
        [&] { at::decode_attention("v2", q.data(), k.data(), v.data(), kv_len.data(), out.data(), nullptr, c, 1); });
    CHECK(paged.global_load.requests == contiguous.global_load.requests + Hq * len);
    CHECK(paged.global_load.sectors == contiguous.global_load.sectors + Hq * len);
    CHECK(paged.global_load.bytes == contiguous.global_load.bytes + Hq * len * 128);
    CHECK(paged.unique_sectors == contiguous.unique_sectors + 1);  // + the table: 8 ints, 1 sector
}

// Chapter 07 at B = 1, H = 1, S = Sq = Sk = 128, d = 64, causal, fp32: 8 blocks of 16 queries,
// K/V tiles of 32 keys. Each block loads its 16 query rows once (32 KiB in all) and, per tile,
// the tile's 32 K and 32 V rows (16 KiB). v2 loads all 4 tiles in every block: 32 tiles; v3 stops
// at the block's last allowed key, so block t loads the 16 t + 16 rows its queries may see (its
// last tile only in part): 16 (1 + 2 + ... + 8) = 576 rows, 18 tiles' worth.
// Both write O and the logsumexp once, and (the lanes on keys) read shared memory conflict-free.
// On the tensor cores (bf16, d = 64, two 64-query blocks): v4 reads its fragments with plain
// shared loads that conflict 8 ways; v5's ldmatrix from the swizzled tiles needs only the ideal
// wavefronts, and v6 (cp.async) the same.
TEST_CASE("chapter 07: flash attention skips the tiles above the diagonal, and its ldmatrix reads without conflicts",
          "[profile][flash]") {
    const at::Shape s{.batch = 1, .heads = 1, .q_len = 128, .kv_len = 128, .head_dim = 64, .causal = true};
    const u64 S = 128, d = 64, tile_bytes = 2 * 32 * d * 4;
    DeviceBuffer<float> q(s.q_elements()), k(s.kv_elements()), v(s.kv_elements()), out(s.q_elements()), lse(S);
    q.fill_bytes(0);
    k.fill_bytes(0);
    v.fill_bytes(0);
    const auto run = [&](const char* version) {
        return one([&] { at::flash_attention(version, q.data(), k.data(), v.data(), out.data(), lse.data(), s); });
    };
    const KernelProfile v2 = run("v2"), v3 = run("v3");
    CHECK(v2.global_load.bytes == 32 * tile_bytes + S * d * 4);
    CHECK(v3.global_load.bytes == 18 * tile_bytes + S * d * 4);
    CHECK(efficiency(v3.global_load) == 1.0);
    CHECK(v3.global_store.bytes == S * d * 4 + S * 4);
    CHECK(v3.shared_load.wavefronts == v3.shared_load.ideal);

    DeviceBuffer<__nv_bfloat16> q16(s.q_elements()), k16(s.kv_elements()), v16(s.kv_elements());
    q16.fill_bytes(0);
    k16.fill_bytes(0);
    v16.fill_bytes(0);
    const auto mma = [&](const char* version) {
        return one(
            [&] { at::flash_attention(version, q16.data(), k16.data(), v16.data(), out.data(), lse.data(), s); });
    };
    const KernelProfile v4 = mma("v4"), v5 = mma("v5"), v6 = mma("v6");
    CHECK(v4.ops.mma > 0);
    CHECK(v5.ops.ldmatrix > 0);
    CHECK(v6.ops.cp_async > 0);
    CHECK(v4.shared_load.wavefronts > 4 * v4.shared_load.ideal);
    CHECK(v5.shared_load.wavefronts == v5.shared_load.ideal);
    CHECK(v6.shared_load.wavefronts == v6.shared_load.ideal);
}

// Chapter 08 at N = 64, K = 2048 (two 1,024-column chunks), B = 1 and 8: 2 blocks of 8 warps, each
// warp 4 rows. Per chunk each lane takes vectors lane, lane + 32, ... of its 4 rows, one 16-byte
// load each, so a request reads 32 consecutive vectors of one row (512 bytes, 16 sectors) and the
// packed weights are read once: N x row_bytes bytes. int8 and fp8: 64 vectors per chunk (2 per
// lane); int4: 32 (1 per lane), each with a load of its group's bf16 scale (the warp's 32 vectors
// span 8 groups of 128: 16 bytes, 1 sector). Each block stages X once per chunk: 16-byte loads,
// 32 units of 8 bf16 per request, B x 4 requests per block and chunk. At the end lanes 0 ... 4 B - 1
// of each warp store its 4 rows x B tokens (and, int8 and fp8, load the 4 rows' fp32 scales: 1
// sector). Staged X is read and written without bank conflicts (the XOR swizzle).
TEST_CASE("chapter 08: the quantized GEMV reads the packed bytes once, 16 bytes a lane", "[profile][quant]") {
    const u64 N = 64, K = 2048, chunks = K / 1024, blocks = N / 32, warps = N / 4;
    const auto run = [&](qt::Format f, int batch) {
        const qt::Layout layout{f, int(K)};
        const qt::DeviceQuantizedMatrix w(qt::quantize(std::vector<float>(N * K, 0.f), int(N), layout));
        DeviceBuffer<__nv_bfloat16> x(std::size_t(batch) * K);
        DeviceBuffer<float> y(std::size_t(batch) * N);
        x.fill_bytes(0);
        return one([&] { qt::gemv(w, x.data(), y.data(), qt::Shape{batch, int(N), int(K)}); });
    };
    for (const qt::Format f : {qt::Format::int8, qt::Format::int4, qt::Format::fp8}) {
        const qt::Layout layout{f, int(K)};
        const bool int4 = f == qt::Format::int4;
        const u64 row_bytes = layout.row_bytes(),
                  w_requests = warps * 4 * (row_bytes / 512);  // 4 rows x (512-byte runs per row)
        INFO(qt::to_string(f) << ": row of " << row_bytes << " bytes");
        for (const int B : {1, 8}) {
            INFO("B = " << B);
            const KernelProfile p = run(f, B);
            const u64 x_requests = blocks * chunks * B * 4;        // 512 bytes of one token each
            const u64 scale_requests = int4 ? w_requests : warps;  // int4: per vector; else per warp
            CHECK(p.global_load.requests == w_requests + x_requests + scale_requests);
            CHECK(p.global_load.sectors == sectors(N * row_bytes) + 16 * x_requests + scale_requests);
            CHECK(p.global_load.bytes ==
                  N * row_bytes + 2 * K * B * blocks + (int4 ? 2 * 32 * w_requests : 4 * 4 * B * warps));
            CHECK(p.global_store.requests == warps);
            CHECK(p.global_store.bytes == 4 * N * B);
            CHECK(p.unique_sectors == sectors(N * row_bytes) + sectors(int4 ? 2 * N * layout.groups_per_row() : 4 * N) +
                                          sectors(2 * K * B) + sectors(4 * N * B));
            CHECK(p.shared_load.wavefronts == p.shared_load.ideal);
            CHECK(p.shared_store.wavefronts == p.shared_store.ideal);
        }
    }
    // the packed weights' sectors against bf16's N K x 2 bytes: a half (int8, fp8), 0.52 (int4 g128)
    CHECK(qt::Layout{qt::Format::int8, int(K)}.row_bytes() * 2 == 2 * K);
    CHECK(qt::Layout{qt::Format::int4, int(K)}.row_bytes() * 4 == 2 * K);
}
