#pragma once
// cuDNN basics for the CUDA backend (src/backend/cuda/cudnn.cpp): per-device handle pools, RAII
// descriptors, and errors turned into dp exceptions. cuDNN is optional (cmake/Cuda.cmake defines
// DP_HAVE_CUDNN 0 or 1 for dparallel's own sources only); the part above the #if is always there,
// so callers and tests can ask whether it is and format its errors without it.
#include <string>

namespace dp::backend::cuda::cudnn {

// True when dparallel was built with cuDNN.
bool available();

// TF32 tensor cores for float32 convolutions (as torch.backends.cudnn.allow_tf32). Off by default
// here, unlike PyTorch: with it, a float32 convolution on Ampere or newer rounds its operands to
// 10 mantissa bits (relative error around 1e-3). Off, the algorithms are restricted to FMA math
// (CUDNN_FMA_MATH; CUDNN_DEFAULT_MATH would still permit TF32 on those GPUs). Process-wide; it
// applies to algorithms chosen after the change (the choice is cached per shape and setting).
void set_allow_tf32(bool allow);
bool allow_tf32();

// The message of a failed cuDNN call: "<what>: cuDNN error <status name> (<code>): <call> [<context>]".
std::string error_message(const char* what, const char* status_name, int status, const char* call, const std::string& context);

}  // namespace dp::backend::cuda::cudnn

#if DP_HAVE_CUDNN
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace dp::backend::cuda::cudnn {

// Throws DeviceError (OutOfMemory for CUDNN_STATUS_ALLOC_FAILED) with error_message's text.
[[noreturn]] void throw_error(cudnnStatus_t status, const char* call, const std::string& context);

// DP_CUDNN_CHECK(cudnnCall(...), context_string)
#define DP_CUDNN_CHECK(call, context)                                                                                                               \
  do {                                                                                                                                              \
    const cudnnStatus_t dp_cudnn_status_ = (call);                                                                                                  \
    if (__builtin_expect(dp_cudnn_status_ != CUDNN_STATUS_SUCCESS, 0)) ::dp::backend::cuda::cudnn::throw_error(dp_cudnn_status_, #call, (context)); \
  } while (0)

// A cuDNN handle of `device` for the caller's exclusive use during its lifetime, bound to `stream`.
// Handles come from a per-device pool (created on first need, with the device current, and kept
// for the life of the process), so concurrent callers on several threads each get their own and
// none is created per call. The caller has made `device` current.
class Handle {
 public:
  Handle(int device, cudaStream_t stream);
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  int device_;
  cudnnHandle_t handle_;
};

// RAII descriptors (create in the constructor, destroy in the destructor).
class TensorDesc {
 public:
  TensorDesc();
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // A contiguous NCHW tensor.
  void set(cudnnDataType_t dtype, int n, int c, int h, int w, const std::string& context);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc();
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  void set(cudnnDataType_t dtype, int k, int c, int h, int w, const std::string& context);
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc();
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  // Cross-correlation (PyTorch's convolution) with the given compute type, groups and math type.
  void set(int ph, int pw, int sh, int sw, int dh, int dw, int groups, cudnnDataType_t compute, cudnnMathType_t math, const std::string& context);
  void set_math(cudnnMathType_t math, const std::string& context);
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

}  // namespace dp::backend::cuda::cudnn
#endif
