#pragma once
// The CUDA runtime, by its names, in the CUDA backend. The backend's kernels are dp::backend::cuda
// (as the CPU's are dp::backend::cpu); what they run on (devices, streams, events, the caching
// allocator, graphs) is the public dp::cuda API of include/dp/cuda, implemented in src/cuda. These
// using-declarations make `Stream`, `cuda::current_stream()` or `detail::logical_device_count()`
// in the backend mean the runtime's, as they did when both shared one namespace. Declarations, not
// a using-directive: a directive would leave `Stream` ambiguous between dp::Stream (the generic
// handle) and dp::cuda::Stream.
#include "dp/core/device_registry.h"
#include "dp/cuda/cuda.h"
#include "dp/cuda/graph.h"
#include "dp/cuda/matmul.h"

namespace dp::backend::cuda {

using ::dp::cuda::allow_tf32;
using ::dp::cuda::caching_allocator;
using ::dp::cuda::current_device;
using ::dp::cuda::current_stream;
using ::dp::cuda::device_allocator;
using ::dp::cuda::device_count;
using ::dp::cuda::device_info;
using ::dp::cuda::DeviceGuard;
using ::dp::cuda::DeviceInfo;
using ::dp::cuda::enable_peer_access;
using ::dp::cuda::Event;
using ::dp::cuda::is_current_stream_capturing;
using ::dp::cuda::physical_device;
using ::dp::cuda::record_stream;
using ::dp::cuda::set_current_stream;
using ::dp::cuda::set_device;
using ::dp::cuda::Stream;

namespace detail {
using ::dp::cuda::detail::logical_device_count;
}  // namespace detail

}  // namespace dp::backend::cuda
