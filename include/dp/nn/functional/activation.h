#pragma once
// dp::nn::functional activations (torch::nn::functional's): relu, leaky_relu, gelu, silu, softmax,
// log_softmax, each taking libtorch's options struct.
//
//   namespace F = dp::nn::functional;
//   y = F::relu(x, F::ReLUFuncOptions(true));                     // in place
//   p = F::softmax(logits, F::SoftmaxFuncOptions(1));
#include <cstdint>
#include <optional>
#include <string>
#include "dp/core/tensor.h"

namespace dp::nn::functional {

struct ReLUFuncOptions {
  ReLUFuncOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT: ReLUFuncOptions(true) as in libtorch
  ReLUFuncOptions& inplace(bool v) {
    inplace_ = v;
    return *this;
  }
  bool inplace() const { return inplace_; }

 private:
  bool inplace_;
};

struct LeakyReLUFuncOptions {
  LeakyReLUFuncOptions& negative_slope(double v) {
    negative_slope_ = v;
    return *this;
  }
  LeakyReLUFuncOptions& inplace(bool v) {
    inplace_ = v;
    return *this;
  }
  double negative_slope() const { return negative_slope_; }
  bool inplace() const { return inplace_; }

 private:
  double negative_slope_ = 1e-2;
  bool inplace_ = false;
};

struct GELUFuncOptions {
  // "none" (exact, erf) or "tanh".
  GELUFuncOptions& approximate(std::string v) {
    approximate_ = std::move(v);
    return *this;
  }
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_ = "none";
};

// softmax / log_softmax over `dim`; with dtype set, the input is converted to it first (PyTorch's
// dtype argument: e.g. float16 logits summed in float32).
struct SoftmaxFuncOptions {
  SoftmaxFuncOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  SoftmaxFuncOptions& dim(int64_t v) {
    dim_ = v;
    return *this;
  }
  SoftmaxFuncOptions& dtype(std::optional<DType> v) {
    dtype_ = v;
    return *this;
  }
  int64_t dim() const { return dim_; }
  std::optional<DType> dtype() const { return dtype_; }

 private:
  int64_t dim_;
  std::optional<DType> dtype_;
};
using LogSoftmaxFuncOptions = SoftmaxFuncOptions;

// With inplace the input itself is overwritten and returned (its handle shares the result).
Tensor relu(Tensor input, const ReLUFuncOptions& options = {});
// x where x > 0, else negative_slope * x (NaN stays NaN); floating inputs. Written with dp ops
// (where / mul), so it is differentiable like them: the gradient at 0 is negative_slope, as PyTorch's.
Tensor leaky_relu(Tensor input, const LeakyReLUFuncOptions& options = {});
Tensor gelu(const Tensor& input, const GELUFuncOptions& options = {});
Tensor silu(const Tensor& input);
Tensor softmax(const Tensor& input, const SoftmaxFuncOptions& options);
Tensor log_softmax(const Tensor& input, const LogSoftmaxFuncOptions& options);

}  // namespace dp::nn::functional
