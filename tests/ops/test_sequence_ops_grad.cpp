// Gradients of the sequence-model ops (dp/ops/sequence.h) by central finite differences (float64),
// and double backward where the backward is itself written with differentiable ops.
#include <gtest/gtest.h>

#include "support/gradcheck.h"

namespace dp {
namespace {

using test::gradcheck;
using test::gradgradcheck;
using test::rand_leaf;
using V = std::vector<Tensor>;

// Distinct values (no ties: a sort's finite differences are only defined away from them).
Tensor distinct_leaf(Shape shape) {
  const int64_t n = numel_of(shape);
  Tensor perm = randperm(n).to(kFloat64);
  Tensor t = (perm / static_cast<double>(n) + rand({n}, kFloat64) * (0.2 / static_cast<double>(n))).reshape(shape);
  return t.detach().set_requires_grad(true);
}

TEST(SequenceOpsGrad, TrilTriu) {
  for (int64_t d : {-2, -1, 0, 1, 3}) {
    SCOPED_TRACE(d);
    EXPECT_TRUE(gradcheck([d](const V& x) { return tril(x[0], d); }, {rand_leaf({3, 4})}));
    EXPECT_TRUE(gradcheck([d](const V& x) { return triu(x[0], d); }, {rand_leaf({2, 4, 3})}));
  }
  EXPECT_TRUE(gradcheck([](const V& x) { return tril(x[0].transpose(-2, -1)); }, {rand_leaf({2, 3, 4})}));
  EXPECT_TRUE(gradgradcheck([](const V& x) { return tril(x[0] * x[0], -1); }, {rand_leaf({3, 3})}));
}

TEST(SequenceOpsGrad, SortAndTopk) {
  manual_seed(1);
  for (bool desc : {false, true}) {
    EXPECT_TRUE(gradcheck([desc](const V& x) { return sort(x[0], -1, desc).first; }, {distinct_leaf({3, 5})}));
    EXPECT_TRUE(gradcheck([desc](const V& x) { return sort(x[0], 0, desc).first; }, {distinct_leaf({4, 2, 3})}));
    EXPECT_TRUE(gradcheck([desc](const V& x) { return topk(x[0], 2, -1, desc).first; }, {distinct_leaf({3, 5})}));
    EXPECT_TRUE(gradcheck([desc](const V& x) { return topk(x[0], 3, 1, desc, false).first; }, {distinct_leaf({2, 4, 3})}));
  }
  EXPECT_TRUE(gradcheck([](const V& x) { return sort(x[0]).first; }, {distinct_leaf({})}));  // 0-dim
  EXPECT_TRUE(gradgradcheck([](const V& x) { return sort(x[0] * x[0], 1).first; }, {distinct_leaf({2, 4})}));
  EXPECT_TRUE(gradgradcheck([](const V& x) { return topk(x[0] * x[0], 2).first; }, {distinct_leaf({2, 4})}));
}

TEST(SequenceOpsGrad, Cumsum) {
  for (int64_t d : {0, 1, -1}) EXPECT_TRUE(gradcheck([d](const V& x) { return cumsum(x[0], d); }, {rand_leaf({3, 4, 2})}));
  EXPECT_TRUE(gradcheck([](const V& x) { return cumsum(x[0], 0); }, {rand_leaf({6})}));
  EXPECT_TRUE(gradcheck([](const V& x) { return cumsum(x[0].t(), 1); }, {rand_leaf({4, 3})}));
  EXPECT_TRUE(gradgradcheck([](const V& x) { return cumsum(x[0] * x[0], 1); }, {rand_leaf({2, 5})}));
}

TEST(SequenceOpsGrad, Baddbmm) {
  auto f = [](double beta, double alpha) { return [beta, alpha](const V& x) { return baddbmm(x[0], x[1], x[2], beta, alpha); }; };
  EXPECT_TRUE(gradcheck(f(1, 1), {rand_leaf({2, 3, 4}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));
  EXPECT_TRUE(gradcheck(f(0.5, -2), {rand_leaf({2, 3, 4}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));
  EXPECT_TRUE(gradcheck(f(0, 1.5), {rand_leaf({2, 3, 4}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));
  EXPECT_TRUE(gradcheck(f(2, 1), {rand_leaf({4}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));  // broadcast self
  EXPECT_TRUE(gradcheck(f(1, 1), {rand_leaf({3, 1}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));
  EXPECT_TRUE(gradgradcheck(f(0.5, 2), {rand_leaf({2, 3, 4}), rand_leaf({2, 3, 5}), rand_leaf({2, 5, 4})}));
}

TEST(SequenceOpsGrad, Einsum) {
  struct Case {
    const char* eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"bhqk,bhkd->bhqd", {{2, 2, 3, 5}, {2, 2, 5, 4}}},
      {"i,j->ij", {{3}, {4}}},
      {"ij->ji", {{3, 4}}},
      {"ij->i", {{3, 4}}},
      {"ij->", {{3, 4}}},
      {"...ij,...jk->...ik", {{2, 2, 3, 4}, {2, 4, 2}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}},
      {"ij,jk", {{2, 3}, {3, 4}}},
      {"bi,bi->b", {{3, 4}, {3, 4}}},
      {"ij,ij->ij", {{3, 4}, {3, 4}}},
      {"ij,jk->ik", {{3, 1}, {4, 2}}},
      {"bij,bjk->bk", {{2, 3, 4}, {2, 4, 5}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},
      {"abcd,cdbe->ae", {{2, 3, 2, 2}, {2, 2, 3, 3}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.eq);
    V inputs;
    for (const Shape& s : c.shapes) inputs.push_back(rand_leaf(s));
    const std::string eq = c.eq;
    EXPECT_TRUE(gradcheck([eq](const V& x) { return einsum(eq, x); }, inputs));
  }
  EXPECT_TRUE(gradgradcheck([](const V& x) { return einsum("bij,bjk->bik", x); }, {rand_leaf({2, 2, 3}), rand_leaf({2, 3, 2})}));
}

TEST(SequenceOpsGrad, RepeatInterleave) {
  EXPECT_TRUE(gradcheck([](const V& x) { return repeat_interleave(x[0], 3, 1); }, {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradcheck([](const V& x) { return repeat_interleave(x[0], 2); }, {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradcheck([](const V& x) { return repeat_interleave(x[0], 2, -3); }, {rand_leaf({2, 2, 3, 2})}));
  Tensor r = tensor<int64_t>({2, 0, 3});
  EXPECT_TRUE(gradcheck([r](const V& x) { return repeat_interleave(x[0], r, 0); }, {rand_leaf({3, 2})}));
  EXPECT_TRUE(gradcheck([r](const V& x) { return repeat_interleave(x[0], r); }, {rand_leaf({3})}));
  EXPECT_TRUE(gradgradcheck([r](const V& x) { return repeat_interleave(x[0] * x[0], r, 1); }, {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradgradcheck([](const V& x) { return repeat_interleave(x[0] * x[0], 2, 0); }, {rand_leaf({2, 3})}));
}

TEST(SequenceOpsGrad, MaskedFill) {
  Tensor m = tensor<bool>({true, false, false, true, true, false}, {2, 3});
  Tensor row = tensor<bool>({false, true, false}, {3});
  EXPECT_TRUE(gradcheck([m](const V& x) { return masked_fill(x[0], m, 0.5); }, {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradcheck([m](const V& x) { return masked_fill(x[0], m, 0.5); }, {rand_leaf({3})}));  // self broadcast
  EXPECT_TRUE(gradcheck(
      [row](const V& x) {
        Tensor y = x[0] * 1;
        return masked_fill_(y, row, -1.0);
      },
      {rand_leaf({2, 3})}));
  EXPECT_TRUE(gradgradcheck(
      [row](const V& x) {
        Tensor y = x[0] * x[0];
        return masked_fill_(y, row, 2.0);
      },
      {rand_leaf({2, 3})}));
}

}  // namespace
}  // namespace dp
