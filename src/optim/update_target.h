#pragma once
// Shared by the optimizers: gradients, state buffers and options as the fused updates need them.
#include <string>
#include "dp/core/tensor.h"
#include "dp/optim/optimizer.h"

namespace dp::optim::detail {

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
