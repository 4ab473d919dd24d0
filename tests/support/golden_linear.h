#pragma once
// Golden files that store plain nested lists (not tensor_from_json's {dtype, shape, data}): a 2-D
// list as a tensor, and a Linear's weight "W" and bias "B" loaded from one.
#include <vector>

#include "dp/autograd/grad_mode.h"
#include "dp/nn/nn.h"
#include "support/golden.h"

namespace dp::test {

inline Tensor matrix(const json& rows, DType dtype = kFloat32) {
  std::vector<double> flat;
  for (const auto& r : rows)
    for (const auto& v : r) flat.push_back(v.get<double>());
  return tensor(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, TensorOptions().dtype(dtype));
}

inline void load_linear(nn::Linear& fc, const json& golden) {
  NoGradGuard no_grad;
  fc->weight.copy_(matrix(golden["W"]));
  std::vector<double> b;
  for (const auto& v : golden["B"]) b.push_back(v.get<double>());
  fc->bias.copy_(tensor(b, TensorOptions().dtype(kFloat32)));
}

}  // namespace dp::test
