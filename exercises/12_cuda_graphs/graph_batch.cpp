/// @file graph_batch.cpp
/// @brief Lab 12: the batch sizes a model captures its decode graphs for, the bucket a batch runs
/// in, and the batch's inputs padded to it (pd/serving/graph_batch.hpp). A padded row must run
/// through every kernel of the graph without changing anything a real row reads: it writes no
/// K or V (position -1) and reads one position of no block.
///
/// Host C++, built into pd_serving from the lab tree (as labs 05, 09, 10 and 11 are), so the
/// model's graphs (ModelOptions::graphs, chapter 12) run these buckets and these inputs.
#include "pd/serving/graph_batch.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace pd::serving {

namespace {

void check(std::span<const GraphRow> rows, int bucket, const GraphInputs& in) {
    const auto bad = [](const std::string& what) { throw std::invalid_argument("fill_graph_inputs: " + what); };
    const std::size_t n = std::size_t(std::max(bucket, 0));
    if (bucket < int(rows.size()) || bucket < 1)
        bad("bucket = " + std::to_string(bucket) + " must hold the " + std::to_string(rows.size()) + " rows (>= 1)");
    for (const std::span<int>* part :
         {&in.tokens, &in.q_len, &in.context, &in.slot, &in.q_start, &in.kv_len, &in.positions, &in.row_seq})
        if (part->size() < n)
            bad("bucket = " + std::to_string(bucket) + " is past a part of GraphInputs (" +
                std::to_string(part->size()) + " ints)");
    if (in.block_size < 0 || (in.block_size > 0 && in.max_blocks < 1))
        bad("GraphInputs.block_size = " + std::to_string(in.block_size) +
            " and max_blocks = " + std::to_string(in.max_blocks) + " (block_size >= 0; pages need max_blocks >= 1)");
    if (in.block_size > 0 && in.table.size() < n * std::size_t(in.max_blocks))
        bad("bucket = " + std::to_string(bucket) + " is past GraphInputs.table (" + std::to_string(in.table.size()) +
            " ints, " + std::to_string(in.max_blocks) + " per row)");
    for (std::size_t s = 0; s < rows.size(); ++s) {
        const GraphRow& r = rows[s];
        const std::string row = "rows[" + std::to_string(s) + "]";
        if (r.context < 0) bad(row + ".context = " + std::to_string(r.context) + " must be >= 0");
        if (in.block_size == 0 && r.slot < 0) bad(row + ".slot = " + std::to_string(r.slot) + " must be >= 0");
        if (in.block_size > 0) {
            const std::size_t need = std::size_t(r.context / in.block_size + 1);  // blocks of context + 1 positions
            if (r.blocks.size() < need || need > std::size_t(in.max_blocks))
                bad(row + ".blocks: " + std::to_string(r.blocks.size()) + " ids for context + 1 = " +
                    std::to_string(r.context + 1) + " positions, which take " + std::to_string(need) + " blocks of " +
                    std::to_string(in.block_size) + " (max_blocks " + std::to_string(in.max_blocks) + ")");
        }
    }
}

}  // namespace

// [graph_buckets]
std::vector<int> graph_buckets(int largest) {
    if (largest < 1)
        throw std::invalid_argument("graph_buckets: largest = " + std::to_string(largest) + " must be >= 1");
    std::vector<int> buckets;
    // TODO(student): 1. the powers of two below largest, then largest itself (~3 lines)
    return buckets;
}

int graph_bucket(std::span<const int> buckets, int sequences) {
    if (buckets.empty()) throw std::invalid_argument("graph_bucket: buckets is empty (graph_buckets())");
    // TODO(student): 2. the smallest bucket that holds sequences rows (sequences >= 1) (~3 lines)
    throw std::invalid_argument("graph_bucket: sequences = " + std::to_string(sequences) + " must be in 1 .. " +
                                std::to_string(buckets.back()));
}
// [graph_buckets]

// [fill_graph_inputs]
void fill_graph_inputs(std::span<const GraphRow> rows, int bucket, const GraphInputs& in) {
    check(rows, bucket, in);
    const bool paged = in.block_size > 0;
    for (int s = 0; s < bucket; ++s) {
        const std::size_t i = std::size_t(s);
        // a row of the batch, or a padded one: one token each, the row's own in the step
        in.q_len[i] = 1;
        in.q_start[i] = s;
        int* table = paged ? in.table.data() + i * std::size_t(in.max_blocks) : nullptr;
        if (paged) std::fill_n(table, in.max_blocks, -1);
        if (i < rows.size()) {
            const GraphRow& r = rows[i];
            // TODO(student): 3. a row of the batch: its token and context, slot and row_seq (pages: s), kv_len, position, its blocks (~8 lines)
            (void)r;
            (void)table;
        } else {
            // TODO(student): 4. a padded row: token 0, context 0, slot and row_seq s, kv_len 1, and a position that writes nothing (~5 lines)
        }
    }
}
// [fill_graph_inputs]

}  // namespace pd::serving
