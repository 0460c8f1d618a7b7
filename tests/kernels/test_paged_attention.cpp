// Chapter 06's paged kernels against the CPU reference and chapter 04's and 05's contiguous
// kernels on the same data scattered into shuffled blocks: decode attention v1 and v2 with
// block sizes 1, 8, 16, 32, contexts shorter than a block, around the block and warp sizes and
// spanning many blocks (partial last blocks), ragged batches, GQA groups 1, 2, 4 and 8, head
// dims 32 to 128, fp32 and bf16 caches; NaN in every position the table does not give a
// sequence, in the spare blocks and in guard blocks before and after the cache; table entries
// of -1 or past the cache inside a context are skipped; v2 with any number of splits and its
// split rule; bitwise repeatability. The KV append writes exactly where the table says and
// nothing else; varlen attention of a mixed batch through the table equals chapter 05's over
// slots. Bad shapes and names are rejected naming the parameter.
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "paged_check.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
namespace rt = pd::kernels::runtime;
using Catch::Matchers::Contains;
using bf16 = __nv_bfloat16;
using pd::testing::PagedBatch;

namespace {

constexpr int kSms = 132;  // v2's split rule for an H100/H200-sized GPU, on every backend

/// Chapter 04's contiguous version each paged version adds the block table to.
const char* contiguous_twin(const std::string& version) {
    return version == "v1" ? "v2" : "v4";
}

/// Checks paged @p version on cache type C against the reference, and against its chapter 04
/// twin run on the same data in the contiguous cache (they differ only in where a row is read,
/// and v2 also in where the splits fall: within 1e-5).
template <typename C>
void check_version(const std::string& version, const PagedBatch& pb, std::uint64_t seed) {
    const at::PagedShape& s = pb.shape;
    const pd::testing::PagedInputs<C> in = pd::testing::make_paged_inputs<C>(pb, seed);
    const std::string what = version + " " + pd::dtype_name<C>() + " " + pb.context(seed);
    pd::DeviceBuffer<float> ws(std::max<std::size_t>(1, at::paged_workspace_floats(version, s, kSms)));
    const std::vector<float> paged = pd::testing::run_paged_decode<C>(
        pb, in, pb.table, [&](const float* q, const C* k, const C* v, const int* table, const int* len, float* out) {
            at::paged_decode_attention(version, q, k, v, table, len, out, ws.data(), s, kSms);
        });
    pd::testing::check_decode_output(paged, in.ref, s, what);

    const at::DecodeShape cs = pb.contiguous();
    const std::string twin = contiguous_twin(version);
    const std::vector<C> kc = pd::round_all<C>(in.k), vc = pd::round_all<C>(in.v);
    pd::DeviceBuffer<float> dq{std::span<const float>(in.q)}, out(in.q.size()),
        cws(std::max<std::size_t>(1, at::decode_workspace_floats(twin, cs, kSms)));
    pd::DeviceBuffer<C> dk{std::span<const C>(kc)}, dv{std::span<const C>(vc)};
    pd::DeviceBuffer<int> dlen{std::span<const int>(pb.lens)};
    out.fill_bytes(pd::kPoisonByte);
    at::decode_attention(twin, dq.data(), dk.data(), dv.data(), dlen.data(), out.data(), cws.data(), cs, kSms);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> contiguous = out.download();
    const pd::CompareResult r = pd::compare<float, float>(paged, contiguous, {1e-5, 1e-5});
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.head_dim)};
    INFO(what << ": against chapter 04's " << twin << " on the contiguous cache");
    INFO(pd::describe(r, "paged vs contiguous", dims));
    CHECK(r.passed);
}

template <typename C>
void check_all_versions(const PagedBatch& pb, std::uint64_t seed) {
    for (const pd::Version& v : at::paged_versions()) check_version<C>(v.name, pb, seed);
}

}  // namespace

TEST_CASE("paged attention: one sequence, block sizes 1, 8, 16, 32, contexts around block and warp sizes", "[paged]") {
    for (int block_size : {1, 8, 16, 32})
        for (int context : {1, 7, 17, 33, 200}) {  // within one block, ending inside one, over many
            const PagedBatch pb = pd::testing::make_paged_batch(8, 2, 64, block_size, {context}, 100 + context);
            check_all_versions<float>(pb, 1000 + std::uint64_t(block_size * 1000 + context));
            check_all_versions<bf16>(pb, 2000 + std::uint64_t(block_size * 1000 + context));
        }
}

TEST_CASE("paged attention: ragged batches in shuffled blocks, GQA groups 1, 2, 4, 8, head dims 32 to 128", "[paged]") {
    using pd::testing::make_paged_batch;
    check_all_versions<float>(make_paged_batch(8, 4, 64, 16, {1, 16, 17, 100, 257}, 1), 11);  // group 2
    check_all_versions<bf16>(make_paged_batch(8, 4, 64, 16, {1, 16, 17, 100, 257}, 2), 12);
    check_all_versions<float>(make_paged_batch(8, 2, 128, 8, {40, 39, 1, 9, 64}, 3), 13);  // group 4, d = 128
    check_all_versions<bf16>(make_paged_batch(8, 2, 128, 8, {40, 39, 1, 9, 64}, 4), 14);
    check_all_versions<float>(make_paged_batch(3, 3, 48, 32, {70, 32, 33}, 5, 5, 3), 15);  // group 1, d = 48
    check_all_versions<float>(make_paged_batch(4, 1, 32, 1, {3, 40, 7}, 6), 16);           // group 4, block size 1
    check_all_versions<bf16>(make_paged_batch(8, 1, 32, 32, {300, 2}, 7), 17);             // group 8
    check_all_versions<float>(make_paged_batch(12, 4, 2, 8, {9, 30}, 8),
                              18);  // group 3 (v2 runs its group-4 kernel), d = 2
}

TEST_CASE("paged attention v2: any number of splits, empty ones included", "[paged]") {
    const PagedBatch pb = pd::testing::make_paged_batch(8, 2, 64, 8, {150, 3, 77}, 9);
    for (int splits : {1, 2, 7, 19, at::kMaxSplits}) {  // 19 splits of one block each; 128 leaves most empty
        pd::DeviceBuffer<float> partials(std::size_t(pb.shape.batch) * pb.shape.heads * splits *
                                         (pb.shape.head_dim + 2));
        pd::testing::check_paged_decode<float>(
            pb, 900 + std::uint64_t(splits),
            [&](const float* q, const float* k, const float* v, const int* table, const int* len, float* out) {
                at::paged_decode_attention_v2(q, k, v, table, len, out, partials.data(), splits, pb.shape);
            },
            "v2 splits=" + std::to_string(splits));
    }
}

TEST_CASE("paged attention v2: the split rule, whole blocks per split", "[paged]") {
    // {batch, heads, kv_heads, head_dim, block_size, num_blocks, max_blocks, max_kv_len}
    // llama-3-8b, B = 1, context 1024 in blocks of 16: chapter 04's rule gives 8 splits of 128
    // positions, 8 blocks each.
    CHECK(at::paged_splits({1, 32, 8, 128, 16, 64, 512, 1024}, 132) == 8);
    // B = 16, context 8192: chapter 04's 5 splits; 512 blocks, 103 per split: still 5.
    CHECK(at::paged_splits({16, 32, 8, 128, 16, 8192, 512, 8192}, 132) == 5);
    // 5 blocks of 128 positions, 4 splits wanted (one SM): 2 blocks per split, so 3 splits.
    CHECK(at::paged_splits({1, 1, 1, 64, 128, 5, 5, 600}, 1) == 3);
    CHECK(at::decode_splits({1, 1, 1, 64, 640, 600}, 1) == 4);
    // a short context is not split; the workspace follows the rule
    CHECK(at::paged_splits({1, 32, 8, 128, 16, 8, 8, 100}, 132) == 1);
    const at::PagedShape s{2, 4, 2, 64, 128, 10, 5, 600};
    CHECK(at::paged_workspace_floats("v2", s, 1) == std::size_t(2) * 4 * at::paged_splits(s, 1) * (64 + 2));
    CHECK(at::paged_workspace_floats("v1", s, 1) == 0);
}

TEST_CASE("paged attention: a table entry that is no block, inside a context, is skipped and never read", "[paged]") {
    // Entries of -1 and num_blocks point at the NaN guard blocks around the cache: reading
    // through them turns the output NaN. The expected result attends to the other positions.
    const PagedBatch pb = pd::testing::make_paged_batch(4, 2, 64, 8, {40, 20, 9}, 21);
    const pd::testing::PagedInputs<float> in = pd::testing::make_paged_inputs<float>(pb, 22);
    std::vector<int> table = pb.table;
    const int mb = pb.shape.max_blocks;
    table[0 * mb + 2] = -1;                   // sequence 0 loses positions 16 ... 23
    table[1 * mb + 0] = pb.shape.num_blocks;  // sequence 1 loses positions 0 ... 7
    table[2 * mb + 1] = -7;                   // sequence 2 loses position 8, its last
    const auto lost = [](int b, int p) {
        return (b == 0 && p >= 16 && p < 24) || (b == 1 && p < 8) || (b == 2 && p == 8);
    };
    const std::vector<double> ref = pd::testing::reference_without(pb, in, lost);
    for (const pd::Version& version : at::paged_versions()) {
        pd::DeviceBuffer<float> ws(std::max<std::size_t>(1, at::paged_workspace_floats(version.name, pb.shape, kSms)));
        const std::vector<float> out = pd::testing::run_paged_decode<float>(
            pb, in, table,
            [&](const float* q, const float* kk, const float* vv, const int* t, const int* len, float* o) {
                at::paged_decode_attention(version.name, q, kk, vv, t, len, o, ws.data(), pb.shape, kSms);
            });
        pd::testing::check_decode_output(out, ref, pb.shape, version.name + " with entries -1, num_blocks, -7");
    }
}

TEST_CASE("paged attention: bitwise repeatable", "[paged]") {
    const PagedBatch pb = pd::testing::make_paged_batch(8, 2, 64, 16, {300, 17, 128}, 31);
    for (const pd::Version& v : at::paged_versions()) {
        pd::DeviceBuffer<float> ws(std::max<std::size_t>(1, at::paged_workspace_floats(v.name, pb.shape, kSms)));
        const auto run = [&](const float* q, const float* k, const float* vv, const int* t, const int* len, float* o) {
            at::paged_decode_attention(v.name, q, k, vv, t, len, o, ws.data(), pb.shape, kSms);
        };
        const auto a = pd::testing::check_paged_decode<float>(pb, 77, run, v.name);
        const auto b = pd::testing::check_paged_decode<float>(pb, 77, run, v.name);
        INFO(v.name);
        CHECK(pd::testing::same_bits(a, b));
    }
}

TEST_CASE("paged attention: bad shapes and names are rejected, naming the parameter", "[paged]") {
    pd::DeviceBuffer<float> buf(64);
    pd::DeviceBuffer<int> idx(4);
    const auto call = [&](const std::string& version, const at::PagedShape& s) {
        at::paged_decode_attention(version, buf.data(), buf.data(), buf.data(), idx.data(), idx.data(), buf.data(),
                                   buf.data(), s, kSms);
    };
    // {batch, heads, kv_heads, head_dim, block_size, num_blocks, max_blocks, max_kv_len}
    REQUIRE_THROWS_WITH(call("v1", {0, 4, 4, 64, 16, 4, 2, 8}), Contains("batch"));
    REQUIRE_THROWS_WITH(call("v1", {1, 0, 4, 64, 16, 4, 2, 8}), Contains("heads"));
    REQUIRE_THROWS_WITH(call("v2", {1, 4, 0, 64, 16, 4, 2, 8}), Contains("kv_heads"));
    REQUIRE_THROWS_WITH(call("v1", {1, 4, 4, 0, 16, 4, 2, 8}), Contains("head_dim"));
    REQUIRE_THROWS_WITH(call("v1", {1, 4, 4, 64, 0, 4, 2, 8}), Contains("block_size"));
    REQUIRE_THROWS_WITH(call("v2", {1, 4, 4, 64, 16, 0, 2, 8}), Contains("num_blocks"));
    REQUIRE_THROWS_WITH(call("v1", {1, 4, 4, 64, 16, 4, 0, 8}), Contains("max_blocks"));
    REQUIRE_THROWS_WITH(call("v1", {1, 4, 4, 64, 16, 4, 2, 0}), Contains("max_kv_len"));
    REQUIRE_THROWS_WITH(call("v1", {1, 6, 4, 64, 16, 4, 2, 8}), Contains("heads = 6") && Contains("kv_heads = 4"));
    REQUIRE_THROWS_WITH(call("v2", {1, 4, 4, 256, 16, 4, 2, 8}), Contains("head_dim = 256"));
    REQUIRE_THROWS_WITH(call("v1", {1, 4, 4, 64, 16, 4, 2, 33}),
                        Contains("max_kv_len = 33") && Contains("max_blocks * block_size = 32"));
    REQUIRE_THROWS_WITH(call("v2", {1, 4, 4, 64, 1 << 16, 4, 1 << 16, 8}), Contains("max_blocks * block_size"));
    REQUIRE_THROWS_WITH(call("v1", {70000, 4, 4, 64, 16, 4, 2, 8}), Contains("batch"));
    REQUIRE_THROWS_WITH(call("v2", {1, 32, 1, 64, 16, 4, 2, 8}), Contains("heads / kv_heads = 32"));
    REQUIRE_THROWS_WITH(call("v9", {1, 4, 4, 64, 16, 4, 2, 8}), Contains("version = v9"));
    const at::PagedShape ok{1, 4, 4, 64, 16, 4, 2, 8};
    for (int splits : {0, at::kMaxSplits + 1})
        REQUIRE_THROWS_WITH(at::paged_decode_attention_v2(buf.data(), buf.data(), buf.data(), idx.data(), idx.data(),
                                                          buf.data(), buf.data(), splits, ok),
                            Contains("splits = " + std::to_string(splits)));
    const auto bf = reinterpret_cast<const bf16*>(buf.data());
    REQUIRE_THROWS_WITH(at::paged_decode_attention_v1(buf.data(), bf, bf, idx.data(), idx.data(), buf.data(),
                                                      {1, 4, 4, 64, 16, 4, 2, 0}),
                        Contains("max_kv_len"));
}

// ---- KV append ---------------------------------------------------------------------------------

namespace {

/// Appends rows (row_seq[t], positions[t]) into a cache of type C pre-filled with a marker
/// (guard blocks included) through @p pb's table, and checks every element: the rows the table
/// places hold the new values (rounded for bf16), everything else keeps the marker.
template <typename C>
void check_paged_append(const PagedBatch& pb, const std::vector<int>& row_seq, const std::vector<int>& positions,
                        std::uint64_t seed) {
    const at::PagedShape& s = pb.shape;
    const int T = int(row_seq.size());
    const std::size_t d = std::size_t(s.head_dim), row_n = std::size_t(s.kv_heads) * d;
    std::vector<float> k(std::size_t(T) * row_n), v(k.size());
    pd::fill_uniform<float>(k, -1.f, 1.f, pd::derive_seed(seed, 1));
    pd::fill_uniform<float>(v, -1.f, 1.f, pd::derive_seed(seed, 2));
    const std::size_t total = std::size_t(s.num_blocks + 2 * pd::testing::kGuardBlocks) * pb.block_elements();
    std::vector<float> want_k(total, -7.f), want_v(total, -7.f);  // the expected cache, by the table's rule
    for (int t = 0; t < T; ++t) {
        const int seq = row_seq[std::size_t(t)], pos = positions[std::size_t(t)];
        if (seq < 0 || seq >= s.batch || pos < 0 || pos >= s.capacity()) continue;
        const int block = pb.table[std::size_t(seq) * s.max_blocks + std::size_t(pos / s.block_size)];
        if (block < 0 || block >= s.num_blocks) continue;
        for (int h = 0; h < s.kv_heads; ++h)
            for (std::size_t c = 0; c < d; ++c) {
                const std::size_t to =
                    ((std::size_t(block + pd::testing::kGuardBlocks) * s.kv_heads + h) * s.block_size +
                     std::size_t(pos % s.block_size)) *
                        d +
                    c;
                const std::size_t from = std::size_t(t) * row_n + std::size_t(h) * d + c;
                want_k[to] = pd::to_float(pd::from_float<C>(k[from]));
                want_v[to] = pd::to_float(pd::from_float<C>(v[from]));
            }
    }
    const std::vector<C> init(total, pd::from_float<C>(-7.f));
    pd::DeviceBuffer<float> dk{std::span<const float>(k)}, dv{std::span<const float>(v)};
    pd::DeviceBuffer<C> kc{std::span<const C>(init)}, vc{std::span<const C>(init)};
    pd::DeviceBuffer<int> dtable{std::span<const int>(pb.table)}, dseq{std::span<const int>(row_seq)},
        dpos{std::span<const int>(positions)};
    const std::size_t first = pd::testing::kGuardBlocks * pb.block_elements();
    rt::paged_kv_append_rows(dk.data(), dv.data(), kc.data() + first, vc.data() + first, dtable.data(), dseq.data(),
                             dpos.data(), T, s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<C> gk = kc.download(), gv = vc.download();
    std::size_t wrong = 0, first_wrong = total;
    for (std::size_t i = 0; i < total; ++i)
        if (pd::to_float(gk[i]) != want_k[i] || pd::to_float(gv[i]) != want_v[i]) {
            ++wrong;
            first_wrong = std::min(first_wrong, i);
        }
    INFO(pd::dtype_name<C>() << " " << pb.context(seed) << " T=" << T);
    INFO(wrong << " cache elements wrong (first at flat index " << first_wrong << ", guard block included): row t "
               << "goes to block table[row_seq[t]][positions[t] / block_size], offset positions[t] % block_size; "
               << "nothing else written");
    CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("paged kv append: each row lands where the block table says, nothing else changes", "[paged][kv_append]") {
    using pd::testing::make_paged_batch;
    // A prefill of sequence 0 (positions 0 ... 20 over three blocks of 8) and decode tokens of
    // sequences 1 and 2 at the last position they hold.
    const PagedBatch a = make_paged_batch(4, 2, 64, 8, {21, 9, 16}, 1);
    std::vector<int> seq(21, 0), pos(21);
    for (int i = 0; i < 21; ++i) pos[std::size_t(i)] = i;
    seq.insert(seq.end(), {1, 2});
    pos.insert(pos.end(), {8, 15});
    check_paged_append<float>(a, seq, pos, 11);
    check_paged_append<bf16>(a, seq, pos, 12);
    // Rows that write nothing: a sequence outside the table (-1, 3), a position before 0 or
    // past max_blocks * block_size, a position whose entry is -1 (the table's spare column).
    check_paged_append<float>(a, {-1, 3, 0, 1, 1, 2, 0}, {0, 0, -1, 32, 16, 3, 4}, 13);
    // Entries that are no block inside a context: num_blocks (the guard block after the cache)
    // and -3; the row of sequence 1 at position 0 still lands.
    PagedBatch broken = a;
    broken.table[std::size_t(broken.shape.max_blocks) + 1] = broken.shape.num_blocks;
    broken.table[2 * std::size_t(broken.shape.max_blocks)] = -3;
    check_paged_append<float>(broken, {1, 2, 1}, {8, 0, 0}, 16);
    // block size 1 (one block per position) and 32 (one partial block), GQA heads, d = 48
    check_paged_append<bf16>(make_paged_batch(6, 3, 48, 1, {5, 2}, 2), {0, 0, 1, 0, 1}, {4, 0, 1, 2, 2}, 14);
    check_paged_append<float>(make_paged_batch(2, 1, 128, 32, {33, 1}, 3), {0, 1, 0}, {32, 0, 31}, 15);
}

TEST_CASE("paged kv append: bad sizes are rejected, naming the parameter", "[paged][kv_append]") {
    pd::DeviceBuffer<float> buf(16);
    pd::DeviceBuffer<int> idx(1);
    const auto call = [&](int T, const at::PagedShape& s) {
        rt::paged_kv_append_rows(buf.data(), buf.data(), buf.data(), buf.data(), idx.data(), idx.data(), idx.data(), T,
                                 s);
    };
    REQUIRE_THROWS_WITH(call(0, {1, 1, 1, 4, 4, 1, 1, 1}), Contains("T must be >= 1"));
    REQUIRE_THROWS_WITH(call(1, {1, 1, 1, 4, 0, 1, 1, 1}), Contains("block_size"));
    REQUIRE_THROWS_WITH(call(1, {1, 1, 1, 4, 4, 0, 1, 1}), Contains("num_blocks"));
}

// ---- varlen attention through the block table --------------------------------------------------

namespace {

/// One sequence of a mixed batch: its new tokens and its first row in Q (its context is in
/// the PagedBatch's lens).
struct Rows {
    int q_len, q_start;
};

/// Runs paged varlen attention on cache type C for the sequences of @p pb with queries
/// @p rows, and chapter 05's varlen attention on the same data in the contiguous cache (slot s
/// = sequence s); checks the paged output against the CPU reference (the fp32 rule) and
/// against chapter 05's (within 1e-5), and the guards past both outputs.
template <typename C>
void check_paged_varlen(const PagedBatch& pb, const std::vector<Rows>& rows, std::uint64_t seed) {
    const at::PagedShape& s = pb.shape;
    int T = 0, max_q = 0;
    std::vector<int> q_start, q_len, slot;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        T += rows[i].q_len;
        max_q = std::max(max_q, rows[i].q_len);
        q_start.push_back(rows[i].q_start);
        q_len.push_back(rows[i].q_len);
        slot.push_back(int(i));
    }
    const pd::testing::PagedInputs<C> in = pd::testing::make_paged_inputs<C>(pb, seed, T);
    const at::DecodeShape cs = pb.contiguous();
    // The reference reads only the keys each query may see: none of the NaN past a context.
    const std::vector<double> ref = pd::reference::varlen_attention(in.q, in.k, in.v, q_start, q_len, pb.lens, slot,
                                                                    s.heads, s.kv_heads, s.head_dim, cs.max_seq);
    constexpr std::size_t kGuard = 32;
    const std::size_t out_n = in.q.size();
    pd::DeviceBuffer<float> dq{std::span<const float>(in.q)}, out(out_n + kGuard), out_slots(out_n + kGuard);
    pd::DeviceBuffer<C> dk{std::span<const C>(in.kp)}, dv{std::span<const C>(in.vp)};
    const std::vector<C> kc = pd::round_all<C>(in.k), vc = pd::round_all<C>(in.v);
    pd::DeviceBuffer<C> dkc{std::span<const C>(kc)}, dvc{std::span<const C>(vc)};
    pd::DeviceBuffer<int> dstart{std::span<const int>(q_start)}, dlen{std::span<const int>(q_len)},
        dkv{std::span<const int>(pb.lens)}, dtable{std::span<const int>(pb.table)}, dslot{std::span<const int>(slot)};
    out.fill_bytes(pd::kPoisonByte);
    out_slots.fill_bytes(pd::kPoisonByte);
    const std::size_t first = pd::testing::kGuardBlocks * pb.block_elements();
    at::paged_varlen_attention(dq.data(), dk.data() + first, dv.data() + first, dstart.data(), dlen.data(), dkv.data(),
                               dtable.data(), out.data(), s, T, max_q);
    const at::VarlenShape vs{s.batch, T, s.heads, s.kv_heads, s.head_dim, s.batch, cs.max_seq, max_q};
    at::varlen_attention(dq.data(), dkc.data(), dvc.data(), dstart.data(), dlen.data(), dkv.data(), dslot.data(),
                         out_slots.data(), vs);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = out.download(), all_slots = out_slots.download();
    const std::vector<float> got(all.begin(), all.begin() + std::ptrdiff_t(out_n)),
        slots(all_slots.begin(), all_slots.begin() + std::ptrdiff_t(out_n));
    std::ostringstream what;
    what << pd::dtype_name<C>() << " " << pb.context(seed) << " T=" << T << " (q_len@row) = [";
    for (const Rows& r : rows) what << r.q_len << "@" << r.q_start << " ";
    INFO(what.str() << "]");
    const std::size_t dims[] = {std::size_t(T), std::size_t(s.heads), std::size_t(s.head_dim)};
    const pd::CompareResult r = pd::compare<float, double>(got, ref, pd::Tolerance::fp32());
    INFO(pd::describe(r,
                      "paged varlen attention (NaN: a row never written, or a position read that the table does "
                      "not give the sequence)",
                      dims));
    CHECK(r.passed);
    const pd::CompareResult rs = pd::compare<float, float>(got, slots, {1e-5, 1e-5});
    INFO(pd::describe(rs, "paged varlen vs chapter 05's varlen over slots", dims));
    CHECK(rs.passed);
    INFO("floats written past out [T, Hq, d]: " << pd::testing::guard_written(all, out_n));
    CHECK(pd::testing::guard_intact(all, out_n));
}

}  // namespace

TEST_CASE("paged varlen attention: a mixed batch through shuffled blocks equals chapter 05's over slots",
          "[paged][varlen]") {
    // Rows of Q [decode ctx 1 | chunk of 7 after 20 | prompt of 33 | decode ctx 130 | chunk of 17
    // after 30], the sequences in another order: kv_len {27, 1, 130, 33, 47}.
    const std::vector<int> lens{27, 1, 130, 33, 47};
    const std::vector<Rows> rows{{7, 1}, {1, 0}, {1, 41}, {33, 8}, {17, 42}};
    struct Case {
        int block_size, heads, kv_heads, d;
        bool bf16_too;
    };
    for (const Case& c : {Case{1, 8, 2, 64, true}, Case{8, 4, 4, 48, false}, Case{16, 4, 2, 128, true},
                          Case{32, 8, 2, 64, false}}) {  // GQA groups 4, 1, 2, 4
        const PagedBatch pb = pd::testing::make_paged_batch(c.heads, c.kv_heads, c.d, c.block_size, lens,
                                                            std::uint64_t(c.block_size * 10 + c.heads / c.kv_heads));
        check_paged_varlen<float>(pb, rows, 300 + std::uint64_t(c.block_size));
        if (c.bf16_too) check_paged_varlen<bf16>(pb, rows, 400 + std::uint64_t(c.block_size));
    }
}

TEST_CASE("paged varlen attention: a table entry that is no block, inside a context, is skipped", "[paged][varlen]") {
    // Decode rows only (one query per sequence is chapter 04's decode attention), blocks of 8:
    // sequence 0 loses positions 16 ... 23 (entry -1), sequence 1 positions 0 ... 7 (entry
    // num_blocks, the NaN guard block after the cache); tiles of 32 keys mix kept and lost rows.
    const PagedBatch pb = pd::testing::make_paged_batch(4, 2, 64, 8, {70, 20, 5}, 23);
    const pd::testing::PagedInputs<float> in = pd::testing::make_paged_inputs<float>(pb, 24);
    std::vector<int> table = pb.table;
    table[2] = -1;
    table[std::size_t(pb.shape.max_blocks)] = pb.shape.num_blocks;
    const std::vector<double> ref = pd::testing::reference_without(
        pb, in, [](int b, int p) { return (b == 0 && p >= 16 && p < 24) || (b == 1 && p < 8); });
    const std::vector<int> q_start{0, 1, 2}, q_len{1, 1, 1};
    pd::DeviceBuffer<int> dstart{std::span<const int>(q_start)}, dlen{std::span<const int>(q_len)};
    const std::vector<float> out = pd::testing::run_paged_decode<float>(
        pb, in, table, [&](const float* q, const float* k, const float* v, const int* t, const int* len, float* o) {
            at::paged_varlen_attention(q, k, v, dstart.data(), dlen.data(), len, t, o, pb.shape, 3, 1);
        });
    pd::testing::check_decode_output(out, ref, pb.shape, "varlen with entries -1 and num_blocks " + pb.context(24));
}

TEST_CASE("paged varlen attention: bad shapes are rejected, naming the parameter", "[paged][varlen]") {
    pd::DeviceBuffer<float> buf(64);
    pd::DeviceBuffer<int> idx(4);
    const auto call = [&](const at::PagedShape& s, int tokens, int max_q_len) {
        at::paged_varlen_attention(buf.data(), buf.data(), buf.data(), idx.data(), idx.data(), idx.data(), idx.data(),
                                   buf.data(), s, tokens, max_q_len);
    };
    const at::PagedShape ok{2, 4, 2, 64, 16, 4, 2, 8};
    REQUIRE_THROWS_WITH(call(ok, 1, 1), Contains("tokens = 1") && Contains("batch = 2"));
    REQUIRE_THROWS_WITH(call(ok, 4, 0), Contains("max_q_len"));
    REQUIRE_THROWS_WITH(call(ok, 4, 5), Contains("max_q_len = 5") && Contains("tokens = 4"));
    REQUIRE_THROWS_WITH(call(ok, 40, 33), Contains("max_q_len = 33") && Contains("max_blocks * block_size = 32"));
    REQUIRE_THROWS_WITH(call({2, 4, 3, 64, 16, 4, 2, 8}, 4, 1), Contains("heads = 4") && Contains("kv_heads = 3"));
    const auto bf = reinterpret_cast<const bf16*>(buf.data());
    REQUIRE_THROWS_WITH(at::paged_varlen_attention(buf.data(), bf, bf, idx.data(), idx.data(), idx.data(), idx.data(),
                                                   buf.data(), {1, 1, 1, 64, 16, 0, 1, 1}, 1, 1),
                        Contains("num_blocks"));
}
