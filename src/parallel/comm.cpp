// scatter / gather (differentiable, each the other's backward) and broadcast_coalesced.
#include "dp/parallel/comm.h"
#include "dp/autograd/function.h"
#include "dp/core/device_registry.h"
#include "dp/core/warning.h"
#include "dp/ops/factory.h"
#include "parallel/comm_device.h"
#include "parallel/placement.h"

namespace dp::parallel {
namespace {

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim, const Tensor& t) {
  DP_CHECK(dim >= -ndim && dim < ndim, IndexError, op, ": dim ", dim, " is out of range for a tensor of size ", t.size_str(),
           " (expected to be in range of [", -ndim, ", ", ndim - 1, "])");
  return dim < 0 ? dim + ndim : dim;
}

std::string sizes_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::vector<int64_t> chunk_sizes(int64_t batch, int64_t n) {
  DP_CHECK(n > 0, ValueError, "chunk_sizes: need at least one device (got ", n, ")");
  DP_CHECK(batch >= 0, ValueError, "chunk_sizes: negative batch size ", batch);
  if (batch == 0) return std::vector<int64_t>(static_cast<size_t>(n), 0);
  const int64_t split = (batch + n - 1) / n;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < batch; start += split) sizes.push_back(std::min(split, batch - start));
  return sizes;
}

std::vector<int64_t> balanced_sizes(int64_t batch, int64_t n) {
  DP_CHECK(n > 0, ValueError, "balanced_sizes: need at least one device (got ", n, ")");
  DP_CHECK(batch >= 0, ValueError, "balanced_sizes: negative batch size ", batch);
  if (batch == 0) return std::vector<int64_t>(static_cast<size_t>(n), 0);
  const int64_t used = std::min(batch, n);
  std::vector<int64_t> sizes(static_cast<size_t>(used), batch / used);
  for (int64_t i = 0; i < batch % used; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Device>& devices, const std::optional<std::vector<int64_t>>& sizes_in,
                            int64_t dim) {
  DP_CHECK(tensor.defined(), ValueError, "scatter: undefined tensor");
  DP_CHECK(!devices.empty(), ValueError, "scatter: expected at least one device to scatter to");
  DP_CHECK(tensor.dim() > 0, ShapeError,
           "scatter: chunk expects at least a 1-dimensional tensor (got a 0-dim tensor; a scalar can't be split over devices)");
  for (Device d : devices) check_device(d);
  const int64_t d = wrap_dim("scatter", dim, tensor.dim(), tensor);
  const int64_t batch = tensor.size(d);
  std::vector<int64_t> sizes;
  if (sizes_in) {
    sizes = *sizes_in;
    DP_CHECK(sizes.size() == devices.size(), ValueError,
             "scatter: expected devices and chunk_sizes to be of same length, but got len(devices) = ", devices.size(),
             " and len(chunk_sizes) = ", sizes.size());
    int64_t total = 0;
    for (int64_t s : sizes) {
      DP_CHECK(s >= 0, ValueError, "scatter: chunk sizes must be non-negative, got ", sizes_str(sizes));
      total += s;
    }
    DP_CHECK(total == batch, ShapeError, "scatter: chunk sizes ", sizes_str(sizes), " sum to ", total, ", but the tensor of size ", tensor.size_str(),
             " has ", batch, " along dim ", d);
  } else {
    sizes = chunk_sizes(batch, static_cast<int64_t>(devices.size()));
  }

  std::vector<Tensor> chunks;
  chunks.reserve(sizes.size());
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      chunks.push_back(detail::place_on(tensor.narrow(d, offset, sizes[i]), devices[i]));
      offset += sizes[i];
    }
  }
  if (autograd::needs_grad(tensor)) {
    for (Tensor& c : chunks)
      if (detail::host_memory(c.device()) && detail::host_memory(tensor.device())) autograd::mark_view(c);
    autograd::record("ScatterBackward", {tensor}, chunks,
                     [source = tensor.device(), d](autograd::variable_list&& grads) { return autograd::variable_list{gather(grads, source, d)}; });
  }
  return chunks;
}

Tensor gather(const std::vector<Tensor>& tensors_in, Device destination, int64_t dim) {
  DP_CHECK(!tensors_in.empty(), ValueError, "gather: expected at least one tensor to gather from");
  check_device(destination);
  for (size_t i = 0; i < tensors_in.size(); ++i) DP_CHECK(tensors_in[i].defined(), ValueError, "gather: tensor ", i, " is undefined");
  bool all_scalars = true;
  for (const Tensor& t : tensors_in) all_scalars = all_scalars && t.dim() == 0;
  const bool unsqueeze = all_scalars && dim == 0;
  if (unsqueeze) {
    warn("Was asked to gather along dimension 0, but all input tensors were scalars; will instead unsqueeze and return a vector.");
  }
  std::vector<Tensor> tensors;
  tensors.reserve(tensors_in.size());
  {
    NoGradGuard no_grad;
    for (const Tensor& t : tensors_in) tensors.push_back(unsqueeze ? t.detach().view({1}) : t.detach());
  }
  const Tensor& first = tensors[0];
  DP_CHECK(first.dim() > 0, ShapeError, "gather: can't gather 0-dim tensors along dim ", dim, " (only dim 0 turns scalars into a vector)");
  const int64_t d = wrap_dim("gather", dim, first.dim(), first);
  Shape out_sizes = first.sizes();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DP_CHECK(t.dim() == first.dim(), ShapeError, "gather: expected all input tensors to have the same number of dimensions, but tensor at index ", i,
             " has ", t.dim(), " dimensions (size ", t.size_str(), "), expected ", first.dim());
    for (int64_t k = 0; k < t.dim(); ++k) {
      DP_CHECK(k == d || t.size(k) == first.size(k), ShapeError, "gather: input tensor at index ", i, " has invalid shape ", t.size_str(),
               ", but expected ", first.size_str(), " in every dimension except ", d);
    }
    DP_CHECK(t.dtype() == first.dtype(), DTypeError, "gather: tensor at index ", i, " has dtype ", dtype_name(t.dtype()), ", but tensor 0 has ",
             dtype_name(first.dtype()));
    total += t.size(d);
  }
  out_sizes[static_cast<size_t>(d)] = total;

  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty(out_sizes, TensorOptions().dtype(first.dtype()).device(destination));
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      const int64_t n = t.size(d);
      if (n > 0) {
        Tensor slot = out.narrow(d, offset, n);
        slot.copy_(t);
      }
      offset += n;
    }
  }
  if (autograd::any_needs_grad(tensors_in)) {
    std::vector<Device> sources;
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) {
      sources.push_back(t.device());
      sizes.push_back(t.size(d));
    }
    autograd::record("GatherBackward", tensors_in, {out},
                     [sources = std::move(sources), sizes = std::move(sizes), d, unsqueeze](autograd::variable_list&& grads) {
                       autograd::variable_list parts = scatter(grads[0], sources, sizes, d);
                       if (unsqueeze)
                         for (Tensor& p : parts) p = p.view({});
                       return parts;
                     });
  }
  return out;
}

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors, const std::vector<Device>& devices, size_t buffer_size) {
  DP_CHECK(!devices.empty(), ValueError, "broadcast_coalesced: expected at least one device");
  DP_CHECK(buffer_size > 0, ValueError, "broadcast_coalesced: buffer_size must be positive");
  for (Device d : devices) check_device(d);
  for (size_t i = 0; i < tensors.size(); ++i) {
    DP_CHECK(tensors[i].defined(), ValueError, "broadcast_coalesced: tensor ", i, " is undefined");
    DP_CHECK(tensors[i].device() == devices[0], DeviceError, "broadcast_coalesced: all tensors must be on devices[0] (", devices[0].str(),
             "), but tensor ", i, " is on ", tensors[i].device().str());
  }
  bool own_memory = !devices[0].is_cpu();  // devices of one type with their own memory
  for (Device d : devices) own_memory = own_memory && d.type == devices[0].type;
  if (own_memory) return detail::device_broadcast_coalesced(tensors, devices, buffer_size);
  std::vector<std::vector<Tensor>> out(devices.size());
  out[0] = tensors;
  NoGradGuard no_grad;
  for (size_t j = 1; j < devices.size(); ++j) {
    out[j].reserve(tensors.size());
    // Host memory has no per-transfer cost to amortise: each tensor is copied straight into its own
    // fresh tensor on the target (no packing into a bucket and back). Devices with their own memory
    // pack (above).
    for (const Tensor& t : tensors) {
      Tensor c = empty(t.sizes(), TensorOptions().dtype(t.dtype()).device(devices[j]));
      if (t.numel() > 0) c.copy_(t);
      out[j].push_back(std::move(c));
    }
  }
  return out;
}

std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Device>& devices) {
  DP_CHECK(tensor.defined(), ValueError, "broadcast: undefined tensor");
  DP_CHECK(!devices.empty(), ValueError, "broadcast: expected at least one device");
  std::vector<Tensor> out;
  NoGradGuard no_grad;
  for (Device d : devices) {
    check_device(d);
    if (d == tensor.device()) {
      out.push_back(tensor.detach());
      continue;
    }
    Tensor c = empty(tensor.sizes(), TensorOptions().dtype(tensor.dtype()).device(d));
    if (tensor.numel() > 0) c.copy_(tensor);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dp::parallel
