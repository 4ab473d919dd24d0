// Memory-bound passes over large tensors on the host's threads (blas::parallel_range): dense
// element-wise ops, dtype conversions, copies, fills and whole-tensor norms of at least
// blas::kRangeMin elements (inputs contiguous or single elements), issued by a host thread with dp::set_num_threads(2), are cut into pieces
// that the host GEMM pool takes. The results are the same bits as with one thread; a device worker,
// a small tensor or a strided one stays in the calling thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/blas.h"
#include "dp/core/threads.h"
#include "dp/core/worker.h"
#include "dp/dp.h"

namespace dp {
namespace {

// Just over kRangeMin and not a multiple of a piece or a vector: several pieces and a ragged tail.
const int64_t kN = backend::cpu::blas::kRangeMin * 2 + 77;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

// Runs fn with `threads` host threads, restoring the setting.
Tensor with_threads(int threads, const std::function<Tensor()>& fn) {
  const int before = get_num_threads();
  set_num_threads(threads);
  Tensor r = fn();
  set_num_threads(before);
  return r;
}

struct Case {
  std::string name;
  std::function<Tensor()> run;
};

std::vector<Case> cases() {
  Generator g(7);
  const Tensor a = randn({kN}, kFloat32, &g), b = randn({kN}, kFloat32, &g);
  const Tensor m = randn({kN / 7, 7}, kFloat32, &g);
  const Tensor h = a.to(kBFloat16);
  return {
      {"add", [=] { return add(a, b); }},
      {"mul by a 0-dim tensor", [=] { return mul(a, full({}, 0.5)); }},
      {"gelu tanh, bfloat16", [=] { return gelu(h, "tanh"); }},
      {"float32 to bfloat16", [=] { return a.to(kBFloat16); }},
      {"bfloat16 to float32", [=] { return h.to(kFloat32); }},
      {"float32 to float64", [=] { return a.to(kFloat64); }},
      {"clone", [=] { return a.clone(); }},
      {"copy_ into a fresh tensor", [=] { return empty({kN}).copy_(a); }},
      {"zeros", [] { return zeros({kN}); }},
      {"full", [] { return full({kN}, 3.25); }},
      {"mul_ in place",
       [=] {
         Tensor c = a.clone();
         c.mul_(full({}, 0.75));
         return c;
       }},
      {"norm (2)", [=] { return norm(a); }},
      {"norm (1), bfloat16", [=] { return norm(h, 1.0); }},
      {"norm of a 2-d tensor", [=] { return norm(m); }},
      {"transposed copy (strided: one thread)", [=] { return m.t().contiguous(); }},
  };
}

TEST(ParallelPasses, SameBitsWithOneAndTwoThreads) {
  for (const Case& c : cases()) {
    Tensor one = with_threads(1, c.run), two = with_threads(2, c.run);
    EXPECT_TRUE(same_bits(one, two)) << c.name;
  }
}

TEST(ParallelPasses, LargeDensePassesUseThePoolOnTheHost) {
  Generator g(3);
  const Tensor a = randn({kN}, kFloat32, &g), b = randn({kN}, kFloat32, &g);
  const int before = get_num_threads();
  set_num_threads(2);
  int64_t calls = backend::cpu::blas::pool_calls();
  Tensor c = add(a, b);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1) << "a large add";
  calls = backend::cpu::blas::pool_calls();
  Tensor h = a.to(kBFloat16);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 1) << "a large conversion";
  calls = backend::cpu::blas::pool_calls();
  Tensor c2 = c.clone();
  c2.mul_(full({}, 0.5));
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls + 2) << "a large clone, then an in-place product with a 0-dim tensor";
  calls = backend::cpu::blas::pool_calls();
  add(a.narrow(0, 0, 1000), b.narrow(0, 0, 1000));
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls) << "a small add stays in the calling thread";
  // On a device worker everything runs in the worker's thread.
  calls = backend::cpu::blas::pool_calls();
  Tensor w = worker_for(Device("cpu:0"))->submit([&] { return add(a, b); }).get();
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls) << "a device worker's add";
  EXPECT_TRUE(same_bits(w, c));
  set_num_threads(1);
  calls = backend::cpu::blas::pool_calls();
  add(a, b);
  EXPECT_EQ(backend::cpu::blas::pool_calls(), calls) << "one host thread: no pool";
  set_num_threads(before);
}

TEST(ParallelPasses, ValuesAreRight) {
  // Spot checks against element formulas (the same-bits test compares the two paths; this one
  // that both compute the op).
  Generator g(5);
  const Tensor a = randn({kN}, kFloat32, &g), b = randn({kN}, kFloat32, &g);
  const int before = get_num_threads();
  set_num_threads(2);
  Tensor s = add(a, b), h = a.to(kBFloat16), f = h.to(kFloat32), z = zeros({kN});
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  for (int64_t i : {int64_t{0}, int64_t{65535}, int64_t{65536}, kN / 2, kN - 1}) {
    EXPECT_EQ(s.data_ptr<float>()[i], pa[i] + pb[i]) << i;
    EXPECT_EQ(f.data_ptr<float>()[i], static_cast<float>(BFloat16(pa[i]))) << i;
    EXPECT_EQ(z.data_ptr<float>()[i], 0.0f) << i;
  }
  double ref = 0;
  for (int64_t i = 0; i < kN; ++i) ref += static_cast<double>(pa[i]) * pa[i];
  EXPECT_NEAR(norm(a).item<double>(), std::sqrt(ref), 1e-6 * std::sqrt(ref));
  set_num_threads(before);
}

}  // namespace
}  // namespace dp
