// The runtime kernels (kernels/runtime/): the forms the model runs that no chapter's step is on
// its own, each against the CPU reference of the steps it extends and, on the same values,
// bitwise against those steps. gemm_simt_bf16 (the model's bf16 GEMM below sm_80) is chapter
// 02's v6 on bf16 inputs: on small integers it is exact, on seeded uniform inputs within the fp32
// rule of the reference of the same bf16 values, and on every shape the same bits as v6 given the
// values widened to fp32; ragged shapes, a poisoned guard past Y, both load paths (K % 4 and
// alignment) and the shape checks. flash_varlen (the model's attention of a mixed batch, chapter
// 07's v3 over chapters 05, 06 and 08's cache forms) gives v3's bits on v3's problem, fp32 and
// bf16 (its own tests against the references: test_varlen_attention.cpp, test_paged_attention.cpp,
// test_kv_quant.cpp). The runtime's decode attention (chapter 04's v4 through chapter 06's block
// table on chapter 08's 8-bit cache) gives paged v2's bits on fp32 and bf16 pages and chapter 08's
// on an 8-bit cache in slots (seen as the pages of one KV head), with one split and several.
#include "attention/decode_attention.hpp"
#include "attention/flash_attention.hpp"
#include "attention/kv_quant.hpp"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "attention_reference.hpp"
#include "gemm/gemm.hpp"
#include "guard_check.hpp"
#include "linear_reference.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
namespace gemm = pd::kernels::gemm;
namespace rt = pd::kernels::runtime;
using bf16 = __nv_bfloat16;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t kSeed = 20261206;
constexpr std::size_t kGuard = 64;

/// Y of gemm_simt_bf16 (bf16 inputs) or of v6 (the same values in fp32) into a poisoned buffer
/// of T N + kGuard floats; X and W sit @p offset elements into their buffers.
template <typename In>
std::vector<float> run(const std::vector<In>& x, const std::vector<In>& w, const gemm::Shape& s,
                       std::size_t offset = 0) {
    std::vector<In> xh(offset), wh(offset);
    xh.insert(xh.end(), x.begin(), x.end());
    wh.insert(wh.end(), w.begin(), w.end());
    pd::DeviceBuffer<In> xd{std::span<const In>(xh)}, wd{std::span<const In>(wh)};
    pd::DeviceBuffer<float> y(s.y_elements() + kGuard);
    y.fill_bytes(pd::kPoisonByte);
    if constexpr (std::is_same_v<In, bf16>)
        rt::gemm_simt_bf16(xd.data() + offset, wd.data() + offset, y.data(), s);
    else
        gemm::gemm("v6", xd.data() + offset, wd.data() + offset, y.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return y.download();
}

/// One problem: the reference of the bf16 values (exact for integers), the guard, a second run's
/// bits, and v6's bits on the same values in fp32.
void check(const gemm::Shape& s, std::uint64_t seed, bool integers, std::size_t offset = 0) {
    std::ostringstream what;
    what << "gemm_simt_bf16 seed=" << seed << " T=" << s.tokens << " N=" << s.n << " K=" << s.k
         << (integers ? " small integers" : " uniform [-1, 1)") << " offset " << offset;
    INFO(what.str());
    std::vector<float> xf(s.x_elements()), wf(s.w_elements());
    if (integers) {
        pd::fill_integers<float>(xf, -3, 3, pd::derive_seed(seed, 1));
        pd::fill_integers<float>(wf, -3, 3, pd::derive_seed(seed, 2));
    } else {
        pd::fill_uniform<float>(xf, -1.f, 1.f, pd::derive_seed(seed, 1));
        pd::fill_uniform<float>(wf, -1.f, 1.f, pd::derive_seed(seed, 2));
    }
    const std::vector<bf16> x = pd::round_all<bf16>(xf), w = pd::round_all<bf16>(wf);
    const std::vector<float> xw = pd::to_float_all<bf16>(x), ww = pd::to_float_all<bf16>(w);  // the same values
    const std::vector<double> ref = pd::reference::linear(xw, ww, s.tokens, s.n, s.k);
    const std::vector<float> got = run(x, w, s, offset);
    const pd::CompareResult r = pd::compare<float, double>(std::span<const float>(got).first(ref.size()), ref,
                                                           integers ? pd::Tolerance::exact() : pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.tokens), std::size_t(s.n)};
    INFO(pd::describe(r, what.str(), dims));
    CHECK(r.passed);
    CHECK(pd::testing::guard_intact(got, s.y_elements()));
    INFO("a second run, and chapter 02's v6 on the same values in fp32, must give the same bits");
    CHECK(pd::testing::same_bits(got, run(x, w, s, offset)));
    CHECK(pd::testing::same_bits(got, run(xw, ww, s, offset)));
}

}  // namespace

TEST_CASE("runtime: gemm_simt_bf16 is v6 on bf16 inputs, over ragged shapes", "[runtime]") {
    // v6's tiles are 128 x 128, 8 deep: T, N and K of 1, 3, 17, 127, 129, 200 leave partial tiles
    // in every direction; K % 4 == 0 takes the 8-byte loads, other K the scalar ones.
    const std::vector<gemm::Shape> shapes = {{1, 1, 1},      {3, 17, 64},     {17, 64, 127},  {127, 129, 200},
                                             {129, 200, 1},  {200, 1, 3},     {1, 200, 17},   {64, 3, 127},
                                             {200, 127, 64}, {257, 260, 131}, {130, 140, 136}};
    std::uint64_t n = 0;
    for (const gemm::Shape& s : shapes) {
        check(s, pd::derive_seed(kSeed, n++), true);
        check(s, pd::derive_seed(kSeed, n++), false);
    }
}

TEST_CASE("runtime: gemm_simt_bf16 falls back to scalar loads for unaligned X and W", "[runtime]") {
    // one element into their buffers: 2 bytes past an 8-byte boundary, K a multiple of 4
    check({65, 130, 136}, pd::derive_seed(kSeed, 100), false, 1);
    check({65, 130, 136}, pd::derive_seed(kSeed, 101), false, 4);
}

TEST_CASE("runtime: gemm_simt_bf16 rejects bad shapes before any launch", "[runtime][errors]") {
    pd::DeviceBuffer<bf16> b(64);
    pd::DeviceBuffer<float> y(64);
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {0, 4, 4}),
                      Contains("tokens (T) must be >= 1, got 0"));
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {4, 4, -8}),
                      Contains("k (K) must be >= 1, got -8"));
    CHECK_THROWS_WITH(rt::gemm_simt_bf16(b.data(), b.data(), y.data(), {65536, 4, 32768}),
                      Contains("X: tokens (T) * k (K) = 2147483648 elements exceeds 2^31 - 1"));
}

// ---- flash_varlen: chapter 07's v3 over the cache (chapters 05, 06 and 08) ------------------

namespace {

/// v3's problem (B sequences of Sq queries, the last of their Sk keys, causal) through
/// varlen_attention() (chapter 05's packed batch over the slots of chapter 04's cache, which is
/// v3's K and V layout, one sequence per slot) and through v3 itself: the same bits. KV is T, Q
/// goes to v3 as T and to the varlen form as the same values in fp32.
template <typename T>
void check_varlen_is_v3(int batch, int heads, int kv_heads, int q_len, int kv_len, int d, std::uint64_t seed) {
    std::ostringstream what;
    what << "flash_varlen vs v3 " << pd::dtype_name<T>() << " B=" << batch << " H=" << heads << " Hkv=" << kv_heads
         << " Sq=" << q_len << " Sk=" << kv_len << " d=" << d << " seed=" << seed;
    INFO(what.str());
    const at::Shape s{.batch = batch,
                      .heads = heads,
                      .q_len = q_len,
                      .kv_len = kv_len,
                      .head_dim = d,
                      .causal = true,
                      .kv_heads = kv_heads};
    std::vector<float> qf(s.q_elements()), kf(s.kv_elements()), vf(s.kv_elements());
    pd::fill_uniform<float>(qf, -2.f, 2.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(kf, -2.f, 2.f, pd::derive_seed(seed, 2));
    pd::fill_uniform<float>(vf, -1.f, 1.f, pd::derive_seed(seed, 3));
    const std::vector<T> q = pd::round_all<T>(qf), k = pd::round_all<T>(kf), v = pd::round_all<T>(vf);
    const std::vector<float> q_values = pd::to_float_all<T>(q);  // what v3 reads, in fp32
    pd::DeviceBuffer<T> dq{std::span<const T>(q)}, dk{std::span<const T>(k)}, dv{std::span<const T>(v)};

    pd::DeviceBuffer<float> out3(s.q_elements());
    at::flash_attention_v3(dq.data(), dk.data(), dv.data(), out3.data(), nullptr, s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> want = out3.download();  // [B, H, Sq, d]

    // the packed batch, token-major [T, H, d], T = B Sq
    std::vector<float> packed(s.q_elements());
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < q_len; ++i)
                for (int c = 0; c < d; ++c)
                    packed[((std::size_t(b) * q_len + i) * heads + h) * d + c] =
                        q_values[((std::size_t(b) * heads + h) * q_len + i) * d + c];
    std::vector<int> q_start(batch), lens(batch, q_len), kv_lens(batch, kv_len), slot(batch);
    for (int b = 0; b < batch; ++b) q_start[b] = b * q_len, slot[b] = b;
    pd::DeviceBuffer<float> dpacked{std::span<const float>(packed)}, out(s.q_elements());
    pd::DeviceBuffer<int> dstart{std::span<const int>(q_start)}, dlen{std::span<const int>(lens)},
        dkv{std::span<const int>(kv_lens)}, dslot{std::span<const int>(slot)};
    const at::VarlenShape vs{.sequences = batch,
                             .tokens = batch * q_len,
                             .heads = heads,
                             .kv_heads = kv_heads,
                             .head_dim = d,
                             .slots = batch,
                             .max_seq = kv_len,
                             .max_q_len = q_len};
    at::varlen_attention(dpacked.data(), dk.data(), dv.data(), dstart.data(), dlen.data(), dkv.data(), dslot.data(),
                         out.data(), vs);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got_packed = out.download();
    std::vector<float> got(s.q_elements());
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < q_len; ++i)
                for (int c = 0; c < d; ++c)
                    got[((std::size_t(b) * heads + h) * q_len + i) * d + c] =
                        got_packed[((std::size_t(b) * q_len + i) * heads + h) * d + c];
    // and both right: v3 against the double-precision reference of the same values
    const std::vector<double> ref = pd::reference::attention_gqa(
        q_values, pd::to_float_all<T>(k), pd::to_float_all<T>(v), batch, heads, kv_heads, q_len, kv_len, d, true);
    const pd::CompareResult r = pd::compare<float, double>(want, ref, pd::Tolerance::fp32());
    INFO(pd::describe(r, what.str(), {}));
    CHECK(r.passed);
    INFO("the runtime's varlen form must give v3's bits on v3's problem");
    CHECK(pd::testing::same_bits(got, want));
}

}  // namespace

TEST_CASE("runtime: flash_varlen is chapter 07's v3 on v3's problem, bitwise", "[runtime]") {
    // (B, H, Hkv, Sq, Sk, d) around the 16-query blocks and 32-key tiles, GQA, d below 128 and odd
    std::uint64_t n = 200;
    const int cases[][6] = {{1, 1, 1, 1, 1, 64},   {2, 4, 2, 17, 127, 64}, {1, 2, 1, 129, 129, 48},
                            {3, 4, 4, 5, 300, 32}, {1, 8, 1, 64, 64, 128}, {2, 2, 2, 33, 40, 7}};
    for (const auto& c : cases) {
        check_varlen_is_v3<float>(c[0], c[1], c[2], c[3], c[4], c[5], pd::derive_seed(kSeed, n++));
        check_varlen_is_v3<bf16>(c[0], c[1], c[2], c[3], c[4], c[5], pd::derive_seed(kSeed, n++));
    }
}

// ---- decode attention: chapter 04's v4 through chapter 06's table on chapter 08's cache ------

namespace {

/// Random cache elements of type T: fp32 and bf16 uniform in [-1, 1), 8-bit codes of any finite
/// value (fp8: every e4m3 code but the two NaNs).
template <typename T>
std::vector<T> random_cache(std::size_t n, std::uint64_t seed) {
    std::vector<float> u(n);
    pd::fill_uniform<float>(u, -1.f, 1.f, seed);
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        const int code = int((u[i] + 1.f) * 127.5f);  // 0 ... 254
        if constexpr (std::is_same_v<T, at::Fp8Kv>)
            out[i] = {std::uint8_t((code & 0x7f) == 0x7f ? code - 1 : code)};
        else if constexpr (std::is_same_v<T, at::Int8Kv>)
            out[i] = {std::int8_t(code - 127)};
        else
            out[i] = pd::round_all<T>(std::vector<float>{u[i]})[0];
    }
    return out;
}

/// Runs @p launch into a poisoned output of @p n floats and returns it.
template <typename Launch>
std::vector<float> run_out(std::size_t n, Launch launch) {
    pd::DeviceBuffer<float> out(n);
    out.fill_bytes(pd::kPoisonByte);
    launch(out.data());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    return out.download();
}

/// Chapter 06's paged v2 (fp32, bf16) against the runtime form on the same paged cache, a
/// shuffled block table and ragged lengths, one split and @p splits.
template <typename T>
void check_paged_is_v2(int batch, int heads, int kv_heads, int d, int block_size, int splits, std::uint64_t seed) {
    std::ostringstream what;
    what << "runtime decode vs paged v2 " << pd::dtype_name<T>() << " B=" << batch << " H=" << heads
         << " Hkv=" << kv_heads << " d=" << d << " block=" << block_size << " splits=" << splits;
    INFO(what.str());
    const int max_blocks = 5, num_blocks = batch * max_blocks + 3;
    std::vector<int> lens(batch), table(std::size_t(batch) * max_blocks), order(num_blocks);
    for (int i = 0; i < num_blocks; ++i) order[i] = (i * 7 + 3) % num_blocks;  // a permutation (7 coprime)
    int max_len = 1;
    for (int b = 0; b < batch; ++b) {
        lens[b] = 1 + (b * 37 + 11) % (max_blocks * block_size);
        max_len = std::max(max_len, lens[b]);
        for (int j = 0; j < max_blocks; ++j)
            table[std::size_t(b) * max_blocks + j] = j * block_size < lens[b] ? order[b * max_blocks + j] : -1;
    }
    const at::PagedShape s{.batch = batch,
                           .heads = heads,
                           .kv_heads = kv_heads,
                           .head_dim = d,
                           .block_size = block_size,
                           .num_blocks = num_blocks,
                           .max_blocks = max_blocks,
                           .max_kv_len = max_len};
    std::vector<float> q(std::size_t(batch) * heads * d);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    const std::vector<T> k = random_cache<T>(s.cache_elements(), pd::derive_seed(seed, 2)),
                         v = random_cache<T>(s.cache_elements(), pd::derive_seed(seed, 3));
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, partials(std::size_t(batch) * heads * splits * (d + 2));
    pd::DeviceBuffer<T> dk{std::span<const T>(k)}, dv{std::span<const T>(v)};
    pd::DeviceBuffer<int> dt{std::span<const int>(table)}, dl{std::span<const int>(lens)};
    for (int n : {1, splits}) {
        const auto step = run_out(q.size(), [&](float* out) {
            at::paged_decode_attention_v2(dq.data(), dk.data(), dv.data(), dt.data(), dl.data(), out, partials.data(),
                                          n, s);
        });
        const auto runtime = run_out(q.size(), [&](float* out) {
            rt::paged_decode_attention(dq.data(), dk.data(), dv.data(), dt.data(), dl.data(), out, partials.data(), n,
                                       s);
        });
        INFO("splits " << n << ": the runtime form must give paged v2's bits");
        CHECK(pd::testing::same_bits(runtime, step));
    }
}

/// Chapter 08's decode attention on an 8-bit cache in slots (v3: one split; v4: @p splits)
/// against the runtime form on the same bytes seen as pages: with one KV head, slot b's S_max
/// positions are blocks b S_max / block ... of [num_blocks, 1, block, d], and a split of
/// ceil(S_max / splits) positions is a run of whole blocks when block divides it.
template <typename T>
void check_kv8_is_ch08(int batch, int heads, int d, int max_seq, int block_size, int splits, std::uint64_t seed) {
    std::ostringstream what;
    what << "runtime decode vs chapter 08 " << (std::is_same_v<T, at::Fp8Kv> ? "fp8" : "int8") << " B=" << batch
         << " H=" << heads << " d=" << d << " S_max=" << max_seq << " block=" << block_size << " splits=" << splits;
    INFO(what.str());
    REQUIRE(max_seq % block_size == 0);
    REQUIRE(max_seq / splits % block_size == 0);
    const int per_slot = max_seq / block_size;
    std::vector<int> lens(batch), table(std::size_t(batch) * per_slot);
    for (int b = 0; b < batch; ++b) {
        lens[b] = b == 0 ? max_seq : 1 + (b * 53 + 5) % max_seq;
        for (int j = 0; j < per_slot; ++j) table[std::size_t(b) * per_slot + j] = b * per_slot + j;
    }
    const at::DecodeShape ds{
        .batch = batch, .heads = heads, .kv_heads = 1, .head_dim = d, .max_seq = max_seq, .max_kv_len = max_seq};
    const at::PagedShape ps{.batch = batch,
                            .heads = heads,
                            .kv_heads = 1,
                            .head_dim = d,
                            .block_size = block_size,
                            .num_blocks = batch * per_slot,
                            .max_blocks = per_slot,
                            .max_kv_len = max_seq};
    const std::size_t elements = std::size_t(batch) * max_seq * d;
    std::vector<float> q(std::size_t(batch) * heads * d), ks(std::size_t(batch) * max_seq),
        vs(std::size_t(batch) * max_seq);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(ks, 0.001f, 0.01f, pd::derive_seed(seed, 4));
    pd::fill_uniform<float>(vs, 0.001f, 0.01f, pd::derive_seed(seed, 5));
    const std::vector<T> k = random_cache<T>(elements, pd::derive_seed(seed, 2)),
                         v = random_cache<T>(elements, pd::derive_seed(seed, 3));
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, dks{std::span<const float>(ks)},
        dvs{std::span<const float>(vs)}, partials(std::size_t(batch) * heads * splits * (d + 2));
    pd::DeviceBuffer<T> dk{std::span<const T>(k)}, dv{std::span<const T>(v)};
    pd::DeviceBuffer<int> dt{std::span<const int>(table)}, dl{std::span<const int>(lens)};
    const auto v3 = run_out(q.size(), [&](float* out) {
        at::decode_attention_v3(dq.data(), dk.data(), dv.data(), dks.data(), dvs.data(), dl.data(), out, ds);
    });
    const auto v4 = run_out(q.size(), [&](float* out) {
        at::decode_attention_v4(dq.data(), dk.data(), dv.data(), dks.data(), dvs.data(), dl.data(), out,
                                partials.data(), splits, ds);
    });
    for (int n : {1, splits}) {
        const auto runtime = run_out(q.size(), [&](float* out) {
            rt::paged_decode_attention(dq.data(), dk.data(), dv.data(), dks.data(), dvs.data(), dt.data(), dl.data(),
                                       out, partials.data(), n, ps);
        });
        INFO("splits " << n << ": the runtime form must give chapter 08's bits (v3 with one split, v4 with more)");
        CHECK(pd::testing::same_bits(runtime, n == 1 ? v3 : v4));
    }
}

}  // namespace

TEST_CASE("runtime: decode attention is chapter 06's paged v2 on fp32 and bf16 pages, bitwise", "[runtime]") {
    std::uint64_t n = 300;
    check_paged_is_v2<float>(3, 8, 2, 64, 16, 3, pd::derive_seed(kSeed, n++));
    check_paged_is_v2<bf16>(3, 8, 2, 64, 16, 3, pd::derive_seed(kSeed, n++));
    check_paged_is_v2<float>(2, 3, 3, 40, 7, 2, pd::derive_seed(kSeed, n++));
    check_paged_is_v2<bf16>(1, 16, 1, 128, 4, 5, pd::derive_seed(kSeed, n++));
}

TEST_CASE("runtime: decode attention is chapter 08's on an 8-bit cache in slots, bitwise", "[runtime]") {
    std::uint64_t n = 400;
    check_kv8_is_ch08<at::Fp8Kv>(3, 4, 64, 96, 8, 3, pd::derive_seed(kSeed, n++));
    check_kv8_is_ch08<at::Int8Kv>(3, 4, 64, 96, 8, 3, pd::derive_seed(kSeed, n++));
    check_kv8_is_ch08<at::Int8Kv>(2, 2, 48, 64, 16, 4, pd::derive_seed(kSeed, n++));
}

namespace {

/// Chapter 12's fixed grid against the eager launch (chapter 04's v4 on slots, chapter 06's v2 on
/// pages, chapter 08's on 8-bit codes), the same inputs, for a batch whose longest context is
/// each of @p contexts in turn (the others ragged): the plan computed on the device is the host's
/// rule, and the outputs are the eager launch's bits.
template <typename T>
void check_fixed_grid(int batch, int heads, int kv_heads, int d, int max_seq, int block_size, int sm_count,
                      std::uint64_t seed) {
    std::ostringstream what;
    what << "fixed grid " << (block_size ? "pages of " + std::to_string(block_size) : std::string("slots"))
         << " B=" << batch << " H=" << heads << " Hkv=" << kv_heads << " d=" << d << " S_max=" << max_seq
         << " SMs=" << sm_count;
    INFO(what.str());
    const bool paged = block_size > 0;
    const int max_blocks = paged ? pd::ceil_div(max_seq, block_size) : 1, num_blocks = batch * max_blocks + 3;
    const rt::FixedGridDecode f{.batch = batch,
                                .heads = heads,
                                .kv_heads = kv_heads,
                                .head_dim = d,
                                .block_size = block_size,
                                .slots = batch,
                                .max_seq = max_seq,
                                .num_blocks = num_blocks,
                                .max_blocks = max_blocks,
                                .sm_count = sm_count};
    const std::size_t rows =
        paged ? std::size_t(num_blocks) * kv_heads * block_size : std::size_t(batch) * kv_heads * max_seq;
    std::vector<float> q(std::size_t(batch) * heads * d), ks(rows), vs(rows);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(ks, 0.001f, 0.01f, pd::derive_seed(seed, 4));
    pd::fill_uniform<float>(vs, 0.001f, 0.01f, pd::derive_seed(seed, 5));
    const std::vector<T> k = random_cache<T>(rows * d, pd::derive_seed(seed, 2)),
                         v = random_cache<T>(rows * d, pd::derive_seed(seed, 3));
    std::vector<int> table(std::size_t(batch) * max_blocks);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = int((i * 7 + 3) % std::size_t(num_blocks));  // 7 coprime
    const std::size_t most = std::size_t(batch) * heads * rt::fixed_grid_splits(f) * (d + 2);
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, dks{std::span<const float>(ks)},
        dvs{std::span<const float>(vs)}, partials(most);
    pd::DeviceBuffer<T> dk{std::span<const T>(k)}, dv{std::span<const T>(v)};
    pd::DeviceBuffer<int> dt{std::span<const int>(table)}, plan(2);
    const float* k_scales = at::kIsKv8<T> ? dks.data() : nullptr;
    const float* v_scales = at::kIsKv8<T> ? dvs.data() : nullptr;
    for (const int longest : {1, 17, 128, 129, 257, max_seq}) {
        if (longest > max_seq) continue;
        INFO("longest context " << longest);
        std::vector<int> lens(static_cast<std::size_t>(batch));
        for (int b = 0; b < batch; ++b) lens[std::size_t(b)] = b == batch / 2 ? longest : 1 + (b * 37 + 11) % longest;
        pd::DeviceBuffer<int> dl{std::span<const int>(lens)};
        const at::DecodeShape ds{batch, heads, kv_heads, d, max_seq, longest};
        const at::PagedShape ps{.batch = batch,
                                .heads = heads,
                                .kv_heads = kv_heads,
                                .head_dim = d,
                                .block_size = std::max(block_size, 1),
                                .num_blocks = num_blocks,
                                .max_blocks = max_blocks,
                                .max_kv_len = longest};
        int splits = 0, chunk = 0;
        if (paged) {
            splits = at::paged_splits(ps, sm_count);
            chunk = pd::ceil_div(pd::ceil_div(longest, block_size), splits) * block_size;
        } else {
            splits = at::decode_splits(ds, sm_count);
            chunk = pd::ceil_div(longest, splits);
        }
        rt::fixed_grid_decode_plan(dl.data(), plan.data(), f);
        CHECK(plan.download() == std::vector<int>{splits, chunk});
        const auto eager = run_out(q.size(), [&](float* out) {
            if constexpr (at::kIsKv8<T>) {
                if (paged)
                    at::paged_decode_attention("v2", dq.data(), dk.data(), dv.data(), k_scales, v_scales, dt.data(),
                                               dl.data(), out, partials.data(), ps, sm_count);
                else
                    at::decode_attention("v4", dq.data(), dk.data(), dv.data(), k_scales, v_scales, dl.data(), out,
                                         partials.data(), ds, sm_count);
            } else {
                if (paged)
                    at::paged_decode_attention("v2", dq.data(), dk.data(), dv.data(), dt.data(), dl.data(), out,
                                               partials.data(), ps, sm_count);
                else
                    at::decode_attention("v4", dq.data(), dk.data(), dv.data(), dl.data(), out, partials.data(), ds,
                                         sm_count);
            }
        });
        const auto fixed = run_out(q.size(), [&](float* out) {
            rt::fixed_grid_decode_attention(dq.data(), dk.data(), dv.data(), k_scales, v_scales,
                                            paged ? dt.data() : nullptr, dl.data(), plan.data(), out, partials.data(),
                                            f);
        });
        INFO(splits << " splits of " << chunk << " positions: the fixed grid must give the eager launch's bits");
        CHECK(pd::testing::same_bits(fixed, eager));
    }
}

}  // namespace

TEST_CASE("runtime: the fixed grid (chapter 12) gives the eager decode's bits, its splits chosen on the device",
          "[runtime][graphs]") {
    std::uint64_t n = 500;
    check_fixed_grid<float>(3, 8, 2, 64, 300, 0, 8, pd::derive_seed(kSeed, n++));
    check_fixed_grid<bf16>(1, 32, 8, 128, 1000, 0, 132, pd::derive_seed(kSeed, n++));
    check_fixed_grid<at::Int8Kv>(2, 4, 1, 40, 200, 0, 16, pd::derive_seed(kSeed, n++));
    check_fixed_grid<float>(3, 8, 2, 64, 300, 16, 8, pd::derive_seed(kSeed, n++));
    check_fixed_grid<bf16>(2, 4, 4, 32, 130, 7, 1, pd::derive_seed(kSeed, n++));
    check_fixed_grid<at::Fp8Kv>(1, 16, 2, 128, 520, 32, 132, pd::derive_seed(kSeed, n++));
}

TEST_CASE("runtime: the fixed grid rejects bad sizes by name", "[runtime][graphs][errors]") {
    rt::FixedGridDecode f{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .slots = 2, .max_seq = 16};
    CHECK(rt::fixed_grid_splits(f) >= 1);
    rt::FixedGridDecode bad = f;
    bad.batch = 3;
    CHECK_THROWS_WITH(rt::fixed_grid_splits(bad), Contains("batch = 3 exceeds slots = 2"));
    bad = f;
    bad.heads = 3;
    CHECK_THROWS_WITH(rt::fixed_grid_splits(bad), Contains("heads / kv_heads"));
    bad = f;
    bad.head_dim = 130;
    CHECK_THROWS_WITH(rt::fixed_grid_splits(bad), Contains("head_dim = 130"));
    bad = f;
    bad.block_size = 4;
    CHECK_THROWS_WITH(rt::fixed_grid_decode_attention<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                             nullptr, nullptr, nullptr, nullptr, bad),
                      Contains("without a block table"));
}
