#include "dp/nn/modules/activation.h"

#include "dp/ops/elementwise.h"
#include "dp/ops/reduction.h"
#include "dp/ops/shape.h"

namespace dp::nn {

Tensor ReLUImpl::forward(const Tensor& input) const {
  if (inplace) {
    Tensor t = input;
    relu_(t);
    return t;
  }
  return relu(input);
}
Tensor SigmoidImpl::forward(const Tensor& input) const { return sigmoid(input); }
Tensor TanhImpl::forward(const Tensor& input) const { return tanh(input); }

GELUImpl::GELUImpl(std::string approx) : approximate(std::move(approx)) {
  DP_CHECK(approximate == "none" || approximate == "tanh", ValueError, "GELU: approximate must be 'none' or 'tanh', got '", approximate, "'");
}
Tensor GELUImpl::forward(const Tensor& input) const { return gelu(input, approximate); }

Tensor SoftmaxImpl::forward(const Tensor& input) const { return softmax(input, dim); }
Tensor LogSoftmaxImpl::forward(const Tensor& input) const { return log_softmax(input, dim); }

Tensor FlattenImpl::forward(const Tensor& input) const { return flatten(input, start_dim, end_dim); }
std::string FlattenImpl::extra_repr() const { return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim); }

}  // namespace dp::nn
