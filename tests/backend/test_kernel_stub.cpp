// The kernel table (src/backend/kernel_stub.h): a kernel declared once and implemented per device
// type; the op calls it with the tensor's device type, and a device type without an implementation
// is a DeviceError naming the op.
#include <gtest/gtest.h>
#include <string>
#include "backend/comm_kernels.h"
#include "backend/copy_kernels.h"
#include "backend/loss_kernels.h"
#include "backend/optim_kernels.h"
#include "backend/random_kernels.h"
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/ops/loss.h"

namespace dp {
namespace {

int twice(int v) { return 2 * v; }

backend::KernelStub<int(int)> doubling_stub{"doubling"};

TEST(KernelStub, CallsTheKernelRegisteredForTheDeviceType) {
  doubling_stub.set(DeviceType::CPU, &twice);
  EXPECT_TRUE(doubling_stub.has(DeviceType::CPU));
  EXPECT_EQ(doubling_stub(DeviceType::CPU, 21), 42);
}

TEST(KernelStub, ADeviceTypeWithoutAKernelIsADeviceErrorNamingTheOp) {
  EXPECT_FALSE(doubling_stub.has(DeviceType::CUDA));
  try {
    doubling_stub(DeviceType::CUDA, 1);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no CUDA kernel for doubling"), std::string::npos) << m;
#if DP_HAVE_CUDA
    EXPECT_EQ(m.find("built without CUDA"), std::string::npos) << m;
#else
    EXPECT_NE(m.find("(built without CUDA)"), std::string::npos) << m;
#endif
  }
}

// The library's own kernels: the CPU backend registers every one; the CUDA backend does in a build
// with CUDA (this program links dparallel::cuda there, tests/CMakeLists.txt), and a build without it
// says so when asked for one.
template <typename Stub>
void expect_registered(const Stub& stub, const char* name) {
  EXPECT_TRUE(stub.has(DeviceType::CPU)) << name;
  EXPECT_EQ(stub.has(DeviceType::CUDA), DP_HAVE_CUDA != 0) << name;
}

TEST(KernelStub, EveryKernelHasACpuImplementationAndACudaOneExactlyInCudaBuilds) {
  EXPECT_TRUE(backend_linked(DeviceType::CPU));
  EXPECT_EQ(backend_linked(DeviceType::CUDA), DP_HAVE_CUDA != 0);  // the CUDA library enlisted itself
  expect_registered(backend::nll_loss_forward, "nll_loss_forward");
  expect_registered(backend::nll_loss_backward, "nll_loss_backward");
  expect_registered(backend::cross_entropy_index_forward, "cross_entropy_index_forward");
  expect_registered(backend::cross_entropy_index_backward, "cross_entropy_index_backward");
  expect_registered(backend::cross_entropy_prob_forward, "cross_entropy_prob_forward");
  expect_registered(backend::cross_entropy_prob_backward, "cross_entropy_prob_backward");
  expect_registered(backend::pointwise_loss_forward, "pointwise_loss_forward");
  expect_registered(backend::pointwise_loss_backward, "pointwise_loss_backward");
  expect_registered(backend::sgd_update, "sgd_update");
  expect_registered(backend::adam_update, "adam_update");
  expect_registered(backend::check_host_scalar_step, "check_host_scalar_step");
  expect_registered(backend::dropout_forward, "dropout_forward");
  expect_registered(backend::dropout_apply, "dropout_apply");
  expect_registered(backend::randint_fill, "randint_fill");
  expect_registered(backend::randperm_fill, "randperm_fill");
  expect_registered(backend::arange_stub, "arange_stub");
  expect_registered(backend::linspace_stub, "linspace_stub");
  expect_registered(backend::sum_into, "sum_into");
}

TEST(KernelStub, ABuildWithoutCudaNamesTheOpAndWhy) {
#if DP_HAVE_CUDA
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  const Tensor none;
  try {
    backend::cross_entropy_index_forward(DeviceType::CUDA, none, Reduction::Mean, none, none, none, none, none, backend::ClassShape{}, -100, 0.0);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_STREQ(e.what(), "no CUDA kernel for cross_entropy (built without CUDA)");
  }
#endif
}

}  // namespace
}  // namespace dp
