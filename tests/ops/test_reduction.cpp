// Reductions: result shapes and dtypes, PyTorch's errors and messages, empty and 0-dim inputs,
// sum_to, and the engine's loops (inner / outer / strided, several blocks) against a float64
// reference on tensors large enough to cross every block boundary.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <random>
#include "backend/cpu/reduce.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;

// A float32 tensor with normal values from a fixed seed.
Tensor randn_f32(const Shape& shape, uint32_t seed = 1, double scale = 1.0, double shift = 0.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  std::vector<float> v(static_cast<size_t>(numel_of(shape)));
  for (float& e : v) e = static_cast<float>(nd(gen) * scale + shift);
  return tensor<float>(v, shape);
}

// Every element of `t` (any layout) as doubles, row-major.
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Reference reduction in long double over dims (empty = all) of a tensor of any layout, keepdim.
Tensor reference(const Tensor& t, const Shape& dims, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<bool> mask = backend::make_dim_mask(dims, t.dim(), "reference");
  Shape out_shape = backend::reduced_shape(t.sizes(), mask, true);
  std::vector<std::vector<double>> groups(static_cast<size_t>(numel_of(out_shape)));
  std::vector<double> v = values(t);
  Shape idx(t.dim(), 0);
  Shape ostr = contiguous_strides(out_shape);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (!mask[d]) o += idx[d] * ostr[d];
    groups[o].push_back(v[i]);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<double> out;
  for (auto& g : groups) out.push_back(f(g));
  return tensor<double>(out, out_shape);
}

double ref_sum(const std::vector<double>& g) {
  long double s = 0;
  for (double x : g) s += x;
  return static_cast<double>(s);
}
double ref_max(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
double ref_var(const std::vector<double>& g) {
  double m = ref_sum(g) / g.size();
  long double s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return static_cast<double>(s / (g.size() - 1));
}
double ref_lse(const std::vector<double>& g) {
  double m = ref_max(g);
  long double s = 0;
  for (double x : g) s += std::exp(x - m);
  return m + std::log(static_cast<double>(s));
}

// A non-contiguous view: dims permuted (no copy).
Tensor permuted(const Tensor& t, const Shape& perm) {
  Shape s, st;
  for (int64_t p : perm) {
    s.push_back(t.sizes()[p]);
    st.push_back(t.strides()[p]);
  }
  return backend::restride_nograd(t, s, st);
}

// ---------------------------------------------------------------- shapes and dtypes

TEST(Reduction, ResultShapes) {
  Tensor x = randn_f32({2, 3, 4});
  EXPECT_EQ(sum(x).sizes(), Shape{});
  EXPECT_EQ(sum(x, {1}).sizes(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, true).sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(sum(x, {-1, 0}).sizes(), (Shape{3}));
  EXPECT_EQ(sum(x, {}, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(mean(x, {0, 2}, true).sizes(), (Shape{1, 3, 1}));
  EXPECT_EQ(amax(x, {2}).sizes(), (Shape{2, 3}));
  EXPECT_EQ(var(x, {1}, 1, true).sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(logsumexp(x, {0, 1}).sizes(), (Shape{4}));
  auto [v, i] = max(x, 1, true);
  EXPECT_EQ(v.sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(i.sizes(), (Shape{2, 1, 4}));
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(argmax(x).sizes(), Shape{});
  EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), (Shape{1, 1, 1}));
  EXPECT_EQ(argmin(x, -1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(norm(x).sizes(), Shape{});
  EXPECT_EQ(softmax(x, 1).sizes(), x.sizes());
  // Method forms forward to the same functions.
  EXPECT_TRUE(all_close(x.sum({1}), sum(x, {1})));
  EXPECT_TRUE(all_close(x.mean(), mean(x)));
  EXPECT_TRUE(all_close(x.var({0}), var(x, {0})));
}

TEST(Reduction, SumDtypes) {
  Tensor b = tensor<bool>({true, false, true, true});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  Tensor u = tensor<uint8_t>({200, 100, 250});
  EXPECT_EQ(sum(u).dtype(), kInt64);
  EXPECT_EQ(sum(u).item<int64_t>(), 550);  // no uint8 wrap-around
  Tensor i32 = tensor<int32_t>({2000000000, 2000000000});
  EXPECT_EQ(sum(i32).item<int64_t>(), 4000000000LL);
  Tensor i64 = tensor<int64_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(sum(i64, {0}).to_vector<int64_t>(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(sum(i64, kFloat32).dtype(), kFloat32);
  EXPECT_EQ(sum(i64, {1}, false, kFloat64).to_vector<double>(), (std::vector<double>{3, 7}));
  Tensor h = tensor<float>({1.5f, 2.25f}).to(kFloat16);
  EXPECT_EQ(sum(h).dtype(), kFloat16);
  EXPECT_FLOAT_EQ(sum(h).item<float>(), 3.75f);
  EXPECT_EQ(sum(randn_f32({3}), kInt64).dtype(), kInt64);
  EXPECT_EQ(max(i64).dtype(), kInt64);
  EXPECT_EQ(amax(u, {0}).dtype(), kUInt8);
  EXPECT_EQ(max(b).item<bool>(), true);
  EXPECT_EQ(min(b).item<bool>(), false);
  EXPECT_EQ(logsumexp(i64, {1}).dtype(), kFloat32);  // PyTorch 1.13 promotes integers
}

TEST(Reduction, ZeroDimInputs) {
  Tensor s = tensor<float>({2.5f}).reshape({});
  EXPECT_FLOAT_EQ(sum(s).item<float>(), 2.5f);
  EXPECT_EQ(sum(s, {0}).sizes(), Shape{});
  EXPECT_EQ(sum(s, {-1}, true).sizes(), Shape{});
  EXPECT_FLOAT_EQ(mean(s, {0}).item<float>(), 2.5f);
  auto [v, i] = max(s, 0);
  EXPECT_FLOAT_EQ(v.item<float>(), 2.5f);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(argmax(s, 0).item<int64_t>(), 0);
  EXPECT_EQ(argmin(s).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(var(s, {}).item<float>()));  // one element, correction 1: 0/0
  EXPECT_FLOAT_EQ(var(s, {}, 0).item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(logsumexp(s, {0}).item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(norm(s).item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(softmax(s, 0).item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(log_softmax(s, -1).item<float>(), 0.0f);
  EXPECT_THROW(sum(s, {1}), IndexError);
  EXPECT_THROW(sum(s, {0, 0}), IndexError);
}

TEST(Reduction, EmptyInputs) {
  Tensor e = zeros({0, 3});
  EXPECT_FLOAT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_EQ(sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(sum(e, {1}).sizes(), Shape{0});
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  EXPECT_EQ(sum(zeros({0}, kInt64)).item<int64_t>(), 0);
  for (double v : values(var(e, {0}))) EXPECT_TRUE(std::isnan(v));
  for (double v : values(logsumexp(e, {0}))) EXPECT_EQ(v, -INFINITY);
  EXPECT_FLOAT_EQ(norm(e).item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(norm(e, INFINITY).item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(norm(e, -INFINITY).item<float>(), 0.0f);
  EXPECT_EQ(softmax(e, 1).sizes(), (Shape{0, 3}));
  EXPECT_EQ(log_softmax(e, 0).numel(), 0);
  // Reducing a non-empty dim of an empty tensor is fine.
  auto [v, i] = max(e, 1);
  EXPECT_EQ(v.sizes(), Shape{0});
  EXPECT_EQ(i.sizes(), Shape{0});
  EXPECT_EQ(amax(e, {1}).sizes(), Shape{0});
  EXPECT_EQ(argmax(e, 1).sizes(), Shape{0});
}

// ---------------------------------------------------------------- errors

template <typename E, typename F>
void expect_error(F f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << fragment;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
  }
}

TEST(Reduction, EmptyMaxIsAnError) {
  Tensor e = zeros({0});
  const std::string spec = "Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.";
  expect_error<IndexError>([&] { max(e); }, "max(): " + spec);
  expect_error<IndexError>([&] { min(e); }, "min(): " + spec);
  expect_error<IndexError>([&] { amax(e, {}); }, "amax(): " + spec);
  expect_error<IndexError>([&] { max(zeros({0, 3}), 0); }, "max(): Expected reduction dim 0 to have non-zero size.");
  expect_error<IndexError>([&] { min(zeros({2, 0}), -1); }, "min(): Expected reduction dim 1 to have non-zero size.");
  expect_error<IndexError>([&] { amax(zeros({0, 3}), {0}); }, "amax(): Expected reduction dim 0 to have non-zero size.");
  expect_error<IndexError>([&] { argmax(e); }, "argmax(): Expected reduction dim to be specified for input.numel() == 0.");
  expect_error<IndexError>([&] { argmin(zeros({0, 3}), 0); }, "argmin(): Expected reduction dim 0 to have non-zero size.");
}

TEST(Reduction, BadDimsAreIndexErrors) {
  Tensor x = randn_f32({3, 4});
  expect_error<IndexError>([&] { sum(x, {1, 1}); }, "dim 1 appears multiple times in the list of dims");
  expect_error<IndexError>([&] { sum(x, {1, -1}); }, "dim 1 appears multiple times in the list of dims");
  expect_error<IndexError>([&] { mean(x, {0, -2}); }, "dim 0 appears multiple times in the list of dims");
  expect_error<IndexError>([&] { sum(x, {2}); }, "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  EXPECT_THROW(sum(x, {-3}), IndexError);
  EXPECT_THROW(amax(x, {0, 0}), IndexError);
  EXPECT_THROW(var(x, {5}), IndexError);
  EXPECT_THROW(dp::std(x, {1, 1}), IndexError);
  EXPECT_THROW(logsumexp(x, {2}), IndexError);
  EXPECT_THROW(max(x, 2), IndexError);
  EXPECT_THROW(min(x, -3), IndexError);
  EXPECT_THROW(argmax(x, 2), IndexError);
  EXPECT_THROW(softmax(x, 2), IndexError);
  EXPECT_THROW(log_softmax(x, -3), IndexError);
}

TEST(Reduction, DtypeErrors) {
  Tensor l = tensor<int64_t>({1, 2, 3});
  expect_error<DTypeError>([&] { mean(l); },
                           "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long");
  expect_error<DTypeError>([&] { mean(tensor<bool>({true}), {0}); }, "Got: Bool");
  expect_error<DTypeError>([&] { mean(tensor<int32_t>({1})); }, "Got: Int");
  expect_error<DTypeError>([&] { var(l, {0}); }, "std and var only support floating point and complex dtypes");
  expect_error<DTypeError>([&] { dp::std(l, {}); }, "std and var only support floating point and complex dtypes");
  expect_error<DTypeError>([&] { norm(l); }, "norm(): input dtype should be either floating point or complex. Got Long instead.");
  expect_error<DTypeError>([&] { softmax(l, 0); }, "not implemented for 'Long'");
  expect_error<DTypeError>([&] { log_softmax(tensor<int32_t>({1}), 0); }, "not implemented for 'Int'");
  expect_error<DTypeError>([&] { argmax(tensor<bool>({true, false})); }, "not implemented for 'Bool'");
}

TEST(Reduction, SumToErrors) {
  Tensor x = randn_f32({3, 4});
  EXPECT_THROW(sum_to(x, {2, 3, 4}), ShapeError);
  EXPECT_THROW(sum_to(x, {3}), ShapeError);
  EXPECT_THROW(sum_to(x, {2, 4}), ShapeError);
}

// ---------------------------------------------------------------- sum_to

TEST(Reduction, SumToMatchingShapeIsTheInput) {
  Tensor x = randn_f32({3, 4});
  EXPECT_TRUE(sum_to(x, {3, 4}).is_same(x));
  Tensor s = randn_f32({});
  EXPECT_TRUE(sum_to(s, {}).is_same(s));
}

TEST(Reduction, SumToValues) {
  Tensor x = randn_f32({5, 3, 4}, 7);
  EXPECT_TRUE(all_close(sum_to(x, {4}), sum(x, {0, 1})));
  EXPECT_TRUE(all_close(sum_to(x, {3, 1}), sum(sum(x, {0}), {1}, true)));
  EXPECT_TRUE(all_close(sum_to(x, {1, 3, 1}), sum(x, {0, 2}, true)));
  EXPECT_TRUE(all_close(sum_to(x, {}), sum(x)));
  EXPECT_TRUE(all_close(sum_to(x, {1, 4}), sum(x, {0, 1}).reshape({1, 4})));
  // The backward of broadcasting: the bias gradient of a Linear layer.
  Tensor g = randn_f32({256, 1024}, 3);
  EXPECT_TRUE(all_close(sum_to(g, {1024}), reference(g, {0}, ref_sum).reshape({1024}), 1e-5, 1e-5));
  // An expanded (stride 0) gradient sums to size * value.
  Tensor row = randn_f32({1, 6}, 4);
  Tensor ex = backend::restride_nograd(row, {5, 6}, {0, 1});
  EXPECT_TRUE(all_close(sum_to(ex, {6}), row.reshape({6}) * 5.0));
  EXPECT_TRUE(all_close(sum_to(ex, {5, 1}), sum(row, {1}, true).expand({5, 1})));
}

// sum_to over leading dims of a contiguous float tensor that needs no gradient (a bias gradient) has
// its own loop; it must agree with the general reduction, which a tensor requiring grad takes.
TEST(Reduction, SumToLeadingDimsFastPathMatchesTheGeneralReduction) {
  struct Case {
    Shape in, target;
  };
  for (const Case& c : {Case{{30, 1}, {1}}, Case{{256, 1024}, {1024}}, Case{{5, 3, 4}, {3, 4}}, Case{{5, 3, 4}, {1, 1, 4}}, Case{{5, 3, 4}, {1, 4}},
                        Case{{7, 600}, {600}}, Case{{9, 2}, {1, 1}}, Case{{0, 3}, {3}}, Case{{3, 0}, {0}}, Case{{1, 6}, {6}}, Case{{6}, {1}}})
    for (DType dt : {kFloat32, kFloat64}) {
      SCOPED_TRACE(shape_str(c.in) + " -> " + shape_str(c.target) + " " + dtype_name(dt));
      Tensor x = randn(c.in, dt);
      Tensor fast = sum_to(x, c.target);
      Tensor general = sum_to(x.detach().requires_grad_(true), c.target).detach();
      EXPECT_EQ(fast.sizes(), Shape(c.target));
      EXPECT_EQ(fast.dtype(), dt);
      EXPECT_TRUE(all_close(fast, general, dt == kFloat32 ? 1e-6 : 1e-13, 1e-6));
    }
  // With grad: the general path records its node (double backward of a broadcast works).
  Tensor x = randn({4, 3}, kFloat64).requires_grad_(true);
  Tensor s = sum_to(x, {3});
  ASSERT_TRUE(s.requires_grad());
  s.backward(ones({3}, kFloat64));
  EXPECT_TRUE(all_close(x.grad(), ones({4, 3}, kFloat64), 0, 0));
}

// ---------------------------------------------------------------- the loops against float64

struct Layout {
  const char* name;
  Shape shape;
  Shape perm;  // empty: contiguous
};

TEST(Reduction, EveryLoopMatchesFloat64) {
  // Shapes crossing the outer loop's 512-column blocks, long rows for the inner loop, and
  // permutations that leave no contiguous reduced or kept dim (the strided fallback).
  const std::vector<Layout> layouts = {
      {"rows", {7, 1500}, {}},         {"cols", {300, 1100}, {}},          {"3d", {6, 40, 70}, {}},       {"t", {600, 5}, {1, 0}},
      {"perm3", {9, 8, 7}, {2, 0, 1}}, {"perm3b", {50, 3, 40}, {1, 2, 0}}, {"size1", {1, 30, 1, 20}, {}},
  };
  for (const Layout& l : layouts) {
    Tensor base = randn_f32(l.shape, 11, 2.0, 0.5);
    Tensor x = l.perm.empty() ? base : permuted(base, l.perm);
    std::vector<Shape> dim_sets = {{}, {0}, {-1}};
    if (x.dim() >= 3) dim_sets.push_back({0, 2});
    if (x.dim() >= 3) dim_sets.push_back({1});
    for (const Shape& dims : dim_sets) {
      SCOPED_TRACE(::testing::Message() << l.name << " dims " << shape_str(dims));
      EXPECT_TRUE(all_close(sum(x, dims, true), reference(x, dims, ref_sum), 1e-6, 1e-5));
      EXPECT_TRUE(all_close(mean(x, dims, true), reference(x, dims, [](auto& g) { return ref_sum(g) / g.size(); }), 1e-6, 1e-6));
      EXPECT_TRUE(all_close(amax(x, dims, true), reference(x, dims, ref_max), 0, 0));
      EXPECT_TRUE(all_close(var(x, dims, 1, true), reference(x, dims, ref_var), 1e-5, 1e-6));
      EXPECT_TRUE(all_close(logsumexp(x, dims, true), reference(x, dims, ref_lse), 1e-6, 1e-5));
      Tensor xd = x.to(kFloat64);
      EXPECT_TRUE(all_close(sum(xd, dims, true), reference(x, dims, ref_sum), 1e-12, 1e-10));
      EXPECT_TRUE(all_close(var(xd, dims, 1, true), reference(x, dims, ref_var), 1e-12, 1e-12));
    }
    for (int64_t d = 0; d < x.dim(); ++d) {
      SCOPED_TRACE(::testing::Message() << l.name << " dim " << d);
      auto [v, i] = max(x, d, true);
      EXPECT_TRUE(all_close(v, reference(x, {d}, ref_max), 0, 0));
      // The index points at the value.
      auto [v2, i2] = min(x, d);
      EXPECT_TRUE(all_close(argmax(x, d, true), i, 0, 0));
      EXPECT_TRUE(all_close(argmin(x, d), i2, 0, 0));
    }
  }
}

TEST(Reduction, IndicesPointAtTheValues) {
  Tensor x = randn_f32({13, 700}, 5);
  auto [v, i] = max(x, 1);
  std::vector<double> xv = values(x), vv = values(v);
  std::vector<int64_t> iv = i.to_vector<int64_t>();
  for (int r = 0; r < 13; ++r) EXPECT_EQ(xv[r * 700 + iv[r]], vv[r]);
  // argmax over everything: the flat index of the first maximum.
  const int64_t flat = argmax(x).item<int64_t>();
  EXPECT_EQ(xv[flat], max(x).item<double>());
  Tensor xt = permuted(x, {1, 0});
  const int64_t flat_t = argmax(xt).item<int64_t>();
  std::vector<double> xtv = values(xt);
  EXPECT_EQ(xtv[flat_t], max(x).item<double>());
}

TEST(Reduction, TiesGiveTheFirstIndex) {
  Tensor x = tensor<float>({1, 3, 3, 0, 3, -1, -1, 2}, {2, 4});
  EXPECT_EQ(max(x, 1).second.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(min(x, 1).second.to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 5);
  // Long rows (the vectorised two-pass row search), ties everywhere.
  std::vector<float> v(3000, 1.0f);
  v[1234] = 5.0f;
  v[2500] = 5.0f;
  v[77] = -2.0f;
  v[2999] = -2.0f;
  Tensor y = tensor<float>(v);
  EXPECT_EQ(argmax(y).item<int64_t>(), 1234);
  EXPECT_EQ(argmin(y, 0).item<int64_t>(), 77);
}

TEST(Reduction, NanPropagates) {
  const float nan = std::nanf("");
  Tensor x = tensor<float>({1, nan, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  auto [v, i] = max(x, 1);
  EXPECT_TRUE(std::isnan(values(v)[0]));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(std::isnan(values(amax(x, {0}))[1]));
  EXPECT_TRUE(std::isnan(values(sum(x, {1}))[0]));
  EXPECT_TRUE(std::isnan(values(logsumexp(x, {1}))[0]));
  EXPECT_TRUE(std::isnan(norm(x, INFINITY).item<float>()));
  std::vector<float> big(1000, 0.5f);
  big[999] = nan;
  EXPECT_TRUE(std::isnan(max(tensor<float>(big)).item<float>()));
  EXPECT_EQ(argmax(tensor<float>(big)).item<int64_t>(), 999);
}

TEST(Reduction, LargeFloat32SumIsAccurate) {
  // 1M float32 values with a large common offset: naive float accumulation would lose ~1e-3.
  Tensor x = randn_f32({1 << 20}, 9, 1.0, 100.0);
  const double exact = ref_sum(values(x));
  EXPECT_NEAR(sum(x).item<double>(), exact, std::fabs(exact) * 1e-7);
  EXPECT_NEAR(mean(x).item<double>(), exact / (1 << 20), 1e-5);
  Tensor m = x.reshape({1024, 1024});
  EXPECT_TRUE(all_close(sum(m, {0}), reference(m, {0}, ref_sum).reshape({1024}), 1e-7, 0));
  EXPECT_TRUE(all_close(sum(m, {1}), reference(m, {1}, ref_sum).reshape({1024}), 1e-7, 0));
  EXPECT_NEAR(var(x, {}).item<double>(), ref_var(values(x)), 1e-5);
  double sq = 0;
  for (double v : values(x)) sq += v * v;
  EXPECT_NEAR(norm(x).item<double>(), std::sqrt(sq), std::sqrt(sq) * 1e-7);
}

TEST(Reduction, NormOrders) {
  Tensor x = tensor<double>({3, -4, 0, 1});
  EXPECT_DOUBLE_EQ(norm(x).item<double>(), std::sqrt(26.0));
  EXPECT_DOUBLE_EQ(norm(x, 1).item<double>(), 8.0);
  EXPECT_DOUBLE_EQ(norm(x, INFINITY).item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(norm(x, -INFINITY).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(norm(x, 0).item<double>(), 3.0);
  EXPECT_NEAR(norm(x, 3).item<double>(), std::cbrt(27.0 + 64.0 + 1.0), 1e-12);
}

}  // namespace
}  // namespace dp
