#pragma once
// Conv2d (torch.nn.Conv2d with padding_mode='zeros'), and ExpandingArray, the "one int or N ints"
// argument that the convolution and pooling options take (libtorch's ExpandingArray<N>).
//
//   dp::nn::Conv2d conv(dp::nn::Conv2dOptions(1, 32, 3).padding(1));
//   dp::nn::Conv2d conv2(dp::nn::Conv2dOptions(32, 64, {3, 5}).stride({2, 1}).bias(false));
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>
#include "dp/nn/module.h"

namespace dp::nn {

// N integers given as one value (repeated N times) or as N values. It remembers which, because
// PyTorch's pooling modules print what they were given: kernel_size=2 versus kernel_size=(2, 2).
template <size_t N>
class ExpandingArray {
 public:
  ExpandingArray(int64_t v) : scalar_(true) { values_.fill(v); }  // NOLINT: `.stride(2)` as in libtorch
  ExpandingArray(std::initializer_list<int64_t> l) : ExpandingArray(std::vector<int64_t>(l)) {}
  ExpandingArray(const std::vector<int64_t>& v) {  // NOLINT
    DP_CHECK(v.size() == N || v.size() == 1, ValueError, "expected a single integer or a list of ", N, " integers, but got ", v.size(), " values ",
             shape_str(v));
    scalar_ = v.size() == 1;
    for (size_t i = 0; i < N; ++i) values_[i] = v[v.size() == 1 ? 0 : i];
  }
  int64_t operator[](size_t i) const { return values_[i]; }
  const std::array<int64_t, N>& values() const { return values_; }
  // Views the N values (valid while this array lives), for the functional ops.
  operator IntArrayRef() const { return IntArrayRef(values_.data(), N); }  // NOLINT
  bool is_scalar() const { return scalar_; }
  bool all_equal(int64_t v) const {
    for (int64_t x : values_)
      if (x != v) return false;
    return true;
  }
  // Python's repr of a tuple of the values: "(3, 3)".
  std::string tuple_str() const {
    std::string s = "(";
    for (size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::to_string(values_[i]);
    return s + (N == 1 ? ",)" : ")");
  }
  // As given: "2" for a single value, else the tuple.
  std::string str() const { return scalar_ ? std::to_string(values_[0]) : tuple_str(); }

 private:
  std::array<int64_t, N> values_{};
  bool scalar_ = false;
};

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  Conv2dOptions& stride(ExpandingArray<2> v) {
    stride_ = v;
    return *this;
  }
  Conv2dOptions& padding(ExpandingArray<2> v) {
    padding_ = v;
    return *this;
  }
  Conv2dOptions& dilation(ExpandingArray<2> v) {
    dilation_ = v;
    return *this;
  }
  Conv2dOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  Conv2dOptions& bias(bool v) {
    bias_ = v;
    return *this;
  }
  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const ExpandingArray<2>& kernel_size() const { return kernel_size_; }
  const ExpandingArray<2>& stride() const { return stride_; }
  const ExpandingArray<2>& padding() const { return padding_; }
  const ExpandingArray<2>& dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  ExpandingArray<2> kernel_size_;
  ExpandingArray<2> stride_ = 1;
  ExpandingArray<2> padding_ = 0;
  ExpandingArray<2> dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
};

// y = conv2d(x, weight, bias); weight [out, in / groups, kH, kW], bias [out]. Input [N, C, H, W]
// or unbatched [C, H, W].
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  explicit Conv2dImpl(const Conv2dOptions& options);
  // PyTorch's: weight ~ kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
  // fan_in = in / groups * kH * kW; bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  Tensor forward(const Tensor& input) const;
  // "1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)": padding, dilation, groups and
  // bias=False only when they differ from the defaults, as PyTorch prints it.
  std::string extra_repr() const override;

  Conv2dOptions options;
  Tensor weight;
  Tensor bias;
};
using Conv2d = ModuleHolder<Conv2dImpl>;

}  // namespace dp::nn
