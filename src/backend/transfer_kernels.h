#pragma once
// The kernel interface of copies between host memory and a device, or between two devices
// (dp::to, Tensor::copy_), implemented by a backend that has device memory (the CUDA backend:
// src/cuda/transfer.cpp). Copies within host memory are kernels::copy_kernel's.
#include "backend/kernel_stub.h"
#include "dp/core/tensor.h"

namespace dp::backend {

// dst <- src converted to dst's dtype and broadcast to dst's shape, where at least one of them is
// on a device of the type the call names (the other in host memory or on such a device).
// non_blocking: the host need not wait for the copy where the memory allows it (pinned host
// memory); the backend's contract says when it does.
using CopyAcross = void(const Tensor& dst, const Tensor& src, bool non_blocking);
DP_DECLARE_KERNEL(copy_across, CopyAcross);

// The device type a copy between `a` and `b` runs on: the one that is not host memory (CPU when
// both are).
inline DeviceType transfer_device_type(Device a, Device b) { return a.is_cpu() ? b.type : a.type; }

}  // namespace dp::backend
