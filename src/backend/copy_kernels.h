#pragma once
// The kernel interface of strided copies and fills, the device seam of every clone, contiguous,
// dtype conversion and transfer, and of the factories' fills (arange, linspace): implemented by the
// CPU backend (src/backend/cpu/loops.cpp) and the CUDA backend (src/backend/cuda/copy.cu,
// transfer.cpp). The ops call backend::copy_kernel /
// backend::fill_kernel below.
#include <cstdint>
#include <type_traits>
#include "backend/dispatch.h"
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// dst (any layout) <- src converted to dst's dtype and broadcast to dst's shape. Called on the
// device type that is not the host's when one of them is on a device (a device backend also copies
// between host and device memory, or between two devices), else on the CPU (every CPU device uses
// host memory).
using CopyKernel = void(const Tensor& dst, const Tensor& src);
// Every element of dst (any layout) = value.
using FillKernel = void(const Tensor& dst, const Scalar& value);
// copy_ between two different memories (host and a device, or two devices), called on the device
// type that is not the host's: host -> device need not wait; device -> host waits unless
// non_blocking and dst is pinned host memory.
using CopyAcrossKernel = void(const Tensor& dst, const Tensor& src, bool non_blocking);
// arange's values: out (1-D, contiguous, not bool) element i = start + step * i, computed in int64
// (start.to_int(), step.to_int(), wrapping) for an integral out, else in double, then converted.
using ArangeKernel = void(const Tensor& out, const Scalar& start, const Scalar& step);
// linspace's values, PyTorch's symmetric formula: out (1-D, contiguous, at least 2 elements) element
// i = s + step * i for i < n / 2, else e - step * (n - 1 - i), where s and e are start and end in
// out's dtype and step = (e - s) / (n - 1), all in the step type: float for float16/bfloat16, double
// for integers, else out's dtype.
using LinspaceKernel = void(const Tensor& out, double start, double end);

DP_DECLARE_KERNEL(copy_kernel, CopyKernel);
DP_DECLARE_KERNEL(fill_kernel, FillKernel);
DP_DECLARE_KERNEL(copy_across_kernel, CopyAcrossKernel);
DP_DECLARE_KERNEL(arange_kernel, ArangeKernel);
DP_DECLARE_KERNEL(linspace_kernel, LinspaceKernel);

// The device type whose backend copies between dst and src: the device's, when either is not in
// host memory.
inline DeviceType copy_device_type(Device dst, Device src) { return dst.is_cpu() ? src.type : dst.type; }
inline DeviceType copy_device_type(const Tensor& dst, const Tensor& src) { return copy_device_type(dst.device(), src.device()); }

// The elements of LinspaceKernel's out (n >= 2 elements of type T): one definition for both
// backends. Linspace<T> f(start, end, n); f(i) is element i.
template <typename T>
struct Linspace {
  using Step = std::conditional_t<std::is_integral_v<T>, double, std::conditional_t<backend::is_reduced_float_v<T>, float, T>>;
  Step s, e, step;
  int64_t n;
  DP_HOST_DEVICE Linspace(double start, double end, int64_t count)
      : s(static_cast<Step>(backend::convert<T>(start))),
        e(static_cast<Step>(backend::convert<T>(end))),
        step((e - s) / static_cast<Step>(count - 1)),
        n(count) {}
  DP_HOST_DEVICE T operator()(int64_t i) const {
    return backend::convert<T>(i < n / 2 ? s + step * static_cast<Step>(i) : e - step * static_cast<Step>(n - i - 1));
  }
};

}  // namespace dp::backend
