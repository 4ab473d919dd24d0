// scatter / gather / broadcast / reduce (dp/parallel/comm.h): values, placement, autograd, errors.
#include <gtest/gtest.h>
#include "dp/dp.h"
#include "support/devices.h"
#include "dp/core/warning.h"
#include "dp/parallel/comm.h"
#include "support/gradcheck.h"

namespace dp::parallel {
namespace {

class Comm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

using test::cpu_devices;

TEST_F(Comm, ChunkSizesFollowTorchChunk) {
  // torch.chunk's split sizes (docs/data-parallel.md, "How a batch is split").
  EXPECT_EQ(chunk_sizes(20, 2), (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(chunk_sizes(9, 4), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(chunk_sizes(6, 4), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(chunk_sizes(20, 8), (std::vector<int64_t>{3, 3, 3, 3, 3, 3, 2}));
  EXPECT_EQ(chunk_sizes(1, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(chunk_sizes(0, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(chunk_sizes(30, 2), (std::vector<int64_t>{15, 15}));
  EXPECT_EQ(chunk_sizes(10, 2), (std::vector<int64_t>{5, 5}));
}

TEST_F(Comm, BalancedSizesUseEveryDevice) {
  EXPECT_EQ(balanced_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(balanced_sizes(6, 4), (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(balanced_sizes(2, 4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(balanced_sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_THROW(balanced_sizes(3, 0), ValueError);
}

TEST_F(Comm, ScatterSplitsOntoDevicesWithoutCopyingHostMemory) {
  Tensor x = arange(0, 20, 1, TensorOptions().dtype(kFloat32)).view({10, 2});
  auto chunks = scatter(x, cpu_devices(4));
  ASSERT_EQ(chunks.size(), 4u);
  const std::vector<int64_t> rows{3, 3, 3, 1};
  int64_t offset = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(chunks[i].device(), Device::cpu(static_cast<int>(i)));
    EXPECT_EQ(chunks[i].size(0), rows[i]);
    EXPECT_TRUE(equal(chunks[i].cpu(), x.narrow(0, offset, rows[i])));
    // CPU devices share host memory: the chunk is a relabelled view of the input.
    EXPECT_EQ(chunks[i].data_ptr(), x.narrow(0, offset, rows[i]).data_ptr());
    offset += rows[i];
  }
}

TEST_F(Comm, ScatterAlongNegativeDimAndExplicitSizes) {
  Tensor x = randn({2, 7});
  auto chunks = scatter(x, cpu_devices(3), std::vector<int64_t>{4, 0, 3}, -1);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].sizes(), Shape({2, 4}));
  EXPECT_EQ(chunks[1].sizes(), Shape({2, 0}));
  EXPECT_EQ(chunks[2].sizes(), Shape({2, 3}));
  EXPECT_TRUE(equal(chunks[2].cpu(), x.narrow(1, 4, 3)));
}

TEST_F(Comm, ScatterOfEmptyBatchGivesOneEmptyChunkPerDevice) {
  auto chunks = scatter(zeros({0, 5}), cpu_devices(2));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].sizes(), Shape({0, 5}));
  EXPECT_EQ(chunks[1].device(), Device("cpu:1"));
}

TEST_F(Comm, ScatterErrorsNameTheProblem) {
  EXPECT_THROW(scatter(randn({4}), {}), ValueError);
  try {
    scatter(tensor<float>({1.0f}).view({}), cpu_devices(2));
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("1-dimensional"), std::string::npos) << e.what();
  }
  try {
    scatter(randn({6, 2}), cpu_devices(2), std::vector<int64_t>{1, 2, 3});
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("len(devices) = 2 and len(chunk_sizes) = 3"), std::string::npos) << e.what();
  }
  try {
    scatter(randn({6, 2}), cpu_devices(2), std::vector<int64_t>{2, 3});
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sum to 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scatter(randn({6, 2}), cpu_devices(2), std::vector<int64_t>{7, -1}), ValueError);
  EXPECT_THROW(scatter(randn({6, 2}), cpu_devices(2), std::nullopt, 2), IndexError);
  EXPECT_THROW(scatter(randn({6, 2}), {Device("cpu:0"), Device("cpu:99")}), DeviceError);
}

TEST_F(Comm, ScatterBackwardGathersToTheInputDeviceWithZerosForUnusedChunks) {
  Tensor x = randn({10, 3}).requires_grad_();
  auto chunks = scatter(x, cpu_devices(4));
  (chunks[0] * 2).sum().backward();
  Tensor g = x.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.device(), Device::cpu());
  EXPECT_TRUE(equal(g.narrow(0, 0, 3), full({3, 3}, 2.0f)));
  EXPECT_TRUE(equal(g.narrow(0, 3, 7), zeros({7, 3})));
}

TEST_F(Comm, GatherConcatenatesOnTheDestination) {
  Tensor a = randn({2, 3}).to("cpu:1");
  Tensor b = randn({4, 3}).to("cpu:2");
  Tensor y = gather({a, b}, Device::cpu());
  EXPECT_EQ(y.device(), Device::cpu());
  EXPECT_TRUE(equal(y, cat({a.cpu(), b.cpu()}, 0)));
  Tensor z = gather({a.t(), b.t()}, "cpu:0", -1);
  EXPECT_EQ(z.sizes(), Shape({3, 6}));
  EXPECT_EQ(z.device(), Device("cpu:0"));
  // A fresh tensor even when the destination is an input's own device.
  Tensor w = gather({a}, "cpu:1");
  EXPECT_NE(w.data_ptr(), a.data_ptr());
}

TEST_F(Comm, GatherOfScalarsGivesAVectorWithPyTorchsWarning) {
  WarningCapture capture;
  Tensor y = gather({full({}, 1.0f).to("cpu:0"), full({}, 2.0f).to("cpu:1"), full({}, 3.0f).to("cpu:2")}, "cpu:0");
  EXPECT_TRUE(equal(y.cpu(), tensor<float>({1, 2, 3})));
  ASSERT_EQ(capture.messages().size(), 1u);
  EXPECT_EQ(capture.messages()[0],
            "Was asked to gather along dimension 0, but all input tensors were scalars; will instead unsqueeze and return a vector.");
  // dim -1 does not qualify (exactly 0 only).
  EXPECT_THROW(gather({full({}, 1.0f), full({}, 2.0f)}, Device::cpu(), -1), ShapeError);
}

TEST_F(Comm, GatherErrorsNameTheProblem) {
  EXPECT_THROW(gather({}, Device::cpu()), ValueError);
  try {
    gather({randn({2, 3}), randn({2, 4})}, Device::cpu());
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("index 1 has invalid shape [2, 4], but expected [2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gather({randn({2, 3}), randn({2, 3, 1})}, Device::cpu()), ShapeError);
  EXPECT_THROW(gather({randn({2, 3}), randn({2, 3}).to(kFloat64)}, Device::cpu()), DTypeError);
  EXPECT_THROW(gather({randn({2, 3})}, Device::cpu(), 2), IndexError);
}

TEST_F(Comm, GatherBackwardSplitsWithTheForwardSizes) {
  Tensor a = randn({2, 3}).to("cpu:1").requires_grad_();
  Tensor b = randn({1, 3}).to("cpu:2").requires_grad_();
  Tensor w = randn({3, 3});
  Tensor y = gather({a, b}, Device::cpu());
  (y * w).sum().backward();
  EXPECT_EQ(a.grad().device(), Device("cpu:1"));
  EXPECT_EQ(b.grad().device(), Device("cpu:2"));
  EXPECT_TRUE(equal(a.grad().cpu(), w.narrow(0, 0, 2)));
  EXPECT_TRUE(equal(b.grad().cpu(), w.narrow(0, 2, 1)));
}

TEST_F(Comm, ScatterAndGatherPassGradcheckAndGradgradcheck) {
  auto scatter_gather = [](const std::vector<Tensor>& in) {
    auto parts = scatter(in[0], cpu_devices(3), std::nullopt, 1);
    std::vector<Tensor> squared;
    for (auto& p : parts) squared.push_back(p * p);
    return gather(squared, Device::cpu(), 1);
  };
  Tensor x = test::rand_leaf({2, 5});
  EXPECT_TRUE(test::gradcheck(scatter_gather, {x}));
  EXPECT_TRUE(test::gradgradcheck(scatter_gather, {x}));
  auto gather_scalars = [](const std::vector<Tensor>& in) {
    WarningCapture quiet;
    return gather({in[0].sum().to("cpu:1"), (in[0] * in[0]).sum().to("cpu:2")}, Device::cpu());
  };
  EXPECT_TRUE(test::gradcheck(gather_scalars, {test::rand_leaf({3})}));
}

TEST_F(Comm, AnInPlaceChangeOfTheInputIsCaughtThroughScatteredViews) {
  // Chunks on other CPU devices alias the input and share its version counter.
  Tensor x = randn({4, 2}).requires_grad_();
  Tensor base = x * 1;  // non-leaf, so it can be modified in place
  auto chunks = scatter(base, cpu_devices(2));
  Tensor y = (chunks[1] * chunks[1]).sum();  // saves chunk 1 for backward
  {
    NoGradGuard no_grad;
    base.add_(1.0);
  }
  EXPECT_THROW(y.backward(), AutogradError);
}

TEST_F(Comm, BroadcastCoalescedCopiesEveryTensorToEveryDevice) {
  Tensor a = randn({3, 2}).to("cpu:0");
  Tensor b = arange(0, 5, 1, TensorOptions().dtype(kInt64)).to("cpu:0");
  Tensor c = randn({4}).to(kFloat64).to("cpu:0");
  auto out = broadcast_coalesced({a, b, c}, cpu_devices(3), /*buffer_size=*/16);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0][0].is_same(a));
  for (size_t j = 1; j < 3; ++j) {
    ASSERT_EQ(out[j].size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[j][i].device(), Device::cpu(static_cast<int>(j)));
    EXPECT_TRUE(equal(out[j][0].cpu(), a.cpu()));
    EXPECT_TRUE(equal(out[j][1].cpu(), b.cpu()));
    EXPECT_TRUE(equal(out[j][2].cpu(), c.cpu()));
    EXPECT_NE(out[j][0].data_ptr(), a.data_ptr());  // fresh tensors
  }
  out[1][0].fill_(7.0);
  EXPECT_FALSE(equal(a.cpu(), out[1][0].cpu()));
  try {
    broadcast_coalesced({a, randn({2})}, cpu_devices(2));
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 is on cpu"), std::string::npos) << e.what();
  }
}

TEST_F(Comm, BroadcastGivesTheSourceItselfOnItsOwnDevice) {
  Tensor a = randn({3}).to("cpu:1");
  auto out = broadcast(a, {Device("cpu:1"), Device("cpu:3")});
  EXPECT_EQ(out[0].data_ptr(), a.data_ptr());
  EXPECT_EQ(out[1].device(), Device("cpu:3"));
  EXPECT_TRUE(equal(out[1].cpu(), a.cpu()));
}

TEST_F(Comm, ReduceAddCoalescedSumsInDeviceOrder) {
  std::vector<std::vector<Tensor>> in(3);
  std::vector<Tensor> expect(2);
  for (int j = 0; j < 3; ++j) {
    Tensor a = randn({3, 4});
    Tensor b = randn({5}).to(kFloat64);
    expect[0] = j == 0 ? a : expect[0] + a;
    expect[1] = j == 0 ? b : expect[1] + b;
    in[j] = {a.to(Device::cpu(j)), b.to(Device::cpu(j))};
  }
  auto out = reduce_add_coalesced(in, "cpu:0");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].device(), Device("cpu:0"));
  EXPECT_EQ(out[1].dtype(), kFloat64);
  EXPECT_TRUE(equal(out[0].cpu(), expect[0]));  // same order of additions: bitwise equal
  EXPECT_TRUE(equal(out[1].cpu(), expect[1]));
  Tensor single = reduce_add({in[0][0]}, "cpu:0");
  EXPECT_TRUE(equal(single, in[0][0]));
  EXPECT_NE(single.data_ptr(), in[0][0].data_ptr());
}

TEST_F(Comm, ReduceAddCoalescedSplitsLargeSumsAcrossWorkersWithTheSameResult) {
  // Large enough to be split across the devices' workers; the result must equal the plain sum.
  std::vector<std::vector<Tensor>> in(4);
  Tensor expect;
  for (int j = 0; j < 4; ++j) {
    Tensor a = randn({1 << 19});
    expect = j == 0 ? a : expect + a;
    in[j] = {a.to(Device::cpu(j))};
  }
  auto out = reduce_add_coalesced(in, "cpu:0");
  EXPECT_TRUE(equal(out[0].cpu(), expect));
}

TEST_F(Comm, ReduceAddCoalescedChecksSizesAndCounts) {
  try {
    reduce_add_coalesced({{randn({2, 2})}, {randn({3, 2}).to("cpu:1")}}, "cpu:0");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 has invalid size: got [3, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reduce_add_coalesced({{randn({2})}, {}}, "cpu:0"), ValueError);
  EXPECT_THROW(reduce_add_coalesced({{randn({2})}, {randn({2}).to(kFloat64)}}, "cpu:0"), DTypeError);
  EXPECT_THROW(reduce_add_coalesced({}, "cpu:0"), ValueError);
}

}  // namespace
}  // namespace dp::parallel
