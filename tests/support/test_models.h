#pragma once
// Small models the equivalence tests of DataParallel and DistributedDataParallel train: an MLP
// (8 features, 4 classes), a CNN on 1x8x8 images, an Embedding model on 3 tokens of 50, and a
// model whose parameters sit in ParameterList, ParameterDict and ModuleDict (8 features, 4 classes),
// and Branchy, whose forward uses one layer only where asked and another never (DDP's unused
// parameters).
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
    net = register_module("net",
                          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                                         nn::Conv2d(nn::Conv2dOptions(4, 6, 3).padding(1)), nn::ReLU(), nn::Flatten(), nn::Linear(6 * 4 * 4, 4)));
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

// Every parameter container, each used by forward() through its lookups (which, in a replica,
// return the replica's tensors and children).
struct ContainerModel : nn::Module {
  nn::Linear fc{nullptr};
  nn::ParameterList scales{nullptr};
  nn::ParameterDict gates{nullptr};
  nn::ModuleDict heads{nullptr};
  ContainerModel() {
    fc = register_module("fc", nn::Linear(8, 6));
    scales = register_module("scales", nn::ParameterList(randn({6}), randn({6, 6}).mul(0.4)));
    gates = register_module("gates", nn::ParameterDict());
    gates->insert("input", randn({6}));
    gates->insert("output", randn({4}));
    heads = register_module("heads", nn::ModuleDict());
    heads->insert("hidden", nn::Sequential(nn::Linear(6, 6), nn::Tanh()));
    heads->insert("cls", nn::Linear(6, 4));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = fc(x) * scales->at(0);
    h = h.matmul(scales->at(1)) + gates->get("input");
    h = heads->at<nn::SequentialImpl>("hidden")->forward(h);
    return heads->at<nn::LinearImpl>("cls")->forward(h) * gates->get("output");
  }
};

// Rank-dependent control flow: `b` only where asked, `never` never (8 features, `out` outputs).
struct Branchy : nn::Module {
  nn::Linear a{nullptr}, b{nullptr}, never{nullptr};
  explicit Branchy(int64_t out = 4) {
    a = register_module("a", nn::Linear(8, out));
    b = register_module("b", nn::Linear(8, out));
    never = register_module("never", nn::Linear(8, out));
  }
  Tensor forward(const Tensor& x, bool use_b) {
    Tensor h = a(x);
    return use_b ? h + b(x) : h;
  }
};

}  // namespace dp::test
