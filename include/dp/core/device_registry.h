#pragma once
#include <string>
#include <vector>
#include "dp/core/device.h"
#include "dp/core/worker.h"

namespace dp {

// Number of CPU devices cpu:0 … cpu:N-1. Default: the DP_CPU_DEVICES environment variable, else
// the number of hardware threads. Can be changed until the first CPU device's worker is started.
int cpu_device_count();
void set_cpu_device_count(int n);
// CUDA devices visible to dparallel (0 without the CUDA backend or without a GPU).
int cuda_device_count();
// Whether this program has the backend of `type`: the host's always; CUDA's when dparallel was
// built with the CUDA backend (DP_HAVE_CUDA in dp/config.h) and the program links its library,
// dparallel::cuda (libdparallel_cuda), which enlists itself when it is linked or loaded. Without
// it the program runs on the CPU alone and needs no CUDA library; linking it (no source change)
// gives the GPUs.
bool backend_linked(DeviceType type);
int device_count(DeviceType type);
// Every device of a type, in index order: {cpu:0, cpu:1, …}.
std::vector<Device> devices(DeviceType type);

// Throws DeviceError if d does not exist ("cpu:7 does not exist: there are 2 CPU devices …"; for a
// CUDA device when there is none, why: built without CUDA, dparallel::cuda not linked, or no GPU).
void check_device(Device d);
// The worker thread of an indexed device (cpu:i or cuda:i), started on first use; nullptr for the
// host ("cpu"). A GPU's worker has that GPU as its current CUDA device. DeviceError for a device
// that does not exist.
Worker* worker_for(Device d);

namespace detail {
// Why a program sees no CUDA device: "dparallel was built without the CUDA backend", "this program
// does not link dparallel's CUDA library (...)" or "no GPU is visible".
std::string no_cuda_devices_reason();
}  // namespace detail

}  // namespace dp

// As torch::cuda's (torch/cuda.h), these two are part of the core library, so that a program that
// does not link the CUDA library may ask; the rest of the CUDA runtime's API (dp/cuda/cuda.h:
// streams, events, the caching allocator) is in dparallel::cuda.
namespace dp::cuda {
// Number of logical CUDA devices (the visible GPUs unless DP_CUDA_VIRTUAL_DEVICES is set; see
// dp/cuda/cuda.h), computed once; 0 without the CUDA backend (not built, or dparallel::cuda not
// linked), without a driver or without a device. Throws only a ValueError for a malformed
// DP_CUDA_VIRTUAL_DEVICES.
int device_count();
// device_count() > 0.
bool is_available();
}  // namespace dp::cuda
