// The seed's training loop under DataParallel: a Linear(5, 1) + Sigmoid model trained with SGD
// (lr 1e-3) and BCELoss on the tutorial's RandomDataset (100 rows x 5 features, batches of 30),
// labelled by a fixed hyperplane so there is something to learn. Each batch is split over --devices,
// the replicas run forward and backward in parallel, and the gradients are summed into the model's
// parameters (on device_ids[0]), where SGD updates them.
//
//   seed_training [--devices cpu:0,cpu:1] [--epochs 300] [--lr 1e-3] [--seed 0] [--loss-on-replicas]
//
// --loss-on-replicas computes BCELoss on each replica (DataParallel::forward_loss): only the
// partial sums travel back, instead of the gathered output and its gradient. The loss is the same.
//
// Prints the devices, the mean loss every 25 epochs and the final training accuracy; exits 1 if
// the loss did not go down, 2 on errors.
#include <cstdio>
#include <iostream>
#include <string>
#include "dp/dp.h"
#include "example_devices.h"

int main(int argc, char** argv) try {
  int epochs = 300;
  double lr = 1e-3;
  uint64_t seed = 0;
  bool loss_on_replicas = false;
  dp_examples::CommandLine cli("seed_training [--devices LIST] [--epochs 300] [--lr 1e-3] [--seed 0] [--loss-on-replicas]",
                               "--loss-on-replicas  compute the loss on each replica (DataParallel::forward_loss)\n");
  cli.option("--epochs", epochs).option("--lr", lr).option("--seed", seed).flag("--loss-on-replicas", loss_on_replicas);
  if (!cli.parse(argc, argv)) return 0;  // --help
  const std::vector<dp::Device> device_ids = cli.devices();
  DP_CHECK(epochs >= 1, ValueError, "--epochs must be at least 1");
  dp::manual_seed(seed);

  // The tutorial's random inputs, labelled by the sign of a fixed linear function.
  dp::data::RandomDataset inputs(5, 100);
  dp::Tensor w_true = dp::tensor<float>({1.0f, -2.0f, 0.5f, 1.5f, -1.0f}, {5, 1});
  dp::Tensor labels = inputs.data().matmul(w_true).gt(0.0).to(dp::kFloat32);
  dp::data::DataLoader loader(dp::data::TensorDataset(inputs.data(), labels), dp::data::DataLoaderOptions().batch_size(30).shuffle(true));

  dp::nn::Sequential model(dp::nn::Linear(5, 1), dp::nn::Sigmoid());
  model->to(device_ids[0]);  // several devices: the parameters must be on device_ids[0] (checked every forward)
  dp::nn::DataParallel net(model, device_ids);
  // The optimizer holds the original parameters: replicas' gradients are summed into them.
  dp::optim::SGD optimizer(net->parameters(), dp::optim::SGDOptions(lr));
  dp::nn::BCELoss criterion;
  const dp::Device out_device = net->output_device();
  std::printf("training on %s (%s), loss on %s\n", dp_examples::join(device_ids).c_str(),
              device_ids.size() > 1 ? "each batch split over the devices" : "one device: the module is called directly",
              loss_on_replicas ? "the replicas" : out_device.str().c_str());

  double first = -1, last = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double sum = 0;
    int batches = 0;
    for (dp::data::Batch& batch : loader) {
      // The batch stays on the host: DataParallel copies each replica's rows straight to its device.
      optimizer.zero_grad();
      dp::Tensor loss =
          loss_on_replicas ? net->forward_loss(criterion, batch.target, batch.data) : criterion(net(batch.data), batch.target.to(out_device));
      loss.backward();
      optimizer.step();
      sum += loss.item<double>();
      ++batches;
    }
    last = sum / batches;
    if (first < 0) first = last;
    if (epoch % 25 == 0 || epoch == epochs - 1) std::printf("epoch %3d  loss %.5f\n", epoch, last);
  }
  dp::NoGradGuard no_grad;
  dp::Tensor pred = net(inputs.data()).gt(0.5).to(dp::kFloat32).cpu();
  double accuracy = pred.eq(labels).to(dp::kFloat32).mean().item<double>();
  std::printf("loss %.5f -> %.5f, training accuracy %.2f\n", first, last, accuracy);
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "seed_training: %s\n", e.what());
  return 2;
}
