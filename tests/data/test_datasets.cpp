// TensorDataset, RandomDataset, collate() and Dataset::get_batch's default (get + stack).
#include <gtest/gtest.h>
#include <atomic>
#include <cmath>
#include "dp/data/data.h"
#include "dp/dp.h"

namespace dp::data {
namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Sample i is data [2] = {i, -i} (float32), target i (int64 scalar); counts get() calls.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(size_t n) : n_(n) {}
  Example get(size_t i) override {
    gets.fetch_add(1);
    DP_CHECK(i < n_, IndexError, "CountingDataset: index ", i, " out of range");
    const double v = static_cast<double>(i);
    return {tensor({v, -v}), scalar_tensor(static_cast<int64_t>(i), kInt64)};
  }
  size_t size() const override { return n_; }
  std::atomic<int> gets{0};

 private:
  size_t n_;
};

TEST(TensorDataset, GetReturnsRowsOfDataAndTarget) {
  Tensor x = arange(12, kFloat32).view({4, 3});
  Tensor y = tensor<int64_t>({7, 8, 9, 10});
  TensorDataset ds(x, y);
  ASSERT_EQ(ds.size(), 4u);
  Example e = ds.get(2);
  EXPECT_EQ(e.data.sizes(), Shape({3}));
  EXPECT_EQ(values(e.data), std::vector<double>({6, 7, 8}));
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item<int64_t>(), 9);
  // get() is a view: no copy per sample.
  EXPECT_EQ(e.data.storage().get(), x.storage().get());
}

TEST(TensorDataset, GetBatchIsOneGatherEqualToStackedGets) {
  Tensor x = randn({10, 2, 3});
  Tensor y = arange(10);
  TensorDataset ds(x, y);
  const std::vector<int64_t> idx = {9, 0, 3, 3, 5};
  Example b = ds.get_batch(idx);
  EXPECT_EQ(b.data.sizes(), Shape({5, 2, 3}));
  EXPECT_EQ(b.target.sizes(), Shape({5}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), idx);
  std::vector<Example> ex;
  for (int64_t i : idx) ex.push_back(ds.get(static_cast<size_t>(i)));
  Example ref = collate(ex);
  EXPECT_EQ(values(b.data), values(ref.data));
  EXPECT_TRUE(b.data.is_contiguous());
  EXPECT_NE(b.data.storage().get(), x.storage().get());  // a copy: later writes to x do not leak in
}

TEST(TensorDataset, WithoutTarget) {
  TensorDataset ds(ones({3, 4}));
  EXPECT_FALSE(ds.get(0).target.defined());
  EXPECT_FALSE(ds.get_batch({0, 2}).target.defined());
  EXPECT_EQ(ds.get_batch({0, 2}).data.sizes(), Shape({2, 4}));
}

TEST(TensorDataset, SizeMismatchNamesBothShapes) {
  try {
    TensorDataset ds(zeros({100, 5}), zeros({99}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("TensorDataset"), std::string::npos) << m;
    EXPECT_NE(m.find("[100, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[99]"), std::string::npos) << m;
  }
  EXPECT_THROW(TensorDataset(scalar_tensor(1.0)), ShapeError);
  EXPECT_THROW(TensorDataset(zeros({3}), scalar_tensor(1.0)), ShapeError);
  EXPECT_THROW(TensorDataset{Tensor()}, ValueError);
}

TEST(TensorDataset, OutOfRangeIndicesAreIndexErrors) {
  TensorDataset ds(zeros({4, 2}), zeros({4}));
  EXPECT_THROW(ds.get(4), IndexError);
  EXPECT_THROW(ds.get_batch({0, 4}), IndexError);
  EXPECT_THROW(ds.get_batch({-1}), IndexError);
  EXPECT_THROW(ds.get_batch({}), ValueError);
}

TEST(RandomDataset, TutorialShapeAndNoTarget) {
  RandomDataset ds(5, 100);
  EXPECT_EQ(ds.size(), 100u);
  EXPECT_EQ(ds.feature_size(), 5);
  EXPECT_EQ(ds.length(), 100);
  EXPECT_EQ(ds.data().sizes(), Shape({100, 5}));
  EXPECT_EQ(ds.data().dtype(), kFloat32);
  EXPECT_FALSE(ds.target().defined());
  EXPECT_EQ(ds.get(3).data.sizes(), Shape({5}));
  EXPECT_FALSE(ds.get(3).target.defined());
}

TEST(RandomDataset, IsRandnFromTheGivenGenerator) {
  Generator g1(123), g2(123), g3(124), ref(123);
  RandomDataset a(5, 100, &g1), b(5, 100, &g2), c(5, 100, &g3);
  EXPECT_EQ(values(a.data()), values(b.data()));
  EXPECT_NE(values(a.data()), values(c.data()));
  EXPECT_EQ(values(a.data()), values(randn({100, 5}, kFloat32, &ref)));  // torch.randn(length, size)
  // N(0, 1): 500 draws have mean within ~5 sigma/sqrt(500) of 0 and variance near 1.
  std::vector<double> v = values(RandomDataset(5, 100, &g3).data());
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  EXPECT_LT(std::abs(mean), 0.25);
  EXPECT_NEAR(sq / (v.size() - 1), 1.0, 0.3);
}

TEST(RandomDataset, DefaultGeneratorFollowsManualSeed) {
  manual_seed(7);
  RandomDataset a(3, 10);
  manual_seed(7);
  RandomDataset b(3, 10);
  EXPECT_EQ(values(a.data()), values(b.data()));
  EXPECT_THROW(RandomDataset(-1, 10), ValueError);
  EXPECT_EQ(RandomDataset(5, 0).size(), 0u);
}

TEST(Collate, StacksDataAndTargets) {
  CountingDataset ds(6);
  Example b = ds.get_batch({4, 1, 5});  // Dataset's default: get() each, then stack
  EXPECT_EQ(ds.gets.load(), 3);
  EXPECT_EQ(b.data.sizes(), Shape({3, 2}));
  EXPECT_EQ(values(b.data), std::vector<double>({4, -4, 1, -1, 5, -5}));
  EXPECT_EQ(b.target.dtype(), kInt64);
  EXPECT_EQ(b.target.to_vector<int64_t>(), std::vector<int64_t>({4, 1, 5}));
  EXPECT_THROW(ds.get_batch({6}), IndexError);
}

TEST(Collate, MismatchesNameTheExample) {
  try {
    collate({{zeros({2}), {}}, {zeros({2}), {}}, {zeros({3}), {}}});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("example 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(collate({{zeros({2}), {}}, {zeros({2}, kFloat64), {}}}), DTypeError);
  EXPECT_THROW(collate({{zeros({2}), zeros({1})}, {zeros({2}), {}}}), ValueError);
  EXPECT_THROW(collate({{zeros({2}), zeros({1})}, {zeros({2}), zeros({2})}}), ShapeError);
  EXPECT_THROW(collate({}), ValueError);
  EXPECT_THROW(collate({{Tensor(), {}}}), ValueError);
}

}  // namespace
}  // namespace dp::data
