// Virtual CUDA devices (DP_CUDA_VIRTUAL_DEVICES, see dp/cuda/cuda.h). The logical -> physical map is
// plain C++ and tested everywhere; the runtime tests need a GPU and the variable set (CTest runs
// this program again with DP_CUDA_VIRTUAL_DEVICES=2 and =4: tests/CMakeLists.txt), and skip otherwise.
#include <gtest/gtest.h>
#include <string>
#include <thread>
#include "cuda/device_map.h"
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/dp.h"
#include "support/cuda.h"
#if DP_HAVE_CUDA
#include "dp/cuda/cuda.h"
#endif

namespace dp {
namespace {

using cuda::detail::DeviceMap;
using cuda::detail::make_device_map;
using cuda::detail::parse_virtual_devices;

std::vector<int> physical(const DeviceMap& m) { return m.physical; }

TEST(CudaDeviceMap, UnsetOrEmptyMeansThePhysicalDevices) {
  EXPECT_EQ(parse_virtual_devices(nullptr), 0);
  EXPECT_EQ(parse_virtual_devices(""), 0);
  DeviceMap m = make_device_map(nullptr, 3);
  EXPECT_FALSE(m.is_virtual);
  EXPECT_EQ(physical(m), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(make_device_map("", 2).count(), 2);
  EXPECT_EQ(make_device_map(nullptr, 0).count(), 0);
}

TEST(CudaDeviceMap, OneGpuBecomesNLogicalDevices) {
  for (int n : {1, 2, 4, 64}) {
    DeviceMap m = make_device_map(std::to_string(n).c_str(), 1);
    EXPECT_TRUE(m.is_virtual);
    EXPECT_EQ(m.count(), n);
    EXPECT_EQ(physical(m), std::vector<int>(static_cast<size_t>(n), 0));
  }
}

TEST(CudaDeviceMap, LogicalDevicesAreDealtRoundRobinOverSeveralGpus) {
  EXPECT_EQ(physical(make_device_map("4", 2)), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(physical(make_device_map("3", 2)), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(physical(make_device_map("2", 4)), (std::vector<int>{0, 1}));  // fewer logical than physical: the first GPUs
  DeviceMap m = make_device_map("5", 2);
  EXPECT_EQ(m.first_logical(0), 0);
  EXPECT_EQ(m.first_logical(1), 1);
  EXPECT_EQ(m.first_logical(2), -1);
}

TEST(CudaDeviceMap, NoGpuMeansNoLogicalDevice) {
  DeviceMap m = make_device_map("4", 0);
  EXPECT_TRUE(m.is_virtual);
  EXPECT_EQ(m.count(), 0);
}

TEST(CudaDeviceMap, MalformedValuesAreAValueErrorNamingTheVariable) {
  for (const char* bad : {"0", "-1", "65", "2x", "x2", " ", "1.5", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    try {
      make_device_map(bad, 1);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("DP_CUDA_VIRTUAL_DEVICES"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[1, 64]"), std::string::npos) << msg;
    }
    EXPECT_THROW(make_device_map(bad, 0), ValueError);  // even without a GPU
  }
}

#if DP_HAVE_CUDA
// The runtime with virtual devices: needs a GPU and DP_CUDA_VIRTUAL_DEVICES >= 2.
#define DP_REQUIRE_VIRTUAL_DEVICES(n)                                 \
  DP_REQUIRE_GPU();                                                   \
  if (!cuda::virtual_devices_enabled() || cuda::device_count() < (n)) \
  GTEST_SKIP() << "needs DP_CUDA_VIRTUAL_DEVICES >= " << (n) << " (device_count() == " << cuda::device_count() << ")"

TEST(CudaVirtualDevices, CountAndMapFollowTheVariable) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  const int n = cuda::device_count();
  EXPECT_EQ(n, parse_virtual_devices(std::getenv("DP_CUDA_VIRTUAL_DEVICES")));
  EXPECT_EQ(cuda_device_count(), n);
  EXPECT_EQ(devices(DeviceType::CUDA).size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(cuda::physical_device(i), i % cuda::physical_device_count());
  EXPECT_THROW(cuda::physical_device(n), DeviceError);
}

TEST(CudaVirtualDevices, CurrentDeviceIsLogicalPerThreadAndGuardsRestoreIt) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  const int n = cuda::device_count();
  cuda::set_device(0);
  for (int i = 0; i < n; ++i) {
    cuda::DeviceGuard guard(i);
    EXPECT_EQ(cuda::current_device(), i);  // logical, though several share a GPU
    std::thread([] { EXPECT_EQ(cuda::current_device(), 0); }).join();
  }
  EXPECT_EQ(cuda::current_device(), 0);
  cuda::set_device(n - 1);
  {
    cuda::DeviceGuard guard(0);
    EXPECT_EQ(cuda::current_device(), 0);
  }
  EXPECT_EQ(cuda::current_device(), n - 1);
  cuda::set_device(0);
  for (int i = 0; i < n; ++i) EXPECT_EQ(worker_for(Device::cuda(i))->submit([] { return cuda::current_device(); }).get(), i);
}

TEST(CudaVirtualDevices, EachDeviceHasItsOwnCreatedDefaultStream) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  const int n = cuda::device_count();
  for (int i = 0; i < n; ++i) {
    cuda::Stream s = cuda::current_stream(i);
    EXPECT_EQ(s.device(), i);
    EXPECT_NE(s.handle(), nullptr) << "cuda:" << i << " uses the GPU's legacy default stream";
    EXPECT_TRUE(s.is_default());
    EXPECT_EQ(s, cuda::Stream::default_stream(i));
    cuda::Stream other_thread = s;
    std::thread([&] { other_thread = cuda::current_stream(i); }).join();
    EXPECT_EQ(other_thread, s);  // shared by all threads, as a default stream is
    for (int j = 0; j < i; ++j) EXPECT_NE(s.handle(), cuda::current_stream(j).handle());
  }
  cuda::Stream side = cuda::Stream::create(1);
  EXPECT_FALSE(side.is_default());
}

TEST(CudaVirtualDevices, EachDeviceHasItsOwnAllocatorPool) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  const int64_t before0 = cuda::memory_stats(0).allocated, before1 = cuda::memory_stats(1).allocated;
  {
    Tensor t = empty({1 << 20}, TensorOptions().device(Device::cuda(1)));
    EXPECT_GE(cuda::memory_stats(1).allocated, before1 + (int64_t{4} << 20));
    EXPECT_EQ(cuda::memory_stats(0).allocated, before0);
  }
  EXPECT_EQ(cuda::memory_stats(1).allocated, before1);
}

TEST(CudaVirtualDevices, CopiesBetweenLogicalDevicesAreExactAndOrdered) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  manual_seed(7);
  const Tensor host = randn({513, 37});
  Tensor a = host.to(Device::cuda(0));
  Tensor b = a.to(Device::cuda(1));
  Tensor c = empty({513, 37}, TensorOptions().device(Device::cuda(0))).fill_(-1.0);
  c.copy_(b.t().contiguous().t());  // strided source on cuda:1
  EXPECT_EQ(b.device(), Device::cuda(1));
  EXPECT_TRUE(equal(b.cpu(), host));
  EXPECT_TRUE(equal(c.cpu(), host));
  // Work queued behind a long kernel on cuda:0's stream must be seen by cuda:1's copy.
  cuda::detail::sleep_cycles(int64_t{1} << 24, cuda::current_stream(0));
  Tensor d = full({4096}, 3.0, TensorOptions().device(Device::cuda(0)));
  Tensor e = d.to(Device::cuda(1));
  EXPECT_TRUE(equal(e.cpu(), full({4096}, 3.0)));
}

TEST(CudaVirtualDevices, PeerAccessAndPropertiesAreTheGpus) {
  DP_REQUIRE_VIRTUAL_DEVICES(2);
  const cuda::DeviceInfo first = cuda::device_info(0);
  EXPECT_GT(first.total_memory, 0);
  EXPECT_GT(first.multi_processor_count, 0);
  for (int i = 1; i < cuda::device_count(); ++i) {
    if (cuda::physical_device(i) != cuda::physical_device(0)) continue;
    EXPECT_TRUE(cuda::enable_peer_access(i, 0));  // one GPU: always
    const cuda::DeviceInfo info = cuda::device_info(i);
    EXPECT_EQ(info.total_memory, first.total_memory);
    EXPECT_EQ(info.multi_processor_count, first.multi_processor_count);
    EXPECT_EQ(info.name, first.name);
  }
}
#endif

}  // namespace
}  // namespace dp
