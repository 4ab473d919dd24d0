// Printing: Tensor::to_string() / operator<< must equal PyTorch's repr() character for character
// (golden strings written by tests/golden/gen_shape.py), plus the device suffix PyTorch prints for
// non-default devices.
#include <gtest/gtest.h>
#include <sstream>
#include "support/golden.h"

namespace dp {
namespace {

using test::json;
using test::tensor_from_json;

TEST(Print, MatchesPyTorchRepr) {
  int checked = 0;
  for (const json& c : test::golden_file("shape.json").at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (name.rfind("print_", 0) != 0) continue;
    SCOPED_TRACE(name);
    const bool leaf_grad = name == "print_requires_grad" || name.rfind("print_grad_fn_", 0) == 0;
    Tensor t = tensor_from_json(c.at("inputs")[0], leaf_grad);
    if (name == "print_grad_fn_transpose")
      t = t.transpose(0, 1);
    else if (name == "print_grad_fn_view")
      t = t.view({3, 2});
    else if (name == "print_grad_fn_select")
      t = t.select(0, 1);
    else if (name == "print_grad_fn_to_f64")
      t = t.to(kFloat64);
    const std::string expected = c.at("output").get<std::string>();
    EXPECT_EQ(t.to_string(), expected);
    std::ostringstream os;
    os << t;
    EXPECT_EQ(os.str(), expected);
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(Print, NonContiguousPrintsLogicalOrder) {
  Tensor t = tensor<float>({0.1f, 0.2f, 0.3f, 0.4f}, {2, 2});
  EXPECT_EQ(t.t().to_string(), "tensor([[0.1000, 0.3000],\n        [0.2000, 0.4000]])");
  EXPECT_EQ(t.select(1, 1).to_string(), "tensor([0.2000, 0.4000])");
  EXPECT_EQ(t.select(0, 1).select(0, 0).to_string(), "tensor(0.3000)");
  EXPECT_EQ(arange(6).view({2, 3}).slice(1, 0, std::nullopt, 2).to_string(), "tensor([[0, 2],\n        [3, 5]])");
}

TEST(Print, DeviceSuffixForNonHostDevices) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  EXPECT_EQ(tensor({1.0, 2.0}).to_string(), "tensor([1., 2.])");
  EXPECT_EQ(tensor({1.0, 2.0}, Device("cpu:1")).to_string(), "tensor([1., 2.], device='cpu:1')");
  EXPECT_EQ(tensor({1.0, 2.0}, Device("cpu:0")).to_string(), "tensor([1., 2.], device='cpu:0')");
  EXPECT_EQ(tensor<int32_t>({1, 2}, {2}, TensorOptions(kInt32).device(Device("cpu:1"))).to_string(),
            "tensor([1, 2], device='cpu:1', dtype=torch.int32)");
  EXPECT_EQ(zeros({0, 2}, TensorOptions(kFloat64).device(Device("cpu:1"))).to_string(),
            "tensor([], device='cpu:1', size=(0, 2), dtype=torch.float64)");
  Tensor g = ones({2}, TensorOptions().device(Device("cpu:1")).requires_grad());
  EXPECT_EQ(g.to_string(), "tensor([1., 1.], device='cpu:1', requires_grad=True)");
  EXPECT_EQ(g.view({2, 1}).to_string(), "tensor([[1.],\n        [1.]], device='cpu:1', grad_fn=<ViewBackward0>)");
  // A suffix that would pass column 80 goes on its own line, indented like the data.
  Tensor wide = tensor<double>({-1234.5678, 2345.125, -3456.25, 4567.5, -5678.75, 6789.0}, {6}, TensorOptions(kFloat64).device(Device("cpu:1")));
  EXPECT_EQ(wide.to_string(),
            "tensor([-1234.5678,  2345.1250, -3456.2500,  4567.5000, -5678.7500,  6789.0000],\n"
            "       device='cpu:1', dtype=torch.float64)");
}

TEST(Print, MiscShapes) {
  EXPECT_EQ(zeros({}).to_string(), "tensor(0.)");
  EXPECT_EQ(scalar_tensor(-2, kInt64).to_string(), "tensor(-2)");
  EXPECT_EQ(scalar_tensor(true, kBool).to_string(), "tensor(True)");
  EXPECT_EQ(zeros({1, 0, 2}).to_string(), "tensor([], size=(1, 0, 2))");
  EXPECT_EQ(ones({2, 1, 1}, kInt64).to_string(), "tensor([[[1]],\n\n        [[1]]])");
  EXPECT_EQ(full({2}, 1e-3, kFloat64).to_string(), "tensor([0.0010, 0.0010], dtype=torch.float64)");
  EXPECT_EQ(full({1}, 123456789.0, kFloat64).to_string(), "tensor([1.2346e+08], dtype=torch.float64)");
  EXPECT_EQ(Tensor().to_string(), "[ Tensor (undefined) ]");
}

}  // namespace
}  // namespace dp
