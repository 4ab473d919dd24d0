#include "dp/nn/modules/normalization.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include "dp/nn/init.h"
#include "dp/ops/factory.h"
#include "dp/ops/normalization.h"

namespace dp::nn {

namespace detail {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: "d.ddde+XX".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t epos = s.find('e');
  const int exp10 = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  // Python's repr: scientific when the decimal point position (exp10 + 1) is <= -4 or > 16.
  const int decpt = exp10 + 1;
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int a = std::abs(exp10);
    out += std::string("e") + (exp10 < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

}  // namespace detail

LayerNormImpl::LayerNormImpl(const LayerNormOptions& opts) : options(opts) {
  DP_CHECK(!options.normalized_shape().empty(), ValueError, "LayerNorm: normalized_shape must have at least one dimension");
  for (int64_t s : options.normalized_shape())
    DP_CHECK(s >= 0, ValueError, "LayerNorm: normalized_shape must be non-negative, got ", shape_str(options.normalized_shape()));
  if (options.elementwise_affine()) {
    weight = register_parameter("weight", dp::empty(options.normalized_shape()));
    bias = register_parameter("bias", dp::empty(options.normalized_shape()));
  } else {
    weight = register_parameter("weight", Tensor());
    bias = register_parameter("bias", Tensor());
  }
  bind_tensor<&LayerNormImpl::weight>("weight");
  bind_tensor<&LayerNormImpl::bias>("bias");
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) const { return layer_norm(input, options.normalized_shape(), weight, bias, options.eps()); }

std::string LayerNormImpl::extra_repr() const {
  // A Python tuple: "(10,)" or "(2, 3)".
  const auto& shape = options.normalized_shape();
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  t += shape.size() == 1 ? ",)" : ")";
  return t + ", eps=" + detail::python_float_repr(options.eps()) + ", elementwise_affine=" + (options.elementwise_affine() ? "True" : "False");
}

}  // namespace dp::nn
