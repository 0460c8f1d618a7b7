// Chapter 04's decode attention (v1 to v4) and KV append against the CPU reference: contexts
// 1, 31, 32, 33, 257 and 4099 (one filling the cache to its last position), GQA groups 1, 4
// and 8, head dims 32, 48, 64 and 128, B in 1, 3 and 8 with ragged contexts, fp32 and bf16
// caches; NaN in every cache position past a context (attending to one fails); v4 with more
// splits than positions; bitwise repeatability; the KV append's layout, rounding and bounds, and
// the runtime's append of packed rows against it bit for bit; and the rejection of bad shapes
// and names.
#include "attention/decode_attention.hpp"
#include "decode_check.hpp"
#include "layers/kv_append.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
namespace ly = pd::kernels::layers;
namespace rt = pd::kernels::runtime;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kSms = 132;  // v4's split rule for an H100/H200-sized GPU, on every backend

/// Checks @p version on cache type C.
template <typename C>
void check_version(const std::string& version, const at::DecodeShape& s, const std::vector<int>& lens,
                   std::uint64_t seed) {
    pd::DeviceBuffer<float> workspace(std::max<std::size_t>(1, at::decode_workspace_floats(version, s, kSms)));
    pd::testing::check_decode<C>(
        s, lens, seed,
        [&](const float* q, const C* k, const C* v, const int* len, float* out) {
            at::decode_attention(version, q, k, v, len, out, workspace.data(), s, kSms);
        },
        version.c_str());
}

template <typename C>
void check_all_versions(const at::DecodeShape& s, const std::vector<int>& lens, std::uint64_t seed) {
    for (const pd::Version& v : at::decode_versions()) check_version<C>(v.name, s, lens, seed);
}

}  // namespace

TEST_CASE("decode attention: one sequence, contexts around the warp and block sizes, cache full", "[decode]") {
    for (int context : {1, 31, 32, 33, 257, 4099}) {
        const at::DecodeShape s{1, 8, 2, 128, context, context};  // GQA group 4; the context fills the cache
        check_all_versions<float>(s, {context}, 4000 + context);
        check_all_versions<bf16>(s, {context}, 5000 + context);
    }
}

TEST_CASE("decode attention: ragged batches, GQA groups 1, 4, 8, head dims 32 to 128", "[decode]") {
    check_all_versions<float>({3, 8, 1, 64, 300, 257}, {33, 1, 257}, 11);  // group 8
    check_all_versions<bf16>({3, 8, 1, 64, 300, 257}, {33, 1, 257}, 12);
    check_all_versions<float>({8, 2, 2, 64, 128, 100}, {1, 7, 31, 32, 33, 64, 99, 100}, 13);  // group 1
    check_all_versions<bf16>({8, 4, 1, 128, 40, 40}, {40, 39, 1, 2, 3, 17, 32, 33}, 14);      // group 4
    check_all_versions<float>({3, 6, 6, 48, 70, 70}, {70, 35, 9}, 15);                        // stories15M's heads
    check_all_versions<float>({2, 4, 2, 32, 64, 64}, {64, 5}, 16);                            // the tiny preset's
    check_all_versions<float>({1, 12, 4, 2, 9, 9}, {9}, 17);  // group 3 (v3 runs its group-4 kernel), d = 2
}

TEST_CASE("decode attention v4: any number of splits, empty ones included", "[decode]") {
    const at::DecodeShape s{3, 8, 2, 64, 200, 150};
    const std::vector<int> lens{150, 3, 77};
    for (int splits : {1, 2, 7, 64, at::kMaxSplits}) {  // 128 splits of 2 positions: most are empty for lens 3
        pd::DeviceBuffer<float> partials(std::size_t(s.batch) * s.heads * splits * (s.head_dim + 2));
        pd::testing::check_decode<float>(
            s, lens, 900 + splits,
            [&](const float* q, const float* k, const float* v, const int* len, float* out) {
                at::decode_attention_v4(q, k, v, len, out, partials.data(), splits, s);
            },
            ("v4 splits=" + std::to_string(splits)).c_str());
    }
}

TEST_CASE("decode attention v4: the split rule on 132 SMs (the chapter's table)", "[decode]") {
    // llama-3-8b's heads (Hq 32, Hkv 8, d 128) on 132 SMs: n = B Hkv blocks before splitting
    // want ceil(528 / n) splits, at most one per 128 positions of the longest context; each
    // split holds ceil(S / splits) positions (the last one the rest). Printed: the chapter's
    // page quotes this table.
    struct Case {
        int batch, context, splits, chunk;
    };
    const Case cases[] = {{1, 1024, 8, 128}, {1, 8192, 64, 128}, {16, 8192, 5, 1639},
                          {1, 1000, 8, 125}, {1, 129, 2, 65},    {1, 100, 1, 100}};
    std::printf("\nv4's splits on 132 SMs, llama-3-8b's heads (Hq 32, Hkv 8, d 128):\n");
    std::printf("%5s  %7s  %6s  %11s  %11s  %6s  %19s\n", "B", "context", "blocks", "ceil(528/n)", "ceil(S/128)",
                "splits", "positions per split");
    std::printf("%s\n", std::string(79, '-').c_str());
    for (const Case& c : cases) {
        const int n = c.batch * 8, wanted = (528 + n - 1) / n, longest = (c.context + 127) / 128;
        const int splits = at::decode_splits({c.batch, 32, 8, 128, 8192, c.context}, kSms);
        const int chunk = (c.context + splits - 1) / splits;
        CHECK(splits == c.splits);
        CHECK(chunk == c.chunk);
        CHECK(splits == std::max(1, std::min(wanted, longest)));
        if (longest <= wanted) CHECK(chunk <= 128);  // when the context's bound binds, no split over 128
        std::printf("%5d  %7d  %6d  %11d  %11d  %6d  %19d\n", c.batch, c.context, n, wanted, longest, splits, chunk);
    }
    // capped at kMaxSplits
    CHECK(at::decode_splits({1, 1, 1, 64, 1 << 20, 1 << 20}, 1000) == at::kMaxSplits);
}

TEST_CASE("decode attention: bitwise repeatable", "[decode]") {
    const at::DecodeShape s{3, 8, 2, 64, 300, 300};
    for (const pd::Version& v : at::decode_versions()) {
        const auto run = [&](const float* q, const float* k, const float* vv, const int* len, float* out) {
            pd::DeviceBuffer<float> ws(std::max<std::size_t>(1, at::decode_workspace_floats(v.name, s, kSms)));
            at::decode_attention(v.name, q, k, vv, len, out, ws.data(), s, kSms);
        };
        const auto a = pd::testing::check_decode<float>(s, {300, 17, 128}, 77, run, v.name.c_str());
        const auto b = pd::testing::check_decode<float>(s, {300, 17, 128}, 77, run, v.name.c_str());
        INFO(v.name);
        CHECK(pd::testing::same_bits(a, b));
    }
}

TEST_CASE("decode attention: bad shapes and names are rejected, naming the parameter", "[decode]") {
    pd::DeviceBuffer<float> buf(64);
    const auto call = [&](const std::string& version, at::DecodeShape s) {
        at::decode_attention(version, buf.data(), buf.data(), buf.data(), nullptr, buf.data(), buf.data(), s, kSms);
    };
    REQUIRE_THROWS_WITH(call("v1", {1, 6, 4, 64, 8, 8}), Contains("heads = 6") && Contains("kv_heads = 4"));
    REQUIRE_THROWS_WITH(call("v2", {1, 4, 4, 256, 8, 8}), Contains("head_dim = 256"));
    REQUIRE_THROWS_WITH(call("v3", {1, 4, 4, 64, 8, 9}), Contains("max_kv_len = 9"));
    REQUIRE_THROWS_WITH(call("v4", {0, 4, 4, 64, 8, 8}), Contains("batch"));
    REQUIRE_THROWS_WITH(call("v3", {1, 32, 1, 64, 8, 8}), Contains("heads / kv_heads = 32"));
    REQUIRE_THROWS_WITH(call("v9", {1, 4, 4, 64, 8, 8}), Contains("version = v9"));
    REQUIRE_THROWS_WITH(at::decode_attention_v4(buf.data(), buf.data(), buf.data(), nullptr, buf.data(), buf.data(), 0,
                                                {1, 4, 4, 64, 8, 8}),
                        Contains("splits = 0"));
}

// ---- KV append ---------------------------------------------------------------------------------

using pd::testing::check_append;

TEST_CASE("kv append: the new tokens land at their positions, nothing else changes", "[decode][kv_append]") {
    check_append<float>({1, 1, 8, 64}, 8, {0}, 1);            // a whole prefill
    check_append<float>({3, 2, 40, 128}, 1, {0, 17, 39}, 2);  // a decode step, the last slot filled
    check_append<bf16>({3, 8, 33, 64}, 5, {0, 28, 10}, 3);    // several tokens, rounded to bf16
    check_append<float>({2, 3, 16, 48}, 4, {14, 15}, 4);      // tokens past S_max are dropped
    check_append<bf16>({2, 1, 16, 2}, 3, {-2, 3}, 5);         // and before 0
}

/// The runtime's kv_append_rows() on the rows of B equal sequences (row t = b n + i: slot b,
/// position start[b] + i; the same buffer as kv_append()'s [B, n, Hkv, d]) writes the cache that
/// lab 04's kv_append() writes, bit for bit, positions outside [0, S_max) dropped by both.
template <typename C>
void check_rows_equal_append(const at::CacheShape& s, int n, const std::vector<int>& start, std::uint64_t seed) {
    INFO("kv_append_rows against kv_append: seed=" << seed << " B=" << s.batch << " S_max=" << s.max_seq << " n=" << n);
    const std::size_t fresh = std::size_t(s.batch) * n * s.kv_heads * s.head_dim;
    std::vector<float> k(fresh), v(fresh);
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(seed, 2));
    std::vector<int> slot, pos;
    for (int b = 0; b < s.batch; ++b)
        for (int i = 0; i < n; ++i) {
            slot.push_back(b);
            pos.push_back(start[std::size_t(b)] + i);
        }
    const std::vector<C> init(s.elements(), pd::from_float<C>(-7.f));
    pd::DeviceBuffer<float> dk{std::span<const float>(k)}, dv{std::span<const float>(v)};
    pd::DeviceBuffer<int> dstart{std::span<const int>(start)}, dslot{std::span<const int>(slot)},
        dpos{std::span<const int>(pos)};
    pd::DeviceBuffer<C> k1{std::span<const C>(init)}, v1{std::span<const C>(init)}, k2{std::span<const C>(init)},
        v2{std::span<const C>(init)};
    ly::kv_append(dk.data(), dv.data(), k1.data(), v1.data(), dstart.data(), n, s);
    rt::kv_append_rows(dk.data(), dv.data(), k2.data(), v2.data(), dslot.data(), dpos.data(), s.batch * n, s);
    const std::vector<C> a = k1.download(), b = k2.download(), c = v1.download(), d = v2.download();
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        differ += pd::to_float(a[i]) != pd::to_float(b[i]) || pd::to_float(c[i]) != pd::to_float(d[i]);
    INFO(differ << " cache elements differ");
    CHECK(differ == 0);
}

TEST_CASE("kv append: the runtime's append of packed rows writes lab 04's cache, bit for bit", "[decode][kv_append]") {
    check_rows_equal_append<float>({3, 2, 40, 128}, 1, {0, 17, 39}, 11);  // a decode step
    check_rows_equal_append<bf16>({3, 8, 33, 64}, 5, {0, 28, 10}, 12);    // several tokens, rounded to bf16
    check_rows_equal_append<float>({2, 3, 16, 48}, 4, {14, -2}, 13);      // past S_max and before 0: dropped
}

TEST_CASE("kv append: bad sizes are rejected, naming the parameter", "[decode][kv_append]") {
    pd::DeviceBuffer<float> buf(16);
    pd::DeviceBuffer<int> start(1);
    REQUIRE_THROWS_WITH(ly::kv_append(buf.data(), buf.data(), buf.data(), buf.data(), start.data(), 1, {1, 0, 4, 4}),
                        Contains("kv_heads"));
    REQUIRE_THROWS_WITH(ly::kv_append(buf.data(), buf.data(), buf.data(), buf.data(), start.data(), 5, {1, 1, 4, 4}),
                        Contains("n = 5"));
}
