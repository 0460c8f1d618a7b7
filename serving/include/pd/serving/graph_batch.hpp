/// @file graph_batch.hpp
/// @brief Chapter 12 (lab 12): the host's part of replaying a decode step as a CUDA graph. A graph
/// replays the launches it recorded with the shapes and addresses it recorded, so a model
/// captures one graph per batch size it will run (its buckets), runs a batch in the smallest
/// bucket that holds it, and writes the batch's inputs, padded to the bucket's rows, where the
/// graph's first copies read them. The model (model/src/graphs.cpp) keeps the graphs, the pinned
/// buffer and the copies; these functions decide the sizes and the values.
///
/// Host C++: graph_buckets(), graph_bucket() and fill_graph_inputs() are built into pd_serving
/// from the lab tree (`<lab tree>/12_cuda_graphs/graph_batch.cpp`), as labs 05, 09, 10 and 11 are.
#pragma once

#include <span>
#include <vector>

namespace pd::serving {

/// The batch sizes a model captures a decode graph for, ascending: the powers of two below
/// @p largest (1, 2, 4, ...) and @p largest itself, as vLLM pads a batch to the next captured
/// size. graph_buckets(6) is {1, 2, 4, 6}; graph_buckets(8) is {1, 2, 4, 8}.
/// Throws std::invalid_argument naming `largest` when it is < 1.
std::vector<int> graph_buckets(int largest);

/// The smallest of @p buckets (ascending, as graph_buckets() returns them) that holds
/// @p sequences rows. Throws std::invalid_argument naming `sequences` ("graph_bucket: sequences
/// = 7 must be in 1 .. 6") when it is < 1 or more than the largest bucket, and naming `buckets`
/// when they are empty.
int graph_bucket(std::span<const int> buckets, int sequences);

/// One sequence of a decode batch: one new token at position `context` of its cache.
struct GraphRow {
    int token = 0;                ///< the token id the step embeds
    int slot = 0;                 ///< its cache slot (slots; unused with pages)
    int context = 0;              ///< positions cached before the token (>= 0)
    std::span<const int> blocks;  ///< pages: its block table, at least ceil((context + 1) / block_size) ids
};

/// Where one replay's inputs go: the parts of the buffer the graph's first copies read, each
/// at least a bucket of ints (the table: bucket x max_blocks). The model's decode pass reads
/// row s of each.
struct GraphInputs {
    std::span<int> tokens;     ///< the token of each row
    std::span<int> q_len;      ///< new tokens per row: 1
    std::span<int> context;    ///< positions cached before the row's token
    std::span<int> slot;       ///< the row's slot (slots), or s, its row of the table (pages)
    std::span<int> q_start;    ///< the row's first token in the step: s (one token per row)
    std::span<int> kv_len;     ///< positions the attention reads: context + 1
    std::span<int> positions;  ///< where the row's K and V are written: context, or -1 (nowhere)
    std::span<int> row_seq;    ///< the sequence of token row s: the row's slot (slots), or s (pages)
    std::span<int> table;      ///< pages: max_blocks block ids per row, -1 past its blocks
    int block_size = 0;        ///< positions per block; 0: slots (no table)
    int max_blocks = 0;        ///< block ids per row of the table (pages)
};

/// Writes @p rows, padded to @p bucket rows, into @p in. A row s of @p rows: its token, q_len 1,
/// its context, its slot (pages: s), q_start s, kv_len context + 1, position context, row_seq as
/// slot, and (pages) its first ceil((context + 1) / block_size) blocks, then -1. A padded row s
/// (rows.size() <= s < bucket) reads one position and writes none: token 0, q_len 1, context 0,
/// slot s, q_start s, kv_len 1, position -1 (the appends skip it), row_seq s, and a table row of
/// -1 (no block: it reads nothing). Nothing past row bucket - 1 is written.
/// Throws std::invalid_argument naming the argument: @p bucket below rows.size() or past a
/// part of @p in; a row's context < 0, its slot < 0 (slots) or too few blocks (pages).
void fill_graph_inputs(std::span<const GraphRow> rows, int bucket, const GraphInputs& in);

}  // namespace pd::serving
