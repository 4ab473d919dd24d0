#pragma once
// What core's Tensor needs from autograd, which sits above it: running a backward pass, and the
// few graph operations behind Tensor's hook and set_data methods (c10's VariableHooksInterface).
// Autograd installs its implementation when it is linked (src/autograd/node.cpp, the object that
// every graph needs), so core includes nothing above it.
#include <cstdint>
#include "dp/core/device.h"
#include "dp/core/dtype.h"
#include "dp/core/tensor_impl.h"

namespace dp::detail {

class AutogradHooks {
 public:
  // Tensor::backward.
  virtual void backward(const Tensor& self, const Tensor& gradient, bool retain_graph, bool create_graph) const = 0;
  // Whether a leaf's gradient accumulator takes gradients of this device and dtype (set_data).
  virtual bool accumulator_matches(const autograd::Node& accumulator, Device device, DType dtype) const = 0;
  // A hook on output `output_nr` of `fn` (register_hook / retain_grad on a non-leaf), and its removal.
  virtual void add_output_hook(autograd::Node& fn, int id, uint32_t output_nr, TensorHook hook) const = 0;
  virtual void remove_output_hooks(autograd::Node& fn, int id, uint32_t output_nr) const = 0;

 protected:
  ~AutogradHooks() = default;
};

// retain_grad's hook id (autograd::Node::kRetainGradHook; autograd checks that they agree).
inline constexpr int kRetainGradHookId = -1;

// Called once by autograd at static initialisation.
void set_autograd_hooks(const AutogradHooks* hooks);
// Throws AutogradError when autograd is not linked into the program.
const AutogradHooks& autograd_hooks();

}  // namespace dp::detail
