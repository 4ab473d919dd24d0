// dp::nn::functional dropout: dp::dropout / dp::dropout_ with the mode passed in the options.
#include "dp/nn/functional/dropout.h"
#include "dp/ops/dropout.h"

namespace dp::nn::functional {

Tensor dropout(Tensor input, const DropoutFuncOptions& options) {
  if (options.inplace()) return dp::dropout_(input, options.p(), options.training());
  return dp::dropout(input, options.p(), options.training());
}

}  // namespace dp::nn::functional
