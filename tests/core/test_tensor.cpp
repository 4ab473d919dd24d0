// Tensor metadata as views change it: sizes, strides, offsets, contiguity, element access.
#include <gtest/gtest.h>
#include "support/golden.h"

namespace dp {
namespace {

TEST(Tensor, MetadataOfAFreshTensor) {
  Tensor t = zeros({2, 3, 4}, kFloat64);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(-3), 12);
  EXPECT_THROW(t.size(3), IndexError);
  EXPECT_THROW(t.stride(-4), IndexError);
  EXPECT_THROW(scalar_tensor(1.0).size(0), IndexError);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.element_size(), 8u);
  EXPECT_EQ(t.nbytes(), 192u);
  EXPECT_EQ(t.size_str(), "[2, 3, 4]");
  EXPECT_EQ(t.describe(), "torch.DoubleTensor [2, 3, 4] on cpu");
  EXPECT_TRUE(t.is_floating_point());
  EXPECT_FALSE(zeros({1}, kInt32).is_floating_point());
}

TEST(Tensor, ContiguityOfViews) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_FALSE(t.transpose(0, 1).is_contiguous());
  EXPECT_TRUE(t.transpose(0, 1).transpose(0, 1).is_contiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).is_contiguous());
  EXPECT_FALSE(t.narrow(2, 1, 2).is_contiguous());
  EXPECT_TRUE(t.select(0, 1).is_contiguous());
  EXPECT_FALSE(t.select(2, 1).is_contiguous());
  EXPECT_TRUE(t.unsqueeze(1).is_contiguous());  // size-1 dims may have any stride
  EXPECT_FALSE(t.expand({5, 2, 3, 4}).is_contiguous());
  EXPECT_TRUE(t.narrow(1, 0, 0).is_contiguous());  // empty tensors are contiguous
  EXPECT_TRUE(t.slice(2, 0, std::nullopt, 2).contiguous().is_contiguous());
}

TEST(Tensor, DataPtrIncludesTheOffsetAndChecksType) {
  Tensor t = arange(12, kFloat32).view({3, 4});
  Tensor row = t.select(0, 2);
  EXPECT_EQ(row.storage_offset(), 8);
  EXPECT_EQ(row.data_ptr<float>(), t.data_ptr<float>() + 8);
  EXPECT_EQ(*row.data_ptr<float>(), 8.0f);
  EXPECT_THROW(row.data_ptr<double>(), DTypeError);
  EXPECT_THROW(t.data_ptr<int32_t>(), DTypeError);
  EXPECT_EQ(row.to_vector<int64_t>(), (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(t.t().to_vector<float>()[1], 4.0f);
  EXPECT_EQ(zeros({0}).data_ptr(), nullptr);
}

TEST(Tensor, DetachAndCopiesOfHandles) {
  Tensor t = zeros({2, 2}, TensorOptions().requires_grad());
  Tensor d = t.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage().get(), t.storage().get());
  Tensor alias = t;  // copying the handle aliases the same impl
  EXPECT_TRUE(alias.is_same(t));
  EXPECT_FALSE(t.view({4}).is_same(t));
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor().sizes(), ValueError);
  EXPECT_THROW(view(Tensor(), {1}), ValueError);
  EXPECT_THROW(cat({zeros({1}), Tensor()}), ValueError);
}

}  // namespace
}  // namespace dp
