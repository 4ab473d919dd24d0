// DataParallel on part of a model, as in PyTorch's "Multi-GPU examples" tutorial:
//
//   class MyModel(nn.Module):
//       def __init__(self):
//           self.block1 = nn.Linear(10, 20)
//           self.block2 = nn.DataParallel(nn.Linear(20, 20))   # only the middle block is split
//           self.block3 = nn.Linear(20, 20)
//
// block1 and block3 run on device_ids[0] on the whole batch; block2 splits its input over --devices,
// runs a replica per device and gathers back onto device_ids[0]. The program trains it a few steps
// with SGD and MSE next to a plain copy (no DataParallel, on the host "cpu") that starts from the same
// weights and sees the same batches, and checks after every step that every parameter's gradient
// equals the copy's: splitting the batch must not change the gradient.
//
//   middle_block_parallel [--devices cpu:0,cpu:1] [--steps 5] [--batch 64] [--lr 0.05] [--seed 0]
//
// It prints the model, its state_dict keys (dparallel's DataParallel adds no "module." infix, so the
// keys equal the plain copy's and either checkpoint loads into the other), one line per step with
// the loss and the largest gradient difference, and "gradients match" at the end. Exits 1 if a
// gradient differs by more than 1e-5 (relative to its size), 2 on errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include "dp/dp.h"
#include "example_devices.h"

namespace {

struct MyModel : dp::nn::Module {
  dp::nn::Linear block1{nullptr};
  dp::nn::DataParallel<dp::nn::LinearImpl> block2{nullptr};
  dp::nn::Linear block3{nullptr};
  explicit MyModel(const std::vector<dp::Device>& device_ids) {
    block1 = register_module("block1", dp::nn::Linear(10, 20));
    // Wrap block2 in DataParallel. With several devices its Linear must be on device_ids[0] before
    // the first forward (MyModel::to below moves it there with the rest).
    block2 = register_module("block2", dp::nn::DataParallel<dp::nn::LinearImpl>(dp::nn::Linear(20, 20), device_ids));
    block3 = register_module("block3", dp::nn::Linear(20, 20));
  }
  dp::Tensor forward(const dp::Tensor& x) {
    dp::Tensor h = block1(x);
    h = block2(h);
    return block3(h);
  }
};

// The same model without DataParallel: the reference.
struct PlainModel : dp::nn::Module {
  dp::nn::Linear block1{nullptr}, block2{nullptr}, block3{nullptr};
  PlainModel() {
    block1 = register_module("block1", dp::nn::Linear(10, 20));
    block2 = register_module("block2", dp::nn::Linear(20, 20));
    block3 = register_module("block3", dp::nn::Linear(20, 20));
  }
  dp::Tensor forward(const dp::Tensor& x) { return block3(block2(block1(x))); }
};

// max |a - b| / max(1, max |b|): a relative bound, so the check does not depend on the scale of a
// parameter's gradient (float sums in a different order differ in the last bits).
double relative_difference(const dp::Tensor& a, const dp::Tensor& b) {
  const dp::Tensor x = a.cpu(), y = b.cpu();
  const double diff = (x - y).abs().max().item<double>();
  return diff / std::max(1.0, y.abs().max().item<double>());
}

}  // namespace

int main(int argc, char** argv) try {
  dp_examples::StepOptions options{.steps = 5, .batch = 64, .lr = 0.05};
  if (!options.parse(argc, argv, "middle_block_parallel [--devices LIST] [--steps 5] [--batch 64] [--lr 0.05] [--seed 0]")) return 0;  // --help
  dp::manual_seed(options.seed);
  const dp::Device device = options.device_ids[0];

  auto model = std::make_shared<MyModel>(options.device_ids);
  auto plain = std::make_shared<PlainModel>();
  // The keys are the same, so the plain copy takes the parallel model's weights as they are (this
  // load would fail in PyTorch, whose keys are "block2.module.weight").
  plain->load_state_dict(model->state_dict());
  model->to(device);

  std::cout << *model << "\n";
  std::printf("state_dict keys:");
  for (const auto& item : model->state_dict()) std::printf(" %s", item.key().c_str());
  std::printf("\nblock2 runs on %s\n", dp_examples::join(model->block2->device_ids()).c_str());

  dp::optim::SGD optimizer(model->parameters(), dp::optim::SGDOptions(options.lr));
  dp::optim::SGD plain_optimizer(plain->parameters(), dp::optim::SGDOptions(options.lr));
  dp::nn::MSELoss criterion;
  const auto names = model->named_parameters();
  const auto plain_params = plain->named_parameters();

  double worst = 0;
  for (int step = 0; step < options.steps; ++step) {
    dp::Tensor x = dp::randn({options.batch, 10}), y = dp::randn({options.batch, 20});
    optimizer.zero_grad();
    plain_optimizer.zero_grad();
    dp::Tensor loss = criterion(model->forward(x.to(device)), y.to(device));
    loss.backward();
    dp::Tensor plain_loss = criterion(plain->forward(x), y);
    plain_loss.backward();
    double step_worst = 0;
    std::string worst_name;
    for (const auto& item : names) {
      const dp::Tensor* ref = plain_params.find(item.key());
      DP_CHECK(ref != nullptr, ValueError, "the plain model has no parameter ", item.key());
      DP_CHECK(item.value().grad().defined(), ValueError, item.key(), " got no gradient");
      const double d = relative_difference(item.value().grad(), ref->grad());
      if (d >= step_worst) step_worst = d, worst_name = item.key();
    }
    worst = std::max(worst, step_worst);
    std::printf("step %d  loss %.6f (plain %.6f)  max gradient difference %.2e (%s)\n", step, loss.item<double>(), plain_loss.item<double>(),
                step_worst, worst_name.c_str());
    optimizer.step();
    plain_optimizer.step();
  }
  double weights = 0;
  const auto plain_state = plain->state_dict();
  for (const auto& item : model->state_dict()) weights = std::max(weights, relative_difference(item.value(), *plain_state.find(item.key())));
  std::printf("after %d steps: max weight difference %.2e\n", options.steps, weights);
  const bool ok = worst <= 1e-5 && weights <= 1e-5;
  std::printf("%s\n", ok ? "gradients match" : "gradients differ");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "middle_block_parallel: %s\n", e.what());
  return 2;
}
