// CUDA tensors against the CPU: transfers in every direction, factories, Philox RNG, every routed
// element-wise op (float32/float64/float16/bfloat16, broadcasting, non-contiguous), activation
// backward, and the device-mismatch error. Every test needs a GPU and skips, saying why, without one.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "backend/elementwise_kernels.h"
#include "support/cuda.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#include "backend/cuda/transfer.h"
#endif

namespace dp {
namespace {

const Device kGpu = Device::cuda(0);

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(Device::cpu(), kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

double tol_for(DType dt) {
  switch (dt) {
    case DType::Float64:
      return 1e-12;
    case DType::Float32:
      return 1e-5;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    default:
      return 0.0;
  }
}

// The CUDA result equals the CPU one (relative error per dtype; exact for integers and bool).
void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  const auto g = values(gpu), c = values(cpu);
  const double tol = tol_for(cpu.dtype());
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    if (std::isinf(c[i])) {
      EXPECT_EQ(g[i], c[i]) << what << " element " << i;
      continue;
    }
    EXPECT_LE(std::abs(g[i] - c[i]), tol * std::max(1.0, std::abs(c[i]))) << what << " element " << i << ": " << g[i] << " vs " << c[i];
  }
}

Tensor sample(IntArrayRef sizes, DType dt, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Generator g(seed);
  Tensor t = rand(sizes, TensorOptions().dtype(kFloat64), &g);
  return dp::add(dp::mul(t, hi - lo), lo).to(dt);
}

TEST(CudaTransfer, RoundTripsEveryDirection) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool}) {
    Tensor h = sample({3, 5}, kFloat32, 1, -10, 10).to(dt);
    Tensor d = h.to(kGpu);
    EXPECT_TRUE(d.is_cuda());
    Tensor back = d.cpu();
    EXPECT_TRUE(dp::equal(back, h)) << dtype_name(dt);
    // dtype-converting transfers both ways
    EXPECT_TRUE(dp::equal(h.to(kGpu, kFloat64).cpu(), h.to(kFloat64))) << dtype_name(dt);
    EXPECT_TRUE(dp::equal(d.to(Device::cpu(), kFloat64), h.to(kFloat64))) << dtype_name(dt);
    // device -> device of another dtype
    EXPECT_TRUE(dp::equal(d.to(kFloat32).cpu(), h.to(kFloat32))) << dtype_name(dt);
  }
}

TEST(CudaTransfer, NonContiguousSourcesAndDestinations) {
  DP_REQUIRE_GPU();
  Tensor h = sample({4, 6}, kFloat32, 2);
  Tensor ht = h.t();  // strided host source
  EXPECT_TRUE(dp::equal(ht.to(kGpu).cpu(), ht));
  Tensor d = h.to(kGpu);
  Tensor dt = d.t();  // strided device source
  EXPECT_FALSE(dt.is_contiguous());
  EXPECT_TRUE(dp::equal(dt.cpu(), ht));
  Tensor dc = dt.contiguous();
  EXPECT_TRUE(dc.is_contiguous());
  EXPECT_TRUE(dc.is_cuda());
  EXPECT_TRUE(dp::equal(dc.cpu(), ht.contiguous()));
  // copy_ into a strided device view from the host, and into a strided host view from the device
  Tensor dz = zeros({6, 4}, TensorOptions().device(kGpu));
  Tensor view = dz.t();
  view.copy_(h);
  EXPECT_TRUE(dp::equal(dz.cpu(), h.t().contiguous()));
  Tensor hz = zeros({6, 4});
  Tensor hview = hz.t();
  hview.copy_(d);
  EXPECT_TRUE(dp::equal(hz, h.t().contiguous()));
  // broadcasting copy_ on the device
  Tensor row = sample({4}, kFloat32, 3).to(kGpu);
  Tensor dst = empty({3, 4}, TensorOptions().device(kGpu));
  dst.copy_(row);
  EXPECT_TRUE(dp::equal(dst.cpu(), row.cpu().expand({3, 4}).contiguous()));
}

TEST(CudaTransfer, NonBlockingFromPinnedMemory) {
  DP_REQUIRE_GPU();
#if DP_HAVE_CUDA
  Tensor pinned = backend::cuda::empty_pinned({1 << 16}, kFloat32);
  EXPECT_TRUE(backend::cuda::is_pinned(pinned.data_ptr()));
  EXPECT_FALSE(backend::cuda::is_pinned(zeros({4}).data_ptr()));
  Tensor src = sample({1 << 16}, kFloat32, 4);
  pinned.copy_(src);
  Tensor d = pinned.to(kGpu, /*non_blocking=*/true);
  Tensor out = backend::cuda::empty_pinned({1 << 16}, kFloat32);
  out.copy_(d, /*non_blocking=*/true);
  cuda::current_stream(0).synchronize();  // the caller's duty after non_blocking into pinned memory
  EXPECT_TRUE(dp::equal(out, src));
  // pageable non_blocking: still correct (goes through staging / waits)
  EXPECT_TRUE(dp::equal(src.to(kGpu, true).cpu(), src));
#endif
}

TEST(CudaTransfer, ItemAndPrinting) {
  DP_REQUIRE_GPU();
  Tensor d = full({}, 2.5, TensorOptions().device(kGpu));
  EXPECT_EQ(d.item().to_double(), 2.5);
  Tensor v = tensor({1.0, 2.0}, TensorOptions().device(kGpu));
  const std::string s = v.to_string();
  EXPECT_NE(s.find("device='cuda:0'"), std::string::npos) << s;
  EXPECT_NE(s.find("2."), std::string::npos) << s;
}

TEST(CudaTransfer, BetweenDevices) {
  DP_REQUIRE_GPU();
#if DP_HAVE_CUDA
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices (found " << cuda::device_count() << ")";
  Tensor h = sample({5, 7}, kFloat32, 5);
  Tensor d1 = h.to(Device::cuda(0)).to(Device::cuda(1));
  EXPECT_EQ(d1.device(), Device::cuda(1));
  EXPECT_TRUE(dp::equal(d1.cpu(), h));
  EXPECT_TRUE(dp::equal(h.to(Device::cuda(1)).t().to(Device::cuda(0)).cpu(), h.t()));
#endif
}

TEST(CudaFactories, MatchTheCpu) {
  DP_REQUIRE_GPU();
  const TensorOptions g = TensorOptions().device(kGpu);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kUInt8, kBool}) {
    EXPECT_TRUE(dp::equal(zeros({3, 2}, g.dtype(dt)).cpu(), zeros({3, 2}, TensorOptions().dtype(dt)))) << dtype_name(dt);
    EXPECT_TRUE(dp::equal(ones({3, 2}, g.dtype(dt)).cpu(), ones({3, 2}, TensorOptions().dtype(dt)))) << dtype_name(dt);
    EXPECT_TRUE(dp::equal(full({5}, 1, g.dtype(dt)).cpu(), full({5}, 1, TensorOptions().dtype(dt)))) << dtype_name(dt);
  }
  Tensor d = sample({2, 3}, kFloat32, 6).to(kGpu);
  EXPECT_TRUE(zeros_like(d).is_cuda());
  EXPECT_TRUE(dp::equal(ones_like(d).cpu(), ones({2, 3})));
  EXPECT_TRUE(dp::equal(full_like(d, -3.5).cpu(), full({2, 3}, -3.5)));
  EXPECT_EQ(empty_like(d).device(), kGpu);
  EXPECT_TRUE(dp::equal(arange(0, 10, 3, g.dtype(kInt64)).cpu(), arange(0, 10, 3, TensorOptions().dtype(kInt64))));
  EXPECT_TRUE(dp::equal(arange(0.5, 2.0, 0.25, g.dtype(kFloat32)).cpu(), arange(0.5, 2.0, 0.25, TensorOptions().dtype(kFloat32))));
  // fill_ of a strided device view
  Tensor z = zeros({4, 4}, g);
  Tensor col = z.select(1, 2);
  col.fill_(7.0);
  Tensor ref = zeros({4, 4});
  ref.select(1, 2).fill_(7.0);
  EXPECT_TRUE(dp::equal(z.cpu(), ref));
}

TEST(CudaRandom, SeededAndDeterministic) {
  DP_REQUIRE_GPU();
  const TensorOptions g = TensorOptions().device(kGpu);
  manual_seed(123);
  Tensor a = rand({1000}, g);
  Tensor an = randn({1001}, g);
  manual_seed(123);
  Tensor b = rand({1000}, g);
  Tensor bn = randn({1001}, g);
  EXPECT_TRUE(dp::equal(a.cpu(), b.cpu()));
  EXPECT_TRUE(dp::equal(an.cpu(), bn.cpu()));
  Tensor c = rand({1000}, g);
  EXPECT_FALSE(dp::equal(a.cpu(), c.cpu()));  // the generator moved on
  auto v = values(a);
  for (double x : v) {
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
  // The device's default stream differs from the CPU's (as in PyTorch) ...
  manual_seed(123);
  EXPECT_FALSE(dp::equal(rand({1000}).to(kGpu).cpu(), a.cpu()));
  // ... but the same Generator state gives the CPU's uniforms and Bernoulli draws exactly and its
  // normals to rounding.
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Generator g1(77), g2(77);
    EXPECT_TRUE(dp::equal(rand({333}, g.dtype(dt), &g1).cpu(), rand({333}, TensorOptions().dtype(dt), &g2))) << dtype_name(dt);
    Generator g3(78), g4(78);
    expect_close(randn({333}, g.dtype(dt), &g3), randn({333}, TensorOptions().dtype(dt), &g4), "randn");
  }
  Generator g5(79), g6(79);
  Tensor bd = empty({500}, g);
  Tensor bh = empty({500});
  bernoulli_(bd, 0.3, &g5);
  bernoulli_(bh, 0.3, &g6);
  EXPECT_TRUE(dp::equal(bd.cpu(), bh));
  // randint / randperm: host draws from the device's generator, copied over
  Generator g7(80), g8(80);
  Tensor ri = randint(-5, 17, {64}, g.dtype(kInt64), &g7);
  EXPECT_TRUE(ri.is_cuda());
  EXPECT_TRUE(dp::equal(ri.cpu(), randint(-5, 17, {64}, TensorOptions().dtype(kInt64), &g8)));
  Generator g9(81), g10(81);
  EXPECT_TRUE(dp::equal(randperm(50, g.dtype(kInt64), &g9).cpu(), randperm(50, TensorOptions().dtype(kInt64), &g10)));
}

TEST(CudaRandom, DropoutDrawsTheCpuMaskFromOneGeneratorState) {
  DP_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor h = sample({37, 11}, dt, 8);
    Tensor d = h.to(kGpu);
    Generator g1(91), g2(91);
    Tensor yh = dropout(h, 0.3, true, &g1);
    Tensor yd = dropout(d, 0.3, true, &g2);
    EXPECT_TRUE(dp::equal(yd.cpu(), yh)) << dtype_name(dt);
  }
  // in place, and p = 1
  Generator g3(92), g4(92);
  Tensor h = sample({100}, kFloat32, 10), d = h.to(kGpu);
  dropout_(h, 0.5, true, &g3);
  dropout_(d, 0.5, true, &g4);
  EXPECT_TRUE(dp::equal(d.cpu(), h));
  EXPECT_TRUE(dp::equal(dropout(d, 1.0, true).cpu(), zeros({100})));
}

// ---------------------------------------------------------------- element-wise ops

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

TEST(CudaElementwise, UnaryOpsMatchTheCpu) {
  DP_REQUIRE_GPU();
  const std::vector<std::pair<std::string, Unary>> ops = {
      {"neg", [](const Tensor& x) { return dp::neg(x); }},
      {"abs", [](const Tensor& x) { return dp::abs(x); }},
      {"sign", [](const Tensor& x) { return dp::sign(x); }},
      {"square", [](const Tensor& x) { return dp::square(x); }},
      {"relu", [](const Tensor& x) { return dp::relu(x); }},
      {"exp", [](const Tensor& x) { return dp::exp(x); }},
      {"log", [](const Tensor& x) { return dp::log(dp::abs(x)); }},
      {"log1p", [](const Tensor& x) { return dp::log1p(dp::abs(x)); }},
      {"sqrt", [](const Tensor& x) { return dp::sqrt(dp::abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return dp::rsqrt(dp::add(dp::abs(x), 0.1)); }},
      {"sin", [](const Tensor& x) { return dp::sin(x); }},
      {"cos", [](const Tensor& x) { return dp::cos(x); }},
      {"reciprocal", [](const Tensor& x) { return dp::reciprocal(dp::add(dp::abs(x), 0.1)); }},
      {"sigmoid", [](const Tensor& x) { return dp::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return dp::tanh(x); }},
      {"gelu", [](const Tensor& x) { return dp::gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return dp::gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return dp::silu(x); }},
      {"softplus", [](const Tensor& x) { return dp::softplus(dp::mul(x, 15.0)); }},
      {"clamp", [](const Tensor& x) { return dp::clamp(x, -0.5, 0.7); }},
      {"clamp_min", [](const Tensor& x) { return dp::clamp(x, -0.5, std::nullopt); }},
      {"pow2", [](const Tensor& x) { return dp::pow(x, 2); }},
      {"pow_general", [](const Tensor& x) { return dp::pow(dp::abs(x), 1.7); }},
      {"rsub", [](const Tensor& x) { return dp::rsub(x, 3.0); }},
      {"logical_not", [](const Tensor& x) { return dp::logical_not(dp::gt(x, 0.0)); }},
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor h = sample({7, 33}, dt, 10);
    Tensor d = h.to(kGpu);
    for (const auto& [name, f] : ops) {
      expect_close(f(d), f(h), name + " " + dtype_name(dt));
      // non-contiguous input (a transposed view)
      expect_close(f(d.t()), f(h.t()), name + " transposed " + dtype_name(dt));
    }
  }
  // integer unary ops
  Tensor hi = sample({50}, kFloat32, 11, -100, 100).to(kInt64);
  Tensor di = hi.to(kGpu);
  for (const char* name : {"neg", "abs", "sign", "square", "relu"}) {
    for (const auto& [n, f] : ops)
      if (n == name) {
        EXPECT_TRUE(dp::equal(f(di).cpu(), f(hi))) << name;
      }
  }
}

TEST(CudaElementwise, BinaryOpsWithBroadcastingMatchTheCpu) {
  DP_REQUIRE_GPU();
  const std::vector<std::pair<std::string, Binary>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return dp::add(a, b); }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return dp::add(a, b, 2.5); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return dp::sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return dp::mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return dp::div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return dp::pow(dp::abs(a), b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return dp::maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return dp::minimum(a, b); }},
      {"lerp", [](const Tensor& a, const Tensor& b) { return dp::lerp(a, b.expand_as(a), 0.3); }},
      {"lerp_far", [](const Tensor& a, const Tensor& b) { return dp::lerp(a, b.expand_as(a), 0.8); }},
      {"where", [](const Tensor& a, const Tensor& b) { return dp::where(dp::gt(a, b), a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return dp::eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return dp::ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return dp::lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return dp::le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return dp::gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return dp::ge(a, b); }},
      {"add_scalar", [](const Tensor& a, const Tensor&) { return dp::add(a, 1.5); }},
      {"mul_scalar", [](const Tensor& a, const Tensor&) { return dp::mul(a, -2.0); }},
      {"div_scalar", [](const Tensor& a, const Tensor&) { return dp::div(a, 3.0); }},
      {"lt_scalar", [](const Tensor& a, const Tensor&) { return dp::lt(a, 0.25); }},
  };
  // (a shape, b shape): same, row broadcast, column broadcast, both broadcast, 0-dim.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5, 9}, {5, 9}}, {{5, 9}, {9}}, {{5, 9}, {5, 1}}, {{4, 1, 6}, {3, 1}}, {{8, 3}, {}}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const auto& [sa, sb] : shapes) {
      Tensor ha = sample(sa, dt, 20), hb = sample(sb, dt, 21, 0.5, 2.0);
      Tensor da = ha.to(kGpu), db = hb.to(kGpu);
      for (const auto& [name, f] : ops) {
        // lerp's `end` must broadcast to a's shape (expand_as), which (3, 1) against (4, 1, 6) does not
        if (name.rfind("lerp", 0) == 0 && sa.size() == 3) continue;
        expect_close(f(da, db), f(ha, hb), name + " " + dtype_name(dt));
      }
    }
    // non-contiguous operands: transposed and sliced views
    Tensor ha = sample({6, 10}, dt, 22), hb = sample({10, 6}, dt, 23, 0.5, 2.0);
    Tensor da = ha.to(kGpu), db = hb.to(kGpu);
    for (const auto& [name, f] : ops) {
      expect_close(f(da, db.t()), f(ha, hb.t()), name + " strided " + dtype_name(dt));
      expect_close(f(da.slice(1, 0, 9, 3), db.t().slice(1, 1, 10, 3)), f(ha.slice(1, 0, 9, 3), hb.t().slice(1, 1, 10, 3)),
                   name + " sliced " + dtype_name(dt));
    }
  }
  // integers (exact, wrapping)
  Tensor ia = sample({40}, kFloat32, 24, -1000, 1000).to(kInt64), ib = sample({40}, kFloat32, 25, 1, 9).to(kInt64);
  for (const char* name : {"add", "sub", "mul", "maximum", "minimum", "eq", "lt", "ge", "add_scalar", "lt_scalar"}) {
    for (const auto& [n, f] : ops)
      if (n == name) {
        EXPECT_TRUE(dp::equal(f(ia.to(kGpu), ib.to(kGpu)).cpu(), f(ia, ib))) << name;
      }
  }
  // mixed dtypes promote as on the CPU
  Tensor hf = sample({3, 4}, kFloat32, 26);
  Tensor hl = ia.slice(0, 0, 4);
  expect_close(dp::add(hf.to(kGpu), hl.to(kGpu)), dp::add(hf, hl), "add float32 + int64");
  expect_close(dp::mul(hf.to(kGpu).to(kFloat16), hf.to(kGpu)), dp::mul(hf.to(kFloat16), hf), "mul float16 * float32");
}

TEST(CudaElementwise, InPlaceAndTernaryOps) {
  DP_REQUIRE_GPU();
  Tensor h = sample({4, 8}, kFloat32, 30), o = sample({8}, kFloat32, 31, 0.5, 2);
  Tensor d = h.to(kGpu), od = o.to(kGpu);
  Tensor hc = h.clone(), dc = d.clone();
  hc.add_(o, 0.5);
  dc.add_(od, 0.5);
  expect_close(dc, hc, "add_");
  hc.mul_(o);
  dc.mul_(od);
  expect_close(dc, hc, "mul_");
  hc.clamp_(-0.3, 0.4);
  dc.clamp_(-0.3, 0.4);
  expect_close(dc, hc, "clamp_");
  hc.addcmul_(hc, o, 0.5);
  dc.addcmul_(dc, od, 0.5);
  expect_close(dc, hc, "addcmul_");
  hc.addcdiv_(h, o, 0.5);
  dc.addcdiv_(d, od, 0.5);
  expect_close(dc, hc, "addcdiv_");
  // in place into a strided view
  Tensor hv = h.clone(), dv = d.clone();
  hv.t().neg_();
  dv.t().neg_();
  expect_close(dv, hv, "neg_ on a transposed view");
}

// The backward kernels are called directly: autograd's engine runs a node on its device's worker,
// and CUDA devices have none yet (worker_for(cuda:i) throws), so backward() on CUDA tensors is a
// later phase.
TEST(CudaElementwise, ActivationBackwardKernelsMatchTheCpu) {
  DP_REQUIRE_GPU();
  using backend::ActGrad;
  const std::vector<std::pair<std::string, ActGrad>> grads = {{"relu", ActGrad::ReluFromOut},   {"sigmoid", ActGrad::SigmoidFromOut},
                                                              {"tanh", ActGrad::TanhFromOut},   {"gelu", ActGrad::Gelu},
                                                              {"gelu_tanh", ActGrad::GeluTanh}, {"silu", ActGrad::Silu},
                                                              {"softplus", ActGrad::Softplus}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor g = sample({6, 7}, dt, 40), x = sample({6, 7}, dt, 41, -4, 4);
    Tensor gd = g.to(kGpu), xd = x.to(kGpu);
    for (const auto& [name, op] : grads) {
      Tensor oh = empty({6, 7}, TensorOptions().dtype(dt)), od = empty({6, 7}, TensorOptions().dtype(dt).device(kGpu));
      backend::activation_backward_kernel(oh.device().type, op, oh, g, x);
      backend::activation_backward_kernel(od.device().type, op, od, gd, xd);
      expect_close(od, oh, name + " backward " + dtype_name(dt));
      // strided operands
      Tensor ot = empty({7, 6}, TensorOptions().dtype(dt)), otd = empty({7, 6}, TensorOptions().dtype(dt).device(kGpu));
      backend::activation_backward_kernel(ot.device().type, op, ot, g.t(), x.t());
      backend::activation_backward_kernel(otd.device().type, op, otd, gd.t(), xd.t());
      expect_close(otd, ot, name + " backward strided " + dtype_name(dt));
    }
    Tensor y = sample({6, 7}, dt, 42);
    for (bool is_max : {true, false}) {
      Tensor oh = empty({6, 7}, TensorOptions().dtype(dt)), od = empty({6, 7}, TensorOptions().dtype(dt).device(kGpu));
      Tensor tie = x.clone();
      tie.select(0, 0).copy_(y.select(0, 0));  // a row of ties (weight 0.5)
      backend::extremum_weight_kernel(oh.device().type, oh, tie, y, is_max);
      backend::extremum_weight_kernel(od.device().type, od, tie.to(kGpu), y.to(kGpu), is_max);
      expect_close(od, oh, std::string("extremum weight ") + (is_max ? "max " : "min ") + dtype_name(dt));
    }
    Tensor mh = empty({6, 7}, TensorOptions().dtype(kBool)), md = empty({6, 7}, TensorOptions().dtype(kBool).device(kGpu));
    backend::clamp_mask_kernel(mh.device().type, mh, x, Scalar(-1.0), std::nullopt);
    backend::clamp_mask_kernel(md.device().type, md, xd, Scalar(-1.0), std::nullopt);
    EXPECT_TRUE(dp::equal(md.cpu(), mh)) << dtype_name(dt);
  }
}

TEST(CudaElementwise, DeviceMismatchIsAClearError) {
  DP_REQUIRE_GPU();
  Tensor d = ones({3}, TensorOptions().device(kGpu));
  Tensor h = ones({3});
  try {
    (void)dp::add(d, h);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("xpected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)dp::mul(h, d), DeviceError);
  EXPECT_THROW(h.add_(d), DeviceError);
  // a CPU 0-dim tensor with a CUDA tensor is allowed (as PyTorch)
  Tensor s = full({}, 2.0);
  expect_close(dp::mul(d, s), dp::mul(h, s), "cuda * cpu scalar tensor");
  expect_close(dp::add(s, d), dp::add(s, h), "cpu scalar tensor + cuda");
}

TEST(CudaElementwise, EqualAndAllcloseOnDeviceTensors) {
  DP_REQUIRE_GPU();
  Tensor h = sample({5, 6}, kFloat32, 60);
  Tensor d = h.to(kGpu);
  EXPECT_TRUE(dp::equal(d, h.to(kGpu)));
  EXPECT_FALSE(dp::equal(d, dp::add(d, 1e-3)));
  EXPECT_TRUE(dp::allclose(d, dp::add(d, 1e-7)));
  EXPECT_FALSE(dp::allclose(d, dp::add(d, 1.0)));
}

TEST(CudaElementwise, LargeTensorsAndEmptyOnes) {
  DP_REQUIRE_GPU();
  Tensor h = sample({1 << 20}, kFloat32, 50);
  Tensor d = h.to(kGpu);
  expect_close(dp::sigmoid(d), dp::sigmoid(h), "sigmoid 1M");
  Tensor e = empty({0, 3}, TensorOptions().device(kGpu));
  EXPECT_EQ(dp::add(e, e).numel(), 0);
  EXPECT_EQ(e.cpu().numel(), 0);
}

}  // namespace
}  // namespace dp
