// DistributedDataParallel with each rank's model on a CUDA device, against single-device training
// on the host: 2 thread ranks (ddp_test_support.h, Gloo over loopback, CUDA tensors staged through
// host copies), rank r on cuda:(r % device count), so one GPU serves both; CTest runs the program
// again with DP_CUDA_VIRTUAL_DEVICES=2, where the ranks sit on two logical devices of one GPU. Each
// step's gradients and the parameters after it equal the reference's to float32 tolerance,
// including a parameter one rank does not use (its gradient comes from the other rank: the used
// marks, reduced in the last bucket on the GPU and read on the host) and one no rank uses
// (undefined .grad, as in PyTorch). With and without a comm hook (with one, the marks travel in a
// host tensor of their own). Without a GPU every test skips and says why.
#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <memory>
#include "distributed/ddp_test_support.h"
#include "dp/core/device_registry.h"
#include "dp/distributed/comm_hooks.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "support/cuda.h"
#include "support/test_models.h"

namespace dp::distributed {
namespace {

using dp::test::Branchy;
using test::run_ranks;

constexpr double kRtol = 1e-4;  // float32; cuBLAS and OpenBLAS sum in different orders
constexpr double kAtol = 1e-5;

std::shared_ptr<Branchy> make_model(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<Branchy>(16);
  m->remember_type<Branchy>();
  return m;
}

bool close(const Tensor& a, const Tensor& b) { return allclose(a.detach().cpu(), b.detach().cpu(), kRtol, kAtol); }

// Rank 0 holds rows [0, 2) and never uses b; rank 1 holds rows [2, 6) and uses it. The reference
// trains the same model on the host with the combined loss (the sum over both shares over 6 rows,
// which is what forward_loss computes).
void check_against_host(const std::function<void(nn::DistributedDataParallel<Branchy>&)>& setup) {
  const int steps = 3;
  const std::vector<int64_t> off{0, 2, 6};
  manual_seed(5);
  std::vector<Tensor> xs, ts;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(randn({6, 8}));
    ts.push_back(randint(0, 16, {6}));
  }
  auto reference = make_model(42);
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  std::vector<std::vector<Tensor>> ref_grads, ref_values;
  for (int s = 0; s < steps; ++s) {
    ref_opt.zero_grad();
    Tensor out0 = reference->forward(xs[s].narrow(0, 0, 2), false);
    Tensor out1 = reference->forward(xs[s].narrow(0, 2, 4), true);
    ((cross_entropy(out0, ts[s].narrow(0, 0, 2), {}, -100, Reduction::Sum) + cross_entropy(out1, ts[s].narrow(0, 2, 4), {}, -100, Reduction::Sum)) /
     6.0)
        .backward();
    std::vector<Tensor> g;
    for (const Tensor& p : reference->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    ref_grads.push_back(std::move(g));
    ref_opt.step();
    std::vector<Tensor> v;
    for (const Tensor& p : reference->parameters()) v.push_back(p.detach().clone());
    ref_values.push_back(std::move(v));
  }
  // Rank 1 starts from other weights: DDP must copy rank 0's.
  std::vector<std::shared_ptr<Branchy>> models{make_model(42), make_model(43)};
  const int devices = cuda_device_count();
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    const Device dev = Device::cuda(r % devices);
    models[r]->to(dev);
    nn::DistributedDataParallel<Branchy> ddp(models[r], group);
    setup(ddp);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      const Tensor x = xs[s].narrow(0, off[r], off[r + 1] - off[r]).to(dev);
      const Tensor t = ts[s].narrow(0, off[r], off[r + 1] - off[r]).to(dev);
      ddp->forward_loss(nn::CrossEntropyLoss(), t, x, r == 1).backward();
      ASSERT_TRUE(ddp->last_backward_synced()) << "rank " << r;
      const auto params = ddp->parameters();
      ASSERT_EQ(params.size(), ref_grads[s].size());
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor g = params[i].grad();
        if (!ref_grads[s][i].defined()) {  // `never`: no rank used it
          EXPECT_FALSE(g.defined()) << "rank " << r << " step " << s << " parameter " << i << ": unused on every rank keeps an undefined .grad";
          continue;
        }
        ASSERT_TRUE(g.defined()) << "rank " << r << " step " << s << " parameter " << i << " (b is used on rank 1: a gradient everywhere)";
        EXPECT_EQ(g.device(), dev) << "rank " << r << " parameter " << i;
        EXPECT_TRUE(close(g, ref_grads[s][i])) << "rank " << r << " step " << s << ": gradient of parameter " << i << " differs";
      }
      opt.step();
      for (size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(close(params[i], ref_values[s][i])) << "rank " << r << " step " << s << ": parameter " << i << " after the step differs";
    }
  });
}

TEST(DDPCuda, TwoRanksOnCudaDevicesEqualHostTrainingWithAnUnusedParameter) {
  DP_REQUIRE_GPU();
  check_against_host([](nn::DistributedDataParallel<Branchy>&) {});
}

TEST(DDPCuda, WithACommHookTheUsedMarksTravelOnTheHost) {
  DP_REQUIRE_GPU();
  check_against_host([](nn::DistributedDataParallel<Branchy>& ddp) { ddp->register_comm_hook(comm_hooks::allreduce()); });
}

}  // namespace
}  // namespace dp::distributed
