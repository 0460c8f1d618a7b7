// CUDA graphs by stream capture, and what CUDA refuses during a capture. On a stream created
// with cudaStreamCreateWithFlags(cudaStreamNonBlocking), a capture of kernel launches (one with
// a struct by value), a cudaMemsetAsync and a cudaMemcpyAsync runs nothing (the buffers keep
// their values until the first replay); cudaStreamIsCapturing says Active during it and None
// after; the graph, instantiated, is replayed three times with the arguments it was captured
// with (changing the host's copies afterwards changes nothing), each replay giving the same
// result from the same start; a replay inside another capture joins that graph. Refused, with
// CUDA's errors: cudaStreamBeginCapture on the legacy stream (cudaErrorStreamCaptureUnsupported);
// a launch on the legacy stream while a blocking stream (cudaStreamCreate's default) captures
// (cudaErrorStreamCaptureImplicit, and the capture ends in cudaErrorStreamCaptureInvalidated),
// while with a non-blocking one it runs; cudaMalloc during a capture in global and thread-local
// mode (cudaErrorStreamCaptureUnsupported, the capture invalidated), allowed in relaxed mode;
// cudaStreamSynchronize of the capturing stream and cudaDeviceSynchronize during a capture
// (cudaErrorStreamCaptureUnsupported, the capture invalidated); cudaEventQuery of an event
// recorded in the capture (cudaErrorCapturedEvent, the capture going on).
#include "check.cuh"

#include <vector>

constexpr int kN = 1000;

struct Step {
    float scale;
    float shift;
};

// y[i] = y[i] * s.scale + s.shift
__global__ void affine(float* y, Step s, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * s.scale + s.shift;
}

// y[i] += x[i]
__global__ void add(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void fill(float* y, float v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}

namespace {

std::vector<float> read(const float* d) {
    std::vector<float> h(kN);
    cudaMemcpy(h.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

bool all_equal(const std::vector<float>& h, float v) {
    for (float x : h)
        if (x != v) return false;
    return true;
}

/// Ends @p s's capture, which an error invalidated: no graph, and cudaErrorStreamCaptureInvalidated.
bool ends_invalidated(cudaStream_t s) {
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    cudaGetLastError();
    return e == cudaErrorStreamCaptureInvalidated && g == nullptr;
}

}  // namespace

int main() {
    const int blocks = (kN + 127) / 128;
    float *y = nullptr, *x = nullptr, *scratch = nullptr;
    CHECK(cudaMalloc(&y, kN * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&x, kN * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&scratch, kN * sizeof(float)) == cudaSuccess);
    std::vector<float> ones(kN, 1.f);
    cudaMemcpy(x, ones.data(), kN * sizeof(float), cudaMemcpyHostToDevice);
    fill<<<blocks, 128>>>(y, 5.f, kN);
    cudaDeviceSynchronize();

    cudaStream_t s = nullptr;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone);

    // ---- the capture: y = ((y * 2 + 1) + x), then scratch = 0, then scratch = y -------------
    Step step{2.f, 1.f};
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive);
    affine<<<blocks, 128, 0, s>>>(y, step, kN);
    add<<<blocks, 128, 0, s>>>(y, x, kN);
    CHECK(cudaMemsetAsync(scratch, 0, kN * sizeof(float), s) == cudaSuccess);
    CHECK(cudaMemcpyAsync(scratch, y, kN * sizeof(float), cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    CHECK(cudaGetLastError() == cudaSuccess);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr);
    CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone);
    CHECK_MSG(all_equal(read(y), 5.f), "the capture ran nothing: y keeps its values");
    step.scale = 100.f;  // the graph keeps the arguments it was captured with

    // its nodes: two kernels, a memset, a copy (CUDA promises no order)
    std::size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess && count == 4);
    cudaGraphNode_t nodes[6] = {};
    count = 6;
    CHECK(cudaGraphGetNodes(graph, nodes, &count) == cudaSuccess && count == 4 && nodes[4] == nullptr);
    int kernels = 0, memsets = 0, copies = 0;
    for (int i = 0; i < 4; ++i) {
        cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
        CHECK(nodes[i] != nullptr && cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess);
        kernels += type == cudaGraphNodeTypeKernel, memsets += type == cudaGraphNodeTypeMemset;
        copies += type == cudaGraphNodeTypeMemcpy;
    }
    CHECK_MSG(kernels == 2 && memsets == 1 && copies == 1, "node types: 2 kernels, a memset, a copy");

    cudaGraphExec_t exec = nullptr;
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && exec != nullptr);
    float expect = 5.f;
    for (int replay = 0; replay < 3; ++replay) {
        CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
        CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        expect = expect * 2.f + 1.f + 1.f;
        CHECK_MSG(all_equal(read(y), expect), "replay %d: y = y * 2 + 1 + x", replay);
        CHECK_MSG(all_equal(read(scratch), expect), "replay %d: the memset, then the copy of y", replay);
    }

    // a replay inside another capture joins that graph: captured once, it runs at that graph's replay
    cudaGraph_t outer = nullptr;
    cudaGraphExec_t outer_exec = nullptr;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
    fill<<<blocks, 128, 0, s>>>(x, 2.f, kN);
    CHECK(cudaStreamEndCapture(s, &outer) == cudaSuccess);
    CHECK_MSG(all_equal(read(y), expect), "the captured replay ran nothing");
    CHECK(cudaGraphInstantiate(&outer_exec, outer, 0) == cudaSuccess);
    CHECK(cudaGraphLaunch(outer_exec, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    expect = expect * 2.f + 1.f + 1.f;
    CHECK_MSG(all_equal(read(y), expect), "the outer graph replays the inner one's nodes");
    CHECK_MSG(all_equal(read(x), 2.f), "and its own launch after them");
    cudaGraphExecDestroy(outer_exec);
    cudaGraphDestroy(outer);

    // ---- refused ----------------------------------------------------------------------------
    CHECK(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnsupported);

    // the legacy stream while a blocking stream captures: an implicit dependency
    cudaStream_t blocking = nullptr;
    CHECK(cudaStreamCreate(&blocking) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal) == cudaSuccess);
    fill<<<blocks, 128>>>(scratch, 7.f, kN);
    CHECK(cudaGetLastError() == cudaErrorStreamCaptureImplicit);
    CHECK(cudaStreamIsCapturing(blocking, &status) == cudaSuccess && status == cudaStreamCaptureStatusInvalidated);
    CHECK(ends_invalidated(blocking));
    // ... and while the non-blocking stream captures, the legacy stream's launch runs
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    fill<<<blocks, 128>>>(scratch, 7.f, kN);
    CHECK(cudaGetLastError() == cudaSuccess);
    cudaGraph_t empty = nullptr;
    CHECK(cudaStreamEndCapture(s, &empty) == cudaSuccess && empty != nullptr);
    cudaGraphDestroy(empty);
    CHECK_MSG(all_equal(read(scratch), 7.f), "the legacy stream's launch ran");

    // cudaMalloc during a capture: refused in global and thread-local mode, allowed in relaxed
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
        CHECK(cudaStreamBeginCapture(s, mode) == cudaSuccess);
        void* p = nullptr;
        CHECK_MSG(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported, "cudaMalloc in mode %d", int(mode));
        CHECK_MSG(ends_invalidated(s), "the capture in mode %d ends invalidated", int(mode));
    }
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    void* relaxed = nullptr;
    CHECK(cudaMalloc(&relaxed, 256) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &empty) == cudaSuccess && empty != nullptr);
    cudaGraphDestroy(empty);
    cudaFree(relaxed);

    // an event recorded in a capture has no time to wait for
    cudaEvent_t mark = nullptr;
    CHECK(cudaEventCreate(&mark) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaEventRecord(mark, s) == cudaSuccess);
    CHECK(cudaEventQuery(mark) == cudaErrorCapturedEvent);
    CHECK(cudaGetLastError() == cudaErrorCapturedEvent);
    CHECK(cudaStreamEndCapture(s, &empty) == cudaSuccess && empty != nullptr);
    cudaGraphDestroy(empty);
    cudaEventDestroy(mark);

    // synchronizing during a capture
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    CHECK(ends_invalidated(s));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    CHECK(ends_invalidated(s));

    // the stream works as before once no capture is in progress
    CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    expect = expect * 2.f + 1.f + 2.f;  // x is 2 now
    CHECK_MSG(all_equal(read(y), expect), "a replay after the refusals");
    CHECK(cudaGetLastError() == cudaSuccess);

    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(blocking);
    cudaStreamDestroy(s);
    cudaFree(y);
    cudaFree(x);
    cudaFree(scratch);
    return conformance::finish();
}
