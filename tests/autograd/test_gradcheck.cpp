// The public gradient checks (dp/autograd/gradcheck.h): a correct hand-written op passes, a wrong
// backward fails with a message naming the input and the worst element, a backward whose own
// backward is wrong passes gradcheck and fails gradgradcheck, raise_exception, several outputs,
// inputs on a CPU device, and argument errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "dp/autograd/gradcheck.h"
#include "dp/core/device_registry.h"
#include "dp/core/warning.h"
#include "dp/dp.h"

namespace dp {
namespace {

using autograd::GradcheckError;
using autograd::GradcheckOptions;
using ::testing::HasSubstr;

// out = a * b^3, written against the autograd API as a custom op. `wrong_b` makes the gradient for
// b use 2 b^2 instead of 3 b^2; `detached` computes it from a detached b, so its value is right but
// the backward is not differentiable with respect to b (its own backward is wrong).
Tensor mul_cube(const Tensor& a, const Tensor& b, bool wrong_b = false, bool detached = false) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = a * b * b * b;
  }
  if (autograd::needs_grad(a, b)) {
    autograd::record("MulCubeBackward", {a, b}, {out}, [a, b, wrong_b, detached](autograd::variable_list&& g) {
      const Tensor bb = detached ? b.detach() : b;
      Tensor ga = g[0] * bb * bb * bb;
      Tensor gb = g[0] * a * bb * bb * (wrong_b ? 2.0 : 3.0);
      return autograd::variable_list{ga, gb};
    });
  }
  return out;
}

Tensor leaf(std::initializer_list<double> v) { return tensor(v, kFloat64).requires_grad_(true); }

TEST(Gradcheck, DefaultsArePyTorchs) {
  GradcheckOptions o;
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.atol, 1e-5);
  EXPECT_EQ(o.rtol, 1e-3);
  EXPECT_TRUE(o.raise_exception);
}

TEST(Gradcheck, CorrectCustomOpPasses) {
  Tensor a = leaf({0.3, -1.2, 0.8, 1.1}), b = leaf({0.5, -2.0, 1.0, 1.5});
  auto f = [](const std::vector<Tensor>& x) { return mul_cube(x[0], x[1]); };
  EXPECT_TRUE(autograd::gradcheck(f, {a, b}));
  EXPECT_TRUE(autograd::gradgradcheck(f, {a, b}));
  // Only b requires grad: a is passed through.
  EXPECT_TRUE(autograd::gradcheck(f, {a.detach(), b}));
}

TEST(Gradcheck, WrongBackwardNamesTheInputAndTheWorstElement) {
  Tensor a = leaf({1, 1, 1, 1}), b = leaf({0.5, -2.0, 1.0, 1.5});
  auto f = [](const std::vector<Tensor>& x) { return mul_cube(x[0], x[1], /*wrong_b=*/true); };
  // d out[j] / d b[j] is 3 a b^2 but the backward says 2 a b^2: the four diagonal elements are
  // wrong, most of all j = 1 (b = -2: analytical 8, numerical 12). Input 0's gradient is right.
  EXPECT_THAT(
      [&] {
        autograd::gradcheck(f, {a, b});
      },
      ::testing::ThrowsMessage<GradcheckError>(
          AllOf(HasSubstr("gradcheck: Jacobian mismatch for output 0 with respect to input 1 (4 of 16 elements)"),
                HasSubstr("worst d output0[1] / d input1[1]: analytical 8 numerical 12"))));
  // A GradcheckError is an AutogradError (and so a dp::Error).
  EXPECT_THROW(autograd::gradcheck(f, {a, b}), AutogradError);

  // raise_exception = false: false, and the same message where asked.
  std::string message = "stale";
  EXPECT_FALSE(autograd::gradcheck(f, {a, b}, {.raise_exception = false, .message = &message}));
  EXPECT_THAT(message, HasSubstr("with respect to input 1"));
  EXPECT_FALSE(autograd::gradcheck(f, {a, b}, {.raise_exception = false}));
  // A passing check empties the message.
  auto good = [](const std::vector<Tensor>& x) { return mul_cube(x[0], x[1]); };
  EXPECT_TRUE(autograd::gradcheck(good, {a, b}, {.raise_exception = false, .message = &message}));
  EXPECT_EQ(message, "");
  // The tolerance decides: rtol 0.5 accepts 8 against 12.
  EXPECT_TRUE(autograd::gradcheck(f, {a, b}, {.rtol = 0.5}));
}

TEST(Gradcheck, GradgradcheckCatchesANonDifferentiableBackward) {
  Tensor a = leaf({0.3, -1.2, 0.8}), b = leaf({0.5, -2.0, 1.5});
  auto f = [](const std::vector<Tensor>& x) { return mul_cube(x[0], x[1], false, /*detached=*/true); };
  EXPECT_TRUE(autograd::gradcheck(f, {a, b}));  // first derivatives are right
  EXPECT_THAT(
      [&] {
        autograd::gradgradcheck(f, {a, b});
      },
      ::testing::ThrowsMessage<GradcheckError>(HasSubstr("gradgradcheck: Jacobian mismatch for output 0 with respect to input 1")));
  // With given incoming gradients (the "input" after the function's inputs is v).
  Tensor v = leaf({0.7, -0.4, 1.3});
  auto good = [](const std::vector<Tensor>& x) { return mul_cube(x[0], x[1]); };
  EXPECT_TRUE(autograd::gradgradcheck(good, {a, b}, {v}));
  EXPECT_FALSE(autograd::gradgradcheck(f, {a, b}, {v}, {.raise_exception = false}));
}

TEST(Gradcheck, SeveralOutputs) {
  Tensor x = leaf({0.2, -0.7, 1.4}), y = leaf({1.5, 0.3, -0.6});
  autograd::GradcheckMultiFunction f = [](const std::vector<Tensor>& in) {
    // An integer output is ignored; a constant one must have a zero Jacobian, and has.
    return std::vector<Tensor>{sin(in[0]) * in[1], sum(in[0] * in[0]), in[0].gt(0.0), ones({2}, kFloat64)};
  };
  EXPECT_TRUE(autograd::gradcheck(f, {x, y}));
  EXPECT_TRUE(autograd::gradgradcheck(f, {x, y}));
  // An output cut off from the graph although it depends on an input (as PyTorch: its numerical
  // Jacobian must be zero, and is not).
  autograd::GradcheckMultiFunction cut = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2, in[1].detach() * 2}; };
  EXPECT_THAT(
      [&] {
        autograd::gradcheck(cut, {x, y});
      },
      ::testing::ThrowsMessage<GradcheckError>(HasSubstr("output 1 with respect to input 1 (3 of 9 elements)")));
  // A wrong second output is reported as output 1.
  autograd::GradcheckMultiFunction bad = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2, mul_cube(in[0], in[1], true)}; };
  EXPECT_THAT(
      [&] {
        autograd::gradcheck(bad, {x, y});
      },
      ::testing::ThrowsMessage<GradcheckError>(HasSubstr("mismatch for output 1 with respect to input 1")));
}

TEST(Gradcheck, InputsOnACpuDevice) {
  set_cpu_device_count(2);
  Tensor a = (rand({3, 4}, kFloat64) - 0.5).to(Device("cpu:1")).requires_grad_(true);
  Tensor b = (rand({4, 2}, kFloat64) - 0.5).to(Device("cpu:1")).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& x) {
    EXPECT_EQ(x[0].device(), Device("cpu:1"));
    return mm(x[0], x[1]).tanh();
  };
  EXPECT_TRUE(autograd::gradcheck(f, {a, b}));
  EXPECT_TRUE(autograd::gradgradcheck(f, {a, b}));
}

TEST(Gradcheck, ArgumentErrors) {
  auto f = [](const std::vector<Tensor>& x) { return x[0] * 2; };
  EXPECT_THAT(
      [&] {
        autograd::gradcheck(f, {tensor({1.0, 2.0}, kFloat64)});
      },
      ::testing::ThrowsMessage<ValueError>(HasSubstr("gradcheck: no input requires grad")));
  // raise_exception does not turn argument errors into false.
  EXPECT_THROW(autograd::gradcheck(f, {tensor({1.0}, kFloat64)}, {.raise_exception = false}), ValueError);
  EXPECT_THAT([&] { autograd::gradcheck(f, {leaf({1.0})}, {.eps = 0}); }, ::testing::ThrowsMessage<ValueError>(HasSubstr("eps must be positive")));
  EXPECT_THAT([&] { autograd::gradcheck(autograd::GradcheckFunction(), {leaf({1.0})}); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("the function is empty")));
  // float32 inputs are checked, with PyTorch's warning.
  WarningCapture capture;
  Tensor x32 = tensor({0.5, 1.0}).requires_grad_(true);
  autograd::gradcheck(f, {x32}, {.eps = 1e-3, .raise_exception = false});
  ASSERT_EQ(capture.messages().size(), 1u);
  EXPECT_THAT(capture.messages()[0], HasSubstr("input 0 requires gradient and is not a double precision floating point"));
}

}  // namespace
}  // namespace dp
