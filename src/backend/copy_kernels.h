#pragma once
// The kernel interface of strided copies and fills, the device seam of every clone, contiguous,
// dtype conversion and transfer: implemented by the CPU backend (src/backend/cpu/loops.cpp) and the
// CUDA backend (src/backend/cuda/copy.cu, transfer.cpp). The ops call kernels::copy_kernel /
// kernels::fill_kernel below.
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

DP_DECLARE_KERNEL(copy_stub, CopyKernel);
DP_DECLARE_KERNEL(fill_stub, FillKernel);
DP_DECLARE_KERNEL(copy_across_stub, CopyAcrossKernel);

// The device type whose backend copies between dst and src: the device's, when either is not in
// host memory.
inline DeviceType copy_device_type(Device dst, Device src) { return dst.is_cpu() ? src.type : dst.type; }
inline DeviceType copy_device_type(const Tensor& dst, const Tensor& src) { return copy_device_type(dst.device(), src.device()); }

}  // namespace dp::backend

namespace dp::kernels {

// Strided copy with dtype conversion: dst (any layout) <- src broadcast to dst's shape.
inline void copy_kernel(const Tensor& dst, const Tensor& src) { backend::copy_stub(backend::copy_device_type(dst, src), dst, src); }
// Fills every element of dst (any layout) with value.
inline void fill_kernel(const Tensor& dst, const Scalar& value) { backend::fill_stub(dst.device().type, dst, value); }

}  // namespace dp::kernels
