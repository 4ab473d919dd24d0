#pragma once
// Checking gradients against finite differences (torch.autograd.gradcheck / gradgradcheck). This
// header is not part of dp/dp.h: include it where you check gradients.
//
//   dp::Tensor x = dp::rand({3, 4}, dp::kFloat64).requires_grad_(true);
//   dp::Tensor w = dp::rand({4, 2}, dp::kFloat64).requires_grad_(true);
//   auto f = [](const std::vector<dp::Tensor>& in) { return my_op(in[0], in[1]); };
//   dp::autograd::gradcheck(f, {x, w});       // true, or throws GradcheckError saying what is wrong
//   dp::autograd::gradgradcheck(f, {x, w});   // the same for the backward's own backward
//
// gradcheck builds the Jacobian of the function's outputs with respect to each input that requires
// grad in two ways: by autograd (one backward per output element) and by central differences
// (f(x + eps) - f(x - eps)) / 2 eps, perturbing one input element at a time. Element (i, j) passes
// when |analytical - numerical| <= atol + rtol * |numerical|, PyTorch's rule and defaults. So keep
// the inputs small (tens of elements) and in float64: in float32 the differences are mostly
// rounding. Inputs may be on any device; they are perturbed through a host copy.
//
// A failure names the output, the input (its index in `inputs`) and the worst element, the one
// furthest beyond the tolerance, with both values, e.g.
//   gradcheck: Jacobian mismatch for output 0 with respect to input 1 (3 of 12 elements): worst
//   d output0[2] / d input1[5]: analytical 1.5 numerical 0.75 (|difference| 0.75 > tolerance 0.00076)
// With raise_exception (the default, as PyTorch) it is thrown as a GradcheckError; without,
// gradcheck returns false and the message is written to GradcheckOptions::message when given.
// Errors the function or its backward raise themselves (an AutogradError for a gradient of the
// wrong device, a ShapeError, ...) propagate unchanged. Bad arguments (no input requiring grad, an
// input that is not floating point) are ValueErrors whatever raise_exception says.
#include <functional>
#include <string>
#include <vector>
#include "dp/core/errors.h"
#include "dp/core/tensor.h"

namespace dp::autograd {

// A gradient that does not match its finite-difference estimate (what gradcheck and
// gradgradcheck throw with raise_exception).
class GradcheckError : public AutogradError {
  using AutogradError::AutogradError;
};

// The function under test: inputs in, one output (a tensor of any shape) or several.
using GradcheckFunction = std::function<Tensor(const std::vector<Tensor>&)>;
using GradcheckMultiFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// torch.autograd.gradcheck's keyword arguments that apply here, with its defaults. Plain fields,
// so designated initializers work: gradcheck(f, inputs, {.atol = 1e-7, .raise_exception = false}).
struct GradcheckOptions {
  double eps = 1e-6;   // the finite-difference step
  double atol = 1e-5;  // absolute tolerance
  double rtol = 1e-3;  // relative tolerance (times |numerical|)
  // true: throw GradcheckError on a mismatch; false: return false.
  bool raise_exception = true;
  // When not null, receives the failure's message (emptied on success).
  std::string* message = nullptr;
};

// Checks the gradients of `fn` with respect to the inputs that require grad (other inputs are
// passed through unchanged). Outputs that are not floating point are ignored; a floating-point
// output that does not require grad must have a zero numerical Jacobian. Returns true when every
// element matches (see above for a mismatch).
bool gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
bool gradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

// Second derivatives (torch.autograd.gradgradcheck): gradcheck of
//   (inputs..., v...) -> d(sum_k outputs[k] . v[k]) / d(inputs that require grad)
// computed with create_graph, with respect to the inputs and to the incoming gradients v, so every
// backward formula's own backward is checked (for functions linear in an input, the Jacobian with
// respect to v is the non-trivial part). `grad_outputs` gives v, one per output that requires
// grad (those of them that require grad are checked as inputs too); empty: random normal ones
// like the outputs, requiring grad (PyTorch's default). A failure's "input" index counts the
// inputs first, then the grad_outputs.
bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
bool gradgradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                   const GradcheckOptions& options = {});
bool gradgradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});
bool gradgradcheck(const GradcheckMultiFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs,
                   const GradcheckOptions& options = {});

}  // namespace dp::autograd
