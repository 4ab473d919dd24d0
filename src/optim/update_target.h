#pragma once
// Shared by the optimizers' step(): running a fused kernel on a parameter's memory in place.
#include <string>
#include "dp/core/half.h"
#include "dp/core/tensor.h"
#include "dp/optim/optimizer.h"

namespace dp::optim::detail {

// Calls kernel(w) with w = the parameter itself when contiguous, else a contiguous copy that is
// written back afterwards; then bumps the parameter's version counter (it changed in place).
template <typename Kernel>
void update_in_place(Tensor& param, Kernel&& kernel) {
  if (param.is_contiguous()) {
    kernel(param);
  } else {
    Tensor w = param.contiguous();
    kernel(w);
    param.copy_(w);
  }
  param.bump_version();
}

// Calls f(S{}) with S the element type of a parameter dtype the fused updates take (float32,
// float64, float16, bfloat16; Optimizer::add_param_group admits no other). One switch per tensor.
template <typename F>
void with_param_type(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32: f(float{}); break;
    case kFloat64: f(double{}); break;
    case kBFloat16: f(BFloat16{}); break;
    case kFloat16: f(Half{}); break;
    default: throw DTypeError(dp::detail::str("optimizer: fused update of a ", dtype_name(dtype), " parameter"));
  }
}

// The gradient the kernels read: undefined when the parameter has none (it is skipped), else
// contiguous (a copy if it is not).
Tensor contiguous_grad(const Tensor& param);

// A saved buffer for `param`: checks its shape and returns a contiguous copy in the parameter's
// dtype and on its device. `key` ("state.3.exp_avg") names it in errors.
Tensor adopt_buffer(const Tensor& param, const Tensor& saved, const std::string& key);
// A saved step count: a one-element tensor of any numeric dtype holding a whole number >= 0.
int64_t adopt_step(const Tensor& saved, const std::string& key);

// A group's options as the optimizer's own options type (a ValueError if a caller swapped in
// another optimizer's options through param_groups()[i].set_options).
template <typename Options>
const Options& options_as(const OptimizerOptions& options, const char* optimizer) {
  const auto* o = dynamic_cast<const Options*>(&options);
  DP_CHECK(o != nullptr, ValueError, optimizer, ": a param group holds another optimizer's options");
  return *o;
}

// A state buffer must match its parameter (shape, dtype, device) and be contiguous: the kernels
// walk the buffers with the parameter's element index.
void check_state_buffer(const Tensor& param, const Tensor& buffer, const char* optimizer, const char* name);

}  // namespace dp::optim::detail
