#include "models.h"

#include "dp/core/errors.h"

namespace dp::train {

nn::Sequential make_model(const std::string& kind, int64_t hidden) {
  if (kind == "seed") return nn::Sequential(nn::Linear(5, 1), nn::Sigmoid());
  if (kind == "mlp")
    return nn::Sequential(nn::Flatten(), nn::Linear(784, hidden), nn::ReLU(), nn::Linear(hidden, hidden), nn::ReLU(), nn::Linear(hidden, 10));
  if (kind == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  throw ValueError("unknown model '" + kind + "': choose seed, mlp or cnn");
}

Criterion make_criterion(const std::string& kind) {
  if (kind == "seed") return nn::BCELoss();
  return nn::CrossEntropyLoss();
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace dp::train
