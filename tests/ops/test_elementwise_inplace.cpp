// In-place ops: version counter, the autograd rules (leaf requiring grad refused, history rebased
// on a non-leaf so gradients flow through), saved-tensor checks, dtype-cast and shape errors,
// aliasing operands, strided self, and copy_ (broadcast, dtype, across CPU devices, gradient).
#include <gtest/gtest.h>
#include <functional>
#include <string>
#include "support/golden.h"
#include "support/gradcheck.h"

namespace dp {
namespace {

using test::all_close;
using test::gradcheck;
using test::rand_leaf;

using test::gradgradcheck;

class Inplace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpu_device_count() < 2) set_cpu_device_count(2);
  }
};

TEST_F(Inplace, EveryOpBumpsTheVersion) {
  const std::vector<std::pair<const char*, std::function<void(Tensor&)>>> ops = {
      {"add_", [](Tensor& t) { t.add_(ones({3})); }},
      {"add_ scalar", [](Tensor& t) { t.add_(1.0); }},
      {"sub_", [](Tensor& t) { t.sub_(ones({3}), 2); }},
      {"sub_ scalar", [](Tensor& t) { t.sub_(1.0); }},
      {"mul_", [](Tensor& t) { t.mul_(ones({3})); }},
      {"mul_ scalar", [](Tensor& t) { t.mul_(2.0); }},
      {"div_", [](Tensor& t) { t.div_(ones({3})); }},
      {"div_ scalar", [](Tensor& t) { t.div_(2.0); }},
      {"neg_", [](Tensor& t) { t.neg_(); }},
      {"sqrt_", [](Tensor& t) { t.sqrt_(); }},
      {"relu_", [](Tensor& t) { t.relu_(); }},
      {"clamp_", [](Tensor& t) { t.clamp_(0.0, 1.0); }},
      {"addcmul_", [](Tensor& t) { t.addcmul_(ones({3}), ones({3}), 0.5); }},
      {"addcdiv_", [](Tensor& t) { t.addcdiv_(ones({3}), ones({3}), 0.5); }},
      {"lerp_", [](Tensor& t) { t.lerp_(ones({3}), 0.5); }},
      {"fill_", [](Tensor& t) { t.fill_(3.0); }},
      {"zero_", [](Tensor& t) { t.zero_(); }},
      {"copy_", [](Tensor& t) { t.copy_(ones({3})); }},
      {"+=", [](Tensor& t) { t += ones({3}); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    Tensor t = full({3}, 4.0);
    Tensor view = t.view({3});
    const uint32_t v0 = t.version();
    op(t);
    EXPECT_EQ(t.version(), v0 + 1);
    EXPECT_EQ(view.version(), v0 + 1);  // views share the counter
  }
}

TEST_F(Inplace, ValuesOfEachOp) {
  Tensor t = tensor<float>({1.f, 4.f, 9.f});
  t.sqrt_();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.f, 2.f, 3.f}));
  t.addcmul_(tensor<float>({1.f, 1.f, 1.f}), tensor<float>({2.f, 4.f, 6.f}), 0.5);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2.f, 4.f, 6.f}));
  t.addcdiv_(tensor<float>({2.f, 2.f, 2.f}), tensor<float>({1.f, 2.f, 4.f}), -1);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0.f, 3.f, 5.5f}));
  t.lerp_(tensor<float>({10.f, 10.f, 10.f}), 0.5);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{5.f, 6.5f, 7.75f}));
  t.clamp_(6.0, 7.0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{6.f, 6.5f, 7.f}));
  t.neg_().relu_();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0.f, 0.f, 0.f}));
  Tensor i = tensor<int64_t>({1, 2});
  i.mul_(3).add_(tensor<int32_t>({1, 1}), 2).sub_(1);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(i.dtype(), kInt64);
  // float16 self, float32 operand: computed in float32, rounded into float16.
  Tensor h = tensor<float>({1.f}).to(kFloat16);
  h.add_(tensor<float>({0.1f}));
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_FLOAT_EQ(h.item<float>(), static_cast<float>(Half(1.1f)));
}

TEST_F(Inplace, WritesThroughStridedViews) {
  Tensor base = zeros({4, 6});
  Tensor every_other = base.slice(1, std::nullopt, std::nullopt, 2);  // [4, 3], stride 2
  every_other.add_(tensor<float>({1.f, 2.f, 3.f}));
  every_other.mul_(2.0);
  std::vector<float> v = base.to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(v[i * 6 + j], j % 2 ? 0.f : 2.f * (j / 2 + 1)) << i << "," << j;
  Tensor m = zeros({3, 2});
  m.t().copy_(tensor<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}));
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1.f, 4.f, 2.f, 5.f, 3.f, 6.f}));
  m.t().fill_(7.0);
  EXPECT_EQ(m.to_vector<float>(), std::vector<float>(6, 7.f));
}

TEST_F(Inplace, AliasedOperands) {
  Tensor x = tensor<float>({1.f, 2.f, 3.f, 4.f});
  x.add_(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2.f, 4.f, 6.f, 8.f}));
  x.mul_(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{4.f, 16.f, 36.f, 64.f}));
  // A partially overlapping operand is read as it was before the write.
  Tensor y = tensor<float>({1.f, 2.f, 3.f, 4.f});
  y.slice(0, 1).add_(y.slice(0, 0, 3));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.f, 3.f, 5.f, 7.f}));
  Tensor z = tensor<float>({1.f, 2.f, 3.f, 4.f}, {2, 2});
  z.copy_(z.t());
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{1.f, 3.f, 2.f, 4.f}));
  Tensor w = tensor<float>({1.f, 2.f, 3.f});
  w.addcmul_(w, w);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{2.f, 6.f, 12.f}));
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

TEST_F(Inplace, ResultDtypeMustCastIntoSelf) {
  Tensor i = tensor<int64_t>({1, 2});
  std::string m = message_of([&] { i.add_(0.5); });
  EXPECT_NE(m.find("result type Float can't be cast to the desired output type Long"), std::string::npos) << m;
  EXPECT_THROW(i.add_(tensor<float>({0.5f, 1.f})), DTypeError);
  EXPECT_THROW(i.div_(2), DTypeError);  // true division gives float
  EXPECT_THROW(i.sqrt_(), DTypeError);
  EXPECT_THROW(i.mul_(tensor<double>({2.0, 2.0})), DTypeError);
  Tensor b = ones({2}, kBool);
  EXPECT_NE(message_of([&] { b.add_(1); }).find("result type Long can't be cast to the desired output type Bool"), std::string::npos);
  EXPECT_THROW(tensor<int32_t>({1}).clamp_(0.5, std::nullopt), DTypeError);
  EXPECT_THROW(ones({2}).lerp_(ones({2}, kFloat64), 0.5), DTypeError);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));  // untouched
  // Allowed casts: float64 into float32, int into float, float32 into float16.
  Tensor f = ones({2});
  f.add_(tensor<double>({0.5, 0.25}));
  f.add_(tensor<int64_t>({1, 1}));
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.5f, 2.25f}));
}

TEST_F(Inplace, SelfMustNotGrow) {
  Tensor s = zeros({3});
  std::string m = message_of([&] { s.add_(zeros({2, 3})); });
  EXPECT_NE(m.find("output with shape [3] doesn't match the broadcast shape [2, 3]"), std::string::npos) << m;
  EXPECT_THROW(zeros({2, 1}).mul_(zeros({2, 3})), ShapeError);
  EXPECT_THROW(zeros({3}).copy_(zeros({4})), ShapeError);
  EXPECT_THROW(zeros({3}).addcmul_(zeros({3}), zeros({2, 3})), ShapeError);
  // An expanded self has elements sharing memory.
  Tensor e = zeros({1, 3}).expand({4, 3});
  EXPECT_THROW(e.add_(1.0), ValueError);
  EXPECT_THROW(e.copy_(zeros({4, 3})), ValueError);
}

TEST_F(Inplace, LeafRequiringGradIsRefused) {
  Tensor x = ones({3}).requires_grad_();
  std::string m = message_of([&] { x.add_(1.0); });
  EXPECT_NE(m.find("a leaf Variable that requires grad is being used in an in-place operation"), std::string::npos) << m;
  EXPECT_NE(m.find("add_"), std::string::npos) << m;
  EXPECT_THROW(x.mul_(2.0), AutogradError);
  EXPECT_THROW(x.copy_(zeros({3})), AutogradError);
  EXPECT_THROW(x.zero_(), AutogradError);
  EXPECT_THROW(x.relu_(), AutogradError);
  EXPECT_EQ(x.version(), 0u);
  {
    NoGradGuard no_grad;  // as an optimizer step does
    x.add_(ones({3}), -0.5);
    x.addcdiv_(ones({3}), full({3}, 2.0), -1);
  }
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(3, 0.f));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.version(), 2u);
}

TEST_F(Inplace, GradientFlowsThroughInplaceOnNonLeaf) {
  Tensor x = tensor<float>({1.f, 2.f, 3.f}).requires_grad_();
  Tensor z = tensor<float>({4.f, 5.f, 6.f}).requires_grad_();
  Tensor y = x * 2;
  y.add_(z);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "AddBackward0");
  y.mul_(z);  // y = (2x + z) * z
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward0");
  y.sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{8.f, 10.f, 12.f}));   // 2 z
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{10.f, 14.f, 18.f}));  // 2x + 2z
}

TEST_F(Inplace, NonRequiringSelfPicksUpHistory) {
  Tensor z = tensor<float>({1.f, 2.f}).requires_grad_();
  Tensor buf = zeros({2});
  buf.add_(z, 3);
  EXPECT_TRUE(buf.requires_grad());
  EXPECT_FALSE(buf.is_leaf());
  buf.sum().backward();
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{3.f, 3.f}));
}

TEST_F(Inplace, ModifyingASavedTensorIsReported) {
  Tensor x = tensor<float>({1.f, 2.f}).requires_grad_();
  Tensor y = x.exp();  // saves its output
  y.add_(1.0);
  std::string m = message_of([&] { y.sum().backward(); });
  EXPECT_NE(m.find("modified by an inplace operation"), std::string::npos) << m;
  Tensor a = tensor<float>({1.f, 2.f}).requires_grad_();
  Tensor h = a * 1;
  Tensor p = h * h;  // saves h
  h.mul_(2.0);
  EXPECT_THROW(p.sum().backward(), AutogradError);
}

// Gradients of the in-place ops, checked by finite differences on a non-leaf self (x * 1).
TEST_F(Inplace, Gradcheck) {
  manual_seed(11);
  using Fn = std::function<void(Tensor&, const std::vector<Tensor>&)>;
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add_", [](Tensor& s, const std::vector<Tensor>& x) { s.add_(x[1], -1.5); }},
      {"add_ scalar", [](Tensor& s, const std::vector<Tensor>&) { s.add_(2.0); }},
      {"sub_", [](Tensor& s, const std::vector<Tensor>& x) { s.sub_(x[1]); }},
      {"mul_", [](Tensor& s, const std::vector<Tensor>& x) { s.mul_(x[1]); }},
      {"mul_ scalar", [](Tensor& s, const std::vector<Tensor>&) { s.mul_(-3.0); }},
      {"div_", [](Tensor& s, const std::vector<Tensor>& x) { s.div_(x[1]); }},
      {"div_ scalar", [](Tensor& s, const std::vector<Tensor>&) { s.div_(4.0); }},
      {"neg_", [](Tensor& s, const std::vector<Tensor>&) { s.neg_(); }},
      {"sqrt_", [](Tensor& s, const std::vector<Tensor>&) { s.add_(3.0).sqrt_(); }},
      {"relu_", [](Tensor& s, const std::vector<Tensor>&) { s.relu_(); }},
      {"clamp_", [](Tensor& s, const std::vector<Tensor>&) { s.clamp_(-0.4, 0.3); }},
      {"addcmul_", [](Tensor& s, const std::vector<Tensor>& x) { s.addcmul_(x[1], x[2], 0.7); }},
      {"addcdiv_", [](Tensor& s, const std::vector<Tensor>& x) { s.addcdiv_(x[1], add(x[2], 3.0), -0.7); }},
      {"lerp_", [](Tensor& s, const std::vector<Tensor>& x) { s.lerp_(x[1], 0.3); }},
      {"copy_", [](Tensor& s, const std::vector<Tensor>& x) { s.copy_(x[1]); }},
      {"fill_ then add_", [](Tensor& s, const std::vector<Tensor>& x) { s.fill_(1.0).add_(x[1]); }},
      {"zero_ then mul_", [](Tensor& s, const std::vector<Tensor>& x) { s.zero_().add_(x[2]).mul_(x[1]); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    std::vector<Tensor> in = {rand_leaf({2, 3}), rand_leaf({3}), rand_leaf({2, 3})};  // the second broadcasts
    auto f = [op = op](const std::vector<Tensor>& x) {
      Tensor s = x[0] * 1;
      op(s, x);
      return s;
    };
    EXPECT_TRUE(gradcheck(f, in));
  }
}

TEST_F(Inplace, DoubleBackwardThroughInplace) {
  manual_seed(12);
  std::vector<Tensor> in = {rand_leaf({4}, 0.5, 2.0), rand_leaf({4}, 0.5, 2.0)};
  auto f = [](const std::vector<Tensor>& x) {
    Tensor s = x[0] * x[0];
    s.mul_(x[1]).div_(x[1] + 1.0).sqrt_();
    return s;
  };
  EXPECT_TRUE(gradcheck(f, in));
  EXPECT_TRUE(gradgradcheck(f, in));
}

TEST_F(Inplace, FillAndZeroGiveZeroGradient) {
  Tensor x = tensor<float>({1.f, 2.f}).requires_grad_();
  Tensor y = x * 3;
  y.zero_();
  EXPECT_EQ(y.grad_fn()->name(), "ZeroBackward0");
  (y + x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1.f, 1.f}));
}

TEST_F(Inplace, CopyAcrossDevicesAndDtypes) {
  Tensor src = tensor<float>({1.5f, -2.5f, 3.f}, Device("cpu:0"));
  Tensor dst = zeros({2, 3}, TensorOptions(kFloat64).device(Device("cpu:1")));
  dst.copy_(src);  // broadcast, float32 -> float64, cpu:0 -> cpu:1
  EXPECT_EQ(dst.device(), Device("cpu:1"));
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{1.5, -2.5, 3.0, 1.5, -2.5, 3.0}));
  Tensor ints = zeros({3}, kInt32);
  ints.copy_(src);
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  Tensor flags = zeros({3}, kBool);
  flags.copy_(tensor<float>({0.f, 0.1f, -1.f}));
  EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{false, true, true}));
  Tensor same = tensor<float>({1.f, 2.f});
  same.copy_(same);
  EXPECT_EQ(same.to_vector<float>(), (std::vector<float>{1.f, 2.f}));
}

TEST_F(Inplace, CopyIsDifferentiableWithRespectToSrc) {
  Tensor src = tensor<double>({1.0, 2.0, 3.0}).requires_grad_();
  Tensor dst = zeros({2, 3}, Device("cpu:1"));  // float32 on another device
  dst.copy_(src);
  EXPECT_EQ(dst.grad_fn()->name(), "CopyBackwards");
  (dst * dst).sum().backward();
  Tensor g = src.grad();
  EXPECT_EQ(g.dtype(), kFloat64);
  EXPECT_EQ(g.device(), Device::cpu());
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{4.0, 8.0, 12.0}));  // 2 rows * 2 * src
}

}  // namespace
}  // namespace dp
