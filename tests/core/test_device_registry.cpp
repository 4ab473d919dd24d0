// The device registry: CPU device count, device checks with their messages, worker_for's bounds
// (a Device can name cpu:32767; that must be an error, not a read past the worker table), and
// concurrent first use of a device starting exactly one worker.
#include <gtest/gtest.h>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <vector>
#include "backend/kernel_stub.h"
#include "dp/config.h"
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"

namespace dp {
namespace {

TEST(DeviceRegistry, CountAndDevices) {
  set_cpu_device_count(std::max(cpu_device_count(), 3));
  int n = cpu_device_count();
  EXPECT_GE(n, 3);
  EXPECT_EQ(device_count(DeviceType::CPU), n);
  std::vector<Device> ds = devices(DeviceType::CPU);
  ASSERT_EQ(static_cast<int>(ds.size()), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(ds[i], Device::cpu(i));
  // 0 without the CUDA backend or without a visible GPU; the registry lists exactly that many.
  const int cuda = cuda_device_count();
  EXPECT_GE(cuda, 0);
  std::vector<Device> gpus = devices(DeviceType::CUDA);
  ASSERT_EQ(static_cast<int>(gpus.size()), cuda);
  for (int i = 0; i < cuda; ++i) EXPECT_EQ(gpus[i], Device::cuda(i));
#if !DP_HAVE_CUDA  // 0 or 1, always defined (the dparallel target sets it)
  EXPECT_EQ(cuda, 0);
#endif
}

TEST(DeviceRegistry, WorkerOfAMissingGpuIsAClearError) {
  const Device missing = Device::cuda(cuda_device_count());  // one past the last GPU (cuda:0 without one)
  try {
    worker_for(missing);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.str() + " does not exist"), std::string::npos) << e.what();
  }
}

TEST(DeviceRegistry, CheckDeviceMessages) {
  set_cpu_device_count(std::max(cpu_device_count(), 2));
  int n = cpu_device_count();
  EXPECT_NO_THROW(check_device(Device::cpu()));
  EXPECT_NO_THROW(check_device(Device::cpu(n - 1)));
  try {
    check_device(Device::cpu(n));
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:" + std::to_string(n) + " does not exist: there are " + std::to_string(n) + " CPU devices"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_device(Device::cuda(0)), DeviceError);
}

// This program links dparallel alone (tests/CMakeLists.txt), as a program that never uses a GPU:
// it has no CUDA backend, whether the library was built with one or not, and a CUDA device or a
// CUDA kernel is an error that says why.
TEST(DeviceRegistry, WithoutTheCudaLibraryACudaDeviceIsAnErrorThatSaysWhy) {
  EXPECT_TRUE(backend_linked(DeviceType::CPU));
  EXPECT_FALSE(backend_linked(DeviceType::CUDA));
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_FALSE(cuda::is_available());
  EXPECT_TRUE(devices(DeviceType::CUDA).empty());
#if DP_HAVE_CUDA
  const std::string why = "this program does not link dparallel's CUDA library, dparallel::cuda (libdparallel_cuda): link it as well to use GPUs";
  const std::string kernel_why = " (dparallel::cuda, the CUDA library, is not linked)";
#else
  const std::string why = "dparallel was built without the CUDA backend";
  const std::string kernel_why = " (built without CUDA)";
#endif
  EXPECT_EQ(detail::no_cuda_devices_reason(), why);
  for (const std::function<void()>& use :
       std::vector<std::function<void()>>{[] { check_device(Device::cuda(0)); }, [] { worker_for(Device::cuda(1)); }}) {
    try {
      use();
      FAIL() << "expected DeviceError";
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(" does not exist: no CUDA devices are available (" + why + ")"), std::string::npos) << msg;
    }
  }
  backend::KernelStub<int(int)> stub{"doubling_stub", "doubling", backend::KernelCoverage::CpuOnly};
  try {
    stub(DeviceType::CUDA, 1);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()), "no CUDA kernel for doubling" + kernel_why);
  }
}

TEST(DeviceRegistry, WorkerForOutOfRange) {
  EXPECT_THROW(worker_for(Device::cpu(cpu_device_count())), DeviceError);
  EXPECT_THROW(worker_for(Device::cpu(5000)), DeviceError);  // beyond the registry's table
  EXPECT_THROW(worker_for(Device::cpu(32767)), DeviceError);
  EXPECT_THROW(worker_for(Device::cuda(0)), DeviceError);
  EXPECT_THROW(set_cpu_device_count(0), ValueError);
}

// Once a device's worker exists, the count cannot shrink below it; growing is fine.
TEST(DeviceRegistry, CannotShrinkBelowAStartedWorker) {
  set_cpu_device_count(std::max(cpu_device_count(), 3));
  ASSERT_NE(worker_for(Device::cpu(2)), nullptr);
  EXPECT_THROW(set_cpu_device_count(2), DeviceError);
  int n = cpu_device_count();
  EXPECT_NO_THROW(set_cpu_device_count(n + 1));
  EXPECT_EQ(cpu_device_count(), n + 1);
}

// Many threads asking for the same device's worker at once get the same one.
TEST(DeviceRegistry, ConcurrentFirstUse) {
  set_cpu_device_count(std::max(cpu_device_count(), 6));
  std::vector<std::future<Worker*>> fs;
  for (int t = 0; t < 8; ++t) fs.push_back(std::async(std::launch::async, [] { return worker_for(Device::cpu(5)); }));
  std::set<Worker*> seen;
  for (auto& f : fs) seen.insert(f.get());
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_NE(*seen.begin(), nullptr);
}

}  // namespace
}  // namespace dp
