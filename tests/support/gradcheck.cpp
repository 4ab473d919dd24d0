#include "support/gradcheck.h"
#include <string>

namespace dp::test {

Tensor rand_leaf(IntArrayRef shape, double lo, double hi) {
  Tensor t = rand(shape, kFloat64) * (hi - lo) + lo;
  return t.detach().requires_grad_(true);
}

namespace {
autograd::GradcheckOptions library_options(const GradcheckOptions& o, std::string* message) {
  return {.eps = o.eps, .atol = o.atol, .rtol = o.rtol, .raise_exception = false, .message = message};
}
}  // namespace

::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::string message;
  try {
    if (!autograd::gradcheck(f, inputs, library_options(opts, &message))) return ::testing::AssertionFailure() << message;
    if (!opts.check_grad_grad) return ::testing::AssertionSuccess();
    std::vector<size_t> which;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].defined() && inputs[k].requires_grad()) which.push_back(k);
    const Tensor v = rand(f(inputs).sizes(), kFloat64);
    TensorFn first = [&](const std::vector<Tensor>& given) {
      // The finite-difference pass calls this under no-grad with plain copies: differentiate
      // those copies (the numeric side only needs the value of the first derivative).
      AutoGradMode grad_on(true);
      std::vector<Tensor> xs = given;
      std::vector<Tensor> wrt;
      for (size_t w : which) {
        if (!xs[w].requires_grad()) xs[w] = xs[w].detach().requires_grad_(true);
        wrt.push_back(xs[w]);
      }
      std::vector<Tensor> g = autograd::grad({f(xs)}, wrt, {v}, true, true, true);
      Tensor total = zeros({}, kFloat64);
      for (const Tensor& gi : g)
        if (gi.defined()) total = total + (gi * gi).sum();
      return total;
    };
    if (!autograd::gradcheck(first, inputs, library_options(opts, &message))) return ::testing::AssertionFailure() << "double backward: " << message;
  } catch (const ValueError& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs) {
  Tensor v = rand_leaf(f(inputs).sizes());
  std::string message;
  try {
    if (autograd::gradgradcheck(f, inputs, {v}, library_options({}, &message))) return ::testing::AssertionSuccess();
  } catch (const ValueError& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  return ::testing::AssertionFailure() << message;
}

}  // namespace dp::test
