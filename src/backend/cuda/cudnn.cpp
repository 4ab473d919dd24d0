// cuDNN handles, descriptors and errors (see cudnn.h).
#include "backend/cuda/cudnn.h"

#include <atomic>
#include <mutex>
#include <vector>
#include "dp/core/errors.h"

namespace dp::backend::cuda::cudnn {
namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

bool available() { return DP_HAVE_CUDNN != 0; }

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

std::string error_message(const char* what, const char* status_name, int status, const char* call, const std::string& context) {
  return dp::detail::str(what, ": cuDNN error ", status_name, " (", status, "): ", call, context.empty() ? "" : " [", context,
                         context.empty() ? "" : "]");
}

}  // namespace dp::backend::cuda::cudnn

#if DP_HAVE_CUDNN
namespace dp::backend::cuda::cudnn {
namespace {

// Idle handles per device. Handles are never destroyed: they live until the process ends (as
// PyTorch's), which avoids tearing down cuDNN during static destruction.
struct HandlePool {
  std::mutex mutex;
  std::vector<std::vector<cudnnHandle_t>> idle;
};
HandlePool& pool() {
  static HandlePool* p = new HandlePool();  // leaked on purpose: used until exit
  return *p;
}

}  // namespace

void throw_error(cudnnStatus_t status, const char* call, const std::string& context) {
  const std::string msg = error_message("cudnn", cudnnGetErrorString(status), static_cast<int>(status), call, context);
  if (status == CUDNN_STATUS_ALLOC_FAILED) throw OutOfMemory(msg);
  throw DeviceError(msg);
}

Handle::Handle(int device, cudaStream_t stream) : device_(device), handle_(nullptr) {
  {
    std::lock_guard<std::mutex> lock(pool().mutex);
    auto& idle = pool().idle;
    if (idle.size() <= static_cast<size_t>(device)) idle.resize(static_cast<size_t>(device) + 1);
    if (!idle[device].empty()) {
      handle_ = idle[device].back();
      idle[device].pop_back();
    }
  }
  if (!handle_) DP_CUDNN_CHECK(cudnnCreate(&handle_), dp::detail::str("creating a cuDNN handle on cuda:", device));
  const cudnnStatus_t st = cudnnSetStream(handle_, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    std::lock_guard<std::mutex> lock(pool().mutex);
    pool().idle[device].push_back(handle_);
    throw_error(st, "cudnnSetStream(handle, stream)", dp::detail::str("cuda:", device));
  }
}

Handle::~Handle() {
  std::lock_guard<std::mutex> lock(pool().mutex);
  pool().idle[device_].push_back(handle_);
}

TensorDesc::TensorDesc() { DP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_), std::string()); }
TensorDesc::~TensorDesc() { (void)cudnnDestroyTensorDescriptor(desc_); }
void TensorDesc::set(cudnnDataType_t dtype, int n, int c, int h, int w, const std::string& context) {
  DP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, dtype, n, c, h, w), context);
}

FilterDesc::FilterDesc() { DP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_), std::string()); }
FilterDesc::~FilterDesc() { (void)cudnnDestroyFilterDescriptor(desc_); }
void FilterDesc::set(cudnnDataType_t dtype, int k, int c, int h, int w, const std::string& context) {
  DP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, dtype, CUDNN_TENSOR_NCHW, k, c, h, w), context);
}

ConvDesc::ConvDesc() { DP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_), std::string()); }
ConvDesc::~ConvDesc() { (void)cudnnDestroyConvolutionDescriptor(desc_); }
void ConvDesc::set(int ph, int pw, int sh, int sw, int dh, int dw, int groups, cudnnDataType_t compute, cudnnMathType_t math,
                   const std::string& context) {
  DP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, ph, pw, sh, sw, dh, dw, CUDNN_CROSS_CORRELATION, compute), context);
  DP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, groups), context);
  set_math(math, context);
}
void ConvDesc::set_math(cudnnMathType_t math, const std::string& context) { DP_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, math), context); }

}  // namespace dp::backend::cuda::cudnn
#endif
