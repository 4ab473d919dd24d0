// Part of a model on the host, part on a device, as in PyTorch's "Multi-GPU examples" tutorial
// ("Part of the model on CPU and part on the GPU"):
//
//   class DistributedModel(nn.Module):
//       def __init__(self):
//           super().__init__(embedding=nn.Embedding(1000, 10), rnn=nn.Linear(10, 10).to(device))
//       def forward(self, x):
//           x = self.embedding(x)     # on the CPU
//           x = x.to(device)          # transfer to the device
//           return self.rnn(x)        # on the device
//
// Here the Embedding(1000, 10) stays on the host "cpu" and the Linear(10, 10) goes to the first device
// of --devices (e.g. cpu:1 or cuda:0). The `.to(device)` in forward is differentiable: backward runs
// the Linear's part of the graph on that device's worker and carries the gradient back to the host,
// where the embedding's rows get it. Without the transfer the Linear rejects its input (every op needs
// its operands on one device, CPU devices included); the program shows that error once, then trains
// the model a few steps with Adam and cross-entropy to predict a fixed random class per token.
//
//   embedding_on_host [--devices cpu:1] [--steps 30] [--batch 256] [--lr 0.1] [--seed 0]
//
// Prints where each parameter and its gradient live, the loss per step, and "loss went down" at the
// end; exits 1 if the loss did not go down or the embedding got no gradient, 2 on errors.
#include <cstdio>
#include <iostream>
#include <string>
#include "dp/dp.h"
#include "example_devices.h"

namespace {

struct DistributedModel : dp::nn::Module {
  dp::nn::Embedding embedding{nullptr};
  dp::nn::Linear fc{nullptr};  // the tutorial calls it `rnn`
  dp::Device device;
  explicit DistributedModel(dp::Device device) : device(device) {
    embedding = register_module("embedding", dp::nn::Embedding(1000, 10));
    fc = register_module("fc", dp::nn::Linear(10, 10));
    fc->to(device);
  }
  // transfer = false leaves out the .to(device): only to show the error it causes.
  dp::Tensor forward(const dp::Tensor& tokens, bool transfer = true) {
    dp::Tensor x = embedding(tokens);  // on the host
    if (transfer) x = x.to(device);    // to the Linear's device
    return fc(x);                      // on the device
  }
};

}  // namespace

int main(int argc, char** argv) try {
  dp_examples::StepOptions options{.steps = 30, .batch = 256, .lr = 0.1};
  if (!options.parse(argc, argv, "embedding_on_host [--devices LIST] [--steps 30] [--batch 256] [--lr 0.1] [--seed 0]",
                     "                 the Linear goes on the first device of the list\n"))
    return 0;  // --help
  dp::manual_seed(options.seed);
  const dp::Device device = options.device_ids[0];

  auto model = std::make_shared<DistributedModel>(device);
  // Each token's class: a fixed random table the model has to learn (through the embedding).
  const dp::Tensor classes = dp::randint(0, 10, {1000});

  try {
    model->forward(dp::randint(0, 1000, {4}), /*transfer=*/false);
    std::printf("without .to(%s): no error (unexpected)\n", device.str().c_str());
  } catch (const dp::DeviceError& e) {
    std::printf("without .to(%s): DeviceError: %s\n", device.str().c_str(), e.what());
  }

  dp::optim::Adam optimizer(model->parameters(), dp::optim::AdamOptions(options.lr));
  dp::nn::CrossEntropyLoss criterion;
  double first = 0, last = 0;
  for (int step = 0; step < options.steps; ++step) {
    dp::Tensor tokens = dp::randint(0, 1000, {options.batch});
    dp::Tensor target = classes.index_select(0, tokens).to(device);
    optimizer.zero_grad();
    dp::Tensor loss = criterion(model->forward(tokens), target);
    loss.backward();
    if (step == 0) {
      for (const auto& item : model->named_parameters())
        std::printf("%-16s on %-6s grad on %s\n", item.key().c_str(), item.value().device().str().c_str(),
                    item.value().grad().defined() ? item.value().grad().device().str().c_str() : "(none)");
    }
    DP_CHECK(model->embedding->weight.grad().defined(), ValueError, "the embedding got no gradient");
    optimizer.step();
    last = loss.item<double>();
    if (step == 0) first = last;
    std::printf("step %2d  loss %.4f\n", step, last);
  }
  const bool ok = last < first;
  std::printf("loss %.4f -> %.4f: %s\n", first, last, ok ? "loss went down" : "loss did not go down");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "embedding_on_host: %s\n", e.what());
  return 2;
}
