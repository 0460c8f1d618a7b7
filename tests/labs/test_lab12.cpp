// Lab 12: the host's part of a decode step replayed as a CUDA graph (graph_buckets, graph_bucket
// and fill_graph_inputs, in <lab tree>/12_cuda_graphs/graph_batch.cpp). The buckets and the
// bucket of a batch for hand-picked sizes; a batch's inputs padded to its bucket worked by hand,
// on slots (3 sequences in a bucket of 4) and on pages (2 sequences in a bucket of 4, blocks of
// 4 positions); a full bucket, and nothing written past the bucket; then seeded random batches
// of 1 to 64 sequences on slots and pages against the rule, written here row by row; last, the
// arguments out of range (std::invalid_argument naming them) and the values at their bounds.
// Every buffer starts poisoned with -7, a value no input takes, so a part left unwritten fails.
#include "pd/rng.hpp"
#include "pd/serving/graph_batch.hpp"

#include "lab_case.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sv = pd::serving;
using Catch::Matchers::Contains;

namespace {

constexpr const char* kWhere = "lab 12: <lab tree>/12_cuda_graphs/graph_batch.cpp";
constexpr int kPoison = -7;

/// The buffer of one replay: every part `rows` ints (the table rows x max_blocks), poisoned.
struct Buffer {
    std::vector<int> tokens, q_len, context, slot, q_start, kv_len, positions, row_seq, table;
    int block_size = 0, max_blocks = 0;

    Buffer(int rows, int block_size_, int max_blocks_) : block_size(block_size_), max_blocks(max_blocks_) {
        for (std::vector<int>* part : parts()) part->assign(std::size_t(rows), kPoison);
        table.assign(block_size > 0 ? std::size_t(rows) * std::size_t(max_blocks) : 0, kPoison);
    }
    std::vector<std::vector<int>*> parts() {
        return {&tokens, &q_len, &context, &slot, &q_start, &kv_len, &positions, &row_seq};
    }
    sv::GraphInputs inputs() {
        return {tokens, q_len, context, slot, q_start, kv_len, positions, row_seq, table, block_size, max_blocks};
    }
};

const char* const kNames[] = {"tokens", "q_len", "context", "slot", "q_start", "kv_len", "positions", "row_seq"};

/// A batch as the test keeps it: the rows and the block tables their spans view.
struct Batch {
    std::vector<sv::GraphRow> rows;
    std::vector<std::vector<int>> blocks;
};

/// What the buffer holds after fill_graph_inputs(rows, bucket, ...): row s < rows.size() its
/// token, q_len 1, context, slot (pages: s), q_start s, kv_len context + 1, position context,
/// row_seq as slot, its first context / block_size + 1 blocks then -1; a padded row token 0,
/// q_len 1, context 0, slot s, q_start s, kv_len 1, position -1, row_seq s, a table row of -1;
/// past the bucket, the poison.
Buffer expected(const Batch& b, int bucket, int capacity, int block_size, int max_blocks) {
    Buffer e(capacity, block_size, max_blocks);
    const bool paged = block_size > 0;
    for (int s = 0; s < bucket; ++s) {
        const std::size_t i = std::size_t(s);
        const bool real = i < b.rows.size();
        const sv::GraphRow r = real ? b.rows[i] : sv::GraphRow{};
        e.tokens[i] = real ? r.token : 0;
        e.q_len[i] = 1;
        e.context[i] = real ? r.context : 0;
        e.slot[i] = real && !paged ? r.slot : s;
        e.q_start[i] = s;
        e.kv_len[i] = real ? r.context + 1 : 1;
        e.positions[i] = real ? r.context : -1;
        e.row_seq[i] = e.slot[i];
        for (int k = 0; paged && k < max_blocks; ++k)
            e.table[i * std::size_t(max_blocks) + std::size_t(k)] =
                real && k <= r.context / block_size ? r.blocks[std::size_t(k)] : -1;
    }
    return e;
}

std::string row_text(const Batch& b, std::size_t s) {
    std::ostringstream os;
    if (s >= b.rows.size()) return "a padded row";
    const sv::GraphRow& r = b.rows[s];
    os << "{token " << r.token << ", slot " << r.slot << ", context " << r.context << ", " << r.blocks.size()
       << " blocks}";
    return os.str();
}

/// fill_graph_inputs(b.rows, bucket) into a poisoned buffer of @p capacity rows, compared part
/// by part with expected(): the first wrong part, row and value are named.
void check_fill(const Batch& b, int bucket, int capacity, int block_size, int max_blocks) {
    INFO(kWhere << ": fill_graph_inputs");
    INFO(b.rows.size() << " rows in a bucket of " << bucket << " (a buffer of " << capacity << " rows), "
                       << (block_size > 0 ? "pages of " + std::to_string(block_size) + " positions, " +
                                                std::to_string(max_blocks) + " blocks per row"
                                          : std::string("slots")));
    Buffer got(capacity, block_size, max_blocks);
    sv::fill_graph_inputs(b.rows, bucket, got.inputs());
    Buffer want = expected(b, bucket, capacity, block_size, max_blocks);
    const std::vector<std::vector<int>*> g = got.parts(), w = want.parts();
    for (std::size_t p = 0; p < g.size(); ++p)
        for (std::size_t s = 0; s < std::size_t(capacity); ++s) {
            if ((*g[p])[s] == (*w[p])[s]) continue;
            INFO("row " << s << " (" << (s < std::size_t(bucket) ? row_text(b, s) : "past the bucket: not written")
                        << "): " << kNames[p] << " = " << (*g[p])[s] << ", expected " << (*w[p])[s]
                        << ((*g[p])[s] == kPoison ? " (-7: not written)" : ""));
            FAIL_CHECK("a wrong input");
            return;
        }
    for (std::size_t k = 0; k < got.table.size(); ++k) {
        if (got.table[k] == want.table[k]) continue;
        const std::size_t s = k / std::size_t(max_blocks);
        INFO("row " << s << " (" << (s < std::size_t(bucket) ? row_text(b, s) : "past the bucket: not written")
                    << "): table entry " << k % std::size_t(max_blocks) << " = " << got.table[k] << ", expected "
                    << want.table[k] << (got.table[k] == kPoison ? " (-7: not written)" : ""));
        FAIL_CHECK("a wrong block id");
        return;
    }
    SUCCEED();
}

/// @p n random rows: slots a permutation of 0 .. capacity - 1 (chapter 04's slots in any order),
/// contexts 0 .. max_context, blocks distinct ids (pages).
Batch random_batch(int n, int capacity, int max_context, int block_size, std::uint64_t seed) {
    pd::Rng rng(seed);
    Batch b;
    std::vector<int> slots(static_cast<std::size_t>(capacity));
    for (int i = 0; i < capacity; ++i) slots[std::size_t(i)] = i;
    for (int i = capacity - 1; i > 0; --i) std::swap(slots[std::size_t(i)], slots[std::size_t(rng.integer(0, i))]);
    int next_block = 100;
    for (int s = 0; s < n; ++s) {
        const int context = rng.integer(0, max_context);
        std::vector<int> blocks;
        if (block_size > 0)
            for (int k = 0; k <= context / block_size; ++k) blocks.push_back(next_block++);
        b.blocks.push_back(std::move(blocks));
        b.rows.push_back({.token = rng.integer(0, 31999), .slot = slots[std::size_t(s)], .context = context});
    }
    for (std::size_t s = 0; s < b.rows.size(); ++s) b.rows[s].blocks = b.blocks[s];
    return b;
}

std::vector<int> powers_then(int largest) {
    std::vector<int> want;
    for (int b = 1; b < largest; b *= 2) want.push_back(b);
    want.push_back(largest);
    return want;
}

}  // namespace

TEST_CASE("lab12: the buckets: the powers of two below the largest, then the largest", "[lab12]") {
    INFO(kWhere << ": graph_buckets");
    CHECK(sv::graph_buckets(1) == std::vector<int>{1});
    CHECK(sv::graph_buckets(2) == std::vector<int>{1, 2});
    CHECK(sv::graph_buckets(3) == std::vector<int>{1, 2, 3});
    CHECK(sv::graph_buckets(6) == std::vector<int>{1, 2, 4, 6});
    CHECK(sv::graph_buckets(8) == std::vector<int>{1, 2, 4, 8});
    CHECK(sv::graph_buckets(9) == std::vector<int>{1, 2, 4, 8, 9});
    CHECK(sv::graph_buckets(64) == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
    CHECK(sv::graph_buckets(100) == std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100});
}

TEST_CASE("lab12: a batch runs in the smallest bucket that holds it", "[lab12]") {
    INFO(kWhere << ": graph_bucket");
    const std::vector<int> six = {1, 2, 4, 6};
    const int want[] = {0, 1, 2, 4, 4, 6, 6};
    for (int n = 1; n <= 6; ++n) {
        INFO(n << " sequences, buckets 1 2 4 6");
        CHECK(sv::graph_bucket(six, n) == want[n]);
    }
    const std::vector<int> one = {1};
    CHECK(sv::graph_bucket(one, 1) == 1);
    const std::vector<int> wide = {1, 2, 4, 8, 16, 32, 64, 100};
    CHECK(sv::graph_bucket(wide, 33) == 64);
    CHECK(sv::graph_bucket(wide, 64) == 64);
    CHECK(sv::graph_bucket(wide, 65) == 100);
    CHECK_THROWS_AS(sv::graph_bucket(six, 7), std::invalid_argument);
    CHECK_THROWS_WITH(sv::graph_bucket(six, 7), Contains("sequences = 7"));
    CHECK_THROWS_WITH(sv::graph_bucket(six, 0), Contains("sequences = 0"));
}

TEST_CASE("lab12: slots: a batch of 3 padded to a bucket of 4, worked by hand", "[lab12]") {
    INFO(kWhere << ": fill_graph_inputs");
    // sequences in slots 2, 0 and 5 with 7, 0 and 12 positions cached; the padded row 3 reads
    // position 0 of slot 3 and writes nothing
    const std::vector<sv::GraphRow> rows = {{.token = 11, .slot = 2, .context = 7},
                                            {.token = 22, .slot = 0, .context = 0},
                                            {.token = 33, .slot = 5, .context = 12}};
    Buffer b(6, 0, 0);
    sv::fill_graph_inputs(rows, 4, b.inputs());
    CHECK(b.tokens == std::vector<int>{11, 22, 33, 0, kPoison, kPoison});
    CHECK(b.q_len == std::vector<int>{1, 1, 1, 1, kPoison, kPoison});
    CHECK(b.context == std::vector<int>{7, 0, 12, 0, kPoison, kPoison});
    CHECK(b.slot == std::vector<int>{2, 0, 5, 3, kPoison, kPoison});
    CHECK(b.q_start == std::vector<int>{0, 1, 2, 3, kPoison, kPoison});
    CHECK(b.kv_len == std::vector<int>{8, 1, 13, 1, kPoison, kPoison});
    CHECK(b.positions == std::vector<int>{7, 0, 12, -1, kPoison, kPoison});
    CHECK(b.row_seq == std::vector<int>{2, 0, 5, 3, kPoison, kPoison});
}

TEST_CASE("lab12: pages: 2 sequences padded to 4, their block tables and the padding's empty rows", "[lab12]") {
    INFO(kWhere << ": fill_graph_inputs");
    // blocks of 4 positions, 3 per row: context 5 writes position 5 in its second block (9);
    // context 3 writes position 3, the last of its first block (4); block 8 past the positions
    // the step reads is not copied
    const std::vector<int> first = {6, 9, 8}, second = {4};
    const std::vector<sv::GraphRow> rows = {{.token = 5, .slot = 7, .context = 5, .blocks = first},
                                            {.token = 6, .slot = 1, .context = 3, .blocks = second}};
    Buffer b(4, 4, 3);
    sv::fill_graph_inputs(rows, 4, b.inputs());
    CHECK(b.tokens == std::vector<int>{5, 6, 0, 0});
    CHECK(b.context == std::vector<int>{5, 3, 0, 0});
    CHECK(b.slot == std::vector<int>{0, 1, 2, 3});  // pages: row s of the table, not the slot
    CHECK(b.row_seq == std::vector<int>{0, 1, 2, 3});
    CHECK(b.kv_len == std::vector<int>{6, 4, 1, 1});
    CHECK(b.positions == std::vector<int>{5, 3, -1, -1});
    CHECK(b.table == std::vector<int>{6, 9, -1, 4, -1, -1, -1, -1, -1, -1, -1, -1});
    CHECK(b.q_len == std::vector<int>{1, 1, 1, 1});
    CHECK(b.q_start == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("lab12: a full bucket has no padding, and nothing past the bucket is written", "[lab12]") {
    for (const int block_size : {0, 16}) {
        INFO((block_size ? "pages" : "slots"));
        const Batch full = random_batch(4, 8, 40, block_size, 12);
        check_fill(full, 4, 8, block_size, 3);
        const Batch one = random_batch(1, 8, 40, block_size, 13);
        check_fill(one, 1, 8, block_size, 3);
        check_fill(one, 2, 8, block_size, 3);
    }
}

TEST_CASE("lab12: random batches of 1 to 64 sequences against the rule, on slots and on pages", "[lab12]") {
    std::uint64_t seed = 1200;
    for (const int largest : {1, 3, 6, 8, 64}) {
        const std::vector<int> buckets = sv::graph_buckets(largest);
        REQUIRE(buckets == powers_then(largest));
        for (int n = 1; n <= largest; ++n) {
            const int bucket = sv::graph_bucket(buckets, n);
            int want = largest;
            for (int b : powers_then(largest))
                if (b >= n) {
                    want = b;
                    break;
                }
            INFO(n << " sequences, buckets up to " << largest);
            REQUIRE(bucket == want);
            for (const int block_size : {0, 1, 16}) {
                INFO("seed " << seed);
                const int max_context = 100;
                const Batch batch = random_batch(n, largest, max_context, block_size, seed++);
                check_fill(batch, bucket, largest, block_size, block_size ? max_context / block_size + 1 : 0);
            }
        }
    }
}

TEST_CASE("lab12: arguments out of range throw std::invalid_argument naming them, and values at the bounds are written",
          "[lab12]") {
    INFO(kWhere);
    CHECK_THROWS_AS(sv::graph_buckets(0), std::invalid_argument);
    CHECK_THROWS_WITH(sv::graph_buckets(-3), Contains("largest"));
    CHECK_THROWS_WITH(sv::graph_bucket(std::vector<int>{}, 1), Contains("buckets"));
    const std::vector<int> blocks = {3};
    const std::vector<sv::GraphRow> two = {{.token = 1, .slot = 0, .context = 0, .blocks = blocks},
                                           {.token = 2, .slot = 1, .context = 0, .blocks = blocks}};
    Buffer slots(4, 0, 0), pages(4, 2, 2);
    CHECK_THROWS_WITH(sv::fill_graph_inputs(two, 1, slots.inputs()), Contains("bucket = 1"));
    CHECK_THROWS_WITH(sv::fill_graph_inputs(two, 5, slots.inputs()), Contains("bucket = 5"));
    CHECK_THROWS_WITH(sv::fill_graph_inputs(two, 0, slots.inputs()), Contains("bucket = 0"));
    std::vector<sv::GraphRow> bad = two;
    bad[1].context = -1;
    CHECK_THROWS_WITH(sv::fill_graph_inputs(bad, 2, slots.inputs()), Contains("rows[1].context"));
    bad = two;
    bad[0].slot = -2;
    CHECK_THROWS_WITH(sv::fill_graph_inputs(bad, 2, slots.inputs()), Contains("rows[0].slot"));
    bad = two;
    bad[1].context = 2;  // 3 positions in blocks of 2: two blocks, one given
    CHECK_THROWS_WITH(sv::fill_graph_inputs(bad, 2, pages.inputs()), Contains("rows[1].blocks"));
    CHECK(slots.tokens == std::vector<int>(4, kPoison));  // nothing written by a refused call
    // at the bounds: a bucket of exactly the rows, context 0 (one position, one block), slot 0,
    // block_size 1 with one block per row
    Buffer unit(2, 1, 1);
    const std::vector<int> b0 = {0}, b1 = {1};
    const std::vector<sv::GraphRow> edge = {{.token = 0, .slot = 0, .context = 0, .blocks = b0},
                                            {.token = 31999, .slot = 9, .context = 0, .blocks = b1}};
    sv::fill_graph_inputs(edge, 2, unit.inputs());
    CHECK(unit.tokens == std::vector<int>{0, 31999});
    CHECK(unit.kv_len == std::vector<int>{1, 1});
    CHECK(unit.positions == std::vector<int>{0, 0});
    CHECK(unit.slot == std::vector<int>{0, 1});
    CHECK(unit.table == std::vector<int>{0, 1});
    std::vector<sv::GraphRow> none;
    Buffer empty(1, 0, 0);
    sv::fill_graph_inputs(none, 1, empty.inputs());  // no sequence: one padded row
    CHECK(empty.positions == std::vector<int>{-1});
    CHECK(empty.kv_len == std::vector<int>{1});
}

TEST_CASE("lab12: a case the grader gives", "[.][lab12-case]") {
    // largest (the model's batch), sequences (1 .. largest), block_size (0: slots), max_context,
    // seed: the buckets of largest, the batch's bucket, and its inputs padded to it
    const pd::testing::LabCase c = pd::testing::LabCase::from_environment();
    INFO("case: " << c.text());
    const int largest = c.integer("largest"), n = c.integer("sequences"), block_size = c.integer("block_size"),
              max_context = c.integer("max_context");
    REQUIRE(largest >= 1);
    REQUIRE(n >= 1);
    REQUIRE(n <= largest);
    REQUIRE(block_size >= 0);
    REQUIRE(max_context >= 0);
    const std::vector<int> buckets = sv::graph_buckets(largest);
    REQUIRE(buckets == powers_then(largest));
    int want = largest;
    for (int b : buckets)
        if (b >= n) {
            want = b;
            break;
        }
    const int bucket = sv::graph_bucket(buckets, n);
    REQUIRE(bucket == want);
    const Batch batch = random_batch(n, largest, max_context, block_size, c.seed());
    check_fill(batch, bucket, largest, block_size, block_size ? max_context / block_size + 1 : 0);
}
