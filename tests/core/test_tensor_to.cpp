// dp::to / Tensor::to: device and dtype conversion, identity when nothing changes, golden values for
// float -> float16/bfloat16/int conversions, strides preserved as PyTorch does, item().
#include <gtest/gtest.h>
#include <cmath>
#include "support/golden.h"

namespace dp {
namespace {

using test::golden_case;
using test::json;
using test::tensor_from_json;

const DType kAll[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

class TensorTo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpu_device_count() < 2) set_cpu_device_count(2);
  }
};

TEST_F(TensorTo, ReturnsSelfWhenNothingChanges) {
  Tensor t = arange(6, kFloat32).view({2, 3});
  EXPECT_TRUE(t.to(kFloat32).is_same(t));
  EXPECT_TRUE(t.to(Device::cpu()).is_same(t));
  EXPECT_TRUE(t.to(Device::cpu(), kFloat32).is_same(t));
  EXPECT_TRUE(to(t, t.device(), t.dtype()).is_same(t));
  EXPECT_TRUE(t.cpu().is_same(t));
  Tensor c = t.to(kFloat32, false, /*copy=*/true);
  EXPECT_FALSE(c.is_same(t));
  EXPECT_NE(c.storage().get(), t.storage().get());
  EXPECT_EQ(c.to_vector<float>(), t.to_vector<float>());
  Tensor d = zeros({2}, Device("cpu:1"));
  EXPECT_TRUE(d.to(Device("cpu:1")).is_same(d));
  EXPECT_FALSE(d.to(Device("cpu:0")).is_same(d));
}

TEST_F(TensorTo, AcrossCpuDevices) {
  Tensor host = arange(12, kFloat32).view({3, 4});
  const std::vector<Device> devs = {Device::cpu(), Device("cpu:0"), Device("cpu:1")};
  for (Device from : devs) {
    Tensor src = host.to(from);
    EXPECT_EQ(src.device(), from);
    for (Device to_dev : devs) {
      SCOPED_TRACE(from.str() + " -> " + to_dev.str());
      Tensor dst = src.to(to_dev);
      EXPECT_EQ(dst.device(), to_dev);
      EXPECT_EQ(dst.storage()->device(), to_dev);
      EXPECT_EQ(dst.to_vector<float>(), host.to_vector<float>());
      if (from != to_dev) {
        EXPECT_NE(dst.storage().get(), src.storage().get());
      }
      // Non-contiguous source, with a dtype change on the way.
      Tensor tv = src.t().to(to_dev, kFloat64);
      EXPECT_EQ(tv.device(), to_dev);
      EXPECT_EQ(tv.to_vector<double>(), host.t().contiguous().to_vector<double>());
    }
  }
  // The memory belongs to the target device's allocator.
  const int64_t before = memory_stats(Device("cpu:1")).allocated;
  Tensor big = zeros({1000}).to(Device("cpu:1"));
  EXPECT_GE(memory_stats(Device("cpu:1")).allocated, before + 4000);
}

TEST_F(TensorTo, ChecksTheDevice) {
  Tensor t = zeros({2});
  try {
    t.to(Device("cpu:7"));
    if (cpu_device_count() <= 7) FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:7 does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.to(Device::cuda(cuda_device_count())), DeviceError);  // one past the last GPU (cuda:0 without one)
  EXPECT_THROW(t.to(Device("cpu:4000")), DeviceError);
}

TEST_F(TensorTo, AllDtypesRoundTripExactly) {
  // Small non-negative integers are exact in every dtype (bool only 0/1).
  const std::vector<double> vals = {0, 1, 2, 3, 7, 100};
  for (DType a : kAll) {
    for (DType b : kAll) {
      SCOPED_TRACE(std::string(dtype_name(a)) + " -> " + dtype_name(b));
      const bool boolean = a == kBool || b == kBool;
      std::vector<double> v = boolean ? std::vector<double>{0, 1, 1, 0} : vals;
      Tensor t = tensor<double>(v).to(a);
      Tensor back = t.to(b).to(a);
      EXPECT_EQ(back.dtype(), a);
      EXPECT_EQ(back.to_vector<double>(), v);
      EXPECT_EQ(t.to(b).dtype(), b);
    }
  }
  // Values above 1 become true in bool.
  EXPECT_EQ(tensor<double>({0, 2.5, -3}).to(kBool).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
}

TEST_F(TensorTo, GoldenConversions) {
  const char* names[] = {"to_f64_float32",  "to_f64_float16", "to_f64_bfloat16", "to_f64_int32",   "to_f64_int64",
                         "to_f64_bool",     "to_f64_uint8",   "to_i64_float64",  "to_i64_float32", "to_i64_float16",
                         "to_i64_bfloat16", "to_i64_int32",   "to_f32_float16",  "to_f32_bfloat16"};
  for (const char* name : names) {
    SCOPED_TRACE(name);
    const json& c = golden_case("shape.json", name);
    Tensor in = tensor_from_json(c.at("inputs")[0]);
    if (std::string(name) == "to_i64_int32") in = in.slice(0, 1, 5);
    const json& expected = c.at("output");
    DType dt = kFloat32;
    for (DType d : kAll)
      if (expected.at("dtype").get<std::string>() == dtype_name(d)) dt = d;
    Tensor out = in.to(dt);
    EXPECT_EQ(out.dtype(), dt);
    // Exact: the golden values are PyTorch's rounded results.
    EXPECT_TRUE(test::all_close(out, expected, 0, 0));
  }
}

TEST_F(TensorTo, PreservesStridesOfDenseInputs) {
  Tensor x = arange(24, kFloat32).view({2, 3, 4});
  EXPECT_EQ(x.transpose(0, 2).to(kFloat64).strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(x.permute({1, 0, 2}).to(Device("cpu:1")).strides(), (Shape{4, 12, 1}));
  EXPECT_EQ(x.slice(2, 0, std::nullopt, 2).to(kFloat64).strides(), (Shape{6, 2, 1}));
  EXPECT_EQ(x.narrow(0, 0, 1).expand({2, 2, 3, 4}).to(kFloat64).strides(), (Shape{24, 12, 4, 1}));
  Tensor t = x.transpose(0, 2).to(kInt32);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.to_vector<int32_t>(), x.transpose(0, 2).contiguous().to_vector<int32_t>());
}

TEST_F(TensorTo, Item) {
  EXPECT_EQ(scalar_tensor(2.5).item().to_double(), 2.5);
  EXPECT_TRUE(scalar_tensor(2.5).item().is_floating_point());
  EXPECT_EQ(tensor<int64_t>({1LL << 60}).item().to_int(), 1LL << 60);
  EXPECT_TRUE(tensor<int32_t>({-4}).item().is_integral());
  EXPECT_TRUE(tensor<bool>({true}).item().is_bool());
  EXPECT_EQ(tensor<double>({0.1}).item<double>(), 0.1);
  EXPECT_EQ(full({1, 1}, 3, kFloat16).item<float>(), 3.0f);
  EXPECT_EQ(arange(10, kInt64).select(0, 7).item<int64_t>(), 7);
  EXPECT_THROW(zeros({2}).item(), ValueError);
  EXPECT_THROW(zeros({0}).item(), ValueError);
}

}  // namespace
}  // namespace dp
