// examples/getting_started.cpp: a model of your own, trained with DataParallel on the devices given
// on the command line, evaluated, saved and loaded back (docs/getting-started.md walks through it).
//
//   getting_started                      # CPU devices cpu:0,cpu:1 (a worker thread each)
//   getting_started cuda:0,cuda:1        # two GPUs
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>
#include "dp/dp.h"

// A model is a struct derived from dp::nn::Module that registers its layers, as in libtorch.
struct Net : dp::nn::Module {
  dp::nn::Linear fc1{nullptr}, fc2{nullptr};
  Net(int64_t in, int64_t hidden, int64_t classes) {
    fc1 = register_module("fc1", dp::nn::Linear(in, hidden));
    fc2 = register_module("fc2", dp::nn::Linear(hidden, classes));
  }
  dp::Tensor forward(const dp::Tensor& x) { return fc2(dp::relu(fc1(x))); }
};

// The fraction of rows whose largest logit is the label.
double accuracy(dp::nn::DataParallel<Net>& net, const dp::Tensor& x, const dp::Tensor& y) {
  dp::NoGradGuard no_grad;
  return net(x).argmax(1).cpu().eq(y).to(dp::kFloat32).mean().item<double>();
}

int main(int argc, char** argv) {
  std::vector<dp::Device> devices;
  std::stringstream list(argc > 1 ? argv[1] : "cpu:0,cpu:1");
  for (std::string name; std::getline(list, name, ',');) devices.emplace_back(name);

  // Data: 4000 rows of 32 features, 8 classes given by a random linear teacher; 1000 held out.
  dp::manual_seed(0);
  dp::Tensor x = dp::randn({4000, 32});
  dp::Tensor y = x.matmul(dp::randn({32, 8})).argmax(1);
  dp::Tensor x_test = x.narrow(0, 3000, 1000), y_test = y.narrow(0, 3000, 1000);
  dp::data::DataLoader loader(dp::data::TensorDataset(x.narrow(0, 0, 3000), y.narrow(0, 0, 3000)),
                              dp::data::DataLoaderOptions().batch_size(64).shuffle(true));

  auto model = std::make_shared<Net>(32, 128, 8);
  model->to(devices[0]);  // DataParallel checks this each forward
  dp::nn::DataParallel<Net> net(model, devices);
  dp::optim::SGD optimizer(model->parameters(), dp::optim::SGDOptions(0.05).momentum(0.9));
  dp::optim::StepLR scheduler(optimizer, /*step_size=*/4, /*gamma=*/0.5);
  dp::nn::CrossEntropyLoss criterion;

  for (int epoch = 1; epoch <= 8; ++epoch) {
    net->train();
    double loss_sum = 0;
    for (dp::data::Batch& batch : loader) {
      // The loss computed on the replicas: each device's rows, only two scalars per device travel.
      dp::Tensor loss = net->forward_loss(criterion, batch.target, batch.data);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      loss_sum += loss.item<double>();
    }
    scheduler.step();
    net->eval();
    std::printf("epoch %d  train loss %.4f  test accuracy %.4f\n", epoch, loss_sum / static_cast<double>(loader.size()),
                accuracy(net, x_test, y_test));
  }

  // Save the weights (safetensors, PyTorch's state_dict keys: "fc1.weight", ...) and load them
  // into a fresh model, on the host this time.
  dp::save(model, "getting_started.safetensors");
  auto loaded = std::make_shared<Net>(32, 128, 8);
  dp::load(loaded, "getting_started.safetensors");
  dp::NoGradGuard no_grad;
  const double same = loaded->forward(x_test).argmax(1).eq(net(x_test).argmax(1).cpu()).to(dp::kFloat32).mean().item<double>();
  std::printf("loaded model agrees with the trained one on %.0f%% of the test rows\n", 100 * same);
  return same == 1.0 ? 0 : 1;
}
