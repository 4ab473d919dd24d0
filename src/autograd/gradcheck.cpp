// gradcheck / gradgradcheck (torch.autograd.gradcheck's slow mode): the full Jacobian by autograd
// and by central differences, compared element by element.
#include "dp/autograd/gradcheck.h"
#include <cmath>
#include <limits>
#include <sstream>
#include "dp/autograd/engine.h"
#include "dp/autograd/grad_mode.h"
#include "dp/core/warning.h"
#include "dp/ops/factory.h"

namespace dp::autograd {
namespace {

// One output's values as float64 on the host (the numerical side).
std::vector<double> host_values(const Tensor& t) { return t.detach().to_vector<double>(); }

bool differentiable(const Tensor& out) { return out.defined() && out.is_floating_point(); }

// The finite-difference and autograd Jacobians of one (output, input) pair: [input element][output element].
using Jacobian = std::vector<std::vector<double>>;

// Compares and describes the first (output, input) pair that does not match; empty when all do.
std::string compare(const char* what, size_t out_index, size_t in_index, const Jacobian& analytical, const Jacobian& numerical,
                    const GradcheckOptions& o) {
  int64_t bad = 0, total = 0;
  double worst_excess = -1;
  size_t wi = 0, wj = 0;
  for (size_t i = 0; i < numerical.size(); ++i)
    for (size_t j = 0; j < numerical[i].size(); ++j) {
      ++total;
      const double a = analytical[i][j], n = numerical[i][j];
      const double tol = o.atol + o.rtol * std::fabs(n);
      const double diff = std::fabs(a - n);
      if (diff <= tol) continue;  // false for NaN: a NaN on either side is a mismatch
      ++bad;
      const double excess = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff - tol;
      if (excess > worst_excess) {
        worst_excess = excess;
        wi = i;
        wj = j;
      }
    }
  if (bad == 0) return {};
  const double a = analytical[wi][wj], n = numerical[wi][wj];
  std::ostringstream os;
  os.precision(8);
  os << what << ": Jacobian mismatch for output " << out_index << " with respect to input " << in_index << " (" << bad << " of " << total
     << " elements): worst d output" << out_index << "[" << wj << "] / d input" << in_index << "[" << wi << "]: analytical " << a << " numerical "
     << n << " (|difference| " << std::fabs(a - n) << " > tolerance " << o.atol + o.rtol * std::fabs(n) << " = atol " << o.atol << " + rtol "
     << o.rtol << " * |numerical|)";
  return os.str();
}

bool fail(const std::string& message, const GradcheckOptions& o) {
  if (o.message) *o.message = message;
  if (o.raise_exception) throw GradcheckError(message);
  return false;
}

bool check(const char* what, const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& o) {
  DP_CHECK(fn != nullptr, ValueError, what, ": the function is empty");
  DP_CHECK(o.eps > 0 && std::isfinite(o.eps), ValueError, what, ": eps must be positive and finite, got ", o.eps);
  DP_CHECK(o.atol >= 0 && o.rtol >= 0, ValueError, what, ": atol and rtol must be >= 0, got atol ", o.atol, ", rtol ", o.rtol);
  if (o.message) o.message->clear();
  std::vector<size_t> which;  // inputs that require grad
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined() || !inputs[k].requires_grad()) continue;
    DP_CHECK(inputs[k].is_floating_point(), ValueError, what, ": input ", k, " requires grad but is ", dtype_name(inputs[k].dtype()));
    if (inputs[k].dtype() != kFloat64)
      warn(::dp::detail::str(what, ": input ", k, " requires gradient and is not a double precision floating point (it is ",
                             dtype_name(inputs[k].dtype()), "): the check is likely to fail"));
    which.push_back(k);
  }
  DP_CHECK(!which.empty(), ValueError, what, ": no input requires grad (at least one input tensor must require gradient)");

  std::vector<Tensor> outputs;
  {
    AutoGradMode grad_on(true);
    outputs = fn(inputs);
  }
  std::vector<Tensor> diff;
  for (size_t k : which) diff.push_back(inputs[k]);

  // analytical[o][d][i][j]: d outputs[o][j] / d inputs[which[d]][i], one backward per output element.
  std::vector<std::vector<Jacobian>> analytical(outputs.size());
  std::vector<int64_t> out_numel(outputs.size(), 0);
  for (size_t oi = 0; oi < outputs.size(); ++oi) {
    const Tensor& y = outputs[oi];
    if (!differentiable(y)) continue;
    const int64_t m = y.numel();
    out_numel[oi] = m;
    analytical[oi].resize(diff.size());
    for (size_t d = 0; d < diff.size(); ++d) analytical[oi][d].assign(diff[d].numel(), std::vector<double>(m, 0.0));
    if (!y.requires_grad()) continue;  // a constant output: its Jacobian is zero
    for (int64_t j = 0; j < m; ++j) {
      Tensor onehot = zeros({m}, kFloat64);
      onehot.data_ptr<double>()[j] = 1.0;
      Tensor seed = onehot.to(y.device(), y.dtype()).view(y.sizes());
      std::vector<Tensor> g = grad({y}, diff, {seed}, /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t d = 0; d < diff.size(); ++d) {
        if (!g[d].defined()) continue;
        if (g[d].sizes() != diff[d].sizes())
          return fail(::dp::detail::str(what, ": the gradient of output ", oi, " with respect to input ", which[d], " has shape ", g[d].size_str(),
                                        " but the input has shape ", diff[d].size_str()),
                      o);
        std::vector<double> col = host_values(g[d]);
        for (size_t i = 0; i < col.size(); ++i) analytical[oi][d][i][j] = col[i];
      }
    }
  }

  // Numerical: perturb one element of one input at a time (a host float64 copy, converted back to
  // the input's dtype and device for each evaluation).
  NoGradGuard no_grad;
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) xs.push_back(t.defined() ? t.detach() : t);
  for (size_t d = 0; d < diff.size(); ++d) {
    const size_t k = which[d];
    const Tensor& original = inputs[k];
    Tensor host = original.detach().to(Device::cpu(), kFloat64, /*non_blocking=*/false, /*copy=*/true).contiguous();
    double* p = host.data_ptr<double>();
    const int64_t n = host.numel();
    std::vector<Jacobian> numerical(outputs.size());
    for (size_t oi = 0; oi < outputs.size(); ++oi)
      if (differentiable(outputs[oi])) numerical[oi].assign(n, std::vector<double>(out_numel[oi], 0.0));
    auto evaluate = [&]() {
      xs[k] = host.to(original.device(), original.dtype(), false, /*copy=*/true).view(original.sizes());
      std::vector<Tensor> out = fn(xs);
      DP_CHECK(out.size() == outputs.size(), ValueError, what, ": the function returned ", outputs.size(), " outputs, then ", out.size());
      return out;
    };
    for (int64_t i = 0; i < n; ++i) {
      const double orig = p[i];
      p[i] = orig + o.eps;
      std::vector<Tensor> plus = evaluate();
      p[i] = orig - o.eps;
      std::vector<Tensor> minus = evaluate();
      p[i] = orig;
      for (size_t oi = 0; oi < outputs.size(); ++oi) {
        if (!differentiable(outputs[oi])) continue;
        DP_CHECK(plus[oi].numel() == out_numel[oi] && minus[oi].numel() == out_numel[oi], ValueError, what, ": output ", oi,
                 " changed its number of elements between evaluations");
        std::vector<double> a = host_values(plus[oi]), b = host_values(minus[oi]);
        for (int64_t j = 0; j < out_numel[oi]; ++j) numerical[oi][i][j] = (a[j] - b[j]) / (2 * o.eps);
      }
    }
    xs[k] = original.detach();
    for (size_t oi = 0; oi < outputs.size(); ++oi) {
      if (!differentiable(outputs[oi])) continue;
      std::string m = compare(what, oi, k, analytical[oi][d], numerical[oi], o);
      if (!m.empty()) return fail(m, o);
    }
  }
  return true;
}

GradcheckMultiFunction as_multi(const GradcheckFunction& fn, const char* what) {
  DP_CHECK(fn != nullptr, ValueError, what, ": the function is empty");
  return [fn](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; };
}

bool second_order(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                  const GradcheckOptions& o) {
  DP_CHECK(fn != nullptr, ValueError, "gradgradcheck: the function is empty");
  std::vector<size_t> which;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].requires_grad()) which.push_back(k);
  DP_CHECK(!which.empty(), ValueError, "gradgradcheck: no input requires grad (at least one input tensor must require gradient)");
  // The outputs gradient flows from: floating point and requiring grad.
  auto differentiable_outputs = [fn](const std::vector<Tensor>& xs) {
    std::vector<Tensor> out;
    for (const Tensor& y : fn(xs))
      if (y.defined() && y.is_floating_point() && y.requires_grad()) out.push_back(y);
    return out;
  };
  std::vector<Tensor> v = grad_outputs;
  if (v.empty()) {
    AutoGradMode grad_on(true);
    for (const Tensor& y : differentiable_outputs(inputs))
      v.push_back(randn(y.sizes(), TensorOptions().dtype(y.dtype()).device(y.device())).requires_grad_(true));
    DP_CHECK(!v.empty(), ValueError, "gradgradcheck: no output of the function requires grad");
  }
  const size_t n = inputs.size();
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), v.begin(), v.end());
  const size_t nv = v.size();
  GradcheckMultiFunction first = [differentiable_outputs, which, n, nv](const std::vector<Tensor>& xs) {
    // The numerical pass calls this under no-grad with plain copies: make leaves of them again.
    AutoGradMode grad_on(true);
    std::vector<Tensor> args(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<Tensor> wrt;
    for (size_t k : which) {
      if (!args[k].requires_grad()) args[k] = args[k].detach().requires_grad_(true);
      wrt.push_back(args[k]);
    }
    std::vector<Tensor> vs;
    for (size_t i = n; i < xs.size(); ++i) vs.push_back(xs[i].requires_grad() ? xs[i] : xs[i].detach().requires_grad_(true));
    std::vector<Tensor> outs = differentiable_outputs(args);
    DP_CHECK(outs.size() == nv, ValueError, "gradgradcheck: ", nv, " grad_outputs given for ", outs.size(),
             " differentiable outputs of the function");
    std::vector<Tensor> g = grad(outs, wrt, vs, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t d = 0; d < g.size(); ++d)
      if (!g[d].defined()) g[d] = zeros_like(wrt[d]);
    return g;
  };
  return check("gradgradcheck", first, all, o);
}

}  // namespace

bool gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  return check("gradcheck", as_multi(fn, "gradcheck"), inputs, options);
}
bool gradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  return check("gradcheck", fn, inputs, options);
}

bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  return second_order(as_multi(fn, "gradgradcheck"), inputs, {}, options);
}
bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                   const GradcheckOptions& options) {
  return second_order(as_multi(fn, "gradgradcheck"), inputs, grad_outputs, options);
}
bool gradgradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  return second_order(fn, inputs, {}, options);
}
bool gradgradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                   const GradcheckOptions& options) {
  return second_order(fn, inputs, grad_outputs, options);
}

}  // namespace dp::autograd
