/// @file paged_check.hpp
/// @brief Shared by the paged attention tests and lab 06's: a batch laid out in a paged cache
/// (each sequence's blocks drawn from a shuffled pool, partial last blocks), the same random
/// data in chapter 04's contiguous cache and scattered into the blocks, and a paged decode
/// attention call checked against the CPU reference and chapter 04's contiguous kernels.
#pragma once

#include "attention/paged_attention.hpp"
#include "attention/paged_layout.hpp"
#include "decode_check.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace pd::testing {

/// B sequences in a paged cache: the sizes, each sequence's context and the block table.
struct PagedBatch {
    kernels::attention::PagedShape shape;  ///< batch = lens.size(), max_kv_len = the longest context
    std::vector<int> lens;                 ///< kv_len of each sequence
    std::vector<int> table;                ///< [B, max_blocks]: each sequence's blocks, then -1

    /// Elements of one block of K (or V): Hkv * block_size * d.
    std::size_t block_elements() const {
        return std::size_t(shape.kv_heads) * std::size_t(shape.block_size) * std::size_t(shape.head_dim);
    }
    /// The contiguous cache of chapter 04 with the same data: [B, Hkv, S_max, d], S_max = capacity().
    kernels::attention::DecodeShape contiguous() const { return shape.contiguous(); }
    /// "seed=... B=... Hq=... Hkv=... d=... block_size=... num_blocks=... kv_len=[...] table=[...]".
    std::string context(std::uint64_t seed) const {
        std::ostringstream os;
        os << "seed=" << seed << " B=" << shape.batch << " Hq=" << shape.heads << " Hkv=" << shape.kv_heads
           << " d=" << shape.head_dim << " block_size=" << shape.block_size << " num_blocks=" << shape.num_blocks
           << " max_blocks=" << shape.max_blocks << " kv_len=[";
        for (std::size_t i = 0; i < lens.size(); ++i) os << (i ? "," : "") << lens[i];
        os << "] table=[";
        for (std::size_t i = 0; i < table.size(); ++i)
            os << (i == 0 ? "" : i % std::size_t(shape.max_blocks) == 0 ? " | " : ",") << table[i];
        return os.str() + "]";
    }
};

/// Sequences of contexts @p lens in a cache of blocks of @p block_size: sequence s gets
/// ceil(lens[s] / block_size) blocks, taken in turn from the pool 0 ... num_blocks - 1 shuffled by
/// @p seed, which holds @p spare blocks more than the sequences use (no sequence's, so a
/// kernel that reads one reads NaN); the table has @p extra_columns columns more than the
/// longest sequence needs (-1 entries, never to be read).
inline PagedBatch make_paged_batch(int heads, int kv_heads, int head_dim, int block_size, const std::vector<int>& lens,
                                   std::uint64_t seed, int spare = 3, int extra_columns = 1) {
    PagedBatch pb;
    pb.lens = lens;
    int used = 0, widest = 0, longest = 1;
    for (int len : lens) {
        const int blocks = (len + block_size - 1) / block_size;
        used += blocks;
        widest = std::max(widest, blocks);
        longest = std::max(longest, len);
    }
    pb.shape = {int(lens.size()), heads, kv_heads, head_dim, block_size, used + spare, widest + extra_columns, longest};
    pb.table =
        kernels::attention::shuffled_block_table(lens, block_size, pb.shape.num_blocks, pb.shape.max_blocks, seed);
    return pb;
}

/// Guard blocks of NaN before and after the paged cache in its device buffer: a kernel that
/// reads through an entry of -1 or num_blocks reads NaN.
constexpr int kGuardBlocks = 1;

/// @p contiguous [B, Hkv, S_max, d] (S_max = capacity()) scattered into a paged cache with
/// kGuardBlocks guard blocks on each side, [kGuardBlocks + num_blocks + kGuardBlocks, Hkv,
/// block_size, d]: position p < lens[s] of sequence s goes to block table[s][p / block_size]
/// at offset p % block_size; every other element is @p fill.
inline std::vector<float> scatter_to_blocks(const PagedBatch& pb, const std::vector<float>& contiguous, float fill) {
    const auto& s = pb.shape;
    return kernels::attention::scatter_to_blocks(contiguous, pb.lens, pb.table, s.kv_heads, s.head_dim, s.capacity(),
                                                 s.block_size, s.max_blocks, s.num_blocks + 2 * kGuardBlocks,
                                                 kGuardBlocks, fill);
}

/// One batch's inputs: Q, the cache in chapter 04's contiguous layout (as floats, already
/// rounded as a cache of type C holds them; NaN past each context) and the same cache
/// scattered into the blocks (type C; NaN in every position no sequence holds, in the spare
/// blocks and in the guard blocks).
template <typename C>
struct PagedInputs {
    std::vector<float> q;     ///< [B, Hq, d]
    std::vector<float> k, v;  ///< [B, Hkv, S_max, d], S_max = capacity()
    std::vector<C> kp, vp;    ///< [guard + num_blocks + guard, Hkv, block_size, d]
    std::vector<double> ref;  ///< the CPU reference of decode attention over the contexts: [B, Hq, d]
};

/// Q [q_rows, Hq, d] and K, V uniform in [-1, 1) from @p seed, the reference of decode
/// attention computed (when @p q_rows = B) before the poison goes in.
template <typename C>
PagedInputs<C> make_paged_inputs(const PagedBatch& pb, std::uint64_t seed, int q_rows = -1) {
    const auto& s = pb.shape;
    const kernels::attention::DecodeShape cs = pb.contiguous();
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    PagedInputs<C> in;
    const int rows = q_rows < 0 ? s.batch : q_rows;
    in.q.resize(std::size_t(rows) * s.heads * s.head_dim);
    in.k.resize(cs.cache().elements());
    in.v.resize(cs.cache().elements());
    fill_uniform<float>(in.q, -1.f, 1.f, derive_seed(seed, 1));
    fill_uniform<float>(in.k, -1.f, 1.f, derive_seed(seed, 2));
    fill_uniform<float>(in.v, -1.f, 1.f, derive_seed(seed, 3));
    const DType dt = std::is_same_v<C, float> ? DType::fp32 : DType::bf16;
    in.k = rounded_to(dt, in.k);
    in.v = rounded_to(dt, in.v);
    if (q_rows < 0)
        in.ref = reference::decode_attention(in.q, in.k, in.v, pb.lens, s.batch, s.heads, s.kv_heads, s.head_dim,
                                             cs.max_seq);
    for (int b = 0; b < s.batch; ++b)  // NaN past each context, for chapter 04's kernels
        for (int h = 0; h < s.kv_heads; ++h)
            for (int p = pb.lens[std::size_t(b)]; p < cs.max_seq; ++p)
                for (int c = 0; c < s.head_dim; ++c) {
                    const std::size_t i = ((std::size_t(b) * s.kv_heads + h) * cs.max_seq + p) * s.head_dim + c;
                    in.k[i] = in.v[i] = kNaN;
                }
    in.kp = round_all<C>(scatter_to_blocks(pb, in.k, kNaN));
    in.vp = round_all<C>(scatter_to_blocks(pb, in.v, kNaN));
    return in;
}

/// Runs @p run(q, k_cache, v_cache, block_table, kv_len, out), one paged decode attention
/// call, on @p in with block table @p table, into an output poisoned with NaN and followed by
/// guard floats; checks the guard and returns out [B, Hq, d].
template <typename C, typename Run>
std::vector<float> run_paged_decode(const PagedBatch& pb, const PagedInputs<C>& in, const std::vector<int>& table,
                                    Run run) {
    constexpr std::size_t kGuard = 32;
    const std::size_t out_n = in.q.size();
    DeviceBuffer<float> dq{std::span<const float>(in.q)}, out(out_n + kGuard);
    DeviceBuffer<C> dk{std::span<const C>(in.kp)}, dv{std::span<const C>(in.vp)};
    DeviceBuffer<int> dtable{std::span<const int>(table)}, dlen{std::span<const int>(pb.lens)};
    out.fill_bytes(kPoisonByte);
    const std::size_t first = kGuardBlocks * pb.block_elements();  // the cache's block 0, after the guard
    run(dq.data(), dk.data() + first, dv.data() + first, dtable.data(), dlen.data(), out.data());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = out.download();
    INFO("floats written past out [B, Hq, d]: " << guard_written(all, out_n));
    CHECK(guard_intact(all, out_n));
    return {all.begin(), all.begin() + std::ptrdiff_t(out_n)};
}

/// Checks @p out [B, Hq, d] against @p ref within the fp32 rule (1e-4 + 1e-4 |ref|).
inline void check_decode_output(const std::vector<float>& out, const std::vector<double>& ref,
                                const kernels::attention::PagedShape& s, const std::string& what) {
    const CompareResult r = compare<float, double>(out, ref, Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.head_dim)};
    INFO(what);
    INFO(describe(r,
                  "paged decode attention (NaN: an output never written, or a position read that the block table "
                  "does not give the sequence)",
                  dims));
    CHECK(r.passed);
}

/// The reference of decode attention over only the positions p of each sequence b for which
/// @p lost(b, p) is false (the keys a kernel must skip), packed into a contiguous cache of their
/// own (attention does not depend on the order of the keys). @p in holds the data.
/// @pre every sequence keeps at least one position
template <typename C, typename Lost>
std::vector<double> reference_without(const PagedBatch& pb, const PagedInputs<C>& in, Lost lost) {
    const kernels::attention::DecodeShape cs = pb.contiguous();
    const std::size_t d = std::size_t(cs.head_dim);
    std::vector<float> k(in.k.size()), v(in.v.size());
    std::vector<int> kept(pb.lens.size(), 0);
    for (int b = 0; b < cs.batch; ++b)
        for (int p = 0; p < pb.lens[std::size_t(b)]; ++p) {
            if (lost(b, p)) continue;
            const int to = kept[std::size_t(b)]++;
            for (int h = 0; h < cs.kv_heads; ++h) {
                const std::size_t head = (std::size_t(b) * cs.kv_heads + h) * std::size_t(cs.max_seq);
                std::copy_n(in.k.begin() + std::ptrdiff_t((head + std::size_t(p)) * d), d,
                            k.begin() + std::ptrdiff_t((head + std::size_t(to)) * d));
                std::copy_n(in.v.begin() + std::ptrdiff_t((head + std::size_t(p)) * d), d,
                            v.begin() + std::ptrdiff_t((head + std::size_t(to)) * d));
            }
        }
    return reference::decode_attention(in.q, k, v, kept, cs.batch, cs.heads, cs.kv_heads, cs.head_dim, cs.max_seq);
}

/// Runs @p run (as run_paged_decode) on seeded data laid out as @p pb and checks its output
/// against the CPU reference (the fp32 rule, the reference reading the same rounded cache).
/// Returns the output.
template <typename C, typename Run>
std::vector<float> check_paged_decode(const PagedBatch& pb, std::uint64_t seed, Run run, const std::string& what) {
    const PagedInputs<C> in = make_paged_inputs<C>(pb, seed);
    const std::vector<float> out = run_paged_decode<C>(pb, in, pb.table, run);
    check_decode_output(out, in.ref, pb.shape, what + " " + dtype_name<C>() + " " + pb.context(seed));
    return out;
}

}  // namespace pd::testing
