// bfloat16 convolution, pooling and batch norm on the CPU.
//
// Goldens (tests/golden/gen_bfloat16.py) carry, for the same bfloat16 inputs, PyTorch 1.13's own
// bfloat16 results and the float64 answer. Every result here must be within one bfloat16 rounding
// of the float64 answer (the kernels compute in float32 or float64 and round once); against
// PyTorch's bfloat16 results the bound is one ulp where PyTorch also rounds once, and a looser,
// tensor-scaled bound where PyTorch 1.13 accumulates in bfloat16 (its pure-bfloat16 batch norm and
// its pooling backward passes; the golden file flags those cases). Also: bfloat16 against our own
// float32 op on the same rounded values over larger CNN-sized shapes, the create_graph backward,
// the refused dtype combinations, and a small CNN trained one step entirely in bfloat16.
#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>
#include "dp/autograd/engine.h"
#include "dp/dp.h"
#include "dp/ops/conv.h"
#include "dp/ops/index.h"
#include "dp/ops/linalg.h"
#include "dp/ops/normalization.h"
#include "dp/ops/pooling.h"
#include "dp/ops/reduction.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::json;
using test::tensor_from_json;

constexpr const char* kFile = "bfloat16.json";
constexpr double kHalfUlp = 1.0 / 256;  // half a bfloat16 ulp, relative: at most 2^-8 of the value
constexpr double kUlp = 1.0 / 128;      // one ulp, relative: at most 2^-7 of the value

std::vector<double> values(const Tensor& t) {
  Tensor d = t.detach().to(kFloat64).contiguous();
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

// |actual - expected| <= rtol * |expected| + scale * max|expected| element-wise, same shape. The
// scale term covers cancellation: an element much smaller than the tensor's largest carries the
// float32 rounding of the large terms it was summed from.
::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double rtol, double scale) {
  if (!actual.defined() || !expected.defined()) return ::testing::AssertionFailure() << (actual.defined() ? "expected" : "actual") << " is undefined";
  if (actual.sizes() != expected.sizes()) return ::testing::AssertionFailure() << "sizes " << actual.size_str() << " vs " << expected.size_str();
  const std::vector<double> a = values(actual), e = values(expected);
  double m = 0;
  for (double v : e) m = std::max(m, std::abs(v));
  const double atol = scale * m;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    if (!(std::abs(a[i] - e[i]) <= rtol * std::abs(e[i]) + atol))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << e[i] << " (|diff| " << std::abs(a[i] - e[i])
                                           << ", allowed " << rtol * std::abs(e[i]) + atol << ")";
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult close(const Tensor& actual, const json& expected, double rtol, double scale) {
  return close(actual, tensor_from_json(expected), rtol, scale);
}

// Within one rounding of the exact answer (float32 arithmetic leaves 2^-14 of the scale).
::testing::AssertionResult rounded_once(const Tensor& actual, const Tensor& exact) { return close(actual, exact, kHalfUlp * 1.01, 1.0 / 16384); }
::testing::AssertionResult rounded_once(const Tensor& actual, const json& exact) {
  return close(actual, tensor_from_json(exact), kHalfUlp * 1.01, 1.0 / 16384);
}

// Against PyTorch's bfloat16 result: both round once (one ulp apart at most), or PyTorch added in
// bfloat16 (its error reaches about one ulp of the tensor's largest element; allow two).
::testing::AssertionResult close_to_torch(const Tensor& actual, const json& c, const json& expected) {
  const bool once = c.at("torch_rounds_once").get<bool>();
  return close(actual, tensor_from_json(expected), kUlp, once ? 1.0 / 16384 : 2 * kUlp);
}

Tensor input_of(const json& c, size_t i, bool requires_grad) {
  const json& j = c.at("inputs")[i];
  return j.is_null() ? Tensor() : tensor_from_json(j, requires_grad);
}

IntArrayRef ints(const json& j, Shape& keep) {
  keep = j.get<Shape>();
  return keep;
}

// Runs the case's op on its inputs (dp tensors) with its args.
Tensor run_case(const json& c, const std::vector<Tensor>& in) {
  const std::string op = c.at("op");
  const json& a = c.at("args");
  Shape s1, s2, s3, s4;
  if (op == "conv2d")
    return conv2d(in[0], in[1], in[2], ints(a.at("stride"), s1), ints(a.at("padding"), s2), ints(a.at("dilation"), s3),
                  a.at("groups").get<int64_t>());
  if (op == "max_pool2d") return max_pool2d(in[0], ints(a.at("kernel_size"), s1), ints(a.at("stride"), s2), ints(a.at("padding"), s3));
  if (op == "avg_pool2d")
    return avg_pool2d(in[0], ints(a.at("kernel_size"), s1), ints(a.at("stride"), s2), ints(a.at("padding"), s3), a.at("ceil_mode").get<bool>(),
                      a.at("count_include_pad").get<bool>());
  if (op == "adaptive_avg_pool2d") return adaptive_avg_pool2d(in[0], ints(a.at("output_size"), s1));
  if (op == "batch_norm")
    return batch_norm(in[0], in[1], in[2], in[3], in[4], a.at("training").get<bool>(), a.at("momentum").get<double>(), a.at("eps").get<double>());
  throw std::runtime_error("unknown op " + op);
}

// The inputs that get gradients: conv2d's and pooling's every given input (conv's first-layer case
// leaves x out: the golden's grads say which), batch_norm's input, weight and bias.
std::vector<bool> grad_mask(const json& c) {
  std::vector<bool> m;
  const json& grads = c.at("torch").at("grads");
  for (size_t i = 0; i < c.at("inputs").size(); ++i) m.push_back(i < grads.size() && !grads[i].is_null());
  return m;
}

void check_case(const json& c) {
  const std::string name = c.at("name");
  SCOPED_TRACE(name);
  const std::vector<bool> mask = grad_mask(c);
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.at("inputs").size(); ++i) in.push_back(input_of(c, i, mask[i]));
  Tensor y = run_case(c, in);
  EXPECT_EQ(y.dtype(), kBFloat16);
  const json& torch = c.at("torch");
  const json& ref = c.at("reference");
  EXPECT_TRUE(rounded_once(y, ref.at("output"))) << "output vs float64";
  EXPECT_TRUE(close_to_torch(y, c, torch.at("output"))) << "output vs PyTorch bfloat16";
  if (torch.contains("indices")) {
    Shape s1, s2, s3;
    const json& a = c.at("args");
    Tensor ind = max_pool2d_with_indices(in[0], ints(a.at("kernel_size"), s1), ints(a.at("stride"), s2), ints(a.at("padding"), s3)).second;
    EXPECT_TRUE(close(ind, torch.at("indices"), 0, 0)) << "indices";
  }
  if (torch.contains("running_mean")) {
    for (const char* k : {"running_mean", "running_var"}) {
      Tensor r = k == std::string("running_mean") ? in[1] : in[2];
      EXPECT_TRUE(rounded_once(r, ref.at(k))) << k << " vs float64";
      EXPECT_TRUE(close_to_torch(r, c, torch.at(k))) << k << " vs PyTorch";
    }
  }
  y.backward(tensor_from_json(c.at("grad_output")));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!mask[i]) {
      if (in[i].defined()) {
        EXPECT_FALSE(in[i].grad().defined()) << "input " << i << " got a gradient";
      }
      continue;
    }
    SCOPED_TRACE("grad of input " + std::to_string(i));
    ASSERT_TRUE(in[i].grad().defined());
    EXPECT_EQ(in[i].grad().dtype(), in[i].dtype());  // bfloat16, or float32 for batch norm's float32 parameters
    EXPECT_TRUE(rounded_once(in[i].grad(), ref.at("grads")[i])) << "vs float64";
    EXPECT_TRUE(close_to_torch(in[i].grad(), c, torch.at("grads")[i])) << "vs PyTorch bfloat16";
  }
}

int check_op(const std::string& op) {
  int n = 0;
  for (const json& c : test::golden_file(kFile).at("cases")) {
    if (c.at("op") != op) continue;
    ++n;
    check_case(c);
  }
  return n;
}

TEST(BFloat16Golden, Conv2d) { EXPECT_GE(check_op("conv2d"), 6); }
TEST(BFloat16Golden, MaxPool2d) { EXPECT_GE(check_op("max_pool2d"), 2); }
TEST(BFloat16Golden, AvgPool2d) { EXPECT_GE(check_op("avg_pool2d"), 2); }
TEST(BFloat16Golden, AdaptiveAvgPool2d) { EXPECT_GE(check_op("adaptive_avg_pool2d"), 2); }
TEST(BFloat16Golden, BatchNorm) { EXPECT_GE(check_op("batch_norm"), 6); }

// The golden file covers both kinds of case (else the loose bound would go untested or unused).
TEST(BFloat16Golden, CoversRoundedOnceAndBFloat16AccumulatingPyTorchCases) {
  int once = 0, not_once = 0;
  for (const json& c : test::golden_file(kFile).at("cases")) (c.at("torch_rounds_once").get<bool>() ? once : not_once)++;
  EXPECT_GE(once, 8);
  EXPECT_GE(not_once, 2);
}

// ---------------------------------------------------------------- against float32

// Values drawn in float32 and rounded to bfloat16; the float32 copy holds the same values.
Tensor rounded(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  manual_seed(seed);
  return add(mul(randn(s), scale), shift).to(kBFloat16);
}

struct Pair {
  Tensor bf, f32;
};
Pair leaf_pair(const Tensor& bf, bool requires_grad = true) {
  return {bf.detach().requires_grad_(requires_grad), bf.detach().to(kFloat32).requires_grad_(requires_grad)};
}

// f on bfloat16 leaves and on float32 leaves of the same values; the bfloat16 output and every
// gradient must be the float32 one rounded once.
template <typename F>
void expect_matches_float32(const char* what, const std::vector<Tensor>& bf_inputs, const F& f) {
  SCOPED_TRACE(what);
  std::vector<Tensor> a, b;
  for (const Tensor& t : bf_inputs) {
    Pair p = leaf_pair(t);
    a.push_back(p.bf);
    b.push_back(p.f32);
  }
  Tensor ya = f(a), yb = f(b);
  ASSERT_EQ(ya.dtype(), kBFloat16);
  ASSERT_EQ(yb.dtype(), kFloat32);
  EXPECT_TRUE(rounded_once(ya, yb)) << "output";
  Tensor g = rounded(ya.sizes(), 99);
  ya.backward(g);
  yb.backward(g.to(kFloat32));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].grad().dtype(), kBFloat16) << "input " << i;
    EXPECT_TRUE(rounded_once(a[i].grad(), b[i].grad())) << "grad of input " << i;
  }
}

TEST(BFloat16VsFloat32, Conv2dCnnLayers) {
  // The training benchmark's second convolution at batch 16, a strided one, a depthwise one.
  expect_matches_float32("conv 32->64 3x3 pad 1", {rounded({16, 32, 14, 14}, 1), rounded({64, 32, 3, 3}, 2, 0.05), rounded({64}, 3)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {1}, {1}); });
  expect_matches_float32("conv 16->32 3x3 stride 2", {rounded({8, 16, 15, 15}, 4), rounded({32, 16, 3, 3}, 5, 0.1), rounded({32}, 6)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {2}, {1}); });
  expect_matches_float32("depthwise 3x3", {rounded({4, 8, 10, 10}, 7), rounded({8, 1, 3, 3}, 8)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], Tensor(), {1}, {1}, {1}, 8); });
}

// Edge cases of the per-image staging: an empty batch (zero weight gradient), an unbatched
// input, a non-contiguous one, and a NaN, which goes through the conversions as in float32.
TEST(BFloat16VsFloat32, Conv2dEdgeCases) {
  expect_matches_float32("empty batch", {rounded({0, 3, 6, 6}, 41), rounded({4, 3, 3, 3}, 42), rounded({4}, 43)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], {1}, {1}); });
  expect_matches_float32("unbatched", {rounded({3, 6, 5}, 44), rounded({4, 3, 2, 2}, 45)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], Tensor(), {2}, {1}); });
  expect_matches_float32("transposed input", {rounded({2, 3, 7, 6}, 46), rounded({4, 3, 3, 3}, 47)},
                         [](const std::vector<Tensor>& t) { return conv2d(t[0].transpose(2, 3), t[1], Tensor(), {1}, {1}); });
  std::vector<double> v = values(rounded({1, 2, 5, 5}, 48));
  v[1 * 25 + 2 * 5 + 2] = std::nan("");  // channel 1, the centre
  const Tensor x = tensor<double>(v, {1, 2, 5, 5}).to(kBFloat16), w = rounded({3, 2, 3, 3}, 49);
  Tensor y = conv2d(x, w), y32 = conv2d(x.to(kFloat32), w.to(kFloat32));
  const std::vector<double> a = values(y), b = values(y32);
  int nans = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::isnan(a[i]), std::isnan(b[i])) << i;
    nans += std::isnan(a[i]);
  }
  EXPECT_EQ(nans, 3 * 9);  // every output of every channel reads the NaN
}

TEST(BFloat16VsFloat32, Pooling) {
  const Tensor x = rounded({8, 16, 14, 14}, 11, 2.0);
  expect_matches_float32("max_pool2d 2", {x}, [](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2}); });
  expect_matches_float32("max_pool2d 3 stride 1 pad 1", {x}, [](const std::vector<Tensor>& t) { return max_pool2d(t[0], {3}, {1}, {1}); });
  expect_matches_float32("avg_pool2d 3 stride 1 pad 1", {x}, [](const std::vector<Tensor>& t) { return avg_pool2d(t[0], {3}, {1}, {1}); });
  expect_matches_float32("adaptive_avg_pool2d 5x3", {x}, [](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], {5, 3}); });
}

TEST(BFloat16VsFloat32, BatchNormTrainingAndEval) {
  const Tensor x = rounded({16, 32, 8, 8}, 21, 3.0, 1.0), w = rounded({32}, 22, 0.5, 1.0), b = rounded({32}, 23);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    // bfloat16 parameters and statistics.
    expect_matches_float32("bfloat16 parameters", {x, w, b}, [&](const std::vector<Tensor>& t) {
      Tensor rm = full({32}, 0.5, t[0].dtype()), rv = full({32}, 2.0, t[0].dtype());
      return batch_norm(t[0], rm, rv, t[1], t[2], training);
    });
    // float32 parameters and statistics for the bfloat16 input (mixed): compare the bfloat16
    // input's result with the all-float32 one; parameter gradients stay float32.
    Pair xp = leaf_pair(x);
    Tensor w32 = w.to(kFloat32).requires_grad_(true), b32 = b.to(kFloat32).requires_grad_(true);
    Tensor w32b = w32.detach().requires_grad_(true), b32b = b32.detach().requires_grad_(true);
    Tensor rm_a = full({32}, 0.5), rv_a = full({32}, 2.0), rm_b = full({32}, 0.5), rv_b = full({32}, 2.0);
    Tensor ya = batch_norm(xp.bf, rm_a, rv_a, w32, b32, training);
    Tensor yb = batch_norm(xp.f32, rm_b, rv_b, w32b, b32b, training);
    ASSERT_EQ(ya.dtype(), kBFloat16);
    EXPECT_TRUE(rounded_once(ya, yb)) << "mixed output";
    EXPECT_TRUE(close(rm_a, rm_b, 1e-6, 1e-7)) << "mixed running_mean";
    EXPECT_TRUE(close(rv_a, rv_b, 1e-6, 1e-7)) << "mixed running_var";
    Tensor g = rounded(ya.sizes(), 24);
    ya.backward(g);
    yb.backward(g.to(kFloat32));
    EXPECT_EQ(xp.bf.grad().dtype(), kBFloat16);
    EXPECT_EQ(w32.grad().dtype(), kFloat32);
    EXPECT_EQ(b32.grad().dtype(), kFloat32);
    EXPECT_TRUE(rounded_once(xp.bf.grad(), xp.f32.grad())) << "mixed grad input";
    EXPECT_TRUE(close(w32.grad(), w32b.grad(), 1e-5, 1e-6)) << "mixed grad weight";
    EXPECT_TRUE(close(b32.grad(), b32b.grad(), 1e-5, 1e-6)) << "mixed grad bias";
  }
}

// The create_graph backward (dp ops, differentiable) gives the fused kernels' gradients.
TEST(BFloat16VsFloat32, CreateGraphBackwardMatchesFusedBackward) {
  const Tensor x0 = rounded({4, 6, 7, 7}, 31, 2.0, 0.5), w0 = rounded({6}, 32, 0.5, 1.0), b0 = rounded({6}, 33);
  const Tensor cw0 = rounded({6, 6, 3, 3}, 34, 0.2);
  for (DType pdt : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(dtype_name(pdt));
    auto grads = [&](bool create_graph) {
      Tensor x = x0.detach().requires_grad_(true), cw = cw0.detach().requires_grad_(true);
      Tensor w = w0.detach().to(pdt).requires_grad_(true), b = b0.detach().to(pdt).requires_grad_(true);
      Tensor y = max_pool2d(batch_norm(conv2d(x, cw, Tensor(), {1}, {1}), Tensor(), Tensor(), w, b, true), {3}, {2}, {1});
      return autograd::grad({y}, {x, cw, w, b}, {rounded(y.sizes(), 35)}, false, create_graph);
    };
    std::vector<Tensor> fused = grads(false), graph = grads(true);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(graph[i].dtype(), fused[i].dtype()) << i;
      // Two roundings apart at most (each path rounds its own float32 result once).
      EXPECT_TRUE(close(graph[i], fused[i], 2 * kUlp, 1.0 / 1024)) << "grad " << i;
    }
  }
}

// ---------------------------------------------------------------- refusals

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

void expect_message(const std::string& msg, const std::vector<std::string>& fragments) {
  for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "missing \"" << f << "\" in: " << msg;
}

TEST(BFloat16Errors, ConvNeedsOneDtype) {
  Tensor x = zeros({1, 2, 5, 5}, kBFloat16), w = zeros({3, 2, 3, 3}, kBFloat16);
  // As PyTorch: "Input type (c10::BFloat16) and weight type (float) should be the same".
  expect_message(message_of<DTypeError>([&] { conv2d(x, w.to(kFloat32)); }),
                 {"conv2d", "Input type (c10::BFloat16) and weight type (float) should be the same"});
  expect_message(message_of<DTypeError>([&] { conv2d(x, w, zeros({3})); }), {"Input type (c10::BFloat16) and bias type (float) should be the same"});
  expect_message(message_of<DTypeError>([&] { conv2d(x.to(kFloat32), w); }), {"Input type (float) and weight type (c10::BFloat16)"});
  // No float16 on the CPU (PyTorch's CPU convolution has none either).
  expect_message(message_of<DTypeError>([&] { conv2d(x.to(kFloat16), w.to(kFloat16)); }), {"conv2d", "float16", "[1, 2, 5, 5]", "cpu", "CUDA"});
  expect_message(message_of<DTypeError>([&] {
                   conv2d_backward_input({1, 2, 5, 5}, zeros({1, 3, 3, 3}, kBFloat16), w.to(kFloat32), {1}, {0}, {1}, 1);
                 }),
                 {"conv2d_backward_input", "grad_output type (c10::BFloat16) and weight type (float)"});
}

TEST(BFloat16Errors, PoolingRefusesFloat16OnTheCpu) {
  Tensor x = zeros({1, 2, 6, 6}, kFloat16);
  for (const std::string& msg :
       {message_of<DTypeError>([&] { max_pool2d(x, {2}); }), message_of<DTypeError>([&] { avg_pool2d(x, {2}); }), message_of<DTypeError>([&] {
          adaptive_avg_pool2d(x, {2, 2});
        })})
    expect_message(msg, {"pool", "float16", "[1, 2, 6, 6]", "cpu", "CUDA"});
}

TEST(BFloat16Errors, BatchNormParameterDtypesFollowPyTorch) {
  Tensor x = zeros({4, 3}, kBFloat16);
  auto f32 = [] { return ones({3}); };
  auto bf = [] { return ones({3}, kBFloat16); };
  // Accepted: all bfloat16, all float32, any of them undefined.
  EXPECT_EQ(batch_norm(x, bf(), bf(), bf(), bf(), true).dtype(), kBFloat16);
  EXPECT_EQ(batch_norm(x, f32(), f32(), f32(), f32(), true).dtype(), kBFloat16);
  EXPECT_EQ(batch_norm(x, f32(), f32(), Tensor(), Tensor(), false).dtype(), kBFloat16);
  EXPECT_EQ(batch_norm(x, Tensor(), Tensor(), f32(), f32(), true).dtype(), kBFloat16);
  EXPECT_EQ(batch_norm(x, Tensor(), Tensor(), Tensor(), bf(), true).dtype(), kBFloat16);
  // Refused, as PyTorch 1.13 refuses them: a mix of bfloat16 and float32, or float64.
  expect_message(message_of<DTypeError>([&] { batch_norm(x, f32(), f32(), bf(), bf(), true); }),
                 {"batch_norm", "bfloat16 input", "all bfloat16 or all float32", "running_mean float32", "weight bfloat16"});
  expect_message(message_of<DTypeError>([&] { batch_norm(x, bf(), bf(), f32(), f32(), true); }), {"running_var bfloat16", "bias float32"});
  expect_message(message_of<DTypeError>([&] { batch_norm(x, Tensor(), Tensor(), f32(), bf(), true); }), {"weight float32, bias bfloat16"});
  expect_message(message_of<DTypeError>([&] { batch_norm(x, ones({3}, kFloat64), ones({3}, kFloat64), Tensor(), Tensor(), false); }),
                 {"running_mean float64"});
  // float32 input: weight and bias in its dtype (unchanged); float16 on the CPU: refused.
  expect_message(message_of<DTypeError>([&] { batch_norm(x.to(kFloat32), Tensor(), Tensor(), bf(), Tensor(), true); }), {"weight", "float32"});
  expect_message(message_of<DTypeError>([&] { batch_norm(x.to(kFloat16), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
                 {"batch_norm", "float16", "CUDA"});
}

// ---------------------------------------------------------------- a small CNN

// conv(1->8, 3x3, pad 1) -> batch_norm -> relu -> max_pool 2 -> conv(8->16, 3x3, pad 1) ->
// batch_norm -> relu -> avg_pool 2 -> linear(16*3*3 -> 10); cross-entropy written with
// log_softmax and gather (the CPU losses take float32/float64 only). The convolutions have no
// bias (the batch norm after them cancels it: its gradient is zero). Parameters are given in the
// dtype the network runs in, the same (bfloat16-representable) values in every dtype.
struct Cnn {
  std::vector<Tensor> p;      // c1w, bn1w, bn1b, c2w, bn2w, bn2b, fcw, fcb
  std::vector<Tensor> stats;  // bn1 mean, var, bn2 mean, var

  static Cnn make(DType dt, DType bn_dt) {
    auto param = [](Tensor t, DType d) { return t.to(kBFloat16).to(d).requires_grad_(true); };
    manual_seed(5);
    Cnn n;
    n.p = {param(mul(randn({8, 1, 3, 3}), 0.3), dt),
           param(add(mul(rand({8}), 0.5), 0.75), bn_dt),
           param(mul(randn({8}), 0.1), bn_dt),
           param(mul(randn({16, 8, 3, 3}), 0.12), dt),
           param(add(mul(rand({16}), 0.5), 0.75), bn_dt),
           param(mul(randn({16}), 0.1), bn_dt),
           param(mul(randn({10, 144}), 0.08), dt),
           param(mul(randn({10}), 0.1), dt)};
    n.stats = {zeros({8}, bn_dt), ones({8}, bn_dt), zeros({16}, bn_dt), ones({16}, bn_dt)};
    return n;
  }

  Tensor logits(const Tensor& x) {
    Tensor h = conv2d(x, p[0], Tensor(), {1}, {1});
    h = max_pool2d(relu(batch_norm(h, stats[0], stats[1], p[1], p[2], true)), {2});
    h = conv2d(h, p[3], Tensor(), {1}, {1});
    h = avg_pool2d(relu(batch_norm(h, stats[2], stats[3], p[4], p[5], true)), {2});
    return linear(h.flatten(1), p[6], p[7]);
  }
};

Tensor cross_entropy_by_hand(const Tensor& logits, const Tensor& target) { return neg(mean(gather(log_softmax(logits, 1), 1, target.unsqueeze(1)))); }

double rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST(BFloat16Cnn, ForwardAndBackwardInBFloat16CloseToFloat32) {
  manual_seed(7);
  const Tensor images = randn({16, 1, 12, 12}).to(kBFloat16);
  const Tensor target = randint(0, 10, {16});
  for (DType bn_dt : {kBFloat16, kFloat32}) {
    SCOPED_TRACE(std::string("batch norm parameters ") + dtype_name(bn_dt));
    Cnn net16 = Cnn::make(kBFloat16, bn_dt), net32 = Cnn::make(kFloat32, kFloat32);
    Tensor logits16 = net16.logits(images);
    Tensor logits32 = net32.logits(images.to(kFloat32));
    EXPECT_EQ(logits16.dtype(), kBFloat16);
    Tensor loss16 = cross_entropy_by_hand(logits16, target), loss32 = cross_entropy_by_hand(logits32, target);
    EXPECT_EQ(loss16.dtype(), kBFloat16);
    const double l16 = loss16.item<double>(), l32 = loss32.item<double>();
    std::cout << "[ bf16 CNN ] loss bfloat16 " << l16 << ", float32 " << l32 << " (BN parameters " << dtype_name(bn_dt) << ")\n";
    EXPECT_NEAR(l16, l32, 0.01 * std::abs(l32));
    EXPECT_LE(rel_l2(logits16, logits32), 0.02);
    loss16.backward();
    loss32.backward();
    for (size_t i = 0; i < net16.p.size(); ++i) {
      const Tensor& g16 = net16.p[i].grad();
      ASSERT_TRUE(g16.defined()) << "parameter " << i;
      EXPECT_EQ(g16.dtype(), net16.p[i].dtype()) << "parameter " << i;
      // bfloat16 activations and gradients keep about 3 significant digits per layer, and batch
      // norm's backward cancels: PyTorch 1.13's own bfloat16 run of this network is 4-11% off its
      // float32 gradients for the layers before the batch norms (relative L2, five draws), under 1%
      // for the linear layer.
      const double err = rel_l2(g16, net32.p[i].grad());
      std::cout << "[ bf16 CNN ]   parameter " << i << " gradient relative L2 error " << err << "\n";
      EXPECT_LE(err, 0.15) << "parameter " << i;
    }
    for (size_t i = 0; i < net16.stats.size(); ++i) EXPECT_LE(rel_l2(net16.stats[i], net32.stats[i]), 0.01) << "running stat " << i;
  }
}

}  // namespace
}  // namespace dp
