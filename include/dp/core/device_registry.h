#pragma once
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
int device_count(DeviceType type);
// Every device of a type, in index order: {cpu:0, cpu:1, …}.
std::vector<Device> devices(DeviceType type);

// Throws DeviceError if d does not exist ("cpu:7 does not exist: there are 2 CPU devices …").
void check_device(Device d);
// The worker thread of an indexed device (cpu:i or cuda:i), started on first use; nullptr for the
// host ("cpu"). A GPU's worker has that GPU as its current CUDA device. DeviceError for a device
// that does not exist.
Worker* worker_for(Device d);

}  // namespace dp
