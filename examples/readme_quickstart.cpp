#include <cstdio>
#include "dp/dp.h"

int main() {
  dp::Tensor x = dp::randn({2000, 20}), y = x.matmul(dp::randn({20, 4})).argmax(1);  // 4 classes
  dp::data::DataLoader loader(dp::data::TensorDataset(x, y), dp::data::DataLoaderOptions().batch_size(100).shuffle(true));
  dp::nn::Sequential model(dp::nn::Linear(20, 64), dp::nn::ReLU(), dp::nn::Linear(64, 4));
  model->to("cpu:0");                                   // the parameters live on device_ids[0]
  dp::nn::DataParallel net(model, {"cpu:0", "cpu:1"});  // or {"cuda:0", "cuda:1"}
  dp::optim::Adam optimizer(model->parameters(), dp::optim::AdamOptions(1e-2));
  dp::nn::CrossEntropyLoss criterion;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    double loss_sum = 0;
    for (dp::data::Batch& batch : loader) {  // 100 rows: 50 on each device
      dp::Tensor loss = criterion(net(batch.data), batch.target.to("cpu:0"));
      optimizer.zero_grad();
      loss.backward();  // the replicas' gradients, summed
      optimizer.step();
      loss_sum += loss.item<double>();
    }
    std::printf("epoch %d  mean loss %.4f\n", epoch, loss_sum / loader.size());
  }
  dp::save(model, "quickstart.safetensors");  // PyTorch's state_dict keys
}
