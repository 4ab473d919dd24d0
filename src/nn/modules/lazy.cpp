#include "dp/nn/modules/lazy.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <utility>
#include <vector>
#include "dp/autograd/grad_mode.h"
#include "dp/nn/init.h"
#include "dp/ops/factory.h"
#include "dp/ops/linalg.h"

namespace dp::nn {

std::optional<std::string> first_uninitialized_module(const Module& module) {
  // named_modules() needs shared ownership of the root; walk the children by hand instead.
  std::vector<std::pair<std::string, const Module*>> stack{{"", &module}};
  std::vector<const Module*> seen;
  while (!stack.empty()) {
    auto [path, m] = std::move(stack.back());
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) continue;
    seen.push_back(m);
    auto* lazy = dynamic_cast<const LazyModuleMixin*>(m);
    if (lazy != nullptr && lazy->has_uninitialized_params()) return path;
    const auto& kids = m->own_children();
    for (size_t i = kids.size(); i-- > 0;)
      if (kids[i].value()) stack.emplace_back(path.empty() ? kids[i].key() : path + "." + kids[i].key(), kids[i].value().get());
  }
  return std::nullopt;
}

LazyLinearImpl::LazyLinearImpl(const LazyLinearOptions& opts) : options(opts) {
  DP_CHECK(options.out_features() >= 0, ValueError, "LazyLinear: out_features must be non-negative, got ", options.out_features());
  weight = register_parameter("weight", empty({0}));
  bias = register_parameter("bias", options.bias() ? empty({0}) : Tensor());
  bind_tensor<&LazyLinearImpl::weight>("weight");
  bind_tensor<&LazyLinearImpl::bias>("bias");
}

void LazyLinearImpl::initialize_parameters(int64_t in_features) {
  DP_CHECK(!initialized_, ValueError, "LazyLinear: the parameters are already initialized (in_features=", in_features_, ")");
  DP_CHECK(in_features >= 0, ValueError, "LazyLinear: in_features must be non-negative, got ", in_features);
  NoGradGuard no_grad;
  weight.set_data(empty({options.out_features(), in_features}, options_of(weight)));
  if (bias.defined()) bias.set_data(empty({options.out_features()}, options_of(bias)));
  in_features_ = in_features;
  initialized_ = true;
  reset_parameters();
}

void LazyLinearImpl::reset_parameters() {
  if (!initialized_) return;
  // As LinearImpl::reset_parameters: kaiming_uniform_(a = sqrt(5)), bias U(-1/sqrt(in), 1/sqrt(in)).
  if (in_features_ > 0) {
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  } else {
    init::zeros_(weight);
  }
  if (bias.defined()) {
    double bound = in_features_ > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features_)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LazyLinearImpl::forward(const Tensor& input) {
  DP_CHECK(input.defined(), ValueError, "LazyLinear: the input is undefined");
  DP_CHECK(input.dim() >= 1, ShapeError, "LazyLinear: the input needs at least one dimension (its last is in_features), got a 0-d tensor");
  if (!initialized_) initialize_parameters(input.size(-1));
  DP_CHECK(input.size(-1) == in_features_, ShapeError, "LazyLinear: mat1 and mat2 shapes cannot be multiplied (input ", input.size_str(),
           ", weight [", options.out_features(), ", ", in_features_, "]): the last input dimension must be ", in_features_,
           " (set by the first forward)");
  return linear(input, weight, bias);
}

std::string LazyLinearImpl::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(options.out_features()) +
         ", bias=" + (options.bias() ? "True" : "False");
}

void LazyLinearImpl::pretty_print(std::ostream& os) const { os << (initialized_ ? "Linear" : "LazyLinear") << "(" << extra_repr() << ")"; }

}  // namespace dp::nn
