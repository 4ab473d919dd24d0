// Stream semantics of backward passes on CUDA (as PyTorch's,
// https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes): a node's
// backward runs on the stream its forward ran on, gradients crossing streams are synchronised, and
// backward() returns ordered with the caller's current stream. The races these tests look for are
// made wide with a slow kernel (cuda::detail::sleep_cycles) queued before the work that produces a
// gradient: a consumer that is not ordered after it reads the value from before (zeros, or a NaN
// poison), not the gradient. Every test but the first needs a GPU and skips, saying why, without one.
#include <gtest/gtest.h>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda.h"

#if DP_HAVE_CUDA
namespace dp {
namespace {

constexpr int64_t kSlow = int64_t(50) * 1000 * 1000;  // tens of milliseconds of spinning
constexpr int64_t kN = int64_t(1) << 20;
const Device kGpu = Device::cuda(0);

// Every element of t (any device) equals `expected`; reports the first few that do not.
void expect_all(const Tensor& t, double expected, const std::string& what) {
  ASSERT_TRUE(t.defined()) << what;
  const Tensor c = t.to(Device::cpu()).to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  int bad = 0;
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!(std::abs(p[i] - expected) <= 1e-6 * std::abs(expected)) && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": " << p[i] << ", expected " << expected;
  EXPECT_EQ(bad, 0) << what;
}

// y = x * factor with a backward that records whether it ran on the stream that was current at
// the forward, then keeps that stream busy before producing the gradient: a consumer that is not
// ordered after this stream reads the gradient too early.
Tensor slow_scale(const Tensor& x, double factor, std::atomic<int>& wrong_stream) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = dp::mul(x, factor);
  }
  const cuda::Stream forward_stream = cuda::current_stream(x.device().index);
  autograd::record("SlowScaleBackward", {x}, {out}, [factor, forward_stream, &wrong_stream](autograd::variable_list&& g) {
    const cuda::Stream now = cuda::current_stream(forward_stream.device());
    if (now != forward_stream) wrong_stream.fetch_add(1);
    cuda::detail::sleep_cycles(kSlow, now);
    return autograd::variable_list{dp::mul(g[0], factor)};
  });
  return out;
}

// `waiter` waits for what `producer` has queued so far.
void wait_stream(const cuda::Stream& waiter, const cuda::Stream& producer) {
  cuda::Event e;
  e.record(producer);
  waiter.wait(e);
}

cuda::Stream default_stream() { return cuda::Stream::default_stream(0); }

Tensor gpu_leaf(double value) {
  Tensor x = dp::full({kN}, value, TensorOptions().device(kGpu));
  x.requires_grad_(true);
  return x;
}

// Host-testable: nodes on other devices record no stream (the CPU path stays stream-free), and
// the check costs nothing that needs a GPU (this runs on machines without one).
TEST(CudaStreamsBackward, CpuNodesRecordNoStream) {
  Tensor x = dp::ones({3});
  x.requires_grad_(true);
  Tensor y = dp::mul(x, 2.0);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_TRUE(y.grad_fn()->stream().is_cpu());
  EXPECT_TRUE(autograd::grad_accumulator(x)->stream().is_cpu());
  dp::sum(y).backward();
  expect_all(x.grad(), 2.0, "x.grad");
}

TEST(CudaStreamsBackward, NodesRecordTheirForwardStream) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0);
  Tensor x = gpu_leaf(1.0);
  Tensor y, z;
  {
    cuda::StreamGuard guard(side);
    wait_stream(side, default_stream());
    y = dp::mul(x, 2.0);
  }
  z = dp::mul(y, 3.0);
  EXPECT_EQ(y.grad_fn()->stream(), side.generic());
  EXPECT_EQ(z.grad_fn()->stream(), default_stream().generic());
  // x's accumulator was made by the first op that used x: on the side stream.
  EXPECT_EQ(autograd::grad_accumulator(x)->stream(), side.generic());
}

// The forward op ran on a side stream, the loss on the default one; backward (called on the
// default stream) runs the op's backward on the side stream, after the loss's, and returns ordered
// with the default stream, so .grad read there holds the gradient.
TEST(CudaStreamsBackward, BackwardRunsOnTheForwardStream) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0);
  std::atomic<int> wrong_stream{0};
  Tensor x = gpu_leaf(1.5);
  x.set_grad(dp::zeros({kN}, TensorOptions().device(kGpu)));  // accumulated into in place: a late read sees 0
  Tensor y;
  {
    cuda::StreamGuard guard(side);
    wait_stream(side, default_stream());
    y = slow_scale(x, 2.0, wrong_stream);
  }
  wait_stream(default_stream(), side);
  dp::sum(y).backward();
  EXPECT_EQ(wrong_stream.load(), 0) << "the backward of an op made on a side stream ran on another stream";
  expect_all(x.grad(), 2.0, "x.grad read on the default stream right after backward");
}

// One leaf used on two streams: its two gradients are produced on different streams (the second
// one slower) and summed into one .grad.
TEST(CudaStreamsBackward, GradientsFromTwoStreamsIntoOneLeaf) {
  DP_REQUIRE_GPU();
  const cuda::Stream s1 = cuda::Stream::create(0), s2 = cuda::Stream::create(0);
  std::atomic<int> wrong_stream{0};
  Tensor x = gpu_leaf(0.5);
  Tensor a, b;
  {
    cuda::StreamGuard guard(s1);
    wait_stream(s1, default_stream());
    a = slow_scale(x, 2.0, wrong_stream);
  }
  {
    cuda::StreamGuard guard(s2);
    wait_stream(s2, default_stream());
    b = slow_scale(slow_scale(x, 1.0, wrong_stream), 3.0, wrong_stream);  // twice as slow as a's
  }
  wait_stream(default_stream(), s1);
  wait_stream(default_stream(), s2);
  dp::sum(dp::add(a, b)).backward();
  EXPECT_EQ(wrong_stream.load(), 0);
  expect_all(x.grad(), 5.0, "x.grad from two streams");
}

// A non-leaf node made on the default stream receives gradients from two side streams: its input
// buffer sums them after both, and its backward (on the default stream) reads the sum.
TEST(CudaStreamsBackward, GradientsFromTwoStreamsIntoOneNode) {
  DP_REQUIRE_GPU();
  const cuda::Stream s1 = cuda::Stream::create(0), s2 = cuda::Stream::create(0);
  std::atomic<int> wrong_stream{0};
  Tensor x = gpu_leaf(1.0);
  Tensor z = dp::mul(x, 1.5);  // default stream
  Tensor a, b;
  {
    cuda::StreamGuard guard(s1);
    wait_stream(s1, default_stream());
    a = slow_scale(z, 2.0, wrong_stream);
  }
  {
    cuda::StreamGuard guard(s2);
    wait_stream(s2, default_stream());
    b = slow_scale(slow_scale(z, 1.0, wrong_stream), 3.0, wrong_stream);
  }
  wait_stream(default_stream(), s1);
  wait_stream(default_stream(), s2);
  dp::sum(dp::add(a, b)).backward();
  EXPECT_EQ(wrong_stream.load(), 0);
  expect_all(x.grad(), 7.5, "x.grad through a node fed from two streams");
}

// The whole step on a side stream; backward called from the default stream and from a third
// stream: either way the caller's stream is ordered after the leaves' (.grad poisoned with NaN
// before, so a read that overtakes the accumulation sees NaN).
TEST(CudaStreamsBackward, BackwardReturnsOrderedWithTheCallersStream) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0), caller = cuda::Stream::create(0);
  for (int use_caller_stream = 0; use_caller_stream < 2; ++use_caller_stream) {
    std::atomic<int> wrong_stream{0};
    Tensor x = gpu_leaf(1.0);
    Tensor loss;
    {
      cuda::StreamGuard guard(side);
      wait_stream(side, default_stream());
      x.set_grad(dp::full({kN}, std::nan(""), TensorOptions().device(kGpu)));
      x.grad().zero_();  // .grad made on the side stream: a read ordered after it sees at least 0
      loss = dp::sum(slow_scale(x, 4.0, wrong_stream));
    }
    const std::string what = use_caller_stream ? "x.grad read on the caller's side stream" : "x.grad read on the default stream";
    if (use_caller_stream) {
      cuda::StreamGuard guard(caller);
      wait_stream(caller, side);
      loss.backward();
      expect_all(x.grad(), 4.0, what);  // read on `caller`
    } else {
      wait_stream(default_stream(), side);
      loss.backward();
      expect_all(x.grad(), 4.0, what);
    }
    EXPECT_EQ(wrong_stream.load(), 0);
  }
}

// The root's gradient is produced on the caller's stream (here slowly, over a NaN poison); the
// root's node, made on the default stream, reads it only after.
TEST(CudaStreamsBackward, RootGradientFromTheCallersStream) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0);
  Tensor x = gpu_leaf(1.0);
  Tensor y = dp::mul(x, 2.0);  // default stream
  Tensor g = dp::full({kN}, std::nan(""), TensorOptions().device(kGpu));
  {
    cuda::StreamGuard guard(side);
    wait_stream(side, default_stream());
    cuda::detail::sleep_cycles(kSlow, side);
    g.fill_(3.0);
    y.backward(g);
    expect_all(x.grad(), 6.0, "x.grad read on the caller's side stream");
  }
}

// autograd::grad(): the captured gradient of a leaf whose op ran on a side stream is ordered with
// the caller's stream when grad() returns.
TEST(CudaStreamsBackward, GradReturnsCapturedGradientsOrderedWithTheCaller) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0);
  std::atomic<int> wrong_stream{0};
  Tensor x = gpu_leaf(1.0);
  Tensor y;
  {
    cuda::StreamGuard guard(side);
    wait_stream(side, default_stream());
    y = slow_scale(slow_scale(x, 2.0, wrong_stream), 1.0, wrong_stream);
  }
  wait_stream(default_stream(), side);
  const std::vector<Tensor> grads = autograd::grad({dp::sum(y)}, {x});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(wrong_stream.load(), 0);
  expect_all(grads[0], 2.0, "grad() of x read on the default stream");
  EXPECT_FALSE(x.grad().defined());
}

// A second step over the same leaves after the first one's .grad was consumed on the default
// stream (an optimizer step): forward and backward on a side stream, the result still exact.
TEST(CudaStreamsBackward, RepeatedStepsOnASideStream) {
  DP_REQUIRE_GPU();
  const cuda::Stream side = cuda::Stream::create(0);
  Tensor w = gpu_leaf(1.0);
  for (int step = 1; step <= 3; ++step) {
    std::atomic<int> wrong_stream{0};
    Tensor loss;
    {
      cuda::StreamGuard guard(side);
      wait_stream(side, default_stream());
      loss = dp::sum(slow_scale(w, 2.0, wrong_stream));
    }
    wait_stream(default_stream(), side);
    loss.backward();
    EXPECT_EQ(wrong_stream.load(), 0);
    expect_all(w.grad(), 2.0 * step, "w.grad after step " + std::to_string(step));  // accumulates
  }
}

}  // namespace
}  // namespace dp
#endif
