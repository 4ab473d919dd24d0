#pragma once
// CUDA graphs (torch.cuda.CUDAGraph): the kernels a step queues are captured once and replayed
// with a single launch, for small models whose step is bound by launch overhead.
//
//   dp::cuda::CUDAGraph graph;
//   step();                                  // warm-up: allocates grads, optimizer state, ...
//   { dp::cuda::GraphCapture capture(graph);  // captures on a side stream
//     step(); capture.end(); }
//   for (...) { x.copy_(next_batch); graph.replay(); }
//
// What a replay does is fixed at capture: the same kernels on the same addresses with the same
// scalar arguments. So inputs are static tensors updated in place (copy_) between replays, outputs
// are read from the tensors the captured step wrote, and host-side values are frozen (SGD's lr at
// capture time; Adam's step count lives on the host, so Adam/AdamW refuse to step during capture).
// Warm up before capturing: first steps differ from later ones (SGD's momentum buffer is
// created by the first step) and lazily created state must exist outside the graph.
//
// Memory: while capturing, the caching allocator gives allocations on the capture stream from a
// private pool (dp/cuda/caching_allocator.h) that only this graph (or graphs sharing its pool)
// use, so the addresses the graph recorded stay valid for its replays; blocks freed during capture
// are reused only within it; everything returns to the ordinary cache when the graph is reset.
//
// Streams: capture needs a stream other than the legacy default one. capture_begin captures the
// calling thread's current stream of the current device and makes it the current stream of that
// device's worker thread too (dp::worker_for(cuda:i), which runs the backward pass) until
// capture_end. Work must not synchronise with the host or copy host memory during capture: those
// calls throw a DeviceError naming the capture (cuda/transfer.cpp checks cudaStreamIsCapturing).
// Capture mode (cudaStreamCaptureMode): ThreadLocal by default, so other threads of the process
// may keep using CUDA normally during the capture.
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include "dp/cuda/cuda.h"

struct CUgraph_st;      // cudaGraph_t == CUgraph_st*
struct CUgraphExec_st;  // cudaGraphExec_t == CUgraphExec_st*

namespace dp::cuda {

enum class CaptureMode { Global, ThreadLocal, Relaxed };

// A graph's private memory pool, to share between graphs (torch.cuda.graph_pool_handle): graphs
// capturing into one pool must be replayed in the order they were captured. id 0: none.
struct MempoolId {
  int device = -1;
  uint64_t id = 0;
  bool valid() const { return id != 0; }
};

// True if the calling thread's current stream on `device` (the current device when -1) is being
// captured. Cheap (a driver query); false without a device.
bool is_current_stream_capturing(int device = -1);

class CUDAGraph {
 public:
  CUDAGraph() = default;
  ~CUDAGraph();  // reset(); a capture still open is ended and dropped
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Starts capturing the calling thread's current stream on the current device (DeviceError for
  // the default stream: use GraphCapture). `pool`: another graph's pool() to share, else a new one.
  // ValueError if this graph already holds a capture (reset() first).
  void capture_begin(MempoolId pool = {}, CaptureMode mode = CaptureMode::ThreadLocal);
  // Ends the capture (on the thread that began it, unless Relaxed) and instantiates the graph.
  // DeviceError when CUDA invalidated the capture (an unsupported call during it), naming why.
  void capture_end();
  // Launches the graph on the calling thread's current stream of the graph's device.
  void replay();
  // Drops the graph and gives back the private pool (its memory becomes ordinary cache).
  void reset();

  MempoolId pool() const { return pool_; }
  bool capturing() const { return capturing_; }
  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }

 private:
  void end_capture_bookkeeping();  // allocator and worker stream back to normal

  int device_ = -1;
  std::optional<Stream> stream_;         // the capture stream
  std::optional<Stream> worker_stream_;  // the device worker's current stream before the capture
  std::optional<Stream> last_replay_;    // where the latest replay was queued (reset waits for it)
  bool worker_switched_ = false;
  bool capturing_ = false;
  MempoolId pool_;
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
};

// Captures into `graph` for its scope: makes a side stream (or uses `stream`) wait for the current
// stream's work, makes it current, and begins the capture; end() (or the destructor) ends it,
// restores the current stream and makes it wait for the side stream, so eager work after the scope
// is ordered after the warm-up and capture. end() reports errors; the destructor ends a capture
// still open and rethrows its error only when no other exception is in flight.
class GraphCapture {
 public:
  explicit GraphCapture(CUDAGraph& graph, MempoolId pool = {}, CaptureMode mode = CaptureMode::ThreadLocal,
                        std::optional<Stream> stream = std::nullopt);
  ~GraphCapture() noexcept(false);
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  void end();
  const Stream& stream() const { return side_; }

 private:
  CUDAGraph& graph_;
  Stream previous_;
  Stream side_;
  std::optional<StreamGuard> guard_;
  int uncaught_ = 0;
  bool ended_ = false;
};

// Runs `step` warmup_iters times eagerly on a side stream (creating its gradients and optimizer
// state outside the graph; these are real steps), captures one call into a graph, and returns a
// function that replays it on the current stream (the capture itself does not run the step).
// Inputs must be static tensors the step reads, updated in place between calls.
std::function<void()> make_graphed_step(const std::function<void()>& step, int warmup_iters = 1, CaptureMode mode = CaptureMode::ThreadLocal);

}  // namespace dp::cuda
