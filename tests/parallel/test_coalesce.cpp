// Buckets for coalesced transfers (src/parallel/coalesce.h): the plan is device-independent, and
// pack/unpack are tensor code, so both are checked on the host; the CUDA paths that use them are
// in test_data_parallel_cuda.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "parallel/coalesce.h"

namespace dp::parallel::detail {
namespace {

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(Coalesce, TensorsOfOneDtypeShareBucketsUpToTheBufferSize) {
  // 4-byte floats: 100 + 150 elements = 1000 bytes fit 1024; the next 100 do not.
  std::vector<TensorSpec> specs{{{10, 10}, kFloat32}, {{150}, kFloat32}, {{100}, kFloat32}, {{2, 3}, kFloat32}};
  auto b = plan_buckets(specs, all(4), 1024);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].items, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(b[0].offsets, (std::vector<int64_t>{0, 100}));
  EXPECT_EQ(b[0].numel, 250);
  EXPECT_EQ(b[1].items, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(b[1].offsets, (std::vector<int64_t>{0, 100}));
  EXPECT_EQ(b[1].numel, 106);
}

TEST(Coalesce, DtypesNeverShareABucketAndOrderIsKept) {
  std::vector<TensorSpec> specs{{{4}, kFloat32}, {{3}, kFloat64}, {{5}, kFloat32}, {{2}, kInt64}, {{1}, kFloat64}};
  auto b = plan_buckets(specs, all(5), 1 << 20);
  ASSERT_EQ(b.size(), 3u);
  for (const Bucket& x : b) {
    for (size_t i : x.items) EXPECT_EQ(specs[i].dtype, x.dtype);
    for (size_t k = 1; k < x.items.size(); ++k) EXPECT_LT(x.items[k - 1], x.items[k]);
  }
  size_t total = 0;
  for (const Bucket& x : b) total += x.items.size();
  EXPECT_EQ(total, 5u);
}

TEST(Coalesce, ATensorLargerThanTheBufferGetsItsOwnBucketAndEmptyOnesNone) {
  std::vector<TensorSpec> specs{{{8}, kFloat32}, {{1000}, kFloat32}, {{0, 4}, kFloat32}, {{8}, kFloat32}};
  auto b = plan_buckets(specs, all(4), 64);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].items, (std::vector<size_t>{0}));
  EXPECT_EQ(b[1].items, (std::vector<size_t>{1}));
  EXPECT_EQ(b[2].items, (std::vector<size_t>{3}));
  EXPECT_TRUE(plan_buckets(specs, {2}, 64).empty());
  EXPECT_TRUE(plan_buckets(specs, {}, 64).empty());
}

TEST(Coalesce, OnlyTheListedTensorsArePlanned) {
  std::vector<TensorSpec> specs{{{2}, kFloat32}, {{3}, kFloat32}, {{4}, kFloat32}};
  auto b = plan_buckets(specs, {2, 0}, 1 << 20);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].items, (std::vector<size_t>{2, 0}));
  EXPECT_EQ(b[0].offsets, (std::vector<int64_t>{0, 4}));
}

TEST(Coalesce, PackThenUnpackRoundTripsWithZerosForMissingTensors) {
  manual_seed(3);
  std::vector<Tensor> ts{randn({3, 4}), Tensor(), randn({5}).t(), randn({4, 2}).t()};  // a strided one too
  std::vector<TensorSpec> specs{{{3, 4}, kFloat32}, {{2, 2}, kFloat32}, {{5}, kFloat32}, {{2, 4}, kFloat32}};
  auto buckets = plan_buckets(specs, all(4), 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  Tensor flat = pack(buckets[0], ts, Device::cpu());
  EXPECT_EQ(flat.sizes(), (Shape{12 + 4 + 5 + 8}));
  EXPECT_TRUE(flat.is_contiguous());
  std::vector<Tensor> back = unpack(buckets[0], flat, specs);
  ASSERT_EQ(back.size(), 4u);
  EXPECT_TRUE(equal(back[0], ts[0]));
  EXPECT_TRUE(equal(back[1], zeros({2, 2})));
  EXPECT_TRUE(equal(back[2], ts[2]));
  EXPECT_TRUE(equal(back[3], ts[3]));
  EXPECT_FALSE(back[0].requires_grad());
}

}  // namespace
}  // namespace dp::parallel::detail

namespace dp::parallel::detail {
namespace {

TEST(Coalesce, CopyCoalescedFillsEveryCopyAcrossBuckets) {
  manual_seed(4);
  std::vector<Tensor> originals{randn({5, 3}), randint(0, 9, {4}), randn({0}), randn({2, 6}).t(), randn({40})};
  std::vector<Tensor> copies;
  for (const Tensor& t : originals) copies.push_back(full(t.sizes(), -7.0, TensorOptions().dtype(t.dtype())));
  const Tensor strided_target = copies[3];
  copy_coalesced(originals, copies, Device::cpu(), 64);  // several buckets of one dtype
  for (size_t k = 0; k < originals.size(); ++k) EXPECT_TRUE(equal(copies[k], originals[k])) << k;
  EXPECT_TRUE(copies[3].is_same(strided_target));  // filled in place
  EXPECT_THROW(copy_coalesced({randn({2})}, {randn({3})}, Device::cpu()), ShapeError);
}

}  // namespace
}  // namespace dp::parallel::detail
