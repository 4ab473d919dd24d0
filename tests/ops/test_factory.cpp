// Factories: values and dtype inference against PyTorch (arange, linspace, eye, full), options,
// requires_grad, host data, and errors.
#include <gtest/gtest.h>
#include "support/golden.h"

namespace dp {
namespace {

using test::json;

DType dtype_from(const json& j) {
  for (DType d : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (j.get<std::string>() == dtype_name(d)) return d;
  throw std::runtime_error("unknown dtype");
}

Scalar scalar_from(const json& j) {
  if (j.is_number_integer()) return Scalar(j.get<int64_t>());
  return Scalar(j.get<double>());
}

TEST(FactoryGolden, ArangeLinspaceEyeFull) {
  int checked = 0;
  for (const json& c : test::golden_file("shape.json").at("cases")) {
    if (!c.contains("args") || !c.at("args").contains("op")) continue;
    const std::string op = c.at("args").at("op").get<std::string>();
    const json& a = c.at("args");
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    Tensor out;
    if (op == "arange") {
      const json& p = a.at("params");
      std::optional<TensorOptions> opts;
      if (!a.at("dtype").is_null()) opts = TensorOptions(dtype_from(a.at("dtype")));
      if (p.size() == 1)
        out = arange(scalar_from(p[0]), opts);
      else if (p.size() == 2)
        out = arange(scalar_from(p[0]), scalar_from(p[1]), 1, opts);
      else
        out = arange(scalar_from(p[0]), scalar_from(p[1]), scalar_from(p[2]), opts);
    } else if (op == "linspace") {
      const json& p = a.at("params");
      out = linspace(p[0].get<double>(), p[1].get<double>(), p[2].get<int64_t>(), dtype_from(a.at("dtype")));
    } else if (op == "eye") {
      out = eye(a.at("params")[0].get<int64_t>(), dtype_from(a.at("dtype")));
    } else if (op == "full") {
      out = full({2, 2}, scalar_from(a.at("params")[0]), dtype_from(a.at("dtype")));
    } else {
      continue;
    }
    ++checked;
    EXPECT_EQ(dtype_name(out.dtype()), c.at("output").at("dtype").get<std::string>());
    // PyTorch's vectorised float loops may differ from the scalar formula in the last bit.
    EXPECT_TRUE(test::all_close(out, c.at("output"), 1e-6, 1e-7));
  }
  EXPECT_GE(checked, 20);
}

TEST(Factory, ArangeDtypeInferenceAndErrors) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(5.0).dtype(), kFloat32);
  EXPECT_EQ(arange(0, 5, 1).dtype(), kInt64);
  EXPECT_EQ(arange(0, 5, 0.5).dtype(), kFloat32);
  EXPECT_EQ(arange(0, 5, 0.5).numel(), 10);
  EXPECT_EQ(arange(5, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(arange(-3, 3, 2).to_vector<int64_t>(), (std::vector<int64_t>{-3, -1, 1}));
  EXPECT_EQ(arange(3, -3, -2).to_vector<int64_t>(), (std::vector<int64_t>{3, 1, -1}));
  EXPECT_EQ(arange(0, 1, 0.3).numel(), 4);  // ceil(1 / 0.3)
  EXPECT_THROW(arange(0, 5, 0), ValueError);
  EXPECT_THROW(arange(0, 5, -1), ValueError);
  EXPECT_THROW(arange(5, 0, 1), ValueError);
  EXPECT_THROW(arange(0, 5, 0.5, kInt64), ValueError);  // step truncates to 0 in integers
  EXPECT_THROW(arange(0.0, INFINITY, 1.0), ValueError);
  EXPECT_THROW(arange(3, kBool), DTypeError);
}

TEST(Factory, FillsAndOptions) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.device(), Device::cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({4}, kInt32).to_vector<int32_t>(), std::vector<int32_t>(4, 1));
  EXPECT_EQ(ones({2}, kBool).to_vector<bool>().size(), 2u);
  EXPECT_EQ(full({3}, -2.5, kFloat64).to_vector<double>(), std::vector<double>(3, -2.5));
  EXPECT_EQ(full({2}, 7, kUInt8).to_vector<uint8_t>(), std::vector<uint8_t>(2, 7));
  EXPECT_EQ(full({2}, true, kFloat32).to_vector<float>(), std::vector<float>(2, 1.0f));
  EXPECT_EQ(full({2}, 0.1, kFloat16).to_vector<Half>()[0].x, Half(0.1f).x);
  EXPECT_EQ(empty({3, 0}).numel(), 0);
  EXPECT_EQ(zeros({}).dim(), 0);
  EXPECT_EQ(zeros({}).numel(), 1);
  Tensor s = scalar_tensor(3.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_EQ(s.item<double>(), 3.5);
  EXPECT_EQ(scalar_tensor(4, kInt64).item<int64_t>(), 4);
  Tensor base = arange(6, kFloat64).view({2, 3}).t();
  for (const Tensor& like : {empty_like(base), zeros_like(base), ones_like(base), full_like(base, 9)}) {
    EXPECT_EQ(like.sizes(), (Shape{3, 2}));
    EXPECT_EQ(like.dtype(), kFloat64);
    EXPECT_NE(like.storage().get(), base.storage().get());
  }
  EXPECT_EQ(full_like(base, 9).to_vector<double>(), std::vector<double>(6, 9.0));
  EXPECT_EQ(ones_like(base).to_vector<double>(), std::vector<double>(6, 1.0));
  Tensor e = eye(3, kInt64);
  EXPECT_EQ(e.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(eye(0).sizes(), (Shape{0, 0}));
}

TEST(Factory, RequiresGradOption) {
  Tensor w = zeros({2, 2}, TensorOptions().requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(w.grad_fn());
  EXPECT_TRUE(ones({2}, TensorOptions(kFloat64).requires_grad()).requires_grad());
  EXPECT_TRUE(rand({2}, TensorOptions().requires_grad()).requires_grad());
  EXPECT_TRUE(randn({2}, TensorOptions().requires_grad()).is_leaf());
  EXPECT_TRUE(eye(2, TensorOptions().requires_grad()).requires_grad());
  EXPECT_TRUE(arange(0.0, 1.0, 0.5, TensorOptions().requires_grad()).requires_grad());
  EXPECT_TRUE(tensor({1.0, 2.0}, TensorOptions().requires_grad()).requires_grad());
  EXPECT_FALSE(zeros({2}).requires_grad());
  EXPECT_THROW(zeros({2}, TensorOptions(kInt64).requires_grad()), AutogradError);  // only floating tensors
}

TEST(Factory, FromHostData) {
  Tensor f = tensor<float>({1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, {2, 3});
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(f.sizes(), (Shape{2, 3}));
  EXPECT_EQ(f.select(1, 2).to_vector<float>(), (std::vector<float>{3.5f, 6.5f}));
  EXPECT_EQ(tensor<double>({1, 2}).dtype(), kFloat64);
  EXPECT_EQ(tensor<int64_t>({1, 2}).dtype(), kInt64);
  EXPECT_EQ(tensor<int32_t>({1, 2}).dtype(), kInt32);
  EXPECT_EQ(tensor<uint8_t>({1, 2}).dtype(), kUInt8);
  Tensor b = tensor<bool>({true, false, true});
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(tensor<Half>({Half(0.5f), Half(2.0f)}).dtype(), kFloat16);
  EXPECT_EQ(tensor<BFloat16>({BFloat16(0.5f)}).to_vector<float>(), (std::vector<float>{0.5f}));
  // opts converts.
  Tensor c = tensor<int64_t>({1, 2, 3}, {3}, kFloat64);
  EXPECT_EQ(c.dtype(), kFloat64);
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  Tensor il = tensor({0.5, 1.5});
  EXPECT_EQ(il.dtype(), kFloat32);
  EXPECT_EQ(il.sizes(), (Shape{2}));
  EXPECT_EQ(tensor({0.5, 1.5}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(tensor<float>({}, {0, 4}).sizes(), (Shape{0, 4}));
  EXPECT_EQ(tensor<float>({2.0f}, Shape{}).dim(), 0);
  try {
    tensor<float>({1, 2, 3, 4, 5}, {2, 3});
    FAIL();
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("5 elements"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 6"), std::string::npos) << msg;
  }
  const int32_t raw[] = {4, 5, 6, 7};
  Tensor r = from_blob_copy(raw, {2, 2}, kInt32);
  EXPECT_EQ(r.to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_NE(r.data_ptr(), static_cast<const void*>(raw));
}

TEST(Factory, NegativeSizesAndBadArguments) {
  EXPECT_THROW(zeros({2, -1}), ShapeError);
  EXPECT_THROW(empty({-3}), ShapeError);
  EXPECT_THROW(ones({-1}), ShapeError);
  EXPECT_THROW(full({-1}, 2), ShapeError);
  EXPECT_THROW(rand({-2}), ShapeError);
  EXPECT_THROW(randn({2, -2}), ShapeError);
  EXPECT_THROW(randint(0, 3, {-1}), ShapeError);
  EXPECT_THROW(tensor<float>({}, {-1}), ShapeError);
  EXPECT_THROW(from_blob_copy(nullptr, {-1}, kFloat32), ShapeError);
  EXPECT_THROW(linspace(0, 1, -1), ValueError);
  EXPECT_THROW(eye(-1), ValueError);
  EXPECT_THROW(randperm(-1), ValueError);
  try {
    zeros({2, -1});
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("negative dimension -1"), std::string::npos) << e.what();
  }
}

TEST(Factory, LinspaceEnds) {
  Tensor l = linspace(-1, 1, 5, kFloat64);
  EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  Tensor m = linspace(0, 1, 7);
  EXPECT_EQ(m.to_vector<float>().front(), 0.0f);
  EXPECT_EQ(m.to_vector<float>().back(), 1.0f);
  EXPECT_EQ(linspace(2, 2, 3).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(linspace(1, 4, 4, kInt32).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace dp
