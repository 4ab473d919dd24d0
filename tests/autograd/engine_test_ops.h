#pragma once
// Small differentiable float32 ops written directly against the autograd API (record, SavedVariable),
// with plain loops for the arithmetic. The engine tests use them so that they test the engine and
// nothing else: every gradient a test expects follows from these few lines. Their backward
// formulas are written with the same ops, so they are differentiable again (create_graph).
#include <gtest/gtest.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "dp/dp.h"

// EXPECT_HAS(text, part): text contains part (shows both when it does not).
#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

namespace dp::agtest {

using autograd::variable_list;

// A float32 tensor with these values on device d (shape {n}, or {} for a single value with scalar=true).
inline Tensor vec(const std::vector<float>& v, Device d = Device::cpu(), bool scalar = false) {
  Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
  Tensor t = make_empty(shape, kFloat32, d);
  float* p = t.data_ptr<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}
inline Tensor leaf(const std::vector<float>& v, Device d = Device::cpu(), bool scalar = false) {
  Tensor t = vec(v, d, scalar);
  t.requires_grad_(true);
  return t;
}
inline std::vector<float> values(const Tensor& t) {
  EXPECT_TRUE(t.defined());
  if (!t.defined()) return {};
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.is_contiguous());
  const float* p = t.data_ptr<float>();
  return std::vector<float>(p, p + t.numel());
}
inline float value(const Tensor& t) {
  auto v = values(t);
  EXPECT_EQ(v.size(), 1u);
  return v.empty() ? 0.0f : v[0];
}

// out[i] = f(a[i]) with a fresh output of a's shape on a's device.
template <typename F>
Tensor map1(const Tensor& a, F f) {
  Tensor out = make_empty(a.sizes(), kFloat32, a.device());
  const float* pa = a.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = f(pa[i]);
  return out;
}
template <typename F>
Tensor map2(const Tensor& a, const Tensor& b, F f) {
  EXPECT_EQ(a.sizes(), b.sizes());
  Tensor out = make_empty(a.sizes(), kFloat32, a.device());
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = f(pa[i], pb[i]);
  return out;
}

// c * x
inline Tensor tscale(const Tensor& x, float c, const std::string& name = "ScaleBackward") {
  Tensor out = map1(x, [c](float v) { return c * v; });
  if (autograd::needs_grad(x)) {
    autograd::record(name, {x}, {out}, [c, name](variable_list&& g) { return variable_list{tscale(g[0], c, name)}; });
  }
  return out;
}

// a * b (element-wise, same shape); saves both inputs.
inline Tensor tmul(const Tensor& a, const Tensor& b) {
  Tensor out = map2(a, b, [](float x, float y) { return x * y; });
  if (autograd::needs_grad(a, b)) {
    autograd::SavedVariable sa(a, false), sb(b, false);
    autograd::record("MulBackward0", {a, b}, {out}, [sa, sb](variable_list&& g) {
      return variable_list{tmul(g[0], sb.unpack()), tmul(g[0], sa.unpack())};
    });
  }
  return out;
}

// a + b (same shape); the backward returns the incoming gradient for both (an alias, as PyTorch's).
inline Tensor tadd(const Tensor& a, const Tensor& b) {
  Tensor out = map2(a, b, [](float x, float y) { return x + y; });
  if (autograd::needs_grad(a, b)) {
    autograd::record("AddBackward0", {a, b}, {out}, [](variable_list&& g) { return variable_list{g[0], g[0]}; });
  }
  return out;
}

Tensor texpand(const Tensor& s, const Shape& shape);

// Sum of all elements, as a 0-dim tensor.
inline Tensor tsum(const Tensor& x) {
  const float* p = x.data_ptr<float>();
  float acc = 0;
  for (int64_t i = 0; i < x.numel(); ++i) acc += p[i];
  Tensor out = vec({acc}, x.device(), /*scalar=*/true);
  if (autograd::needs_grad(x)) {
    Shape shape = x.sizes();
    autograd::record("SumBackward0", {x}, {out}, [shape](variable_list&& g) { return variable_list{texpand(g[0], shape)}; });
  }
  return out;
}

// A 0-dim (or one-element) tensor broadcast to `shape`.
inline Tensor texpand(const Tensor& s, const Shape& shape) {
  float v = s.data_ptr<float>()[0];
  Tensor out = make_empty(shape, kFloat32, s.device());
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = v;
  if (autograd::needs_grad(s)) {
    autograd::record("ExpandBackward0", {s}, {out}, [](variable_list&& g) { return variable_list{tsum(g[0])}; });
  }
  return out;
}

// exp(x); saves its output (the case where SavedVariable gives the output its history back).
inline Tensor texp(const Tensor& x) {
  Tensor out = map1(x, [](float v) { return std::exp(v); });
  if (autograd::needs_grad(x)) {
    autograd::SavedVariable saved(out, /*is_output=*/true);
    autograd::record("ExpBackward0", {x}, {out}, [saved](variable_list&& g) { return variable_list{tmul(g[0], saved.unpack())}; });
  }
  return out;
}

// A copy of x on device d (differentiable: the gradient goes back to x's device).
inline Tensor tto(const Tensor& x, Device d) {
  Tensor out = make_empty(x.sizes(), kFloat32, d);
  std::copy(x.data_ptr<float>(), x.data_ptr<float>() + x.numel(), out.data_ptr<float>());
  if (autograd::needs_grad(x)) {
    Device src = x.device();
    autograd::record("ToCopyBackward0", {x}, {out}, [src](variable_list&& g) { return variable_list{tto(g[0], src)}; });
  }
  return out;
}

// Identity whose backward runs `fn` first (to observe or interfere with the backward pass).
inline Tensor tprobe(const Tensor& x, std::function<void()> fn, const std::string& name = "ProbeBackward") {
  Tensor out = map1(x, [](float v) { return v; });
  if (autograd::needs_grad(x)) {
    autograd::record(name, {x}, {out}, [fn](variable_list&& g) {
      fn();
      return variable_list{g[0]};
    });
  }
  return out;
}

// A rendezvous of `parties` threads with a timeout: arrive_and_wait() returns false if the others
// did not all arrive in time (a serial schedule would otherwise deadlock; this fails instead).
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}
  bool arrive_and_wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (++arrived_ == parties_) {
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, timeout, [&] { return arrived_ >= parties_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_;
  int arrived_ = 0;
};

// Makes sure cpu:0 … cpu:3 exist (growing the count is always allowed).
inline void ensure_cpu_devices(int n = 4) {
  if (cpu_device_count() < n) set_cpu_device_count(n);
}

}  // namespace dp::agtest
