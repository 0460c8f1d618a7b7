// Lab 06: the block-table walk of paged decode attention v1 (paged_decode_attention_v1, in
// <lab tree>/06_paged_kv/block_table_walk.cu), against the CPU reference on the same data
// scattered into shuffled blocks: block sizes 1, 8, 16 and 32, contexts shorter than a block,
// ending inside one and spanning many, ragged batches, grouped-query heads, fp32 and bf16
// caches; NaN in every position the table does not give a sequence, in the spare blocks and
// in guard blocks around the cache; table entries that are no block are skipped, never read, and
// a sequence without a single block gets zeros.
#include "../kernels/paged_check.hpp"
#include "attention/paged_attention.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace at = pd::kernels::attention;
using bf16 = __nv_bfloat16;
using pd::testing::make_paged_batch;
using pd::testing::PagedBatch;

namespace {

constexpr const char* kWhere = "lab 06: paged_decode_attention_v1 in <lab tree>/06_paged_kv/block_table_walk.cu";

/// Runs v1 on @p pb with block table @p table.
template <typename C>
auto v1_on(const PagedBatch& pb) {
    return [&pb](const float* q, const C* k, const C* v, const int* table, const int* len, float* out) {
        at::paged_decode_attention_v1(q, k, v, table, len, out, pb.shape);
    };
}

template <typename C>
void check_v1(const PagedBatch& pb, std::uint64_t seed) {
    INFO(kWhere);
    pd::testing::check_paged_decode<C>(pb, seed, v1_on<C>(pb), "v1");
}

}  // namespace

TEST_CASE("lab06: one sequence, block sizes 1, 8, 16, 32, contexts within one block and over many", "[lab06]") {
    for (int block_size : {1, 8, 16, 32})
        for (int context : {1, 5, 16, 33, 130}) {
            check_v1<float>(make_paged_batch(4, 4, 64, block_size, {context}, 10 + context), 100 + context);
            check_v1<bf16>(make_paged_batch(4, 2, 128, block_size, {context}, 20 + context), 200 + context);
        }
}

TEST_CASE("lab06: ragged batch in shuffled blocks, grouped-query heads", "[lab06]") {
    check_v1<float>(make_paged_batch(8, 2, 64, 16, {100, 1, 37, 16, 17}, 1), 301);  // group 4
    check_v1<float>(make_paged_batch(6, 6, 48, 8, {50, 9}, 2, 6, 3), 302);          // 6 spare blocks, 3 spare columns
    check_v1<bf16>(make_paged_batch(8, 1, 32, 1, {64, 63, 2, 17}, 3), 303);         // group 8, one position per block
}

TEST_CASE("lab06: an entry that is no block (-1, or past the cache) is skipped, never read through", "[lab06]") {
    INFO(kWhere);
    // Sequence 0's third block (positions 16 ... 23) is -1, sequence 1's first is num_blocks:
    // both point at the NaN guard blocks around the cache. The expected output attends to the
    // other positions.
    const PagedBatch pb = make_paged_batch(4, 2, 64, 8, {30, 12}, 4);
    const pd::testing::PagedInputs<float> in = pd::testing::make_paged_inputs<float>(pb, 401);
    std::vector<int> table = pb.table;
    table[2] = -1;
    table[std::size_t(pb.shape.max_blocks)] = pb.shape.num_blocks;
    const std::vector<double> ref = pd::testing::reference_without(
        pb, in, [](int b, int p) { return (b == 0 && p >= 16 && p < 24) || (b == 1 && p < 8); });
    const std::vector<float> out = pd::testing::run_paged_decode<float>(pb, in, table, v1_on<float>(pb));
    pd::testing::check_decode_output(out, ref, pb.shape, "v1 with table entries -1 and num_blocks " + pb.context(401));
}

TEST_CASE("lab06: a sequence whose every entry is -1 has no key, and its output is zeros", "[lab06]") {
    INFO(kWhere);
    // A broken table: no position of sequence 0's context has a block. Nothing is read through
    // a -1 (the guard blocks around the cache hold NaN), so its four warps' states stay empty
    // and merge_warps writes 0; sequence 1, whose table is whole, attends as usual.
    const PagedBatch pb = make_paged_batch(4, 2, 64, 8, {20, 12}, 5);
    const pd::testing::PagedInputs<float> in = pd::testing::make_paged_inputs<float>(pb, 402);
    std::vector<int> table = pb.table;
    std::fill_n(table.begin(), pb.shape.max_blocks, -1);
    std::vector<double> ref = in.ref;
    std::fill_n(ref.begin(), std::size_t(pb.shape.heads) * std::size_t(pb.shape.head_dim), 0.0);
    const std::vector<float> out = pd::testing::run_paged_decode<float>(pb, in, table, v1_on<float>(pb));
    pd::testing::check_decode_output(out, ref, pb.shape, "v1 with every entry of sequence 0 -1 " + pb.context(402));
}

TEST_CASE("lab06: a case the grader gives", "[.][lab06-case]") {
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("the grader's case " << c.text());
    const std::vector<int> lens = c.integers("lens");
    const std::uint64_t seed = c.seed();
    const PagedBatch pb = make_paged_batch(c.integer("heads"), c.integer("kv_heads"), c.integer("head_dim"),
                                           c.integer("block_size"), lens, seed);
    if (c.word("dtype", "fp32") == "bf16")
        check_v1<bf16>(pb, seed + 1);
    else
        check_v1<float>(pb, seed + 1);
}
