#pragma once
// Helpers of the GPU tests that check an op on a CUDA device against the CPU: random inputs, a
// relative-norm comparison, a poisoned allocator cache (unwritten outputs read NaN), and a runner
// that evaluates a function and its gradients on either device.
#include <gtest/gtest.h>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>
#include "dp/dp.h"
#if DP_HAVE_CUDA
#include "dp/cuda/matmul.h"
#endif

namespace dp::test {

inline const Device kGpu = Device::cuda(0);

// Uniform in [lo, hi), drawn in float64 on the host from `seed`, converted to dt.
inline Tensor sample(IntArrayRef sizes, DType dt, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Generator g(seed);
  Tensor t = rand(sizes, TensorOptions().dtype(kFloat64), &g);
  return dp::add(dp::mul(t, hi - lo), lo).to(dt);
}

// The elements of t (any device, any dtype) as float64 on the host, in row-major order.
inline std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(Device::cpu(), kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// ||got - ref|| / ||ref|| in float64 (||got - ref|| when ref is all zeros). A NaN in got makes it
// infinite with nan_as_infinity, else it propagates (NaN) like any other NaN.
inline double rel_err(const Tensor& got, const Tensor& ref, bool nan_as_infinity = true) {
  const auto g = values(got), r = values(ref);
  double num = 0, den = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (nan_as_infinity && std::isnan(g[i])) return std::numeric_limits<double>::infinity();
    num += (g[i] - r[i]) * (g[i] - r[i]);
    den += r[i] * r[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// A CUDA result against a reference (any device, dtype not checked): rel_err at most tol.
inline void expect_close(const Tensor& gpu, const Tensor& ref, double tol, const std::string& what) {
  ASSERT_TRUE(gpu.defined()) << what;
  ASSERT_TRUE(ref.defined()) << what;
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.sizes(), ref.sizes()) << what;
  EXPECT_LE(rel_err(gpu, ref), tol) << what;
}

// A CUDA result against the CPU's, same dtype and shape: no NaN where the CPU has a number (an
// unwritten element), ||gpu - cpu|| / ||cpu|| (||gpu - cpu|| when cpu is all zeros) at most tol.
// Where the CPU has NaN the GPU must have NaN too with nan_where_cpu_nan; without it a CPU NaN
// fails the check (the results are expected to be finite).
inline void expect_written_close(const Tensor& gpu, const Tensor& cpu, const std::string& what, double tol, bool nan_where_cpu_nan) {
  ASSERT_TRUE(gpu.defined()) << what;
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  const auto g = values(gpu), c = values(cpu);
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (nan_where_cpu_nan && std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_FALSE(std::isnan(g[i])) << what << " element " << i << " is NaN (not written?), CPU " << c[i];
    num += (g[i] - c[i]) * (g[i] - c[i]);
    den += c[i] * c[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  EXPECT_LE(rel, tol) << what << ": relative error " << rel;
}

// The message of the E that f throws; names another exception type, or says none was thrown.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

inline double tol_for(DType dt) {
  switch (dt) {
    case DType::Float64:
      return 1e-12;
    case DType::Float32:
      return 1e-6;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    default:
      return 0.0;
  }
}

// ||gpu - cpu|| / ||cpu|| (in float64) at most tol; NaN where the CPU has NaN; all-zero passes.
// With check_dtype false the GPU result may have another dtype (a float16 run against a float32
// reference).
inline void expect_rel(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what, bool check_dtype = true) {
  ASSERT_TRUE(gpu.defined() && cpu.defined()) << what;
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  if (check_dtype) {
    ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  }
  const std::vector<double> g = gpu.to(Device::cpu(), kFloat64).contiguous().to_vector<double>();
  const std::vector<double> c = cpu.to(kFloat64).contiguous().to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << ": element " << i << " should be NaN, is " << g[i];
      continue;
    }
    ASSERT_FALSE(std::isnan(g[i])) << what << ": element " << i << " is NaN (unwritten?), expected " << c[i];
    num += (g[i] - c[i]) * (g[i] - c[i]);
    den += c[i] * c[i];
  }
  EXPECT_LE(std::sqrt(num), tol * std::sqrt(den)) << what << ": relative error " << std::sqrt(num / std::max(den, 1e-300));
}

// Bit-for-bit the CPU's result (ops that only move elements, integer sums).
inline void expect_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  EXPECT_TRUE(dp::equal(gpu.cpu(), cpu)) << what;
}

// Fills the device's allocator cache with NaN, so an output element a kernel forgets to write
// reads NaN (the caching allocator hands the freed block out again).
inline void poison_device_cache() { (void)full({1 << 20}, std::numeric_limits<float>::quiet_NaN(), TensorOptions().device(kGpu)); }

// The same with float64 blocks of every power-of-two size from 2^4 to 2^22 elements, held at once
// and then freed, so outputs of many sizes get NaN-filled memory.
inline void poison_device_cache_all_sizes() {
#if DP_HAVE_CUDA
  std::vector<Tensor> blocks;
  for (int k = 4; k <= 22; ++k) blocks.push_back(dp::full({int64_t{1} << k}, NAN, TensorOptions().dtype(kFloat64).device(kGpu)));
#endif
}

#if DP_HAVE_CUDA
// Sets cuda::allow_tf32 for a scope and restores the previous setting.
struct Tf32Guard {
  bool previous;
  explicit Tf32Guard(bool on) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(on); }
  ~Tf32Guard() { cuda::set_allow_tf32(previous); }
};
#endif

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Run {
  Tensor out;
  std::vector<Tensor> grads;  // one per input marked differentiable
};

// f on copies of `inputs` on `dev` (those marked in `diff` require grad), then the gradients for a
// fixed random upstream gradient (the same values on every device, in out's dtype).
inline Run run_on(Device dev, const std::vector<Tensor>& inputs, const std::vector<bool>& diff, const Fn& f) {
  std::vector<Tensor> xs, leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].to(dev).detach();
    if (i < diff.size() && diff[i]) {
      t.requires_grad_(true);
      leaves.push_back(t);
    }
    xs.push_back(t);
  }
  if (dev.is_cuda()) poison_device_cache();
  Run r;
  r.out = f(xs);
  if (!leaves.empty()) {
    const Tensor go = sample(r.out.sizes(), kFloat64, 99, 0.5, 2.0).to(dev, r.out.dtype());
    r.grads = autograd::grad({r.out}, leaves, {go});
  }
  return r;
}

// The op on the GPU against the CPU: the forward bit for bit (exact_forward) or within tol, the
// gradients within tol.
inline void compare(const std::string& what, const std::vector<Tensor>& inputs, const std::vector<bool>& diff, const Fn& f, bool exact_forward,
                    double tol = 1e-6) {
  SCOPED_TRACE(what);
  const Run c = run_on(Device::cpu(), inputs, diff, f);
  const Run g = run_on(kGpu, inputs, diff, f);
  if (exact_forward)
    expect_same(g.out, c.out, what + " forward");
  else
    expect_rel(g.out, c.out, tol, what + " forward");
  ASSERT_EQ(g.grads.size(), c.grads.size());
  for (size_t k = 0; k < c.grads.size(); ++k) expect_rel(g.grads[k], c.grads[k], tol, what + " gradient " + std::to_string(k));
}

}  // namespace dp::test
