// The seed's training loop on one device: a Linear(5, 1) + Sigmoid model trained with SGD
// (lr 1e-3) and BCELoss on the tutorial's RandomDataset (100 rows x 5 features, batches of 30),
// labelled by a fixed hyperplane so there is something to learn.
//
//   seed_training [--device cpu] [--epochs 300] [--lr 1e-3] [--seed 0]
//
// Prints the mean loss every 25 epochs and the final training accuracy; exits 1 if the loss did
// not go down, 2 on errors.
#include <cstdio>
#include <iostream>
#include <string>
#include "dp/data/data.h"
#include "dp/dp.h"
#include "dp/nn/modules/loss.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"

int main(int argc, char** argv) try {
  std::string device = "cpu";
  int epochs = 300;
  double lr = 1e-3;
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dp::ValueError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") device = value();
    else if (a == "--epochs") epochs = std::stoi(value());
    else if (a == "--lr") lr = std::stod(value());
    else if (a == "--seed") seed = std::stoull(value());
    else if (a == "--help" || a == "-h") {
      std::cout << "seed_training [--device cpu] [--epochs 300] [--lr 1e-3] [--seed 0]\n";
      return 0;
    } else throw dp::ValueError("unknown option " + a + " (try --help)");
  }
  dp::manual_seed(seed);
  dp::Device dev(device);

  // The tutorial's random inputs, labelled by the sign of a fixed linear function.
  dp::data::RandomDataset inputs(5, 100);
  dp::Tensor w_true = dp::tensor<float>({1.0f, -2.0f, 0.5f, 1.5f, -1.0f}, {5, 1});
  dp::Tensor labels = inputs.data().matmul(w_true).gt(0.0).to(dp::kFloat32);
  dp::data::DataLoader loader(dp::data::TensorDataset(inputs.data(), labels), dp::data::DataLoaderOptions().batch_size(30).shuffle(true));

  dp::nn::Sequential model(dp::nn::Linear(5, 1), dp::nn::Sigmoid());
  model->to(dev);
  dp::optim::SGD optimizer(model->parameters(), dp::optim::SGDOptions(lr));
  dp::nn::BCELoss criterion;

  double first = -1, last = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double sum = 0;
    int batches = 0;
    for (dp::data::Batch& batch : loader) {
      dp::Tensor input = batch.data.to(dev), target = batch.target.to(dev);
      optimizer.zero_grad();
      dp::Tensor loss = criterion(model(input), target);
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
  dp::Tensor pred = model(inputs.data().to(dev)).gt(0.5).to(dp::kFloat32).cpu();
  double accuracy = pred.eq(labels).to(dp::kFloat32).mean().item<double>();
  std::printf("loss %.5f -> %.5f, training accuracy %.2f\n", first, last, accuracy);
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "seed_training: %s\n", e.what());
  return 2;
}
