/// @file graphs.cpp
/// @brief Chapter 12: the model's decode pass replayed as a CUDA graph (ModelOptions::graphs).
///
/// A decode pass is a few hundred small launches whose arguments do not change from step to step
/// when every input lives at a fixed address. So each batch bucket (1, 2, 4, ... rows) is
/// captured once: the copies of the pass's inputs from a pinned host buffer into the model's own
/// metadata buffers, the split plan of the decode attention (computed on the device from the
/// lengths, kernels/runtime/runtime.hpp's fixed grid), and every kernel of forward_pass() on the
/// model's stream. A step then fills the pinned buffer on the host, copies its tokens, and
/// launches the bucket's graph: one call instead of one per kernel. A batch smaller than its
/// bucket is padded with rows that write nothing to the cache (position -1, which the appends
/// skip) and read at most one position (their logits are never read). The buckets, the bucket
/// of a batch and the padded inputs are lab 12's (pd/serving/graph_batch.hpp, built from the lab
/// tree); this file keeps the graphs, the pinned buffer and the copies.
#include "pd/model/model.hpp"

#include "runtime/runtime.hpp"

#include "pd/common.hpp"
#include "pd/cuda_check.hpp"
#include "pd/serving/graph_batch.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pd::model {

using bf16 = __nv_bfloat16;

/// What the graphs own: the stream they are captured on and replayed on, the pinned buffer a
/// step's inputs are written to, and one executable graph per bucket (null until captured).
struct Model::Graphs {
    cudaStream_t stream = nullptr;
    cudaEvent_t read = nullptr;  // recorded after each replay: the pinned buffer's last copy is done
    int* host = nullptr;  // pinned: tokens [B] | q_len, context, slot [3B] | q_start, kv_len, positions, row_seq [B
                          // each] | table
    DeviceBuffer<int> plan{2};          // the decode attention's [splits, chunk], computed in the graph
    std::vector<cudaGraphExec_t> exec;  // per bucket
    std::vector<GraphNodes> nodes;      // per bucket, counted at its capture
    cudaGraphExec_t pass = nullptr;     // capture_pass(): one pass of any plan, for a comparison
    ~Graphs() {                         // (no throw from a destructor: errors here are ignored)
        for (cudaGraphExec_t e : exec)
            if (e != nullptr) cudaGraphExecDestroy(e);
        if (pass != nullptr) cudaGraphExecDestroy(pass);
        if (host != nullptr) cudaFreeHost(host);
        if (read != nullptr) cudaEventDestroy(read);
        if (stream != nullptr) cudaStreamDestroy(stream);
    }
};

void Model::GraphsDeleter::operator()(Graphs* g) const {
    delete g;
}

namespace {

/// Offsets of the pinned buffer's parts, for a model of @p B rows: tokens, meta (q_len, context,
/// slot), q_start, kv_len, positions, row_seq, then the block table.
struct Layout {
    std::size_t tokens, meta, q_start, kv_len, positions, row_seq, table, total;
    Layout(int B, int table_ints)
        : tokens(0),
          meta(std::size_t(B)),
          q_start(4 * std::size_t(B)),
          kv_len(5 * std::size_t(B)),
          positions(6 * std::size_t(B)),
          row_seq(7 * std::size_t(B)),
          table(8 * std::size_t(B)),
          total(8 * std::size_t(B) + std::size_t(table_ints)) {}
};

}  // namespace

void Model::init_graphs() {
    const ModelOptions& o = options_;
    // the largest decode pass the model takes: batch rows, within the activations and the logits
    const int largest = std::min({o.batch, max_step_tokens_, max_logit_rows_});
    buckets_ = serving::graph_buckets(largest);  // lab 12: 1, 2, 4, ... and the largest
    graphs_.reset(new Graphs);
    Graphs& g = *graphs_;
    PD_CHECK_CUDA(cudaStreamCreate(&g.stream));  // blocking: ordered with the legacy stream's copies
    PD_CHECK_CUDA(cudaEventCreateWithFlags(&g.read, cudaEventDisableTiming));
    const Layout at(o.batch, int(table_host_.size()));
    PD_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&g.host), at.total * sizeof(int)));
    std::fill_n(g.host, at.total, 0);
    g.exec.assign(buckets_.size(), nullptr);
    g.nodes.assign(buckets_.size(), GraphNodes{});
    replay_ = true;
    stream_ = g.stream;
    for (std::size_t i = 0; i < buckets_.size(); ++i) cache_->fixed_grid(buckets_[i]);  // the layout has a form
}

int Model::graph_bucket(int sequences) const {
    if (buckets_.empty()) throw std::invalid_argument("graph_bucket: the model has no graphs (ModelOptions.graphs)");
    return serving::graph_bucket(buckets_, sequences);  // lab 12: the smallest that holds them
}

/// The batch a graph of @p rows rows reads: the model's own metadata buffers (fixed addresses,
/// filled by the graph's first copies), the split plan, the model's stream.
BatchView Model::graph_view(int rows) const {
    BatchView v;
    v.sequences = rows;
    v.tokens = rows;
    v.max_q_len = 1;
    v.max_kv_len = max_seq_;  // (the appends' shape; the attention reads its lengths on the device)
    v.q_len = meta_.data();
    v.context = meta_.data() + options_.batch;
    v.slot = meta_.data() + 2 * options_.batch;
    v.q_start = q_start_.data();
    v.kv_len = kv_len_.data();
    v.positions = positions_.data();
    v.row_seq = row_seq_.data();
    v.block_table = options_.cache.block_size > 0 ? block_table_.data() : nullptr;
    v.rows_in_order = options_.cache.block_size == 0;  // chapter 04's slots: sequence s in slot s
    v.uniform = 0;  // each row appended at its own position (a padded row's, -1, nowhere)
    v.stream = stream_;
    v.split_plan = graphs_->plan.data();
    return v;
}

namespace {

/// Captures what @p body issues on @p stream (thread-local mode: this thread may not allocate
/// meanwhile), counts its kernels and copies into @p nodes, and returns the executable graph.
cudaGraphExec_t record(cudaStream_t stream, const std::function<void()>& body, Model::GraphNodes& nodes) {
    PD_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (...) {
        cudaStreamEndCapture(stream, &graph);  // leave the stream usable; the partial graph is dropped
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
    }
    PD_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    std::size_t count = 0;  // what a replay runs: kernels, and copies
    PD_CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> list(count);
    PD_CHECK_CUDA(cudaGraphGetNodes(graph, list.data(), &count));
    nodes = {};
    for (cudaGraphNode_t node : list) {
        cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
        PD_CHECK_CUDA(cudaGraphNodeGetType(node, &type));
        nodes.kernels += type == cudaGraphNodeTypeKernel;
        nodes.copies += type == cudaGraphNodeTypeMemcpy;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    PD_CHECK_CUDA(e);
    return exec;
}

}  // namespace

// [capture]
void Model::capture(std::size_t i) {
    Graphs& g = *graphs_;
    const int n = buckets_[i], B = options_.batch;
    const Layout at(B, int(table_host_.size()));
    const auto upload = [&](int* to, std::size_t from, std::size_t count) {
        PD_CHECK_CUDA(cudaMemcpyAsync(to, g.host + from, count * sizeof(int), cudaMemcpyHostToDevice, g.stream));
    };
    batch_ = graph_view(n);
    logit_rows_host_.clear();
    const Plan p{
        .projections = Plan::Projections::gemv, .attention = Plan::Attention::decode, .sequences = n, .tokens = n};
    g.exec[i] = record(
        g.stream,
        [&] {
            // the step's inputs, from the pinned buffer the host filled (the tokens are copied before)
            upload(meta_.data(), at.meta, 3 * std::size_t(B));
            upload(q_start_.data(), at.q_start, std::size_t(B));
            upload(kv_len_.data(), at.kv_len, std::size_t(B));
            upload(positions_.data(), at.positions, std::size_t(B));
            upload(row_seq_.data(), at.row_seq, std::size_t(B));
            if (!table_host_.empty()) upload(block_table_.data(), at.table, table_host_.size());
            // the decode attention's splits, from the lengths on the device
            kernels::runtime::fixed_grid_decode_plan(kv_len_.data(), g.plan.data(), cache_->fixed_grid(n), g.stream);
            if (options_.weights == DType::fp32)
                forward_pass<float>(p);
            else
                forward_pass<bf16>(p);
        },
        g.nodes[i]);
    ++graph_stats_.captured;
}
// [capture]

Model::GraphNodes Model::capture_pass(std::span<const int> tokens, std::span<const StepSequence> sequences) {
    if (!graphs_) throw std::invalid_argument("capture_pass: the model has no graphs (ModelOptions.graphs)");
    check(tokens, sequences);
    if (tokens.empty()) throw std::invalid_argument("capture_pass: no tokens");
    Graphs& g = *graphs_;
    upload_batch(tokens, sequences);  // eagerly: the batch the replays read again
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const Plan p = plan(sequences);
    if (g.pass != nullptr) PD_CHECK_CUDA(cudaGraphExecDestroy(g.pass));
    g.pass = nullptr;
    GraphNodes nodes;
    g.pass = record(
        g.stream,
        [&] {
            if (options_.weights == DType::fp32)
                forward_pass<float>(p);
            else
                forward_pass<bf16>(p);
        },
        nodes);
    return nodes;
}

void Model::replay_pass() {
    if (!graphs_ || graphs_->pass == nullptr)
        throw std::invalid_argument("replay_pass: no pass was captured (capture_pass())");
    PD_CHECK_CUDA(cudaGraphLaunch(graphs_->pass, graphs_->stream));
}

void Model::capture_graphs() {
    if (!graphs_) throw std::invalid_argument("capture_graphs: the model has no graphs (ModelOptions.graphs)");
    for (std::size_t i = 0; i < buckets_.size(); ++i)
        if (graphs_->exec[i] == nullptr) capture(i);
}

Model::GraphNodes Model::graph_nodes(int bucket) {
    if (!graphs_) throw std::invalid_argument("graph_nodes: the model has no graphs (ModelOptions.graphs)");
    const auto it = std::find(buckets_.begin(), buckets_.end(), bucket);
    if (it == buckets_.end())
        throw std::invalid_argument("graph_nodes: bucket = " + std::to_string(bucket) + " is not one of the model's");
    const std::size_t i = std::size_t(it - buckets_.begin());
    if (graphs_->exec[i] == nullptr) capture(i);
    return graphs_->nodes[i];
}

void Model::replay_graphs(bool on) {
    if (!graphs_) throw std::invalid_argument("replay_graphs: the model has no graphs (ModelOptions.graphs)");
    replay_ = on;
}

// [graph_pass]
void Model::graph_pass(std::span<const int> tokens, const int* tokens_device, std::span<const StepSequence> sequences) {
    Graphs& g = *graphs_;
    const int S = int(sequences.size()), n = graph_bucket(S), B = options_.batch;
    const std::size_t i = std::size_t(std::find(buckets_.begin(), buckets_.end(), n) - buckets_.begin());
    const bool paged = options_.cache.block_size > 0;
    const Layout at(B, int(table_host_.size()));
    PD_CHECK_CUDA(cudaEventSynchronize(g.read));  // the last replay has copied the pinned buffer
    int* h = g.host;
    // lab 12: the rows, padded to the bucket, written where the graph's first copies read them
    std::vector<serving::GraphRow> rows(static_cast<std::size_t>(S));
    for (int s = 0; s < S; ++s) {
        const StepSequence& q = sequences[std::size_t(s)];
        rows[std::size_t(s)] = {.token = tokens.empty() ? 0 : tokens[std::size_t(s)],
                                .slot = q.slot,
                                .context = q.context,
                                .blocks = q.blocks};
    }
    const auto part = [&](std::size_t offset) { return std::span<int>(h + offset, std::size_t(B)); };
    serving::fill_graph_inputs(rows, n,
                               {.tokens = part(at.tokens),
                                .q_len = part(at.meta),
                                .context = part(at.meta + B),
                                .slot = part(at.meta + 2 * std::size_t(B)),
                                .q_start = part(at.q_start),
                                .kv_len = part(at.kv_len),
                                .positions = part(at.positions),
                                .row_seq = part(at.row_seq),
                                .table = std::span<int>(h + at.table, table_host_.size()),
                                .block_size = paged ? options_.cache.block_size : 0,
                                .max_blocks = paged ? max_blocks_ : 0});
    // the tokens: from the host (every row), or already on the device (then only the padding's)
    const int first = tokens_device != nullptr ? S : 0;
    if (first < n)
        PD_CHECK_CUDA(cudaMemcpyAsync(tokens_.data() + first, h + at.tokens + first,
                                      std::size_t(n - first) * sizeof(int), cudaMemcpyHostToDevice, g.stream));
    if (tokens_device != nullptr && tokens_device != tokens_.data())
        PD_CHECK_CUDA(cudaMemcpyAsync(tokens_.data(), tokens_device, std::size_t(S) * sizeof(int),
                                      cudaMemcpyDeviceToDevice, g.stream));
    if (g.exec[i] == nullptr) capture(i);
    PD_CHECK_CUDA(cudaGraphLaunch(g.exec[i], g.stream));
    PD_CHECK_CUDA(cudaEventRecord(g.read, g.stream));
    batch_ = graph_view(n);
    logit_rows_host_.clear();
    rows_ = S;  // the padded rows' logits are not the pass's
    ++graph_stats_.replays;
    graph_stats_.padded += n - S;
    graph_stats_.last_bucket = n;
}
// [graph_pass]

}  // namespace pd::model
