// Coalesced broadcast and reduction between devices with their own memory (comm_device.h).
#include "parallel/comm_device.h"
#include "backend/comm_kernels.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/device_runtime.h"
#include "dp/ops/factory.h"
#include "parallel/coalesce.h"

namespace dp::parallel::detail {

std::vector<std::vector<Tensor>> device_broadcast_coalesced(const std::vector<Tensor>& tensors, const std::vector<Device>& devices,
                                                            size_t buffer_size) {
  NoGradGuard no_grad;
  const size_t n_dev = devices.size();
  std::vector<std::vector<Tensor>> out(n_dev);
  out[0] = tensors;
  if (n_dev == 1) return out;
  std::vector<TensorSpec> specs;
  std::vector<size_t> all;
  for (size_t i = 0; i < tensors.size(); ++i) {
    specs.push_back({tensors[i].sizes(), tensors[i].dtype()});
    all.push_back(i);
  }
  for (size_t j = 1; j < n_dev; ++j) {
    out[j].resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i)  // empty tensors are not in any bucket
      if (tensors[i].numel() == 0) out[j][i] = empty(specs[i].sizes, TensorOptions().dtype(specs[i].dtype).device(devices[j]));
  }
  std::vector<int> ids;
  for (Device d : devices) ids.push_back(d.index);
  const DeviceType type = devices[0].type;
  const bool use_collective = backend::collective_usable_kernel(type, ids);
  for (const Bucket& b : plan_buckets(specs, all, buffer_size)) {
    const Tensor flat0 = pack(b, tensors, devices[0]);
    std::vector<Tensor> flats(n_dev);
    flats[0] = flat0;
    for (size_t j = 1; j < n_dev; ++j) flats[j] = empty({b.numel}, TensorOptions().dtype(b.dtype).device(devices[j]));
    if (use_collective) {
      std::vector<void*> ptrs;
      for (const Tensor& f : flats) ptrs.push_back(f.data_ptr());
      backend::collective_broadcast_kernel(type, ptrs, b.numel, b.dtype, ids, 0);
    } else {
      // One copy per device: peer or device-to-device, ordered by events (Tensor::copy_).
      for (size_t j = 1; j < n_dev; ++j) flats[j].copy_(flat0);
    }
    for (size_t j = 1; j < n_dev; ++j) {
      std::vector<Tensor> views = unpack(b, flats[j], specs);
      for (size_t k = 0; k < b.items.size(); ++k) out[j][b.items[k]] = std::move(views[k]);
    }
  }
  return out;
}

namespace {

// One bucket's sum on `destination` from per-device flat buffers (flats[k] on devices[k]).
Tensor sum_flats(const std::vector<Tensor>& flats, const std::vector<Device>& devices, Device destination, const Bucket& b) {
  const TensorOptions options = TensorOptions().dtype(b.dtype).device(destination);
  if (flats.size() == 1) return flats[0].device() == destination ? flats[0] : flats[0].to(destination);
  std::vector<int> ids;
  size_t root = devices.size();
  for (size_t k = 0; k < devices.size(); ++k) {
    ids.push_back(devices[k].index);
    if (devices[k] == destination) root = k;
  }
  const DeviceType type = destination.type;
  if (root < devices.size() && backend::collective_usable_kernel(type, ids)) {
    Tensor out = empty({b.numel}, options);
    std::vector<const void*> ptrs;
    for (const Tensor& f : flats) ptrs.push_back(f.data_ptr());
    backend::collective_reduce_kernel(type, ptrs, out.data_ptr(), b.numel, b.dtype, ids, root);
    return out;
  }
  // The sum kernel on the destination's current stream. Buffers on the destination's GPU (virtual
  // devices) or a peer's are read in place once the destination's stream has waited for their
  // producer; the others are copied over first.
  const DeviceRuntime& rt = *device_runtime(type);
  const int dest = destination.index;
  const Stream ds = rt.current_stream(dest);
  std::vector<Tensor> keep;    // moved copies, alive until the launch
  std::vector<int> read_from;  // devices whose buffers the kernel reads in place
  std::vector<const void*> ptrs;
  for (size_t k = 0; k < flats.size(); ++k) {
    const int src = devices[k].index;
    if (src == dest) {
      ptrs.push_back(flats[k].data_ptr());
    } else if (backend::peer_access_kernel(type, dest, src)) {
      rt.wait_stream(ds, rt.current_stream(src));
      read_from.push_back(src);
      ptrs.push_back(flats[k].data_ptr());
    } else {
      keep.push_back(flats[k].to(destination));
      ptrs.push_back(keep.back().data_ptr());
    }
  }
  Tensor out = empty({b.numel}, options);
  backend::sum_into_kernel(type, out.data_ptr(), ptrs, b.numel, b.dtype, ds);
  // The sources' allocators reuse their blocks in their own stream order: make those streams wait
  // for the kernel, so a buffer freed after this returns is not overwritten while it is read.
  for (int src : read_from) rt.wait_stream(rt.current_stream(src), ds);
  return out;
}

}  // namespace

std::vector<Tensor> device_reduce_sum(const std::vector<std::vector<Tensor>>& inputs, const std::vector<TensorSpec>& specs, Device destination,
                                      size_t buffer_size) {
  NoGradGuard no_grad;
  if (destination.is_cpu()) {
    // A host destination: each input comes over (the host waits for each copy), then the host sum.
    std::vector<std::vector<Tensor>> moved(inputs.size());
    for (size_t j = 0; j < inputs.size(); ++j)
      for (const Tensor& t : inputs[j]) moved[j].push_back(t.defined() && !t.is_cpu() ? t.to(destination) : t);
    return reduce_sum(moved, specs, destination, buffer_size);
  }
  const size_t count = specs.size();
  std::vector<Tensor> results(count);
  // Each device list's buffers live on one device: where its first tensor off the host is (its
  // others, and any host tensor, are brought there).
  std::vector<Device> list_device(inputs.size(), destination);
  for (size_t j = 0; j < inputs.size(); ++j)
    for (const Tensor& t : inputs[j])
      if (t.defined() && !t.is_cpu()) {
        list_device[j] = t.device();
        break;
      }
  std::vector<size_t> summed;  // tensors with two or more contributions
  for (size_t i = 0; i < count; ++i) {
    const TensorOptions options = TensorOptions().dtype(specs[i].dtype).device(destination);
    const Tensor* only = nullptr;
    size_t contributions = 0;
    for (const auto& list : inputs)
      if (list[i].defined()) {
        ++contributions;
        only = &list[i];
      }
    if (contributions == 0) {
      results[i] = zeros(specs[i].sizes, options);
    } else if (contributions == 1) {
      results[i] = only->device() == destination ? *only : only->to(destination);
    } else if (only->numel() == 0) {
      results[i] = empty(specs[i].sizes, options);
    } else {
      summed.push_back(i);
    }
  }
  for (const Bucket& b : plan_buckets(specs, summed, buffer_size)) {
    std::vector<Tensor> flats;
    std::vector<Device> devices;
    for (size_t j = 0; j < inputs.size(); ++j) {
      bool any = false, whole = true;
      for (size_t i : b.items) {
        any = any || inputs[j][i].defined();
        whole = whole && inputs[j][i].defined() && inputs[j][i].device() == list_device[j];
      }
      if (!any) continue;
      const Tensor& first = inputs[j][b.items[0]];
      if (b.items.size() == 1 && whole && first.is_contiguous()) {
        flats.push_back(first.view({b.numel}));  // a bucket of one tensor: no packing
      } else {
        flats.push_back(pack(b, inputs[j], list_device[j]));
      }
      devices.push_back(list_device[j]);
    }
    const Tensor sum = sum_flats(flats, devices, destination, b);
    std::vector<Tensor> views = unpack(b, sum, specs);
    for (size_t k = 0; k < b.items.size(); ++k) results[b.items[k]] = std::move(views[k]);
  }
  return results;
}

}  // namespace dp::parallel::detail
