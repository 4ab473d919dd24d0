#include "dp/nn/modules/container.h"

namespace dp::nn {

Tensor SequentialImpl::forward(const Tensor& input) const {
  Tensor x = input;
  const auto& children = own_children();
  for (size_t i = 0; i < calls_.size(); ++i) x = calls_[i](*children[i].value(), x);
  return x;
}

Tensor SequentialImpl::forward_range(const Tensor& input, size_t begin, size_t end) const {
  DP_CHECK(begin <= end && end <= size(), IndexError, "Sequential::forward_range: [", begin, ", ", end, ") is not a range of its ", size(),
           " children");
  Tensor x = input;
  const auto& children = own_children();
  for (size_t i = begin; i < end; ++i) x = calls_[i](*children[i].value(), x);
  return x;
}

ModulePtr SequentialImpl::operator[](size_t index) const {
  DP_CHECK(index < size(), IndexError, "Sequential: index ", index, " is out of range (size ", size(), ")");
  return own_children()[index].value();
}

ModulePtr ModuleListImpl::operator[](size_t index) const {
  DP_CHECK(index < size(), IndexError, "ModuleList: index ", index, " is out of range (size ", size(), ")");
  return own_children()[index].value();
}

std::vector<ModulePtr> ModuleListImpl::items() const {
  std::vector<ModulePtr> out;
  for (const auto& c : own_children()) out.push_back(c.value());
  return out;
}

}  // namespace dp::nn
