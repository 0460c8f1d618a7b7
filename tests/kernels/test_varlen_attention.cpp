// Chapter 05's varlen attention against the CPU reference: a mixed batch (a prefill chunk of 7
// queries after 20 cached positions, decode tokens with contexts 1 and 257, a whole prompt of
// 33) with permuted slots and rows packed out of sequence order; ragged query counts around the
// 16-query block and the 32-key tile; GQA groups 1, 2 and 4; head dims 48, 64 and 128; fp32
// and bf16 caches. NaN in every cache position past a context and in the unused slot, and
// after a query's own position (the causal rule, row by row); outputs poisoned, with guards past
// T. Each sequence's rows in a mixed batch equal, bitwise, the sequence alone; runs are
// bitwise repeatable; bad shapes are rejected naming the parameter. The reference itself agrees
// with chapter 04's decode reference.
#include "attention/attention.hpp"
#include "attention/varlen_attention.hpp"
#include "attention_reference.hpp"
#include "guard_check.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::size_t kGuard = 32;  // floats past out [T, Hq, d] that must stay poisoned

/// One sequence of a batch: its queries, its context (new tokens included), its cache slot and
/// its first row in Q.
struct Seq {
    int q_len, kv_len, slot, q_start;
};

/// A mixed batch and the sizes around it.
struct Batch {
    std::vector<Seq> seqs;
    int heads, kv_heads, head_dim, slots, max_seq;

    int tokens() const {
        int t = 0;
        for (const Seq& s : seqs) t += s.q_len;
        return t;
    }
    std::vector<int> field(int Seq::*m) const {
        std::vector<int> out;
        for (const Seq& s : seqs) out.push_back(s.*m);
        return out;
    }
    at::VarlenShape shape() const {
        int longest = 0;
        for (const Seq& s : seqs) longest = std::max(longest, s.q_len);
        return {int(seqs.size()), tokens(), heads, kv_heads, head_dim, slots, max_seq, longest};
    }
    std::size_t out_n() const { return std::size_t(tokens()) * heads * head_dim; }
    std::size_t cache_n() const { return std::size_t(slots) * kv_heads * max_seq * head_dim; }
    /// The same sizes holding only sequence @p s, its rows at 0.
    Batch alone(std::size_t s) const {
        Batch b = *this;
        b.seqs = {seqs[s]};
        b.seqs[0].q_start = 0;
        return b;
    }
    /// "seed=... Hq=... [q_len/kv_len@slot, ...]": the context of a failure.
    std::string context(std::uint64_t seed) const {
        std::ostringstream os;
        os << "seed=" << seed << " T=" << tokens() << " Hq=" << heads << " Hkv=" << kv_heads << " d=" << head_dim
           << " slots=" << slots << " S_max=" << max_seq << " seqs (q_len/kv_len@slot,row)=[";
        for (std::size_t i = 0; i < seqs.size(); ++i)
            os << (i ? " " : "") << seqs[i].q_len << "/" << seqs[i].kv_len << "@" << seqs[i].slot << ","
               << seqs[i].q_start;
        return os.str() + "]";
    }
};

/// Q [T, Hq, d] and a cache [slots, Hkv, S_max, d] as floats, the cache already rounded as the
/// kernel of cache type C reads it.
struct Inputs {
    std::vector<float> q, k, v;
};

template <typename C>
Inputs make_inputs(const Batch& b, std::uint64_t seed) {
    Inputs in{std::vector<float>(b.out_n()), std::vector<float>(b.cache_n()), std::vector<float>(b.cache_n())};
    pd::fill_uniform<float>(in.q, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(in.k, -1.f, 1.f, pd::derive_seed(seed, 2));
    pd::fill_uniform<float>(in.v, -1.f, 1.f, pd::derive_seed(seed, 3));
    const pd::DType d = std::is_same_v<C, float> ? pd::DType::fp32 : pd::DType::bf16;
    in.k = pd::rounded_to(d, in.k);
    in.v = pd::rounded_to(d, in.v);
    return in;
}

/// The CPU reference of batch @p b on inputs @p in: out [T, Hq, d] in double.
std::vector<double> reference(const Batch& b, const Inputs& in) {
    return pd::reference::varlen_attention(in.q, in.k, in.v, b.field(&Seq::q_start), b.field(&Seq::q_len),
                                           b.field(&Seq::kv_len), b.field(&Seq::slot), b.heads, b.kv_heads, b.head_dim,
                                           b.max_seq);
}

/// NaN in K and V at positions from[slot] ... S_max - 1 of every KV head of each slot.
void poison_from(Inputs& in, const Batch& b, const std::vector<int>& from) {
    for (int s = 0; s < b.slots; ++s)
        for (int h = 0; h < b.kv_heads; ++h)
            for (int p = from[std::size_t(s)]; p < b.max_seq; ++p)
                for (int c = 0; c < b.head_dim; ++c) {
                    const std::size_t i = ((std::size_t(s) * b.kv_heads + h) * b.max_seq + p) * b.head_dim + c;
                    in.k[i] = in.v[i] = kNaN;
                }
}

/// NaN at every position no query of the batch may see: past each context, and all of a slot
/// no sequence uses.
void poison_unseen(Inputs& in, const Batch& b) {
    std::vector<int> from(std::size_t(b.slots), 0);
    for (const Seq& s : b.seqs) from[std::size_t(s.slot)] = s.kv_len;
    poison_from(in, b, from);
}

/// Runs the kernel on cache type C into a poisoned output with kGuard floats past its end;
/// checks the guard and returns out [T, Hq, d].
template <typename C>
std::vector<float> run(const Batch& b, const Inputs& in, const std::string& what) {
    const std::vector<C> kc = pd::round_all<C>(in.k), vc = pd::round_all<C>(in.v);
    const std::vector<int> q_start = b.field(&Seq::q_start), q_len = b.field(&Seq::q_len),
                           kv_len = b.field(&Seq::kv_len), slot = b.field(&Seq::slot);
    pd::DeviceBuffer<float> dq{std::span<const float>(in.q)}, out(b.out_n() + kGuard);
    pd::DeviceBuffer<C> dk{std::span<const C>(kc)}, dv{std::span<const C>(vc)};
    pd::DeviceBuffer<int> ds{std::span<const int>(q_start)}, dn{std::span<const int>(q_len)},
        dl{std::span<const int>(kv_len)}, dslot{std::span<const int>(slot)};
    out.fill_bytes(pd::kPoisonByte);
    at::varlen_attention(dq.data(), dk.data(), dv.data(), ds.data(), dn.data(), dl.data(), dslot.data(), out.data(),
                         b.shape());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = out.download();
    INFO(what << " " << pd::dtype_name<C>());
    INFO("floats written past out [T, Hq, d]: " << pd::testing::guard_written(all, b.out_n()));
    CHECK(pd::testing::guard_intact(all, b.out_n()));
    return {all.begin(), all.begin() + std::ptrdiff_t(b.out_n())};
}

/// Checks the kernel on cache type C against the reference (fp32 rule: Q is fp32 and the
/// reference reads the same rounded cache) with NaN wherever no query may look; returns out.
template <typename C>
std::vector<float> check_batch(const Batch& b, std::uint64_t seed) {
    Inputs in = make_inputs<C>(b, seed);
    const std::vector<double> ref = reference(b, in);
    poison_unseen(in, b);
    const std::vector<float> out = run<C>(b, in, b.context(seed));
    const pd::CompareResult r = pd::compare<float, double>(out, ref, pd::Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(b.tokens()), std::size_t(b.heads), std::size_t(b.head_dim)};
    INFO(pd::dtype_name<C>() << " " << b.context(seed));
    INFO(pd::describe(r, "varlen attention (NaN: a row never written, or a position past kv_len read)", dims));
    CHECK(r.passed);
    return out;
}

/// The rows of sequence @p s of an output [T, Hq, d].
std::vector<float> rows_of(const std::vector<float>& out, const Batch& b, std::size_t s) {
    const std::size_t row = std::size_t(b.heads) * b.head_dim;
    const auto first = out.begin() + std::ptrdiff_t(std::size_t(b.seqs[s].q_start) * row);
    return {first, first + std::ptrdiff_t(std::size_t(b.seqs[s].q_len) * row)};
}

/// The mixed batch of the chapter: Q rows [decode ctx 1 | chunk of 7 | prompt of 33 | decode ctx 257],
/// sequences in another order, slots permuted and slot 2 unused.
Batch mixed_batch(int heads, int kv_heads, int head_dim) {
    return {{{7, 27, 3, 1}, {1, 1, 0, 0}, {1, 257, 4, 41}, {33, 33, 1, 8}}, heads, kv_heads, head_dim, 5, 260};
}

}  // namespace

TEST_CASE("varlen attention: a mixed batch of prefill chunk, decodes and a whole prompt", "[varlen]") {
    for (const auto& [heads, kv_heads] : {std::pair{3, 3}, std::pair{8, 2}})  // GQA groups 1 and 4
        for (int d : {64, 128}) {
            const Batch b = mixed_batch(heads, kv_heads, d);
            check_batch<float>(b, 100 + std::uint64_t(heads * d));
            check_batch<bf16>(b, 200 + std::uint64_t(heads * d));
        }
}

TEST_CASE("varlen attention: ragged query counts around the block and tile sizes", "[varlen]") {
    // q_len 1, 2, 3, 17, 31, 33, 16, 32 after 0 ... 100 cached positions; group 2, d = 48.
    Batch b{{{1, 1, 7, 0},
             {2, 5, 0, 1},
             {3, 43, 6, 3},
             {17, 18, 1, 6},
             {31, 31, 5, 23},
             {33, 130, 2, 54},
             {16, 32, 4, 87},
             {32, 132, 3, 103}},
            6,
            3,
            48,
            8,
            140};
    check_batch<float>(b, 31);
    check_batch<bf16>(b, 32);
}

TEST_CASE("varlen attention: no query reads a position after its own (the causal rule)", "[varlen]") {
    // For each cut p, NaN at positions p and later of the slot: rows whose allowed keys end at or
    // before p must not change by a bit, the others must turn NaN (they read the poison).
    for (const Seq& seq : {Seq{7, 27, 1, 0}, Seq{33, 33, 0, 0}}) {
        const Batch b{{seq}, 4, 1, 64, 2, 40};
        Inputs in = make_inputs<float>(b, 55);
        poison_unseen(in, b);
        const std::vector<float> clean = run<float>(b, in, b.context(55));
        const std::size_t row = std::size_t(b.heads) * b.head_dim;
        for (int p = seq.kv_len - seq.q_len + 1; p < seq.kv_len; ++p) {
            if (seq.q_len > 7 && p % 8 != 1 && p != seq.kv_len - 1) continue;  // a sample of the prompt's cuts
            Inputs cut = in;
            std::vector<int> from(std::size_t(b.slots), 0);
            from[std::size_t(seq.slot)] = p;
            poison_from(cut, b, from);
            const std::vector<float> got = run<float>(b, cut, b.context(55));
            for (int i = 0; i < seq.q_len; ++i) {
                const std::vector<float> a(clean.begin() + std::ptrdiff_t(i * row),
                                           clean.begin() + std::ptrdiff_t((i + 1) * row));
                const std::vector<float> c(got.begin() + std::ptrdiff_t(i * row),
                                           got.begin() + std::ptrdiff_t((i + 1) * row));
                const int allowed = pd::kernels::attention::allowed_keys(i, seq.q_len, seq.kv_len);
                INFO(b.context(55) << " cut at position " << p << ", query " << i << " sees " << allowed << " keys");
                if (allowed <= p)
                    CHECK(pd::testing::same_bits(a, c));
                else
                    CHECK(std::all_of(c.begin(), c.end(), [](float x) { return std::isnan(x); }));
            }
        }
    }
}

TEST_CASE("varlen attention: a sequence's rows in a mixed batch equal the sequence alone, bitwise", "[varlen]") {
    const Batch b = mixed_batch(8, 2, 64);
    const auto check_alone = [&]<typename C>(C*, std::uint64_t seed) {
        Inputs in = make_inputs<C>(b, seed);
        poison_unseen(in, b);
        const std::vector<float> mixed = run<C>(b, in, b.context(seed));
        const std::vector<float> again = run<C>(b, in, b.context(seed));
        INFO(pd::dtype_name<C>() << " " << b.context(seed) << ": the same batch twice");
        CHECK(pd::testing::same_bits(mixed, again));
        for (std::size_t s = 0; s < b.seqs.size(); ++s) {
            const Batch one = b.alone(s);
            Inputs in_one{rows_of(in.q, b, s), in.k, in.v};
            const std::vector<float> alone = run<C>(one, in_one, one.context(seed));
            INFO(pd::dtype_name<C>() << " " << b.context(seed) << ": sequence " << s << " alone");
            CHECK(pd::testing::same_bits(rows_of(mixed, b, s), alone));
        }
    };
    check_alone(static_cast<float*>(nullptr), 71);
    check_alone(static_cast<bf16*>(nullptr), 72);
}

TEST_CASE("varlen attention: the reference agrees with chapter 04's decode reference", "[varlen]") {
    // Query i of a chunk of 7 after 20 cached positions is a decode query over allowed_keys(i)
    // positions; a batch of decode tokens is chapter 04's decode attention.
    const Batch b{{{7, 27, 1, 0}, {1, 5, 0, 7}}, 4, 2, 16, 2, 30};
    const Inputs in = make_inputs<float>(b, 9);
    const std::vector<double> got = reference(b, in);
    const std::size_t row = std::size_t(b.heads) * b.head_dim, slot_n = b.cache_n() / std::size_t(b.slots);
    const auto slot_span = [&](const std::vector<float>& x, int slot) {
        return std::span<const float>(x).subspan(std::size_t(slot) * slot_n, slot_n);
    };
    for (int t = 0; t < b.tokens(); ++t) {
        const Seq& s = t < 7 ? b.seqs[0] : b.seqs[1];
        const int len = pd::kernels::attention::allowed_keys(t - s.q_start, s.q_len, s.kv_len);
        const std::vector<int> lens{len};
        const std::vector<double> want = pd::reference::decode_attention(
            std::span<const float>(in.q).subspan(std::size_t(t) * row, row), slot_span(in.k, s.slot),
            slot_span(in.v, s.slot), lens, 1, b.heads, b.kv_heads, b.head_dim, b.max_seq);
        INFO("row " << t << " over " << len << " positions");
        CHECK(std::equal(want.begin(), want.end(), got.begin() + std::ptrdiff_t(std::size_t(t) * row)));
    }
    const std::vector<float> q1(row), kv(slot_n);
    const auto ref_call = [&](int q_len, int kv_len, int slot, int q_start) {
        const std::vector<int> a{q_start}, n{q_len}, l{kv_len}, s{slot};
        pd::reference::varlen_attention(q1, kv, kv, a, n, l, s, b.heads, b.kv_heads, b.head_dim, b.max_seq);
    };
    REQUIRE_THROWS_WITH(ref_call(2, 1, 0, 0), Contains("q_len[0] = 2"));
    REQUIRE_THROWS_WITH(ref_call(1, 31, 0, 0), Contains("kv_len[0] = 31"));
    REQUIRE_THROWS_WITH(ref_call(1, 1, 1, 0), Contains("slot[0] = 1"));
    REQUIRE_THROWS_WITH(ref_call(1, 1, 0, 1), Contains("q_start[0] = 1"));
}

TEST_CASE("varlen attention: bad shapes are rejected, naming the parameter", "[varlen]") {
    pd::DeviceBuffer<float> buf(64);
    pd::DeviceBuffer<int> idx(4);
    const auto call = [&](const at::VarlenShape& s) {
        at::varlen_attention(buf.data(), buf.data(), buf.data(), idx.data(), idx.data(), idx.data(), idx.data(),
                             buf.data(), s);
    };
    // {sequences, tokens, heads, kv_heads, head_dim, slots, max_seq, max_q_len}
    REQUIRE_THROWS_WITH(call({0, 4, 4, 4, 64, 2, 8, 1}), Contains("sequences"));
    REQUIRE_THROWS_WITH(call({2, 4, 6, 4, 64, 2, 8, 1}), Contains("heads = 6") && Contains("kv_heads = 4"));
    REQUIRE_THROWS_WITH(call({2, 4, 4, 4, 256, 2, 8, 1}), Contains("head_dim = 256"));
    REQUIRE_THROWS_WITH(call({2, 4, 4, 4, 64, 0, 8, 1}), Contains("slots"));
    REQUIRE_THROWS_WITH(call({3, 2, 4, 4, 64, 2, 8, 1}), Contains("tokens = 2"));
    REQUIRE_THROWS_WITH(call({2, 4, 4, 4, 64, 2, 8, 5}), Contains("max_q_len = 5"));
    REQUIRE_THROWS_WITH(call({2, 40, 4, 4, 64, 2, 8, 9}), Contains("max_q_len = 9") && Contains("max_seq = 8"));
    REQUIRE_THROWS_WITH(call({70000, 70000, 4, 4, 64, 2, 8, 1}), Contains("sequences"));
    const auto bf = reinterpret_cast<const bf16*>(buf.data());
    REQUIRE_THROWS_WITH(at::varlen_attention(buf.data(), bf, bf, idx.data(), idx.data(), idx.data(), idx.data(),
                                             buf.data(), {1, 1, 1, 1, 0, 1, 1, 1}),
                        Contains("head_dim"));
}
