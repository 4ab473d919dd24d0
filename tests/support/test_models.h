#pragma once
// Small models the equivalence tests of DataParallel and DistributedDataParallel train: an MLP
// (8 features, 4 classes), a CNN on 1x8x8 images and an Embedding model on 3 tokens of 50.
#include "dp/nn/nn.h"

namespace dp::test {

struct Mlp : nn::Module {
  nn::Sequential net{nullptr};
  explicit Mlp(int64_t hidden = 16) {
    net = register_module("net", nn::Sequential(nn::Linear(8, hidden), nn::ReLU(), nn::Linear(hidden, 16), nn::Tanh(), nn::Linear(16, 4)));
  }
  Tensor forward(const Tensor& x) { return net->forward(x); }
};

struct Cnn : nn::Module {
  nn::Sequential net{nullptr};
  Cnn() {
    net = register_module("net", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                                                nn::Conv2d(nn::Conv2dOptions(4, 6, 3).padding(1)), nn::ReLU(), nn::Flatten(),
                                                nn::Linear(6 * 4 * 4, 4)));
  }
  Tensor forward(const Tensor& x) { return net->forward(x); }
};

struct EmbeddingModel : nn::Module {
  nn::Embedding emb{nullptr};
  nn::Linear fc{nullptr};
  EmbeddingModel() {
    emb = register_module("emb", nn::Embedding(50, 6));
    fc = register_module("fc", nn::Linear(3 * 6, 4));
  }
  Tensor forward(const Tensor& tokens) { return fc(emb(tokens).flatten(1)); }
};

}  // namespace dp::test
