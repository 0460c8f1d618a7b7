// Stream capture and CUDA graphs on the simulator. A stream that captures (cudaStreamBeginCapture)
// records the work issued to it, kernel launches with a copy of their arguments, copies and
// memsets, instead of running it; cudaStreamEndCapture hands the recording over as a graph,
// cudaGraphInstantiate makes an executable copy of it, and each cudaGraphLaunch runs its nodes
// in the order they were captured, on the stream it is launched into, with the arguments they
// were captured with. What CUDA refuses during a capture is refused here with CUDA's error, and
// the diagnostic names the call: a capture of the legacy default stream; work on the legacy
// stream while a blocking stream captures (an implicit dependency, which invalidates the
// capture); a potentially unsafe call such as cudaMalloc under the global and thread-local
// modes; synchronizing a capturing stream or the device. docs/simulator.md ("CUDA graphs") says
// what is modelled and what is not (one stream per capture: no fork and join through events).
#include "sim_internal.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pd::sim::detail {

/// One node of a captured graph: a kernel launch, a copy or a memset, as it was issued.
struct GraphNode {
    enum class Kind { kernel, copy, set } kind = Kind::kernel;
    LaunchRequest launch;                          ///< kernel: the launch (its stream replaced at replay)
    std::shared_ptr<const void> bound;             ///< kernel: the kernel and its arguments, copied at capture
    std::vector<const void*> pointers;             ///< kernel: the pointer arguments, for the device check
    void* dst = nullptr;                           ///< copy, set: the destination
    const void* src = nullptr;                     ///< copy: the source
    std::size_t bytes = 0;                         ///< copy, set: the bytes
    cudaMemcpyKind direction = cudaMemcpyDefault;  ///< copy
    int value = 0;                                 ///< set: the byte value
};

}  // namespace pd::sim::detail

// The runtime's opaque graph handles, defined by the simulator.
struct CUgraph_st {
    std::vector<pd::sim::detail::GraphNode> nodes;
};
struct CUgraphExec_st {
    std::vector<pd::sim::detail::GraphNode> nodes;
};

namespace pd::sim::detail {

namespace {

std::mutex capture_mutex;
std::vector<cudaStream_t> capturing;  // streams with a capture begun and not ended (under capture_mutex)
thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

/// A stream the program created (not the legacy or per-thread default stream).
bool created(cudaStream_t s) {
    return reinterpret_cast<std::uintptr_t>(s) > 2;
}
bool legacy(cudaStream_t s) {
    return s == nullptr || s == cudaStreamLegacy;
}

/// Fails with @p code, naming what was refused and why.
cudaError_t refuse(cudaError_t code, const std::string& why) {
    set_last_diagnostic(why);
    set_error(code);
    return code;
}

const char* mode_name(cudaStreamCaptureMode m) {
    return m == cudaStreamCaptureModeGlobal        ? "global"
           : m == cudaStreamCaptureModeThreadLocal ? "thread-local"
                                                   : "relaxed";
}

}  // namespace

cudaError_t capture_status(cudaStream_t stream, bool& recording) {
    recording = false;
    if (!created(stream)) return cudaSuccess;
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (stream->capture == nullptr) return cudaSuccess;
    if (stream->capture_invalidated) return cudaErrorStreamCaptureInvalidated;
    recording = true;
    return cudaSuccess;
}

cudaError_t record_launch(const LaunchRequest& req) {
    if (req.clone == nullptr)
        return refuse(cudaErrorStreamCaptureUnsupported,
                      "kernel '" + kernel_name(req.kernel) + "': this launch cannot be captured into a graph");
    GraphNode node;
    node.kind = GraphNode::Kind::kernel;
    node.launch = req;
    node.bound = req.clone(req.bound);
    node.pointers.assign(req.pointers, req.pointers + req.arguments);
    std::lock_guard<std::mutex> lock(capture_mutex);
    req.stream->capture->nodes.push_back(std::move(node));
    return cudaSuccess;
}

void record_copy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    GraphNode node;
    node.kind = GraphNode::Kind::copy;
    node.dst = dst;
    node.src = src;
    node.bytes = bytes;
    node.direction = kind;
    std::lock_guard<std::mutex> lock(capture_mutex);
    stream->capture->nodes.push_back(std::move(node));
}

void record_set(cudaStream_t stream, void* dst, int value, std::size_t bytes) {
    GraphNode node;
    node.kind = GraphNode::Kind::set;
    node.dst = dst;
    node.value = value;
    node.bytes = bytes;
    std::lock_guard<std::mutex> lock(capture_mutex);
    stream->capture->nodes.push_back(std::move(node));
}

cudaError_t legacy_stream_work(cudaStream_t stream, const char* call) {
    if (!legacy(stream)) return cudaSuccess;
    const int device = current_device_of_thread();
    std::lock_guard<std::mutex> lock(capture_mutex);
    int invalidated = 0;
    for (cudaStream_t s : capturing)
        if (s->device == device && (s->flags & cudaStreamNonBlocking) == 0 && !s->capture_invalidated) {
            s->capture_invalidated = true;
            ++invalidated;
        }
    if (invalidated == 0) return cudaSuccess;
    return refuse(cudaErrorStreamCaptureImplicit,
                  std::string(call) +
                      " on the legacy default stream while a blocking stream captures: every blocking stream "
                      "waits for the legacy stream, an implicit dependency a capture cannot record (the capture is "
                      "invalidated; create the capturing stream with cudaStreamNonBlocking, or issue the work to "
                      "another stream)");
}

cudaError_t capture_unsafe_call(const char* call) {
    const std::thread::id self = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(capture_mutex);
    std::vector<cudaStream_t> concerned;
    for (cudaStream_t s : capturing) {
        const bool mine = s->capture_thread == self && s->capture_mode != cudaStreamCaptureModeRelaxed;
        const bool global = s->capture_thread != self && s->capture_mode == cudaStreamCaptureModeGlobal &&
                            thread_mode == cudaStreamCaptureModeGlobal;
        if (mine || global) concerned.push_back(s);
    }
    if (concerned.empty()) return cudaSuccess;
    for (cudaStream_t s : concerned) s->capture_invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported,
                  std::string(call) + " during a stream capture in " + mode_name(concerned.front()->capture_mode) +
                      " mode: a potentially unsafe call (a graph would not replay it), refused and the capture "
                      "invalidated (allocate before the capture, or capture in cudaStreamCaptureModeRelaxed)");
}

cudaError_t capture_sync(cudaStream_t stream, bool device, const char* call) {
    std::lock_guard<std::mutex> lock(capture_mutex);
    std::vector<cudaStream_t> concerned;
    for (cudaStream_t s : capturing)
        if (device ? s->device == current_device_of_thread() : s == stream) concerned.push_back(s);
    if (concerned.empty()) return cudaSuccess;
    for (cudaStream_t s : concerned) s->capture_invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported,
                  std::string(call) + " while " + (device ? "a stream of the device" : "the stream") +
                      " captures: captured work has not run, there is nothing to wait for (the capture is "
                      "invalidated; synchronize after cudaStreamEndCapture, or after cudaGraphLaunch)");
}

void forget_capture(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(capture_mutex);
    const auto it = std::find(capturing.begin(), capturing.end(), stream);
    if (it == capturing.end()) return;
    capturing.erase(it);
    delete stream->capture;
    stream->capture = nullptr;
}

}  // namespace pd::sim::detail

using pd::sim::detail::GraphNode;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    using namespace pd::sim::detail;
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return refuse(cudaErrorInvalidValue,
                      "cudaStreamBeginCapture: mode " + std::to_string(int(mode)) + " is not a cudaStreamCaptureMode");
    if (legacy(stream))
        return refuse(cudaErrorStreamCaptureUnsupported,
                      "cudaStreamBeginCapture on the legacy default stream: CUDA captures created streams only "
                      "(cudaStreamCreate one)");
    if (!created(stream))
        return refuse(cudaErrorNotSupported,
                      "cudaStreamBeginCapture on cudaStreamPerThread: the simulator captures created streams only");
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (stream->capture != nullptr)
        return refuse(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
    stream->capture = new CUgraph_st;
    stream->capture_mode = mode;
    stream->capture_thread = std::this_thread::get_id();
    stream->capture_invalidated = false;
    capturing.push_back(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    using namespace pd::sim::detail;
    if (graph == nullptr) return refuse(cudaErrorInvalidValue, "cudaStreamEndCapture: pGraph is null");
    if (!created(stream)) return refuse(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (stream->capture == nullptr)
        return refuse(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    if (stream->capture_mode != cudaStreamCaptureModeRelaxed && stream->capture_thread != std::this_thread::get_id())
        return refuse(cudaErrorStreamCaptureWrongThread,
                      "cudaStreamEndCapture from another thread than the one that began the capture (in " +
                          std::string(mode_name(stream->capture_mode)) + " mode)");
    capturing.erase(std::find(capturing.begin(), capturing.end(), stream));
    CUgraph_st* g = stream->capture;
    stream->capture = nullptr;
    if (stream->capture_invalidated) {
        stream->capture_invalidated = false;
        delete g;
        *graph = nullptr;
        return refuse(cudaErrorStreamCaptureInvalidated,
                      "cudaStreamEndCapture: an error during the capture invalidated it (the call that caused it "
                      "failed and said why): no graph");
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    using namespace pd::sim::detail;
    if (status == nullptr) return refuse(cudaErrorInvalidValue, "cudaStreamIsCapturing: pCaptureStatus is null");
    *status = cudaStreamCaptureStatusNone;
    if (!created(stream)) return cudaSuccess;
    std::lock_guard<std::mutex> lock(capture_mutex);
    if (stream->capture != nullptr)
        *status = stream->capture_invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
    using namespace pd::sim::detail;
    if (mode == nullptr) return refuse(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: mode is null");
    std::swap(*mode, thread_mode);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    using namespace pd::sim::detail;
    if (exec == nullptr || graph == nullptr)
        return refuse(cudaErrorInvalidValue, "cudaGraphInstantiate: a null pGraphExec or graph");
    if (flags != 0)
        return refuse(cudaErrorInvalidValue,
                      "cudaGraphInstantiate: flags " + std::to_string(flags) + " (the simulator instantiates with 0)");
    *exec = new CUgraphExec_st{graph->nodes};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    using namespace pd::sim::detail;
    if (exec == nullptr) return refuse(cudaErrorInvalidValue, "cudaGraphLaunch: graphExec is null");
    if (const cudaError_t s = sticky_error()) return s;
    bool recording = false;
    if (const cudaError_t e = capture_status(stream, recording))
        return refuse(e, "cudaGraphLaunch: " + std::string(cudaGetErrorString(e)));
    if (recording) {  // into another capture: its nodes join that graph, as a child graph does
        std::lock_guard<std::mutex> lock(capture_mutex);
        for (const GraphNode& n : exec->nodes) stream->capture->nodes.push_back(n);
        return cudaSuccess;
    }
    if (const cudaError_t e = legacy_stream_work(stream, "cudaGraphLaunch")) return e;
    for (const GraphNode& n : exec->nodes) {
        switch (n.kind) {
            case GraphNode::Kind::kernel: {
                LaunchRequest req = n.launch;
                req.stream = stream;
                req.bound = n.bound.get();
                req.pointers = n.pointers.data();
                launch(req);
                break;
            }
            case GraphNode::Kind::copy:
                if (const cudaError_t e = cudaMemcpyAsync(n.dst, n.src, n.bytes, n.direction, stream)) return e;
                break;
            case GraphNode::Kind::set:
                if (const cudaError_t e = cudaMemsetAsync(n.dst, n.value, n.bytes, stream)) return e;
                break;
        }
        if (const cudaError_t s = sticky_error()) return s;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (exec == nullptr)
        return pd::sim::detail::refuse(cudaErrorInvalidValue, "cudaGraphExecDestroy: graphExec is null");
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (graph == nullptr) return pd::sim::detail::refuse(cudaErrorInvalidValue, "cudaGraphDestroy: graph is null");
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* numNodes) {
    if (graph == nullptr || numNodes == nullptr)
        return pd::sim::detail::refuse(cudaErrorInvalidValue, "cudaGraphGetNodes: graph or numNodes is null");
    const std::size_t n = graph->nodes.size();
    if (nodes != nullptr) {  // the first *numNodes of them (a node is its GraphNode, seen as the handle)
        for (std::size_t i = 0; i < std::min(n, *numNodes); ++i)
            nodes[i] = reinterpret_cast<cudaGraphNode_t>(&graph->nodes[i]);
        if (*numNodes > n)
            for (std::size_t i = n; i < *numNodes; ++i) nodes[i] = nullptr;
    }
    *numNodes = n;
    return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
    if (node == nullptr || type == nullptr)
        return pd::sim::detail::refuse(cudaErrorInvalidValue, "cudaGraphNodeGetType: node or type is null");
    using Kind = pd::sim::detail::GraphNode::Kind;
    switch (reinterpret_cast<const pd::sim::detail::GraphNode*>(node)->kind) {
        case Kind::kernel:
            *type = cudaGraphNodeTypeKernel;
            break;
        case Kind::copy:
            *type = cudaGraphNodeTypeMemcpy;
            break;
        case Kind::set:
            *type = cudaGraphNodeTypeMemset;
            break;
    }
    return cudaSuccess;
}
