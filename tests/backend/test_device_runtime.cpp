// The device-generic streams and runtimes (dp/core/stream.h, dp/core/device_runtime.h): the host
// has no runtime and its stream guard does nothing; a device type's runtime is what autograd's
// nodes, the engine's stream synchronisation, the device registry and the allocator lookup use.
// A recording fake runtime stands in for a GPU, so the generic paths run on machines without one.
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "autograd/backward_streams.h"
#include "dp/autograd/node.h"
#include "dp/core/allocator.h"
#include "dp/core/device_registry.h"
#include "dp/core/device_runtime.h"
#include "dp/ops/factory.h"

namespace dp {
namespace {

TEST(DeviceRuntime, TheHostHasNoRuntimeAndItsStreamGuardDoesNothing) {
  EXPECT_EQ(device_runtime(DeviceType::CPU), nullptr);
  const Stream host = current_stream(Device::cpu(0));
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(host, Stream());
  StreamGuard guard(host);  // nothing to set: the host's stream is the calling thread
  EXPECT_EQ(current_stream(Device::cpu()), Stream());
}

TEST(DeviceRuntime, AStreamIsAValueThatKeepsItsOwnerAlive) {
  auto owner = std::make_shared<int>(5);
  const Stream a(Device::cuda(1), 7, owner);
  const Stream b(Device::cuda(1), 7);
  const Stream c(Device::cuda(0), 7);
  EXPECT_EQ(a, b);  // same device and id: the same queue
  EXPECT_NE(a, c);
  EXPECT_FALSE(a.is_cpu());
  EXPECT_EQ(owner.use_count(), 2);
}

TEST(DeviceRuntime, TheDefaultAcceleratorIsTheOneWithDevices) {
  const std::optional<DeviceType> type = default_accelerator();
  EXPECT_EQ(type.has_value(), cuda_device_count() > 0);
  if (type) {
    EXPECT_EQ(*type, DeviceType::CUDA);
  }
}

// Host memory behind a fake device type's allocator.
class HostMemory final : public Allocator {
 public:
  explicit HostMemory(Device d) : device_(d) {}
  void* allocate(size_t nbytes) override { return ::operator new(nbytes == 0 ? 1 : nbytes); }
  void deallocate(void* ptr, size_t) override { ::operator delete(ptr); }
  MemoryStats stats() const override { return {}; }
  void reset_peak() override {}
  Device device() const override { return device_; }

 private:
  Device device_;
};

// Two devices, streams numbered per device (1 is each device's default), and a log of the
// ordering calls. Single-threaded use only (the tests below).
class FakeRuntime final : public DeviceRuntime {
 public:
  mutable int current = 0;
  mutable std::map<int, uint64_t> current_ids;  // device -> current stream id (default: 1)
  mutable std::vector<std::string> log;

  int device_count() const override { return 2; }
  int current_device() const override { return current; }
  void set_device(int index) const override {
    log.push_back("set_device " + std::to_string(index));
    current = index;
  }
  void restore_device(int index) const noexcept override { current = index; }
  Stream current_stream(int index) const override {
    auto it = current_ids.find(index);
    return Stream(Device::cuda(index), it == current_ids.end() ? 1 : it->second);
  }
  Stream default_stream(int index) const override { return Stream(Device::cuda(index), 1); }
  void set_current_stream(const Stream& s) const override { current_ids[s.device().index] = s.id(); }
  void wait_stream(const Stream& waiter, const Stream& producer) const override { log.push_back("wait " + name(waiter) + " for " + name(producer)); }
  void record_stream(void* ptr, const Stream& s) const override { log.push_back(std::string("record ") + (ptr ? "ptr" : "null") + " on " + name(s)); }
  Allocator& allocator(int index) const override { return index == 0 ? memory0_ : memory1_; }
  DeviceProperties properties(int) const override { return DeviceProperties{1 << 30, 4}; }

  static std::string name(const Stream& s) { return s.device().str() + "/" + std::to_string(s.id()); }

 private:
  mutable HostMemory memory0_{Device::cuda(0)};
  mutable HostMemory memory1_{Device::cuda(1)};
};

// Installs the fake as the CUDA runtime for one test, and puts the real one back. Skipped where a
// real GPU is visible: its runtime must not be replaced under the process's other users.
class FakeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: the fake runtime would replace the real CUDA runtime";
    previous_ = device_runtime(DeviceType::CUDA);
    register_device_runtime(DeviceType::CUDA, &fake_);
  }
  void TearDown() override {
    if (installed()) register_device_runtime(DeviceType::CUDA, previous_);
  }
  bool installed() const { return device_runtime(DeviceType::CUDA) == &fake_; }

  FakeRuntime fake_;
  const DeviceRuntime* previous_ = nullptr;
};

struct Probe final : autograd::Node {
  autograd::variable_list apply(autograd::variable_list&&) override { return {}; }
  std::string name() const override { return "Probe"; }
};

TEST_F(FakeDeviceTest, TheRegistryAndTheAllocatorLookupGoThroughTheRuntime) {
  EXPECT_EQ(cuda_device_count(), 2);
  EXPECT_NO_THROW(check_device(Device::cuda(1)));
  EXPECT_THROW(check_device(Device::cuda(2)), DeviceError);
  EXPECT_EQ(allocator_for(Device::cuda(1)).device(), Device::cuda(1));
  EXPECT_EQ(default_accelerator(), DeviceType::CUDA);
}

TEST_F(FakeDeviceTest, AStreamGuardSetsTheDeviceAndItsStreamAndRestoresBoth) {
  {
    StreamGuard guard(Stream(Device::cuda(1), 9));
    EXPECT_EQ(fake_.current, 1);
    EXPECT_EQ(current_stream(Device::cuda(1)).id(), 9u);
    EXPECT_EQ(current_stream(Device(DeviceType::CUDA)).id(), 9u);  // no index: the current device's
  }
  EXPECT_EQ(fake_.current, 0);
  EXPECT_EQ(current_stream(Device::cuda(1)).id(), 1u);
}

TEST_F(FakeDeviceTest, ANodeRecordsItsDevicesCurrentStreamAndForgetsItOnTheHost) {
  Probe n;
  EXPECT_TRUE(n.stream().is_cpu());
  fake_.current_ids[1] = 4;
  n.set_device(Device::cuda(1));
  EXPECT_EQ(n.stream(), Stream(Device::cuda(1), 4));
  n.set_device(Device::cpu(0));
  EXPECT_TRUE(n.stream().is_cpu());
}

TEST_F(FakeDeviceTest, AGradientCrossingStreamsIsOrderedAndRecordedOnTheConsumersStream) {
  Tensor g = empty({4}, TensorOptions().device(Device::cuda(1)));
  ASSERT_EQ(g.device(), Device::cuda(1));
  Probe consumer;
  fake_.current_ids[1] = 3;  // the consumer's forward ran on stream 3
  consumer.set_device(Device::cuda(1));
  fake_.current_ids[1] = 5;  // the producer (this thread) is on stream 5
  const Stream target = autograd::detail::sync_gradient(g, consumer);
  EXPECT_EQ(target, Stream(Device::cuda(1), 3));
  ASSERT_EQ(fake_.log.size(), 2u);
  EXPECT_EQ(fake_.log[0], "wait cuda:1/3 for cuda:1/5");
  EXPECT_EQ(fake_.log[1], "record ptr on cuda:1/3");

  // Same stream: nothing to order.
  fake_.log.clear();
  fake_.current_ids[1] = 3;
  EXPECT_EQ(autograd::detail::sync_gradient(g, consumer), Stream(Device::cuda(1), 3));
  EXPECT_TRUE(fake_.log.empty());

  // A consumer on another device reads through g's device's default stream.
  Probe other;
  other.set_device(Device::cuda(0));
  EXPECT_EQ(autograd::detail::sync_gradient(g, other), Stream(Device::cuda(1), 1));
  ASSERT_EQ(fake_.log.size(), 2u);
  EXPECT_EQ(fake_.log[0], "wait cuda:1/1 for cuda:1/3");
}

TEST_F(FakeDeviceTest, TheCallersStreamsWaitForTheLeafStreamsOnce) {
  std::vector<Stream> leaves;
  autograd::detail::add_leaf_stream(leaves, Stream(Device::cuda(1), 6));
  autograd::detail::add_leaf_stream(leaves, Stream(Device::cuda(1), 6));
  autograd::detail::add_leaf_stream(leaves, Stream(Device::cuda(0), 1));
  ASSERT_EQ(leaves.size(), 2u);
  autograd::detail::sync_caller(leaves);
  // cuda:1's caller stream (1) waits for 6; cuda:0's caller stream is the leaf stream itself.
  ASSERT_EQ(fake_.log.size(), 1u);
  EXPECT_EQ(fake_.log[0], "wait cuda:1/1 for cuda:1/6");
}

}  // namespace
}  // namespace dp
