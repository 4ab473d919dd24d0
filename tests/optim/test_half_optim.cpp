// float16/bfloat16 parameters on the CPU: SGD (momentum, Nesterov, weight decay), Adam (amsgrad,
// L2) and AdamW steps against a float32 run that starts from the same 16-bit values and sees the
// same 16-bit gradients. The half run keeps its state in the parameter's dtype (PyTorch's
// foreach=False path does too) and rounds once per stored value, so after a few steps the two
// agree to about the 16-bit type's precision.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "backend/cpu/fused_updates.h"

namespace dp {
namespace {

using optim::Adam;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;
using optim::Optimizer;
using optim::SGD;
using optim::SGDOptions;

// ||a - b|| / ||b|| over float64 copies.
double rel_err(const Tensor& a, const Tensor& b) {
  const auto x = a.to(kFloat64).contiguous().to_vector<double>(), y = b.to(kFloat64).contiguous().to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / den);
}

// Values representable in `half` (drawn in float32 and rounded), returned in `dt`.
Tensor half_values(IntArrayRef shape, uint64_t seed, DType half, DType dt) {
  Generator gen(seed);
  return randn(shape, kFloat32, &gen).to(half).to(dt);
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

// Parameters after `steps` steps in dtype `dt`, every value (start, gradients) representable in
// `half`. A [5, 7] parameter, a [37] one and a non-contiguous view-backed [3, 4] one (transposed
// storage: the update goes through a contiguous copy).
std::vector<Tensor> run(DType half, DType dt, const MakeOptimizer& make, int steps) {
  std::vector<Tensor> ps = {half_values({5, 7}, 1, half, dt).requires_grad_(true), half_values({37}, 2, half, dt).requires_grad_(true),
                            half_values({4, 3}, 3, half, dt).t().detach().requires_grad_(true)};
  auto opt = make(ps);
  for (int k = 0; k < steps; ++k) {
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(half_values(ps[i].sizes(), 100 + 10 * k + i, half, dt));
    opt->step();
  }
  return ps;
}

void expect_half_matches_float(const MakeOptimizer& make, const char* what) {
  for (DType half : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(std::string(what) + " " + dtype_name(half));
    const auto got = run(half, half, make, 4);
    const auto ref = run(half, kFloat32, make, 4);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), half);
      const double err = rel_err(got[i], ref[i]);
      EXPECT_LT(err, half == kBFloat16 ? 1e-2 : 2e-3) << "parameter " << i;
    }
  }
}

TEST(HalfOptim, SgdMomentum) {
  expect_half_matches_float([](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, SGDOptions(0.05).momentum(0.9)); }, "SGD momentum");
  expect_half_matches_float(
      [](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01)); },
      "SGD Nesterov");
  expect_half_matches_float([](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, SGDOptions(0.05)); }, "SGD plain");
}

TEST(HalfOptim, Adam) {
  expect_half_matches_float([](std::vector<Tensor> ps) { return std::make_unique<Adam>(ps, AdamOptions(0.01)); }, "Adam");
  expect_half_matches_float([](std::vector<Tensor> ps) { return std::make_unique<Adam>(ps, AdamOptions(0.01).amsgrad(true).weight_decay(0.1)); },
                            "Adam amsgrad L2");
}

TEST(HalfOptim, AdamW) {
  expect_half_matches_float([](std::vector<Tensor> ps) { return std::make_unique<AdamW>(ps, AdamWOptions(0.01).weight_decay(0.1)); }, "AdamW");
}

TEST(HalfOptim, StateIsInTheParametersDtype) {
  Tensor p = half_values({6}, 7, kBFloat16, kBFloat16).requires_grad_(true);
  SGD sgd({p}, SGDOptions(0.1).momentum(0.9));
  Adam adam({p}, AdamOptions(0.01));
  p.set_grad(half_values({6}, 8, kBFloat16, kBFloat16));
  sgd.step();
  adam.step();
  for (const auto* opt : {static_cast<const Optimizer*>(&sgd), static_cast<const Optimizer*>(&adam)}) {
    ASSERT_FALSE(opt->state().empty());
    for (const auto& [impl, st] : opt->state()) {
      OrderedDict<std::string, Tensor> saved;
      st->save("", saved);
      for (const auto& item : saved)
        if (item.key() != "step") {
          EXPECT_EQ(item.value().dtype(), kBFloat16) << item.key();
        }
    }
  }
}

// One element by hand: the float32 math, one rounding per stored value.
TEST(HalfOptim, SgdKernelRoundsOncePerStore) {
  backend::cpu::fused::SgdScalars s;
  s.lr = 0.1;
  s.momentum = 0.9;
  BFloat16 p(1.0f), g(0.3f), buf(0.5f);
  backend::cpu::fused::sgd_update(&p, &g, &buf, /*buffer_initialized=*/true, 1, s);
  const float b = std::fma(static_cast<float>(g), 1.0f, static_cast<float>(BFloat16(0.5f)) * 0.9f);
  EXPECT_EQ(buf.x, BFloat16(b).x);
  EXPECT_EQ(p.x, BFloat16(std::fma(b, -0.1f, 1.0f)).x);  // the unrounded buffer value
}

TEST(HalfOptim, AdamKernelVectorAndScalarAgreeForFloat) {
  // The float32 path still takes the AVX body for long arrays; the 16-bit types loop per element.
  // Their results for one element equal the float32 computation rounded.
  backend::cpu::fused::AdamScalars s;
  s.lr = 0.01;
  s.step = 3;
  Half p(0.75f), g(-0.2f), m(0.01f), v(0.002f);
  float pf = p, gf = g, mf = m, vf = v;
  backend::cpu::fused::adam_update(&p, &g, &m, &v, nullptr, 1, s);
  backend::cpu::fused::adam_update(&pf, &gf, &mf, &vf, nullptr, 1, s);
  EXPECT_EQ(p.x, Half(pf).x);
  EXPECT_EQ(m.x, Half(mf).x);
  EXPECT_EQ(v.x, Half(vf).x);
}

}  // namespace
}  // namespace dp
