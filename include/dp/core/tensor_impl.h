#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include "dp/core/dtype.h"
#include "dp/core/pooled.h"
#include "dp/core/shape.h"
#include "dp/core/storage.h"

namespace dp {

class Tensor;
namespace autograd {
class Node;
}

using TensorHook = std::function<Tensor(const Tensor&)>;  // may return an undefined tensor: keep grad
using PostAccumulateGradHook = std::function<void(Tensor&)>;

// Autograd state of a tensor; allocated only for tensors that take part in autograd.
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  bool is_view = false;                            // made by a view op from a tensor with history
  std::shared_ptr<Tensor> grad;                    // leaf gradient (or retained non-leaf gradient)
  std::shared_ptr<autograd::Node> grad_fn;         // null for leaves
  uint32_t output_nr = 0;                          // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the AccumulateGrad node, kept alive by the graph
  std::vector<std::pair<int, TensorHook>> hooks;   // (handle, hook), run on the gradient in order
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
  int next_hook_id = 0;
  std::mutex mu;  // guards grad accumulation from several workers

  // Every tensor with history gets one: recycle them through the per-thread block cache.
  static void* operator new(size_t bytes) { return detail::pooled_allocate(bytes); }
  static void operator delete(void* p, size_t bytes) noexcept { detail::pooled_deallocate(p, bytes); }
};

// The data behind a Tensor handle: a view (sizes, strides, offset) into a Storage, plus dtype.
struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  int64_t numel = 0;
  bool is_contiguous = true;
  std::unique_ptr<AutogradMeta> autograd;

  TensorImpl(Storage s, Shape sz, Shape st, int64_t off, DType dt);
  // A fresh contiguous tensor whose element count the caller already knows (make_empty): skips
  // refresh_metadata's pass over sizes and strides.
  struct Contiguous {};
  TensorImpl(Contiguous, Storage s, Shape sz, Shape st, int64_t n, DType dt)
      : storage(std::move(s)), sizes(std::move(sz)), strides(std::move(st)), dtype(dt), numel(n), is_contiguous(true) {}
  void refresh_metadata();  // recompute numel and is_contiguous after sizes/strides change
  Device device() const { return storage->device(); }
  AutogradMeta& autograd_meta();  // creates on first use
};

}  // namespace dp
