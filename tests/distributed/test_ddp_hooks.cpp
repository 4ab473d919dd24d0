// Module hooks under DistributedDataParallel: DDP calls the wrapped module as module(args...), as
// PyTorch's DDP does, so the module's hooks fire once per rank and forward, and the gradients are
// still averaged across ranks. Ranks are threads (ddp_test_support.h).
#include <gtest/gtest.h>
#include <atomic>
#include <mutex>
#include <vector>
#include "distributed/ddp_test_support.h"
#include "dp/distributed/distributed_data_parallel.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"

namespace dp::distributed {
namespace {

using nn::Module;
using nn::TensorList;
using test::run_ranks;

struct Net : nn::Module {
  nn::Linear fc{nullptr};
  Net() { fc = register_module("fc", nn::Linear(5, 2)); }
  Tensor forward(const Tensor& x) { return fc(x); }
};

std::shared_ptr<Net> make_net() {
  manual_seed(13);
  return std::make_shared<Net>();
}

TEST(DDPHooks, ModuleHooksFireOncePerRankAndGradientsStayAveraged) {
  manual_seed(4);
  Tensor x = randn({8, 5});
  auto reference = make_net();
  reference->forward(x).sum().backward();
  const Tensor ref = reference->fc->weight.grad() / 2.0;  // DDP averages the ranks' gradients

  std::vector<std::shared_ptr<Net>> models{make_net(), make_net()};
  std::vector<int> forwards(2, 0), backwards(2, 0);
  std::vector<std::string> grad_output_shapes(2);
  std::vector<Tensor> grads(2);
  run_ranks(2, [&](const ProcessGroupPtr& group, int r) {
    models[r]->register_forward_hook([&, r](Module&, const TensorList&, const Tensor&) { ++forwards[r]; });
    models[r]->register_full_backward_hook([&, r](Module&, const TensorList&, const TensorList& go) {
      ++backwards[r];
      grad_output_shapes[r] = go[0].size_str();
    });
    nn::DistributedDataParallel<Net> ddp(models[r], group);
    Tensor rows = x.narrow(0, 4 * r, 4).clone().requires_grad_(true);
    ddp(rows).sum().backward();
    grads[r] = models[r]->fc->weight.grad();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(forwards[r], 1) << "rank " << r;
    EXPECT_EQ(backwards[r], 1) << "rank " << r;
    EXPECT_EQ(grad_output_shapes[r], "[4, 2]") << "rank " << r;
  }
  ASSERT_TRUE(grads[0].defined() && grads[1].defined());
  EXPECT_TRUE(allclose(grads[0], ref, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(grads[1], ref, 1e-5, 1e-6));
}

}  // namespace
}  // namespace dp::distributed
