// The kernel table (src/backend/kernel_stub.h): a kernel declared once and implemented per device
// type; the op calls it with the tensor's device type, and a device type without an implementation
// is a DeviceError naming the op.
#include <gtest/gtest.h>
#include <set>
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

backend::KernelStub<int(int)> doubling_stub{"doubling_stub", "doubling", backend::KernelCoverage::CpuOnly};

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

// The library's own kernels, every one of them (each stub enlists itself): the CPU backend
// implements each kernel whose coverage names the CPU, and the CUDA backend, in a build with CUDA
// (this program links dparallel::cuda there, tests/CMakeLists.txt), each kernel whose coverage names
// CUDA; no backend registers a kernel its coverage does not name, so the coverage stays true.
TEST(KernelStub, EveryKernelIsImplementedByExactlyTheBackendsItsCoverageNames) {
  EXPECT_TRUE(backend_linked(DeviceType::CPU));
  EXPECT_EQ(backend_linked(DeviceType::CUDA), DP_HAVE_CUDA != 0);  // the CUDA library enlisted itself
  size_t library_stubs = 0;
  std::set<std::string> names;
  for (const backend::KernelStubBase* stub : backend::all_kernel_stubs()) {
    const std::string name = stub->name();
    if (name == "doubling_stub") continue;  // this test's own
    ++library_stubs;
    EXPECT_TRUE(names.insert(name).second) << name << " is defined twice";
    EXPECT_EQ(name.substr(name.size() - 7), "_kernel") << name << ": every stub is named <name>_kernel";
    const backend::KernelCoverage c = stub->coverage();
    EXPECT_EQ(stub->has(DeviceType::CPU), c != backend::KernelCoverage::CudaOnly) << name;
    EXPECT_EQ(stub->has(DeviceType::CUDA), DP_HAVE_CUDA != 0 && c != backend::KernelCoverage::CpuOnly) << name;
  }
  // The kernels this test knows of by name are among them (a stub that stopped enlisting would
  // drop out unseen otherwise).
  for (const char* known : {"copy_kernel", "add_kernel", "sum_into_kernel", "nll_loss_forward_kernel", "randperm_fill_kernel",
                            "attention_forward_kernel", "collective_reduce_kernel"})
    EXPECT_EQ(names.count(known), 1u) << known;
  EXPECT_GE(library_stubs, 100u);
}

TEST(KernelStub, ABuildWithoutCudaNamesTheOpAndWhy) {
#if DP_HAVE_CUDA
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  const Tensor none;
  try {
    backend::cross_entropy_index_forward_kernel(DeviceType::CUDA, none, Reduction::Mean, none, none, none, none, none, backend::ClassShape{}, -100,
                                                0.0);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_STREQ(e.what(), "no CUDA kernel for cross_entropy (built without CUDA)");
  }
#endif
}

}  // namespace
}  // namespace dp
