// bfloat16 matrix products on oneDNN (src/backend/cpu/onednn.h) against the float32 path they
// replace (bfloat16 converted to float32, OpenBLAS, rounded once) and against the float64 answer
// for the same bfloat16 values: mm in every operand layout and odd sizes, tiled over host threads
// and run on a device worker, bmm / matmul with batch broadcasting and folding, addmm's alpha and
// beta, linear forward (fused bias) and backward, and the switch. Both paths must be within one
// bfloat16 rounding of the exact answer (the bound of tests/ops/test_bfloat16.cpp: half an ulp
// relative, plus 2^-14 of the tensor's largest value for float32 accumulation), hence within one
// ulp of each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/onednn.h"
#include "dp/core/threads.h"
#include "dp/core/worker.h"
#include "dp/dp.h"
#include "dp/core/backends.h"

namespace dp {
namespace {

constexpr double kHalfUlp = 1.0 / 256;  // half a bfloat16 ulp, relative
constexpr double kUlp = 1.0 / 128;      // one ulp, relative

std::vector<double> values(const Tensor& t) {
  Tensor d = t.detach().to(kFloat64).contiguous();
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

// |actual - expected| <= rtol * |expected| + scale * max|expected| element-wise, same shape.
::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double rtol, double scale) {
  if (actual.sizes() != expected.sizes()) return ::testing::AssertionFailure() << "sizes " << actual.size_str() << " vs " << expected.size_str();
  const std::vector<double> a = values(actual), e = values(expected);
  double m = 0;
  for (double v : e) m = std::max(m, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    const double allowed = rtol * std::abs(e[i]) + scale * m;
    if (!(std::abs(a[i] - e[i]) <= allowed))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << e[i] << " (allowed " << allowed << ")";
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult rounded_once(const Tensor& actual, const Tensor& exact) { return close(actual, exact, kHalfUlp * 1.01, 1.0 / 16384); }
::testing::AssertionResult within_ulp(const Tensor& a, const Tensor& b) { return close(a, b, kUlp * 1.01, 1.0 / 8192); }

bool have_onednn() { return backends::onednn::is_available(); }
#define SKIP_WITHOUT_ONEDNN()                                                                                                           \
  if (!have_onednn())                                                                                                                   \
  GTEST_SKIP() << (backend::cpu::onednn::compiled() ? "oneDNN has no bfloat16 matmul kernel other than its reference loops on this CPU" \
                                                    : "built without oneDNN (libdnnl-dev)")

// fn() computed on oneDNN and on the float32 path (the switch restored after).
struct Both {
  Tensor onednn, fallback;
  int64_t onednn_calls;
};
Both both(const std::function<Tensor()>& fn) {
  const bool before = backends::onednn::enabled();
  backends::onednn::set_enabled(true);
  const int64_t c0 = backend::cpu::onednn::calls();
  Both r;
  r.onednn = fn();
  r.onednn_calls = backend::cpu::onednn::calls() - c0;
  backends::onednn::set_enabled(false);
  r.fallback = fn();
  EXPECT_EQ(backend::cpu::onednn::calls() - c0, r.onednn_calls) << "the float32 path must not call oneDNN";
  backends::onednn::set_enabled(before);
  return r;
}

// Both paths against the float64 answer `exact` and each other.
void expect_both_close(const Both& r, const Tensor& exact, const std::string& what) {
  EXPECT_EQ(r.onednn.dtype(), kBFloat16) << what;
  EXPECT_EQ(r.fallback.dtype(), kBFloat16) << what;
  EXPECT_TRUE(rounded_once(r.onednn, exact)) << what << " (oneDNN)";
  EXPECT_TRUE(rounded_once(r.fallback, exact)) << what << " (float32 path)";
  EXPECT_TRUE(within_ulp(r.onednn, r.fallback)) << what;
}

Tensor bf16_randn(IntArrayRef shape, Generator& g) { return randn(shape, kFloat32, &g).to(kBFloat16); }
Tensor f64(const Tensor& t) { return t.to(kFloat64); }

TEST(BFloat16Gemm, ReportsItsKernel) {
  SKIP_WITHOUT_ONEDNN();
  const std::string impl = backends::onednn::implementation();
  EXPECT_FALSE(impl.empty());
  EXPECT_EQ(impl.rfind("ref", 0), std::string::npos) << impl;
  std::cout << "oneDNN bfloat16 matmul kernel: " << impl << "\n";
  backends::onednn::set_enabled(false);
  EXPECT_EQ(backends::onednn::implementation(), "");
  EXPECT_FALSE(backends::onednn::enabled());
  backends::onednn::set_enabled(true);
  EXPECT_TRUE(backends::onednn::enabled());
}

// Every operand layout (plain, transposed views) and odd sizes, in one thread and tiled over
// threads of the host pool (both tall and wide products are cut).
TEST(BFloat16Gemm, MmEveryLayoutAndShape) {
  SKIP_WITHOUT_ONEDNN();
  const int before = get_num_threads();
  struct S {
    int64_t m, n, k;
  };
  const S shapes[] = {{1, 1, 1}, {3, 5, 7}, {67, 131, 45}, {700, 96, 200}, {96, 700, 200}, {130, 260, 256}};
  Generator g(3);
  for (const S& s : shapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const Tensor a = ta ? bf16_randn({s.k, s.m}, g).t() : bf16_randn({s.m, s.k}, g);
        const Tensor b = tb ? bf16_randn({s.n, s.k}, g).t() : bf16_randn({s.k, s.n}, g);
        const Tensor exact = mm(f64(a), f64(b));
        const std::string what =
            std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb);
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          const int64_t pool = backend::cpu::blas::pool_calls();
          const Both r = both([&] { return mm(a, b); });
          EXPECT_EQ(r.onednn_calls, 1) << what;
          expect_both_close(r, exact, what + " threads=" + std::to_string(threads));
          // Only the large products are cut into tiles (one pool call per path then).
          const bool large = static_cast<double>(s.m) * s.n * s.k >= 8.0 * 1048576.0 && std::max(s.m, s.n) >= 128;
          if (threads == 1) {
            EXPECT_EQ(backend::cpu::blas::pool_calls(), pool) << what;
          } else if (large) {
            EXPECT_GE(backend::cpu::blas::pool_calls(), pool + 1) << what;
          }
        }
      }
    }
  }
  // Operands with a leading dimension larger than the matrix (slices of wider tensors): oneDNN's
  // AMX kernels need dense matrices, so these are copied first; the values are the same.
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const Tensor a = bf16_randn({150, 300}, g).narrow(1, 7, 260), b = bf16_randn({260, 400}, g).narrow(1, 3, 330);
    const Tensor at = bf16_randn({270, 150}, g).narrow(0, 5, 260).t();
    for (const Tensor& lhs : {a, at}) {
      const Both r = both([&] { return mm(lhs, b); });
      EXPECT_EQ(r.onednn_calls, 1);
      expect_both_close(r, mm(f64(lhs), f64(b)), "slices, threads=" + std::to_string(threads));
    }
  }
  set_num_threads(before);
}

// bmm and matmul: batched products (one primitive for the batch, its items spread over the
// threads), batch dims broadcast from either side, transposed batch views, and [B, n, k] @ [k, m]
// folded into one product.
TEST(BFloat16Gemm, BatchedBroadcastAndFolded) {
  SKIP_WITHOUT_ONEDNN();
  const int before = get_num_threads();
  Generator g(5);
  struct Case {
    std::string name;
    Tensor a, b;
  };
  std::vector<Case> cases = {
      {"bmm [4,33,40]@[4,40,20]", bf16_randn({4, 33, 40}, g), bf16_randn({4, 40, 20}, g)},
      {"bmm transposed views", bf16_randn({6, 40, 33}, g).transpose(1, 2), bf16_randn({6, 20, 40}, g).transpose(1, 2)},
      {"matmul [2,3,16,8]@[8,12] folded", bf16_randn({2, 3, 16, 8}, g), bf16_randn({8, 12}, g)},
      {"matmul [16,8]@[5,8,12] broadcast A", bf16_randn({16, 8}, g), bf16_randn({5, 8, 12}, g)},
      {"matmul [3,1,16,8]@[4,8,12] broadcast both", bf16_randn({3, 1, 16, 8}, g), bf16_randn({4, 8, 12}, g)},
      {"bmm attention [48,64,64]@[48,64,64]", bf16_randn({48, 64, 64}, g), bf16_randn({48, 64, 64}, g)},
      {"bmm two large [2,300,200]@[2,200,300]", bf16_randn({2, 300, 200}, g), bf16_randn({2, 200, 300}, g)},
      {"bmm heads sliced from a wider tensor", bf16_randn({8, 16, 96}, g).narrow(2, 32, 32), bf16_randn({8, 96, 16}, g).narrow(1, 0, 32)},
  };
  for (const Case& c : cases) {
    const Tensor exact = matmul(f64(c.a), f64(c.b));
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const Both r = both([&] { return matmul(c.a, c.b); });
      EXPECT_GE(r.onednn_calls, 1) << c.name;
      expect_both_close(r, exact, c.name + " threads=" + std::to_string(threads));
    }
  }
  set_num_threads(before);
}

// addmm's alpha and beta (oneDNN's output scale and sum post-op) and baddbmm-like accumulation:
// C = beta * self + alpha * A @ B, rounded once.
TEST(BFloat16Gemm, AddmmAlphaBeta) {
  SKIP_WITHOUT_ONEDNN();
  Generator g(7);
  const Tensor self = bf16_randn({37, 53}, g), a = bf16_randn({37, 29}, g), b = bf16_randn({29, 53}, g);
  for (auto [beta, alpha] : std::vector<std::pair<double, double>>{{1, 1}, {0.5, 2}, {0, 0.25}, {-1.5, 1}}) {
    const Tensor exact = addmm(f64(self), f64(a), f64(b), beta, alpha);
    const Both r = both([&] { return addmm(self, a, b, beta, alpha); });
    EXPECT_EQ(r.onednn_calls, 1);
    expect_both_close(r, exact, "beta=" + std::to_string(beta) + " alpha=" + std::to_string(alpha));
  }
}

// linear: the fused-bias forward, a broadcast one-value bias, no bias, a 3-D input and a
// transposed one; and the backward GEMMs (dx = G @ W, dw = G^T @ X) against the float32 path's.
TEST(BFloat16Gemm, LinearForwardAndBackward) {
  SKIP_WITHOUT_ONEDNN();
  Generator g(9);
  const Tensor w = bf16_randn({48, 40}, g), bias = bf16_randn({48}, g), one = bf16_randn({1}, g);
  struct Case {
    std::string name;
    Tensor x, b;
  };
  const std::vector<Case> cases = {
      {"bias", bf16_randn({70, 40}, g), bias},
      {"one-value bias", bf16_randn({70, 40}, g), one},
      {"no bias", bf16_randn({70, 40}, g), Tensor()},
      {"3-D input", bf16_randn({2, 35, 40}, g), bias},
      {"transposed input", bf16_randn({40, 70}, g).t(), bias},
  };
  for (const Case& c : cases) {
    const Tensor exact = linear(f64(c.x), f64(w), c.b.defined() ? f64(c.b) : Tensor());
    const Both fwd = both([&] { return linear(c.x, w, c.b); });
    EXPECT_EQ(fwd.onednn_calls, 1) << c.name;
    expect_both_close(fwd, exact, c.name);

    // Backward: the gradients on both paths, for a fixed bfloat16 output gradient.
    const Tensor grad_out = bf16_randn(exact.sizes(), g);
    auto grads = [&] {
      Tensor x = c.x.detach().requires_grad_(true), wt = w.detach().requires_grad_(true);
      Tensor b = c.b.defined() ? c.b.detach().requires_grad_(true) : Tensor();
      linear(x, wt, b).backward(grad_out);
      return std::vector<Tensor>{x.grad(), wt.grad()};
    };
    const bool before = backends::onednn::enabled();
    backends::onednn::set_enabled(true);
    const int64_t c0 = backend::cpu::onednn::calls();
    const std::vector<Tensor> on = grads();
    EXPECT_EQ(backend::cpu::onednn::calls() - c0, 3) << c.name << ": forward, dx and dw on oneDNN";
    backends::onednn::set_enabled(false);
    const std::vector<Tensor> off = grads();
    backends::onednn::set_enabled(before);
    const Tensor g64 = f64(grad_out).reshape({-1, 48});
    const Tensor dx_exact = mm(g64, f64(w)).reshape(c.x.sizes()), dw_exact = mm(g64.t(), f64(c.x).reshape({-1, 40}));
    for (size_t i = 0; i < 2; ++i) {
      const Tensor& ex = i == 0 ? dx_exact : dw_exact;
      EXPECT_TRUE(rounded_once(on[i], ex)) << c.name << (i == 0 ? " dx" : " dw") << " (oneDNN)";
      EXPECT_TRUE(rounded_once(off[i], ex)) << c.name << (i == 0 ? " dx" : " dw") << " (float32 path)";
      EXPECT_TRUE(within_ulp(on[i], off[i])) << c.name << (i == 0 ? " dx" : " dw");
    }
  }
}

// A device worker's product runs in the worker's thread alone (no pool call), whatever the host
// setting; several workers and the host at once all get right answers.
TEST(BFloat16Gemm, WorkerKeepsToItsThread) {
  SKIP_WITHOUT_ONEDNN();
  const int before = get_num_threads();
  set_num_threads(2);
  Generator g(13);
  const Tensor a = bf16_randn({256, 512}, g), b = bf16_randn({512, 384}, g);  // 50M multiply-adds: tiled on the host
  const Tensor exact = mm(f64(a), f64(b));
  const int64_t pool = backend::cpu::blas::pool_calls();
  const Tensor host = mm(a, b);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), pool + 1);
  EXPECT_TRUE(rounded_once(host, exact));
  std::vector<std::future<Tensor>> results;
  for (int d = 0; d < 2; ++d) results.push_back(worker_for(Device::cpu(d))->submit([&] { return mm(a, b); }));
  const Tensor host_again = mm(a, b);
  for (auto& r : results) EXPECT_TRUE(rounded_once(r.get(), exact));
  EXPECT_TRUE(rounded_once(host_again, exact));
  EXPECT_LE(backend::cpu::blas::pool_calls(), pool + 2);  // the host's second call at most
  const int64_t after_host = backend::cpu::blas::pool_calls();
  EXPECT_TRUE(rounded_once(worker_for(Device::cpu(0))->submit([&] { return mm(a, b); }).get(), exact));
  EXPECT_EQ(backend::cpu::blas::pool_calls(), after_host);  // the worker's call used no pool thread
  set_num_threads(before);
}

// Switched off, bfloat16 products take the float32 path (and float16 always does).
TEST(BFloat16Gemm, SwitchAndFloat16) {
  Generator g(17);
  const Tensor a = bf16_randn({20, 30}, g), b = bf16_randn({30, 10}, g);
  backends::onednn::set_enabled(false);
  int64_t c0 = backend::cpu::onednn::calls();
  const Tensor off = mm(a, b);
  EXPECT_EQ(backend::cpu::onednn::calls(), c0);
  backends::onednn::set_enabled(true);
  EXPECT_TRUE(rounded_once(off, mm(f64(a), f64(b))));
  c0 = backend::cpu::onednn::calls();
  const Tensor h = mm(a.to(kFloat16), b.to(kFloat16));
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(backend::cpu::onednn::calls(), c0);
  const Tensor on = mm(a, b);
  EXPECT_EQ(backend::cpu::onednn::calls(), c0 + (have_onednn() ? 1 : 0));
  EXPECT_TRUE(within_ulp(on, off));
}

}  // namespace
}  // namespace dp
