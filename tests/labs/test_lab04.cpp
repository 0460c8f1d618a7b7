// Lab 04: v2 of decode attention, the online softmax (decode_attention_v2, in
// <lab tree>/04_kv_cache/decode_attention_online.cu), and the KV append (kv_append, in
// <lab tree>/04_kv_cache/kv_append.cu), against the CPU reference: contexts shorter and longer
// than the block's four warps, ragged batches, grouped-query heads, fp32 and bf16 caches, NaN
// in every cache position past a context, nothing written past the output or outside the new
// positions.
#include "../kernels/decode_check.hpp"
#include "attention/decode_attention.hpp"
#include "layers/kv_append.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

namespace at = pd::kernels::attention;
using bf16 = __nv_bfloat16;

namespace {

constexpr const char* kWhere = "lab 04: decode_attention_v2 in <lab tree>/04_kv_cache/decode_attention_online.cu";

template <typename C>
void check_v2(const at::DecodeShape& s, const std::vector<int>& lens, std::uint64_t seed) {
    INFO(kWhere);
    pd::testing::check_decode<C>(
        s, lens, seed,
        [&](const float* q, const C* k, const C* v, const int* len, float* out) {
            at::decode_attention_v2(q, k, v, len, out, s);
        },
        "v2");
}

}  // namespace

TEST_CASE("lab04: online softmax, one sequence, contexts around the four warps", "[lab04]") {
    for (int context : {1, 2, 3, 4, 5, 31, 33, 257}) {
        check_v2<float>({1, 4, 4, 64, context, context}, {context}, 100 + context);
        check_v2<bf16>({1, 4, 2, 128, context, context}, {context}, 200 + context);
    }
}

TEST_CASE("lab04: online softmax, ragged batch and grouped-query heads", "[lab04]") {
    check_v2<float>({3, 8, 2, 64, 100, 100}, {100, 1, 37}, 301);
    check_v2<float>({2, 6, 6, 48, 50, 50}, {50, 9}, 302);
    check_v2<bf16>({4, 8, 1, 32, 64, 64}, {64, 63, 2, 17}, 303);
}

TEST_CASE("lab04: online softmax stays finite when the scores are large", "[lab04]") {
    // q . k up to d = 128: exp of an unshifted score would overflow fp32 (e^88); the running
    // maximum keeps every exponent <= 0
    const at::DecodeShape s{1, 2, 2, 128, 40, 40};
    INFO(kWhere);
    std::vector<float> q(std::size_t(2) * 128, 1.f), k(s.cache().elements()), v(s.cache().elements());
    pd::fill_uniform<float>(v, -1.f, 1.f, 9);
    for (std::size_t i = 0; i < k.size(); ++i)
        k[i] = 10.f * float(int(i / 128) % 7) / 7.f;  // rows of equal values, scores up to ~97
    pd::DeviceBuffer<float> dq{std::span<const float>(q)}, dk{std::span<const float>(k)}, dv{std::span<const float>(v)},
        out(q.size());
    const std::vector<int> lens{40};
    pd::DeviceBuffer<int> dlen{std::span<const int>(lens)};
    out.fill_bytes(pd::kPoisonByte);
    at::decode_attention_v2(dq.data(), dk.data(), dv.data(), dlen.data(), out.data(), s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<double> ref = pd::reference::decode_attention(q, k, v, lens, 1, 2, 2, 128, 40);
    const pd::CompareResult r = pd::compare<float, double>(out.download(), ref, pd::Tolerance::fp32());
    INFO(pd::describe(r, "decode_attention_v2 with scores up to ~97 (inf or NaN: the running max is missing)"));
    CHECK(r.passed);
}

TEST_CASE("lab04: KV append writes each new token's K and V at its position", "[lab04]") {
    INFO("lab 04: kv_append in <lab tree>/04_kv_cache/kv_append.cu");
    pd::testing::check_append<float>({2, 2, 12, 64}, 3, {0, 9}, 41);  // sequence 1 fills the last positions 9, 10, 11
    pd::testing::check_append<bf16>({3, 1, 20, 48}, 1, {0, 5, 19}, 42);  // one decode step, rounded to bf16
    pd::testing::check_append<float>({1, 2, 8, 32}, 4, {6}, 43);         // positions 8 and 9 are past S_max: dropped
}

TEST_CASE("lab04: a case the grader gives", "[.][lab04-case]") {
    // {"kernel": "attention", batch, heads, kv_heads, head_dim, lens [batch], dtype, seed} or
    // {"kernel": "append", batch, kv_heads, max_seq, head_dim, n, start [batch], dtype, seed}
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    const bool bf16_cache = c.word("dtype", "fp32") == "bf16";
    if (c.word("kernel", "attention") == "append") {
        INFO("lab 04: kv_append in <lab tree>/04_kv_cache/kv_append.cu");
        const at::CacheShape s{c.integer("batch"), c.integer("kv_heads"), c.integer("max_seq"), c.integer("head_dim")};
        const std::vector<int> start = c.integers("start");
        if (bf16_cache)
            pd::testing::check_append<bf16>(s, c.integer("n"), start, c.seed());
        else
            pd::testing::check_append<float>(s, c.integer("n"), start, c.seed());
        return;
    }
    const std::vector<int> lens = c.integers("lens");
    const int longest = lens.empty() ? 1 : *std::max_element(lens.begin(), lens.end());
    const at::DecodeShape s{int(lens.size()),
                            c.integer("heads"),
                            c.integer("kv_heads"),
                            c.integer("head_dim"),
                            int(c.number("max_seq", float(longest))),
                            longest};
    if (bf16_cache)
        check_v2<bf16>(s, lens, c.seed());
    else
        check_v2<float>(s, lens, c.seed());
}
