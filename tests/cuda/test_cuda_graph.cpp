// CUDA graphs (dp/cuda/graph.h): a captured forward + backward + SGD step of a small MLP replayed
// N times gives the weights of N eager steps (a static input updated with copy_ between replays);
// private pools come and go with the graph; things that cannot be captured (host copies, Adam's
// host-side step count, the default stream) are clear errors. The argument checks that need no
// device run on every machine; the rest needs a GPU.
#include <gtest/gtest.h>
#include <cmath>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"
#if DP_HAVE_CUDA
#include "dp/cuda/graph.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA
using cuda::CUDAGraph;
using cuda::GraphCapture;

// ---------------------------------------------------------------- host

TEST(CudaGraphHost, MisuseWithoutACaptureIsAValueError) {
  CUDAGraph g;
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(g.capturing());
  try {
    g.replay();
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing has been captured"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g.capture_end(), ValueError);
  g.reset();  // nothing to drop
  EXPECT_FALSE(g.pool().valid());
}

TEST(CudaGraphHost, MakeGraphedStepChecksItsArguments) {
  EXPECT_THROW(cuda::make_graphed_step(nullptr), ValueError);
  EXPECT_THROW(cuda::make_graphed_step([] {}, -1), ValueError);
}

TEST(CudaGraphHost, CapturingQueryIsFalseWithoutADevice) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is visible; the GPU tests cover the query";
  EXPECT_FALSE(cuda::is_current_stream_capturing());
}

// ---------------------------------------------------------------- GPU

using test::kGpu;

// NaN propagates (a NaN result fails every comparison, EXPECT_GT too).
double rel_error(const Tensor& out, const Tensor& ref) { return test::rel_err(out, ref, /*nan_as_infinity=*/false); }

Tensor sample(IntArrayRef sizes, uint64_t seed) {
  Generator g(seed);
  return randn(sizes, TensorOptions().dtype(kFloat32), &g);
}

// A two-layer MLP's parameters on the GPU.
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(uint64_t seed) {
    w1 = (sample({32, 8}, seed) * 0.3).to(kGpu).requires_grad_(true);
    b1 = (sample({32}, seed + 1) * 0.1).to(kGpu).requires_grad_(true);
    w2 = (sample({4, 32}, seed + 2) * 0.3).to(kGpu).requires_grad_(true);
    b2 = (sample({4}, seed + 3) * 0.1).to(kGpu).requires_grad_(true);
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  // forward + backward + optimizer step; returns the loss (a device tensor, not read here).
  Tensor step(optim::Optimizer& opt, const Tensor& x, const Tensor& y) const {
    opt.zero_grad();
    Tensor h = relu(matmul(x, w1.t()) + b1);
    Tensor out = matmul(h, w2.t()) + b2;
    Tensor loss = mean((out - y) * (out - y));
    loss.backward();
    opt.step();
    return loss.detach();
  }
};

Tensor batch_x(int i) { return sample({16, 8}, 5000 + 2 * static_cast<uint64_t>(i)); }
Tensor batch_y(int i) { return sample({16, 4}, 5001 + 2 * static_cast<uint64_t>(i)); }

TEST(CudaGraph, CapturedTrainingStepReplaysLikeEagerSteps) {
  DP_REQUIRE_GPU();
  constexpr int kReplays = 6;
  Mlp graphed(7), eager(7);
  optim::SGD opt_g(graphed.params(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD opt_e(eager.params(), optim::SGDOptions(0.05).momentum(0.9));
  // Static inputs: the graph reads these addresses on every replay.
  Tensor x = empty({16, 8}, TensorOptions().device(kGpu));
  Tensor y = empty({16, 4}, TensorOptions().device(kGpu));

  // Warm-up (a real step on both): creates the gradients and momentum buffers outside the graph.
  x.copy_(batch_x(0));
  y.copy_(batch_y(0));
  graphed.step(opt_g, x, y);
  eager.step(opt_e, batch_x(0).to(kGpu), batch_y(0).to(kGpu));

  CUDAGraph graph;
  Tensor static_loss;
  {
    GraphCapture capture(graph);
    static_loss = graphed.step(opt_g, x, y);  // captured, not run
    capture.end();
  }
  ASSERT_TRUE(graph.captured());
  EXPECT_TRUE(graph.pool().valid());
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 1);
  EXPECT_EQ(cuda::memory_stats(0).captures_underway, 0);

  Tensor eager_loss;
  for (int i = 1; i <= kReplays; ++i) {
    x.copy_(batch_x(i));
    y.copy_(batch_y(i));
    graph.replay();
    eager_loss = eager.step(opt_e, batch_x(i).to(kGpu), batch_y(i).to(kGpu));
    EXPECT_LE(rel_error(static_loss, eager_loss), 1e-5) << "loss of step " << i + 1;
  }
  const std::vector<Tensor> pg = graphed.params(), pe = eager.params();
  for (size_t k = 0; k < pg.size(); ++k) EXPECT_LE(rel_error(pg[k], pe[k]), 1e-5) << "parameter " << k;
  // The weights moved: the replays did train.
  Mlp initial(7);
  EXPECT_GT(rel_error(pg[0], initial.w1), 1e-3);

  graph.reset();
  EXPECT_FALSE(graph.captured());
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 0);
  // Eager training goes on with the graph's memory back in the ordinary cache.
  graphed.step(opt_g, x, y);
}

TEST(CudaGraph, MakeGraphedStepWarmsUpCapturesAndReplays) {
  DP_REQUIRE_GPU();
  Tensor a = full({1000}, 1.5, TensorOptions().device(kGpu));
  Tensor b = full({1000}, 0.25, TensorOptions().device(kGpu));
  auto step = cuda::make_graphed_step([&] { a.mul_(2.0).add_(b); }, /*warmup_iters=*/1);
  // Warm-up ran once (1.5 * 2 + 0.25 = 3.25); the capture did not run.
  EXPECT_EQ(a.to(Device::cpu()).to_vector<float>()[0], 3.25f);
  b.fill_(1.0);  // a static input changed in place
  step();
  step();
  const float expect = (3.25f * 2 + 1) * 2 + 1;
  for (float v : a.to(Device::cpu()).to_vector<float>()) ASSERT_EQ(v, expect);
}

TEST(CudaGraph, HostCopiesDuringCaptureAreRefusedNamingTheCapture) {
  DP_REQUIRE_GPU();
  Tensor x = zeros({8}, TensorOptions().device(kGpu));
  CUDAGraph graph;
  {
    GraphCapture capture(graph);
    EXPECT_TRUE(cuda::is_current_stream_capturing());
    try {
      x.copy_(ones({8}));
      FAIL() << "expected DeviceError";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("during CUDA graph capture on cuda:0"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)x.sum().item(), DeviceError);  // a device-to-host copy, which waits
    x.add_(1.0);
    capture.end();  // the refused calls did not break the capture
  }
  EXPECT_FALSE(cuda::is_current_stream_capturing());
  graph.replay();
  graph.replay();
  for (float v : x.to(Device::cpu()).to_vector<float>()) EXPECT_EQ(v, 2.0f);
}

TEST(CudaGraph, AdamRefusesToStepDuringCaptureAndTheGraphIsDropped) {
  DP_REQUIRE_GPU();
  Tensor p = ones({4}, TensorOptions().device(kGpu)).requires_grad_(true);
  optim::Adam adam({p}, optim::AdamOptions(0.1));
  p.set_grad(full({4}, 0.5, TensorOptions().device(kGpu)));
  adam.step();  // eager steps are fine
  CUDAGraph graph;
  try {
    GraphCapture capture(graph);
    adam.step();
    capture.end();
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("Adam: step() during CUDA graph capture"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(graph.capturing());
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 0);
  EXPECT_EQ(cuda::memory_stats(0).captures_underway, 0);
  EXPECT_EQ(static_cast<optim::AdamParamState&>(*adam.state().at(p.unsafe_impl())).step, 1);
}

TEST(CudaGraph, CaptureOnTheDefaultStreamIsRefused) {
  DP_REQUIRE_GPU();
  CUDAGraph graph;
  cuda::StreamGuard on_default(cuda::Stream::default_stream(0));
  if (!cuda::current_stream(0).is_default()) GTEST_SKIP() << "virtual devices: the default stream is a created stream";
  try {
    graph.capture_begin();
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("default stream"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 0);
}

TEST(CudaGraph, GraphsCanShareAPool) {
  DP_REQUIRE_GPU();
  Tensor a = zeros({256}, TensorOptions().device(kGpu));
  CUDAGraph first, second;
  {
    GraphCapture capture(first);
    Tensor t = a + 1.0;  // a temporary of the first graph
    a.copy_(t);
    capture.end();
  }
  {
    GraphCapture capture(second, first.pool());
    Tensor t = a * 3.0;
    a.copy_(t);
    capture.end();
  }
  EXPECT_EQ(second.pool().id, first.pool().id);
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 1);
  first.replay();
  second.replay();
  first.replay();
  second.replay();
  for (float v : a.to(Device::cpu()).to_vector<float>()) EXPECT_EQ(v, 12.0f);  // ((0+1)*3+1)*3
  first.reset();
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 1);  // still used by the second graph
  second.replay();
  second.reset();
  EXPECT_EQ(cuda::memory_stats(0).private_pools, 0);
  for (float v : a.to(Device::cpu()).to_vector<float>()) EXPECT_EQ(v, 36.0f);
}

#else
TEST(CudaGraphHost, NeedsTheCudaBackend) { DP_REQUIRE_GPU(); }
#endif

}  // namespace
}  // namespace dp
