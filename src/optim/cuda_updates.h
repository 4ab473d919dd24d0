#pragma once
// Parameters on CUDA devices, gathered while a step walks a group, so that each (device, dtype)
// gets one multi-tensor launch (cuda/optim.h) at the end instead of a launch per parameter.
// CPU parameters keep their per-parameter fused loop (update_target.h); nothing here runs for them.
#include <utility>
#include <vector>
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::optim::detail {

template <typename Entry>
class CudaUpdateBatch {
 public:
  // The contiguous tensor the kernel writes for `param`: the parameter itself, or a contiguous copy
  // that finish() writes back. `grad` must match the parameter's device and dtype (the kernels read
  // raw memory). Both are kept alive until the launch is queued.
  Tensor target(const char* optimizer, const Tensor& param, const Tensor& grad) {
    DP_CHECK(grad.device() == param.device() && grad.dtype() == param.dtype() && grad.sizes() == param.sizes(), ValueError,
             optimizer, ": the gradient of a parameter ", param.size_str(), " ", dtype_name(param.dtype()), " on ", param.device().str(),
             " is ", grad.size_str(), " ", dtype_name(grad.dtype()), " on ", grad.device().str(),
             "; it must have the parameter's shape, dtype and device");
    keep_.push_back(grad);
    return param.is_contiguous() ? param : param.contiguous();
  }
  // Queues the update of `param` (whose kernel memory is `target`, from target()).
  void add(const Tensor& param, const Tensor& target, const Entry& entry) {
    const int device = param.device().index;
    Batch* b = nullptr;
    for (Batch& x : batches_)
      if (x.dtype == param.dtype() && x.device == device) b = &x;
    if (b == nullptr) b = &batches_.emplace_back(Batch{param.dtype(), device, {}});
    b->entries.push_back(entry);
    written_.emplace_back(param, target);
  }
  bool empty() const { return batches_.empty(); }
  // launch(dtype, device, entries) per batch; then strided parameters get their copies back, and
  // every parameter's version counter is bumped (they changed in place).
  template <typename Launch>
  void finish(Launch&& launch) {
    for (const Batch& b : batches_) launch(b.dtype, b.device, b.entries);
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
    int device;
    std::vector<Entry> entries;
  };
  std::vector<Batch> batches_;
  std::vector<std::pair<Tensor, Tensor>> written_;  // (parameter, the tensor the kernel writes)
  std::vector<Tensor> keep_;                        // gradients (maybe contiguous copies)
};

}  // namespace dp::optim::detail
