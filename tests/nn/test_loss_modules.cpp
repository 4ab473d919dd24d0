// Loss modules: options reach the functional ops, weights are buffers (state_dict keys as
// PyTorch's, moved by to(), copied by clone()), and the modules print as PyTorch prints them.
#include <gtest/gtest.h>
#include <sstream>
#include "dp/nn/modules/loss.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;

std::vector<std::string> keys(const nn::TensorDict& d) {
  std::vector<std::string> k;
  for (const auto& item : d) k.push_back(item.key());
  return k;
}

template <typename M>
std::string printed(const M& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

Tensor idx(std::vector<int64_t> v, Shape shape) { return tensor<int64_t>(v, shape); }

TEST(LossModules, PrintLikePyTorch) {
  Tensor w = rand({3});
  EXPECT_EQ(printed(nn::CrossEntropyLoss()), "CrossEntropyLoss()");
  EXPECT_EQ(printed(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().weight(w).label_smoothing(0.1).reduction(Reduction::Sum))),
            "CrossEntropyLoss()");
  EXPECT_EQ(printed(nn::NLLLoss()), "NLLLoss()");
  EXPECT_EQ(printed(nn::MSELoss()), "MSELoss()");
  EXPECT_EQ(printed(nn::L1Loss()), "L1Loss()");
  EXPECT_EQ(printed(nn::BCELoss(nn::BCELossOptions().weight(w))), "BCELoss()");
  EXPECT_EQ(printed(nn::BCEWithLogitsLoss()), "BCEWithLogitsLoss()");
  EXPECT_EQ(nn::CrossEntropyLoss()->extra_repr(), "");
  EXPECT_EQ(nn::CrossEntropyLoss()->name(), "CrossEntropyLoss");
}

TEST(LossModules, WeightBuffersMatchPyTorchStateDict) {
  Tensor w = rand({3}), pw = rand({3});
  EXPECT_TRUE(keys(nn::CrossEntropyLoss()->state_dict()).empty());
  EXPECT_EQ(keys(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().weight(w))->state_dict()), std::vector<std::string>{"weight"});
  EXPECT_EQ(keys(nn::NLLLoss(nn::NLLLossOptions().weight(w))->state_dict()), std::vector<std::string>{"weight"});
  EXPECT_EQ(keys(nn::BCELoss(nn::BCELossOptions().weight(w))->state_dict()), std::vector<std::string>{"weight"});
  EXPECT_EQ(keys(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().pos_weight(pw))->state_dict()), std::vector<std::string>{"pos_weight"});
  EXPECT_EQ(keys(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().pos_weight(pw).weight(w))->state_dict()),
            (std::vector<std::string>{"weight", "pos_weight"}));
  EXPECT_TRUE(keys(nn::MSELoss()->state_dict()).empty());
  EXPECT_TRUE(nn::CrossEntropyLoss()->parameters().empty());
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().weight(w));
  EXPECT_TRUE(ce->weight.is_same(w));
  EXPECT_EQ(ce->buffers().size(), 1u);
}

TEST(LossModules, ForwardUsesOptions) {
  Tensor x = randn({6, 4}), w = rand({4}) + 0.5;
  Tensor t = idx({0, 3, 1, 3, 2, 1}, {6});
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().reduction(Reduction::Sum).label_smoothing(0.1).ignore_index(3).weight(w));
  EXPECT_TRUE(all_close(ce(x, t), cross_entropy(x, t, w, 3, Reduction::Sum, 0.1), 0, 0));
  nn::CrossEntropyLoss plain;
  EXPECT_TRUE(all_close(plain(x, t), cross_entropy(x, t), 0, 0));
  nn::NLLLoss nll(nn::NLLLossOptions().ignore_index(1).weight(w).reduction(Reduction::None));
  EXPECT_TRUE(all_close(nll(x, t), nll_loss(x, t, w, 1, Reduction::None), 0, 0));
  Tensor a = rand({6, 4}), b = rand({6, 4});
  EXPECT_TRUE(all_close(nn::MSELoss(Reduction::Sum)(a, b), mse_loss(a, b, Reduction::Sum), 0, 0));
  EXPECT_TRUE(all_close(nn::L1Loss(nn::L1LossOptions().reduction(Reduction::None))(a, b), l1_loss(a, b, Reduction::None), 0, 0));
  EXPECT_TRUE(
      all_close(nn::BCELoss(nn::BCELossOptions().weight(w).reduction(Reduction::Sum))(a, b), binary_cross_entropy(a, b, w, Reduction::Sum), 0, 0));
  Tensor pw = rand({4}) * 2.0;
  EXPECT_TRUE(all_close(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().pos_weight(pw).weight(w))(x, b),
                        binary_cross_entropy_with_logits(x, b, w, pw), 0, 0));
}

TEST(LossModules, BackwardThroughModule) {
  Tensor x = randn({5, 3}).requires_grad_(true);
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().label_smoothing(0.2));
  Tensor l = ce(x, idx({0, 1, 2, 1, 0}, {5}));
  l.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(LossModules, ToConvertsWeightBuffers) {
  Tensor w = rand({4}) + 0.5;
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().weight(w));
  ce->to(kFloat64);
  EXPECT_EQ(ce->weight.dtype(), kFloat64);
  EXPECT_EQ(ce->state_dict()["weight"].dtype(), kFloat64);
  Tensor x = randn({3, 4}, kFloat64);
  Tensor t = idx({0, 1, 3}, {3});
  EXPECT_TRUE(all_close(ce(x, t), cross_entropy(x, t, w.to(kFloat64)), 1e-15, 0));
  nn::BCEWithLogitsLoss bl(nn::BCEWithLogitsLossOptions().pos_weight(rand({4})));
  bl->to(kFloat64);
  EXPECT_EQ(bl->pos_weight.dtype(), kFloat64);
  EXPECT_NO_THROW(bl(x, rand({3, 4}, kFloat64)));
}

TEST(LossModules, CloneCopiesWeights) {
  Tensor w = rand({4}) + 0.5;
  auto ce = std::make_shared<nn::CrossEntropyLossImpl>(nn::CrossEntropyLossOptions().weight(w).ignore_index(2));
  auto copy = nn::clone(ce);
  ASSERT_TRUE(copy->weight.defined());
  EXPECT_FALSE(copy->weight.is_same(ce->weight));
  EXPECT_TRUE(all_close(copy->weight, w, 0, 0));
  EXPECT_EQ(copy->options.ignore_index(), 2);
  EXPECT_TRUE(copy->state_dict()["weight"].is_same(copy->weight) || all_close(copy->state_dict()["weight"], w, 0, 0));
}

TEST(LossModules, LoadStateDict) {
  nn::NLLLoss a(nn::NLLLossOptions().weight(zeros({3})));
  nn::NLLLoss b(nn::NLLLossOptions().weight(tensor<float>({1, 2, 3}, {3})));
  a->load_state_dict(b->state_dict());
  EXPECT_TRUE(all_close(a->weight, tensor<float>({1, 2, 3}, {3}), 0, 0));
}

}  // namespace
}  // namespace dp
