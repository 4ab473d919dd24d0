// CUDA graph capture and replay (dp/cuda/graph.h).
#include "dp/cuda/graph.h"
#include <cuda_runtime_api.h>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/cuda/check.h"

namespace dp::cuda {

namespace {

cudaStreamCaptureMode to_cuda(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::Global:
      return cudaStreamCaptureModeGlobal;
    case CaptureMode::Relaxed:
      return cudaStreamCaptureModeRelaxed;
    case CaptureMode::ThreadLocal:
      break;
  }
  return cudaStreamCaptureModeThreadLocal;
}

// Sets `stream` as the current stream of its device's worker thread (which runs the backward
// pass); returns the worker's previous one. Nothing to do when called on that worker.
std::optional<Stream> switch_worker_stream(const Stream& stream) {
  Worker* w = worker_for(Device::cuda(stream.device()));
  if (w == nullptr || w->is_current()) return std::nullopt;
  return w
      ->submit([stream] {
        Stream previous = current_stream(stream.device());
        set_current_stream(stream);
        return previous;
      })
      .get();
}

void restore_worker_stream(const Stream& previous) {
  Worker* w = worker_for(Device::cuda(previous.device()));
  w->submit([previous] { set_current_stream(previous); }).get();
}

}  // namespace

bool is_current_stream_capturing(int device) {
  if (::dp::cuda::detail::logical_device_count() == 0) return false;
  const Stream s = current_stream(device);
  // The legacy default stream (null handle) is the current GPU's: query `device`'s, not that of
  // whichever device happens to be current.
  std::optional<DeviceGuard> guard;
  if (s.handle() == nullptr) guard.emplace(s.device());
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(s.handle(), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy stream while a blocking stream of the device captures: using it now would join
    // (and break) that capture, so it counts as capturing.
    (void)cudaGetLastError();
    return true;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

// ---------------------------------------------------------------- CUDAGraph

CUDAGraph::~CUDAGraph() {
  try {
    reset();
  } catch (...) {
    // Destruction at exit may meet a torn-down runtime; nothing useful to do.
  }
}

void CUDAGraph::capture_begin(MempoolId pool, CaptureMode mode) {
  DP_CHECK(!capturing_ && exec_ == nullptr, ValueError, "CUDAGraph::capture_begin: this graph ",
           capturing_ ? "is already capturing" : "already holds a captured graph", "; reset() it first");
  const int dev = current_device();
  const Stream s = current_stream(dev);
  DP_CHECK(!s.is_default(), DeviceError, "CUDAGraph::capture_begin: the current stream of cuda:", dev,
           " is the default stream, which CUDA cannot capture; capture on a side stream (dp::cuda::GraphCapture makes one)");
  DP_CHECK(!pool.valid() || pool.device == dev, DeviceError, "CUDAGraph::capture_begin: the memory pool to share belongs to cuda:", pool.device,
           ", but the capture is on cuda:", dev);
  detail::CachingAllocatorCore& alloc = caching_allocator(dev);
  detail::PoolId id = 0;
  if (pool.valid()) {
    alloc.retain_pool(pool.id);
    id = pool.id;
  } else {
    id = alloc.create_pool();
  }
  bool allocator_capturing = false;
  std::optional<Stream> worker_previous;
  try {
    alloc.begin_capture(s.id(), id);
    allocator_capturing = true;
    worker_previous = switch_worker_stream(s);
    DP_CUDA_CHECK(cudaStreamBeginCapture(s.handle(), to_cuda(mode)));
  } catch (...) {
    if (worker_previous) restore_worker_stream(*worker_previous);
    if (allocator_capturing) alloc.end_capture(s.id());
    alloc.release_pool(id);
    throw;
  }
  device_ = dev;
  stream_ = s;
  worker_stream_ = worker_previous;
  capturing_ = true;
  pool_ = MempoolId{dev, id};
}

void CUDAGraph::end_capture_bookkeeping() {
  capturing_ = false;
  caching_allocator(device_).end_capture(stream_->id());
  if (worker_stream_) restore_worker_stream(*worker_stream_);
  worker_stream_.reset();
}

void CUDAGraph::capture_end() {
  DP_CHECK(capturing_, ValueError, "CUDAGraph::capture_end: no capture in progress (capture_begin first)");
  DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_->handle(), &graph);
  end_capture_bookkeeping();
  if (err != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    // Nothing was captured: the pool goes back now.
    caching_allocator(device_).release_pool(pool_.id);
    pool_ = MempoolId{};
    throw DeviceError(dp::detail::str("CUDAGraph::capture_end on cuda:", device_, ": the capture failed with ", cudaGetErrorName(err), " (",
                                      cudaGetErrorString(err),
                                      "). During a capture nothing may synchronise with the host "
                                      "(item(), copies to or from the host, synchronize()), use the legacy default stream, or "
                                      "end the capture from another thread (unless CaptureMode::Relaxed)."));
  }
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  DP_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  exec_ = exec;
}

void CUDAGraph::replay() {
  DP_CHECK(exec_ != nullptr, ValueError, "CUDAGraph::replay: ",
           capturing_ ? "the capture is still in progress (capture_end first)" : "nothing has been captured (capture_begin, capture_end first)");
  DeviceGuard guard(device_);
  Stream s = current_stream(device_);
  DP_CUDA_CHECK(cudaGraphLaunch(exec_, s.handle()));
  last_replay_ = std::move(s);
}

void CUDAGraph::reset() {
  if (capturing_) {
    // An open capture is abandoned.
    DeviceGuard guard(device_);
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_->handle(), &g) == cudaSuccess && g != nullptr) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    end_capture_bookkeeping();
  }
  if (exec_ != nullptr) {
    // Replays may still be running, and the pool's memory is about to become ordinary cache.
    // Launches of one executable graph run in launch order, so waiting for the stream of the
    // latest is enough (not the whole device: another thread may be capturing on it).
    DeviceGuard guard(device_);
    if (last_replay_) last_replay_->synchronize();
    last_replay_.reset();
    (void)cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  if (graph_ != nullptr) {
    (void)cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
  if (pool_.valid()) {
    caching_allocator(pool_.device).release_pool(pool_.id);
    pool_ = MempoolId{};
  }
  stream_.reset();
  device_ = -1;
}

// ---------------------------------------------------------------- GraphCapture

GraphCapture::GraphCapture(CUDAGraph& graph, MempoolId pool, CaptureMode mode, std::optional<Stream> stream)
    : graph_(graph), previous_(current_stream()), side_(stream ? *stream : Stream::create(current_device())), uncaught_(std::uncaught_exceptions()) {
  DP_CHECK(side_.device() == previous_.device(), DeviceError, "GraphCapture: the capture stream is on cuda:", side_.device(),
           " but the current device is cuda:", previous_.device());
  // The captured work may read what the current stream produced (weights, inputs).
  Event ready;
  ready.record(previous_);
  side_.wait(ready);
  guard_.emplace(side_);
  try {
    graph_.capture_begin(pool, mode);
  } catch (...) {
    guard_.reset();
    throw;
  }
}

void GraphCapture::end() {
  if (ended_) return;
  ended_ = true;
  std::exception_ptr error;
  try {
    graph_.capture_end();
  } catch (...) {
    error = std::current_exception();
  }
  guard_.reset();
  // Eager work after the scope is ordered after everything queued on the side stream.
  Event done;
  done.record(side_);
  previous_.wait(done);
  if (error) std::rethrow_exception(error);
}

GraphCapture::~GraphCapture() noexcept(false) {
  if (ended_) return;
  if (std::uncaught_exceptions() > uncaught_) {
    // Unwinding: the step did not finish, so its partial capture is dropped, quietly.
    ended_ = true;
    try {
      graph_.reset();
    } catch (...) {
    }
    guard_.reset();
    return;
  }
  end();
}

std::function<void()> make_graphed_step(const std::function<void()>& step, int warmup_iters, CaptureMode mode) {
  DP_CHECK(static_cast<bool>(step), ValueError, "make_graphed_step: the step is empty");
  DP_CHECK(warmup_iters >= 0, ValueError, "make_graphed_step: warmup_iters must be >= 0, got ", warmup_iters);
  // Warm-up on the current stream, where the eager steps that follow run too. (Backward passes
  // follow their forward's stream: each node runs on the stream it was made on, see
  // autograd/backward_streams.h; the captured step's nodes record the capture stream.)
  for (int i = 0; i < warmup_iters; ++i) step();
  auto graph = std::make_shared<CUDAGraph>();
  {
    GraphCapture capture(*graph, MempoolId{}, mode);
    step();
    capture.end();
  }
  return [graph] { graph->replay(); };
}

}  // namespace dp::cuda
