// Device and dtype conversion (dp::to) and Tensor::item().
//
// All CPU devices ("cpu", "cpu:0", "cpu:1", ...) share host memory, so a conversion between them is
// a strided, dtype-converting copy into memory owned by the target device's allocator, done in the
// calling thread.
#include <algorithm>
#include <numeric>
#include "dp/core/pooled.h"
#include "backend/copy_kernels.h"
#include "backend/dispatch.h"
#include "dp/autograd/function.h"
#include "dp/core/device_registry.h"
#include "dp/ops/shape.h"
#include "ops/common.h"

namespace dp {

namespace {

// PyTorch's is_non_overlapping_and_dense: the elements fill a block of numel() positions with no
// gaps or repeats (in some order of the dimensions).
bool non_overlapping_and_dense(const Tensor& t) {
  const int64_t n = t.dim();
  if (n == 1) return t.sizes()[0] < 2 || t.strides()[0] == 1;
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  // Sort by stride, size 0 and 1 dims last.
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t require = 1;
  for (int64_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != require) return false;
    require *= sizes[d];
  }
  return true;
}

}  // namespace

Tensor to(const Tensor& t, Device device, DType dtype, bool non_blocking, bool copy) {
  ops::check_defined("to", t);
  if (!copy && device == t.device() && dtype == t.dtype()) return t;
  check_device(device);
  // A copy that leaves host memory runs on the backend of the device involved (one that has none in
  // this build: a CUDA device in a build without the CUDA backend).
  const bool across = !device.is_cpu() || !t.device().is_cpu();
  const DeviceType across_type = backend::copy_device_type(device, t.device());
  DP_CHECK(!across || backend::copy_across_kernel.has(across_type), NotImplementedError, "to: copies between ", t.device().str(), " and ",
           device.str(), " need the CUDA backend (this build has none)");
  // As PyTorch's memory_format=preserve: a dense non-overlapping input keeps its strides.
  Tensor out;
  if (non_overlapping_and_dense(t)) {
    auto storage = ::dp::detail::make_pooled<StorageImpl>(static_cast<size_t>(t.numel()) * element_size(dtype), device);
    out = Tensor(::dp::detail::make_pooled<TensorImpl>(std::move(storage), t.sizes(), t.strides(), 0, dtype));
  } else {
    out = make_empty(t.sizes(), dtype, device);
  }
  if (across)
    backend::copy_across_kernel(across_type, out, t, non_blocking);
  else
    backend::copy_kernel(backend::copy_device_type(out, t), out, t);
  if (autograd::needs_grad(t) && is_floating_point(dtype)) {
    const Device src_device = t.device();
    const DType src_dtype = t.dtype();
    autograd::record("ToCopyBackward0", {t}, {out}, [src_device, src_dtype](autograd::variable_list&& g) {
      return autograd::variable_list{to(g[0], src_device, src_dtype, false, false)};
    });
  }
  return out;
}

Scalar Tensor::item() const {
  DP_CHECK(numel() == 1, ValueError, "item(): a Tensor with ", numel(), " elements cannot be converted to Scalar (size ", size_str(), ")");
  if (!is_cpu()) {  // device memory: read through a copy to the host
    NoGradGuard no_grad;
    return dp::to(*this, Device::cpu(), dtype(), false, false).item();  // waits for the device
  }
  const void* p = data_ptr();
  return backend::dispatch_all(dtype(), "item", [&]<typename T>() -> Scalar {
    const T v = *static_cast<const T*>(p);
    if constexpr (std::is_same_v<T, bool>)
      return Scalar(v);
    else if constexpr (std::is_integral_v<T>)
      return Scalar(static_cast<int64_t>(v));
    else if constexpr (std::is_same_v<T, double>)
      return Scalar(v);
    else
      return Scalar(static_cast<double>(static_cast<float>(v)));
  });
}

}  // namespace dp
