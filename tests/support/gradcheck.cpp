#include "support/gradcheck.h"
#include <cmath>
#include <sstream>

namespace dp::test {

Tensor rand_leaf(IntArrayRef shape, double lo, double hi) {
  Tensor t = rand(shape, kFloat64) * (hi - lo) + lo;
  return t.detach().requires_grad_(true);
}

namespace {

// d f(inputs)[j] / d inputs[k][i] by central differences, perturbing a contiguous copy in place.
std::vector<std::vector<double>> numeric_jacobian(const TensorFn& f, const std::vector<Tensor>& inputs, size_t k, double eps,
                                                  int64_t out_numel) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) xs.push_back(t.detach().clone());
  Tensor x = xs[k];
  int64_t n = x.numel();
  std::vector<std::vector<double>> jac(n, std::vector<double>(out_numel));
  NoGradGuard no_grad;
  double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    double orig = p[i];
    p[i] = orig + eps;
    std::vector<double> plus = f(xs).to_vector<double>();
    p[i] = orig - eps;
    std::vector<double> minus = f(xs).to_vector<double>();
    p[i] = orig;
    for (int64_t j = 0; j < out_numel; ++j) jac[i][j] = (plus[j] - minus[j]) / (2 * eps);
  }
  return jac;
}

}  // namespace

::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::vector<Tensor> diff;
  std::vector<size_t> which;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) {
      if (inputs[k].dtype() != kFloat64) return ::testing::AssertionFailure() << "gradcheck: input " << k << " must be float64";
      diff.push_back(inputs[k]);
      which.push_back(k);
    }
  if (diff.empty()) return ::testing::AssertionFailure() << "gradcheck: no input requires grad";
  Tensor y = f(inputs);
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "gradcheck: output does not require grad";
  const int64_t m = y.numel();
  // Analytic Jacobian, one backward per output element.
  std::vector<std::vector<std::vector<double>>> analytic(diff.size());
  for (size_t d = 0; d < diff.size(); ++d) analytic[d].assign(diff[d].numel(), std::vector<double>(m, 0.0));
  for (int64_t j = 0; j < m; ++j) {
    Tensor onehot = zeros({m}, kFloat64);
    onehot.data_ptr<double>()[j] = 1.0;
    std::vector<Tensor> g = autograd::grad({y}, diff, {onehot.view(y.sizes())}, /*retain_graph=*/true,
                                           /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t d = 0; d < diff.size(); ++d) {
      if (!g[d].defined()) continue;
      std::vector<double> col = g[d].to_vector<double>();
      if ((int64_t)col.size() != diff[d].numel())
        return ::testing::AssertionFailure() << "gradcheck: gradient for input " << which[d] << " has " << col.size()
                                             << " elements, expected " << diff[d].numel();
      for (int64_t i = 0; i < diff[d].numel(); ++i) analytic[d][i][j] = col[i];
    }
  }
  for (size_t d = 0; d < diff.size(); ++d) {
    auto numeric = numeric_jacobian(f, inputs, which[d], opts.eps, m);
    for (int64_t i = 0; i < diff[d].numel(); ++i)
      for (int64_t j = 0; j < m; ++j) {
        double a = analytic[d][i][j], n = numeric[i][j];
        if (!(std::fabs(a - n) <= opts.atol + opts.rtol * std::fabs(n)))
          return ::testing::AssertionFailure() << "gradcheck: d out[" << j << "] / d input" << which[d] << "[" << i << "]: autograd " << a
                                               << " vs finite difference " << n;
      }
  }
  if (opts.check_grad_grad) {
    // Differentiate (grad . v) with a fixed random v through the backward graph.
    Tensor v = rand(y.sizes(), kFloat64);
    TensorFn first = [&](const std::vector<Tensor>& given) {
      // The finite-difference pass calls this under no-grad with plain copies: differentiate
      // those copies (the numeric side only needs the value of the first derivative).
      AutoGradMode grad_on(true);
      std::vector<Tensor> xs = given;
      std::vector<Tensor> d2;
      for (size_t w : which) {
        if (!xs[w].requires_grad()) xs[w] = xs[w].detach().requires_grad_(true);
        d2.push_back(xs[w]);
      }
      Tensor out = f(xs);
      std::vector<Tensor> g = autograd::grad({out}, d2, {v}, true, true, true);
      Tensor total = zeros({}, kFloat64);
      for (const Tensor& gi : g)
        if (gi.defined()) total = total + (gi * gi).sum();
      return total;
    };
    GradcheckOptions o2 = opts;
    o2.check_grad_grad = false;
    auto r = gradcheck(first, inputs, o2);
    if (!r) return ::testing::AssertionFailure() << "double backward: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs) {
  const size_t n = inputs.size();
  Tensor v = rand_leaf(f(inputs).sizes());
  std::vector<Tensor> all = inputs;
  all.push_back(v);
  TensorFn first = [f, n](const std::vector<Tensor>& xs) {
    AutoGradMode on(true);
    std::vector<Tensor> leaves;
    for (size_t k = 0; k < n; ++k) leaves.push_back(xs[k].requires_grad() ? xs[k] : xs[k].detach().requires_grad_(true));
    Tensor y = f(leaves);
    std::vector<Tensor> g = autograd::grad({y}, leaves, {xs[n]}, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t k = 0; k < n; ++k) flat.push_back((g[k].defined() ? g[k] : zeros_like(leaves[k])).reshape({-1}));
    return cat(flat, 0);
  };
  return gradcheck(first, all);
}

}  // namespace dp::test
