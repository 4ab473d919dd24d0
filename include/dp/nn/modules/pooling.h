#pragma once
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d (no parameters). Options take one int or two
// (ExpandingArray, from conv.h) and the modules print exactly what PyTorch's print, including
// whether a size was given as an int or a tuple: MaxPool2d(kernel_size=2, stride=2, padding=0,
// dilation=1, ceil_mode=False).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include "dp/nn/module.h"
#include "dp/nn/modules/conv.h"

namespace dp::nn {

struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  MaxPool2dOptions& stride(ExpandingArray<2> v) {
    stride_ = v;
    return *this;
  }
  MaxPool2dOptions& padding(ExpandingArray<2> v) {
    padding_ = v;
    return *this;
  }
  MaxPool2dOptions& dilation(ExpandingArray<2> v) {
    dilation_ = v;
    return *this;
  }
  MaxPool2dOptions& ceil_mode(bool v) {
    ceil_mode_ = v;
    return *this;
  }
  const ExpandingArray<2>& kernel_size() const { return kernel_size_; }
  // Defaults to kernel_size.
  const ExpandingArray<2>& stride() const { return stride_ ? *stride_ : kernel_size_; }
  const ExpandingArray<2>& padding() const { return padding_; }
  const ExpandingArray<2>& dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  ExpandingArray<2> kernel_size_;
  std::optional<ExpandingArray<2>> stride_;
  ExpandingArray<2> padding_ = 0;
  ExpandingArray<2> dilation_ = 1;
  bool ceil_mode_ = false;
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size) : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& input) const;
  // The output and the int64 indices of the maxima (see dp::max_pool2d_with_indices).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& input) const;
  std::string extra_repr() const override;

  MaxPool2dOptions options;
};
using MaxPool2d = ModuleHolder<MaxPool2dImpl>;

struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  AvgPool2dOptions& stride(ExpandingArray<2> v) {
    stride_ = v;
    return *this;
  }
  AvgPool2dOptions& padding(ExpandingArray<2> v) {
    padding_ = v;
    return *this;
  }
  AvgPool2dOptions& ceil_mode(bool v) {
    ceil_mode_ = v;
    return *this;
  }
  AvgPool2dOptions& count_include_pad(bool v) {
    count_include_pad_ = v;
    return *this;
  }
  AvgPool2dOptions& divisor_override(std::optional<int64_t> v) {
    divisor_override_ = v;
    return *this;
  }
  const ExpandingArray<2>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<2>& stride() const { return stride_ ? *stride_ : kernel_size_; }
  const ExpandingArray<2>& padding() const { return padding_; }
  bool ceil_mode() const { return ceil_mode_; }
  bool count_include_pad() const { return count_include_pad_; }
  std::optional<int64_t> divisor_override() const { return divisor_override_; }

 private:
  ExpandingArray<2> kernel_size_;
  std::optional<ExpandingArray<2>> stride_;
  ExpandingArray<2> padding_ = 0;
  bool ceil_mode_ = false;
  bool count_include_pad_ = true;
  std::optional<int64_t> divisor_override_;
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size) : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override;

  AvgPool2dOptions options;
};
using AvgPool2d = ModuleHolder<AvgPool2dImpl>;

struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size) : output_size_(output_size) {}  // NOLINT
  const ExpandingArray<2>& output_size() const { return output_size_; }

 private:
  ExpandingArray<2> output_size_;
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size) : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options) : options(options) {}
  Tensor forward(const Tensor& input) const;
  std::string extra_repr() const override { return "output_size=" + options.output_size().str(); }

  AdaptiveAvgPool2dOptions options;
};
using AdaptiveAvgPool2d = ModuleHolder<AdaptiveAvgPool2dImpl>;

}  // namespace dp::nn
