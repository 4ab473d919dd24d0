// Gradients of the indexing ops by central finite differences (float64), duplicates included,
// in-place variants, and double backward where the backward is itself differentiable.
#include <gtest/gtest.h>

#include "support/gradcheck.h"

namespace dp {
namespace {

using test::gradcheck;
using test::rand_leaf;

using dp::test::gradgradcheck;

Tensor idx(std::vector<int64_t> v, Shape shape) { return tensor<int64_t>(v, shape); }

TEST(IndexGrad, IndexSelect) {
  Tensor i = idx({2, 0, 2}, {3});  // duplicate 2: its gradient adds up
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return index_select(x[0], 0, i); }, {rand_leaf({3, 2})}));
  EXPECT_TRUE(gradgradcheck([i](const std::vector<Tensor>& x) { return index_select(x[0], 0, i); }, {rand_leaf({3, 2})}));
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return index_select(x[0], 1, i); }, {rand_leaf({2, 3, 2})}));
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return index_select(x[0].t(), 1, i); }, {rand_leaf({3, 2})}));
}

TEST(IndexGrad, Gather) {
  Tensor i = idx({0, 2, 2, 1, 0, 0}, {2, 3});
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return gather(x[0], 1, i); }, {rand_leaf({2, 4})}));
  EXPECT_TRUE(gradgradcheck([i](const std::vector<Tensor>& x) { return gather(x[0], 1, i); }, {rand_leaf({2, 4})}));
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return gather(x[0], 0, i); }, {rand_leaf({3, 3})}));
}

TEST(IndexGrad, ScatterAdd) {
  Tensor i = idx({0, 2, 2, 1}, {2, 2});
  auto f = [i](const std::vector<Tensor>& x) { return scatter_add(x[0], 1, i, x[1]); };
  EXPECT_TRUE(gradcheck(f, {rand_leaf({2, 3}), rand_leaf({2, 2})}));
  EXPECT_TRUE(gradgradcheck(f, {rand_leaf({2, 3}), rand_leaf({2, 2})}));
  // src larger than index: the part beyond index's extent gets a zero gradient
  EXPECT_TRUE(gradcheck(f, {rand_leaf({3, 3}), rand_leaf({3, 4})}));
  EXPECT_TRUE(gradgradcheck(f, {rand_leaf({3, 3}), rand_leaf({3, 4})}));
}

TEST(IndexGrad, ScatterAddInPlace) {
  Tensor i = idx({1, 1, 0}, {1, 3});
  EXPECT_TRUE(gradcheck(
      [i](const std::vector<Tensor>& x) {
        Tensor y = x[0] * 1.0;
        scatter_add_(y, 0, i, x[1]);
        return y;
      },
      {rand_leaf({2, 3}), rand_leaf({2, 3})}));
}

TEST(IndexGrad, IndexAdd) {
  Tensor i = idx({1, 1, 0}, {3});
  auto f = [i](const std::vector<Tensor>& x) { return index_add(x[0], 0, i, x[1]); };
  EXPECT_TRUE(gradcheck(f, {rand_leaf({2, 3}), rand_leaf({3, 3})}));
  EXPECT_TRUE(gradgradcheck(f, {rand_leaf({2, 3}), rand_leaf({3, 3})}));
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return index_add(x[0], 1, i, x[1]); }, {rand_leaf({2, 2}), rand_leaf({2, 3})}));
  EXPECT_TRUE(gradcheck(
      [i](const std::vector<Tensor>& x) {
        Tensor y = x[0] * 1.0;
        index_add_(y, 0, i, x[1]);
        return y;
      },
      {rand_leaf({2, 3}), rand_leaf({3, 3})}));
}

TEST(IndexGrad, Embedding) {
  Tensor i = idx({3, 0, 3, 1, 0, 0}, {2, 3});
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return embedding(x[0], i); }, {rand_leaf({4, 2})}));
  EXPECT_TRUE(gradgradcheck([i](const std::vector<Tensor>& x) { return embedding(x[0], i); }, {rand_leaf({4, 2})}));
  // With a padding row the first derivative deliberately differs from finite differences (the
  // padding row gets no gradient although the output reads it: PyTorch's semantics, tested in
  // test_index.cpp); its backward is still differentiable w.r.t. the incoming gradient.
  EXPECT_TRUE(gradgradcheck([i](const std::vector<Tensor>& x) { return embedding(x[0], i, 0); }, {rand_leaf({4, 2})}));
  EXPECT_TRUE(gradcheck([i](const std::vector<Tensor>& x) { return embedding(x[0].t(), i); }, {rand_leaf({2, 4})}));
}

TEST(IndexGrad, MaskedFill) {
  Tensor m = tensor<bool>({true, false, false, true, true, false}, {2, 3});
  EXPECT_TRUE(gradcheck([m](const std::vector<Tensor>& x) { return masked_fill(x[0], m, 0.5); }, {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradgradcheck([m](const std::vector<Tensor>& x) { return masked_fill(x[0], m, 0.5); }, {rand_leaf({2, 3})}));
  // self broadcast by the mask: the gradient sums over the broadcast dim
  EXPECT_TRUE(gradcheck([m](const std::vector<Tensor>& x) { return masked_fill(x[0], m, -1.0); }, {rand_leaf({2, 1})}));
}

TEST(IndexGrad, NllStyleGatherOfLogSoftmax) {
  // What NLLLoss does: pick one log-probability per row.
  Tensor target = idx({2, 0, 1}, {3, 1});
  EXPECT_TRUE(gradcheck([target](const std::vector<Tensor>& x) { return gather(log_softmax(x[0], 1), 1, target).sum(); }, {rand_leaf({3, 4})}));
  EXPECT_TRUE(gradgradcheck([target](const std::vector<Tensor>& x) { return gather(log_softmax(x[0], 1), 1, target).sum(); }, {rand_leaf({3, 4})}));
}

}  // namespace
}  // namespace dp
