// NCCL collectives within one process (src/backend/cuda/nccl.h).
#include "backend/cuda/nccl.h"
#include <algorithm>
#include <map>
#include <mutex>
#include "dp/core/errors.h"
#include "dp/cuda/cuda.h"
#include "backend/cuda/runtime_api.h"
#if DP_HAVE_NCCL
#include <nccl.h>
#endif

namespace dp::backend::cuda::nccl {

#if DP_HAVE_NCCL
namespace {

std::vector<int> physical_of(const std::vector<int>& devices) {
  std::vector<int> gpus;
  gpus.reserve(devices.size());
  for (int d : devices) gpus.push_back(physical_device(d));
  return gpus;
}

bool distinct(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) == v.end();
}

void check(ncclResult_t r, const char* call) { DP_CHECK(r == ncclSuccess, DeviceError, "NCCL error: ", call, " failed: ", ncclGetErrorString(r)); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
      return ncclUint8;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
  }
  throw DTypeError(::dp::detail::str("NCCL: unsupported dtype ", dtype_name(t)));
}

// The communicators of a GPU list (rank i on gpus[i]), made once. Never destroyed: ncclCommDestroy
// at exit may wait on a torn-down runtime.
const std::vector<ncclComm_t>& communicators(const std::vector<int>& gpus) {
  static std::mutex mu;
  static auto* cache = new std::map<std::vector<int>, std::vector<ncclComm_t>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(gpus);
  if (it != cache->end()) return it->second;
  std::vector<ncclComm_t> comms(gpus.size());
  check(ncclCommInitAll(comms.data(), static_cast<int>(gpus.size()), gpus.data()), "ncclCommInitAll");
  return cache->emplace(gpus, std::move(comms)).first->second;
}

// Runs one call per rank inside an NCCL group; each on its device's current stream.
template <typename F>
void grouped(const std::vector<int>& devices, const char* what, F&& per_rank) {
  DP_CHECK(collective_usable_kernel(devices), DeviceError, "NCCL ", what, ": the devices must be at least two distinct GPUs");
  const std::vector<ncclComm_t>& comms = communicators(physical_of(devices));
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t first_error = ncclSuccess;
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceGuard guard(devices[i]);
    const ncclResult_t r = per_rank(i, comms[i], current_stream(devices[i]).handle());
    if (first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  check(first_error, what);
  check(end, "ncclGroupEnd");
}

}  // namespace

bool collective_usable_kernel(const std::vector<int>& devices) { return devices.size() >= 2 && distinct(physical_of(devices)); }

void collective_broadcast_kernel(const std::vector<void*>& buffers, int64_t count, DType dtype, const std::vector<int>& devices, size_t root) {
  DP_CHECK(buffers.size() == devices.size() && root < devices.size(), ValueError, "NCCL broadcast: ", buffers.size(), " buffers for ", devices.size(),
           " devices, root ", root);
  if (count <= 0) return;
  const ncclDataType_t type = nccl_type(dtype);
  grouped(devices, "ncclBroadcast", [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buffers[root], buffers[i], static_cast<size_t>(count), type, static_cast<int>(root), comm, stream);
  });
}

void collective_reduce_kernel(const std::vector<const void*>& inputs, void* out, int64_t count, DType dtype, const std::vector<int>& devices,
                              size_t root) {
  DP_CHECK(inputs.size() == devices.size() && root < devices.size(), ValueError, "NCCL reduce: ", inputs.size(), " inputs for ", devices.size(),
           " devices, root ", root);
  if (count <= 0) return;
  const ncclDataType_t type = nccl_type(dtype);
  const ncclRedOp_t op = dtype == DType::Bool ? ncclMax : ncclSum;  // bool: or (a sum could leave a 2 in a bool)
  grouped(devices, "ncclReduce", [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
    return ncclReduce(inputs[i], i == root ? out : nullptr, static_cast<size_t>(count), type, op, static_cast<int>(root), comm, stream);
  });
}

#else  // built without NCCL

bool collective_usable_kernel(const std::vector<int>&) { return false; }

void collective_broadcast_kernel(const std::vector<void*>&, int64_t, DType, const std::vector<int>&, size_t) {
  throw DeviceError("NCCL broadcast: dparallel was built without NCCL (DP_HAVE_NCCL is 0)");
}

void collective_reduce_kernel(const std::vector<const void*>&, void*, int64_t, DType, const std::vector<int>&, size_t) {
  throw DeviceError("NCCL reduce: dparallel was built without NCCL (DP_HAVE_NCCL is 0)");
}

#endif

}  // namespace dp::backend::cuda::nccl
