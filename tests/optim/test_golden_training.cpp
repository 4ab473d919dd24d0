// Golden training: from the initial weights PyTorch wrote (safetensors), 20 SGD-momentum steps and
// 20 Adam steps on PyTorch's batches reach PyTorch's losses and final weights (1e-5 relative).
// tests/golden/gen_training.py writes training_init.safetensors and training.json.
#include <gtest/gtest.h>
#include <functional>
#include <memory>
#include "dp/nn/modules/loss.h"
#include "dp/nn/nn.h"
#include "dp/nn/serialize.h"
#include "dp/optim/optim.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_file;
using test::tensor_from_json;

const std::string kInit = std::string(DP_GOLDEN_DIR) + "/training_init.safetensors";

nn::Sequential make_model() { return nn::Sequential(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3)); }

void run_golden(const std::string& run, const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make_opt) {
  const auto& g = golden_file("training.json");
  nn::Sequential model = make_model();
  dp::load(model, kInit);  // PyTorch-written weights, keys "0.weight", "0.bias", "2.weight", "2.bias"
  auto opt = make_opt(model->parameters());
  nn::CrossEntropyLoss loss_fn;
  const auto& expected_losses = g["runs"][run]["losses"];
  ASSERT_EQ(g["batches"].size(), expected_losses.size());
  for (size_t i = 0; i < g["batches"].size(); ++i) {
    Tensor x = tensor_from_json(g["batches"][i]["input"]);
    Tensor y = tensor_from_json(g["batches"][i]["target"]);
    opt->zero_grad();
    Tensor loss = loss_fn(model(x), y);
    loss.backward();
    opt->step();
    const double want = expected_losses[i].get<double>();
    EXPECT_NEAR(loss.item<double>(), want, 1e-5 * std::abs(want) + 1e-7) << run << " step " << i;
  }
  for (const auto& [key, value] : g["runs"][run]["final"].items()) {
    Tensor mine = model->state_dict()[key];
    EXPECT_TRUE(all_close(mine, value, 1e-5, 1e-6)) << run << ": " << key;
  }
}

TEST(GoldenTraining, SgdMomentumMatchesPyTorch) {
  run_golden("sgd_momentum", [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.1).momentum(0.9)); });
}

TEST(GoldenTraining, AdamMatchesPyTorch) {
  run_golden("adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(0.01)); });
}

TEST(GoldenTraining, InitialWeightsAreThePyTorchOnes) {
  nn::Sequential model = make_model();
  dp::load(model, kInit);
  auto file = dp::load(kInit);
  ASSERT_EQ(file.size(), 4u);
  for (const auto& item : file) EXPECT_TRUE(dp::equal(model->state_dict()[item.key()], item.value())) << item.key();
}

}  // namespace
}  // namespace dp
