#pragma once
// A group's parameters, gathered while a step walks it, so that each (device, dtype) gets one call
// of the backend's update kernel (backend/optim_kernels.h) at the end: on a CUDA device a few
// multi-tensor launches instead of a launch per parameter, on the CPU one loop over the list.
#include <utility>
#include <vector>
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::optim::detail {

template <typename Entry>
class UpdateBatch {
 public:
  // The contiguous tensor the kernel writes for `param`: the parameter itself, or a contiguous copy
  // that finish() writes back. `grad` must match the parameter's device and dtype (the kernels read
  // raw memory). Both are kept alive until the launch is queued.
  Tensor target(const char* optimizer, const Tensor& param, const Tensor& grad) {
    DP_CHECK(grad.device() == param.device() && grad.dtype() == param.dtype() && grad.sizes() == param.sizes(), ValueError, optimizer,
             ": the gradient of a parameter ", param.size_str(), " ", dtype_name(param.dtype()), " on ", param.device().str(), " is ",
             grad.size_str(), " ", dtype_name(grad.dtype()), " on ", grad.device().str(), "; it must have the parameter's shape, dtype and device");
    keep_.push_back(grad);
    return param.is_contiguous() ? param : param.contiguous();
  }
  // Queues the update of `param` (whose kernel memory is `target`, from target()).
  void add(const Tensor& param, const Tensor& target, const Entry& entry) {
    const Device device = param.device();
    Batch* b = nullptr;
    for (Batch& x : batches_)
      if (x.dtype == param.dtype() && x.device == device) b = &x;
    if (b == nullptr) b = &batches_.emplace_back(Batch{param.dtype(), device, {}});
    b->entries.push_back(entry);
    written_.emplace_back(param, target);
  }
  // launch(device, dtype, entries) per batch, in the order the batches were first seen; then
  // strided parameters get their copies back, and every parameter's version counter is bumped
  // (they changed in place).
  template <typename Launch>
  void finish(Launch&& launch) {
    for (const Batch& b : batches_) launch(b.device, b.dtype, b.entries);
    for (auto& [param, target] : written_) {
      Tensor p = param;
      if (!target.is_same(param)) p.copy_(target);
      p.bump_version();
    }
    batches_.clear();
    written_.clear();
    keep_.clear();
  }

 private:
  struct Batch {
    DType dtype;
    Device device;
    std::vector<Entry> entries;
  };
  std::vector<Batch> batches_;
  std::vector<std::pair<Tensor, Tensor>> written_;  // (parameter, the tensor the kernel writes)
  std::vector<Tensor> keep_;                        // gradients (maybe contiguous copies)
};

}  // namespace dp::optim::detail
