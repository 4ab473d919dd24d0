// Device parsing and printing, check_device, and devices as seen by factories and conversions.
#include <gtest/gtest.h>
#include "support/golden.h"

namespace dp {
namespace {

TEST(Device, Parsing) {
  Device host("cpu");
  EXPECT_TRUE(host.is_cpu());
  EXPECT_FALSE(host.has_index());
  EXPECT_EQ(host.index, -1);
  EXPECT_EQ(host, Device::cpu());
  Device c3("cpu:3");
  EXPECT_TRUE(c3.is_cpu());
  EXPECT_EQ(c3.index, 3);
  EXPECT_EQ(c3, Device::cpu(3));
  Device g1("cuda:1");
  EXPECT_TRUE(g1.is_cuda());
  EXPECT_EQ(g1.index, 1);
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  EXPECT_NE(Device("cpu:0"), Device("cpu"));
  EXPECT_NE(Device("cpu:0"), Device("cuda:0"));
  for (const char* bad : {"gpu", "cpu:", "cpu:-1", "cpu:x", "cuda:1:2", "CPU", "", ":0", "cpu:1a", "cuda:1234567"}) {
    SCOPED_TRACE(bad);
    try {
      Device d(bad);
      FAIL() << "parsed " << d.str();
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Device, Printing) {
  EXPECT_EQ(Device("cpu").str(), "cpu");
  EXPECT_EQ(Device("cpu:12").str(), "cpu:12");
  EXPECT_EQ(Device("cuda").str(), "cuda:0");
  std::ostringstream os;
  os << Device("cuda:2");
  EXPECT_EQ(os.str(), "cuda:2");
  EXPECT_NE(std::hash<Device>()(Device("cpu:1")), std::hash<Device>()(Device("cuda:1")));
}

TEST(Device, CheckDeviceOnATwoDeviceMachine) {
  set_cpu_device_count(2);
  ASSERT_EQ(cpu_device_count(), 2);
  EXPECT_NO_THROW(check_device(Device("cpu")));
  EXPECT_NO_THROW(check_device(Device("cpu:0")));
  EXPECT_NO_THROW(check_device(Device("cpu:1")));
  try {
    check_device(Device("cpu:7"));
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cpu:7 does not exist"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 CPU devices"), std::string::npos) << msg;
  }
  EXPECT_THROW(check_device(Device("cpu:2")), DeviceError);
  EXPECT_THROW(check_device(Device("cuda:0")), DeviceError);
  // Factories and conversions validate their device.
  EXPECT_THROW(zeros({2}, Device("cpu:7")), DeviceError);
  EXPECT_THROW(empty({2}, Device("cpu:2")), DeviceError);
  EXPECT_THROW(rand({2}, Device("cpu:9")), DeviceError);
  EXPECT_THROW(arange(3, TensorOptions(kInt64).device(Device("cpu:5"))), DeviceError);
  EXPECT_THROW(zeros({2}).to(Device("cpu:7")), DeviceError);
  EXPECT_THROW(zeros({2}, Device("cuda:0")), DeviceError);
  EXPECT_EQ(zeros({2}, Device("cpu:1")).device(), Device("cpu:1"));
  EXPECT_EQ(devices(DeviceType::CPU), (std::vector<Device>{Device("cpu:0"), Device("cpu:1")}));
}

TEST(Device, TensorsKnowTheirDevice) {
  if (cpu_device_count() < 2) set_cpu_device_count(2);
  Tensor a = ones({2, 2}, Device("cpu:1"));
  EXPECT_EQ(a.device(), Device("cpu:1"));
  EXPECT_TRUE(a.is_cpu());
  EXPECT_FALSE(a.is_cuda());
  // Views stay on the device of their base.
  EXPECT_EQ(a.t().device(), Device("cpu:1"));
  EXPECT_EQ(a.chunk(2)[1].device(), Device("cpu:1"));
  EXPECT_EQ(cat({a, a}).device(), Device("cpu:1"));
  EXPECT_EQ(ones_like(a).device(), Device("cpu:1"));
  EXPECT_EQ(options_of(a).device_, Device("cpu:1"));
  EXPECT_EQ(options_of(a).dtype_, kFloat32);
}

}  // namespace
}  // namespace dp

// An index past 16 bits must be rejected, not wrapped to a negative index (the host device).
TEST(DeviceParse, IndexTooLargeForSixteenBitsIsRejected) {
  EXPECT_THROW(dp::Device("cpu:40000"), dp::ValueError);
  EXPECT_THROW(dp::Device("cuda:32768"), dp::ValueError);
  EXPECT_EQ(dp::Device("cpu:32767").index, 32767);
}
