// The CUDA runtime basics (dp/cuda/cuda.h) and the CUDA caching allocator on a real device. Without
// the CUDA backend or without a visible GPU, the device count is 0 and everything that needs a
// device skips, saying why.
#include <gtest/gtest.h>
#include <cstring>
#include <thread>
#include <vector>
#include "dp/core/allocator.h"
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "support/cuda.h"
#if DP_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "dp/cuda/check.h"
#include "dp/cuda/cuda.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA
// Launches both test kernels once and waits, so that (lazy) module loading cannot stall a later
// launch behind running work and make "still running" checks flaky.
void warm_up_kernels() {
  cuda::Stream s = cuda::Stream::create(0);
  void* p = nullptr;
  DP_CUDA_CHECK(cudaMalloc(&p, 4 * sizeof(uint32_t)));
  cuda::fill_u32(p, 0, 4, s);
  cuda::detail::sleep_cycles(1, s);
  s.synchronize();
  DP_CUDA_CHECK(cudaFree(p));
}
#endif

TEST(CudaRuntime, DeviceCountIsConsistentAndNeverThrows) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(device_count(DeviceType::CUDA), n);
  EXPECT_EQ(devices(DeviceType::CUDA).size(), static_cast<size_t>(n));
#if DP_HAVE_CUDA
  EXPECT_EQ(cuda::device_count(), n);
  EXPECT_EQ(cuda::device_count(), n);  // cached: the same answer
  EXPECT_EQ(cuda::is_available(), n > 0);
#else
  EXPECT_EQ(n, 0);  // built without the CUDA backend
#endif
}

TEST(CudaRuntime, MissingDeviceIsAClearDeviceError) {
  const int n = cuda_device_count();
  const Device missing = Device::cuda(n);  // one past the last
  try {
    allocator_for(missing);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.str() + " does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_device(missing), DeviceError);
#if DP_HAVE_CUDA
  EXPECT_THROW(cuda::set_device(n), DeviceError);
  EXPECT_THROW(cuda::Stream::create(n), DeviceError);
  if (n == 0) {
    EXPECT_THROW(cuda::current_device(), DeviceError);
    EXPECT_THROW(cuda::current_stream(), DeviceError);
  }
#endif
}

#if DP_HAVE_CUDA

TEST(CudaRuntime, CheckedCallNamesTheCallAndTheError) {
  try {
    DP_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
    EXPECT_NE(msg.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_cuda_runtime.cpp"), std::string::npos) << msg;
  }
  EXPECT_THROW(DP_CUDA_CHECK(cudaErrorMemoryAllocation), OutOfMemory);
  EXPECT_NO_THROW(DP_CUDA_CHECK(cudaSuccess));
}

TEST(CudaRuntime, CurrentDeviceIsPerThread) {
  DP_REQUIRE_GPU();
  const int n = cuda::device_count();
  cuda::set_device(n - 1);
  EXPECT_EQ(cuda::current_device(), n - 1);
  int other = -1;
  std::thread([&] {
    cuda::set_device(0);
    other = cuda::current_device();
  }).join();
  EXPECT_EQ(other, 0);
  EXPECT_EQ(cuda::current_device(), n - 1);
  {
    cuda::DeviceGuard guard(0);
    EXPECT_EQ(cuda::current_device(), 0);
  }
  EXPECT_EQ(cuda::current_device(), n - 1);
  cuda::set_device(0);
}

TEST(CudaRuntime, EachGpuHasOneWorkerWhoseCurrentDeviceIsThatGpu) {
  DP_REQUIRE_GPU();
  for (int i = 0; i < cuda::device_count(); ++i) {
    Worker* w = worker_for(Device::cuda(i));
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w, worker_for(Device::cuda(i)));  // started once
    EXPECT_EQ(w->device(), Device::cuda(i));
    EXPECT_EQ(w->submit([] { return cuda::current_device(); }).get(), i);
  }
}

TEST(CudaRuntime, CurrentStreamIsPerThreadAndDefaultsToTheDefaultStream) {
  DP_REQUIRE_GPU();
  cuda::set_device(0);
  EXPECT_TRUE(cuda::current_stream(0).is_default());
  cuda::Stream side = cuda::Stream::create(0);
  EXPECT_FALSE(side.is_default());
  EXPECT_EQ(side.device(), 0);
  {
    cuda::StreamGuard guard(side);
    EXPECT_EQ(cuda::current_stream(0), side);
    EXPECT_EQ(cuda::current_stream(), side);
    bool other_thread_default = false;
    std::thread([&] { other_thread_default = cuda::current_stream(0).is_default(); }).join();
    EXPECT_TRUE(other_thread_default);
  }
  EXPECT_TRUE(cuda::current_stream(0).is_default());
}

TEST(CudaRuntime, EventsOrderWorkAcrossStreams) {
  DP_REQUIRE_GPU();
  warm_up_kernels();
  constexpr size_t n = 1 << 20;
  cuda::Stream producer = cuda::Stream::create(0);
  cuda::Stream consumer = cuda::Stream::create(0);
  uint32_t* buf = nullptr;
  DP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&buf), n * sizeof(uint32_t)));
  std::vector<uint32_t> host(n, 0);
  // The producer is kept busy, then fills; the consumer copies only after the producer's event.
  cuda::detail::sleep_cycles(int64_t(50) * 1000 * 1000, producer);  // tens of milliseconds
  cuda::fill_u32(buf, 0xC0FFEEu, n, producer);
  cuda::Event filled;
  EXPECT_FALSE(filled.recorded());
  EXPECT_TRUE(filled.query());  // never recorded: nothing to wait for
  filled.record(producer);
  EXPECT_TRUE(filled.recorded());
  EXPECT_FALSE(filled.query());  // the producer is still sleeping
  EXPECT_FALSE(producer.query());
  consumer.wait(filled);
  DP_CUDA_CHECK(cudaMemcpyAsync(host.data(), buf, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, consumer.handle()));
  consumer.synchronize();
  EXPECT_TRUE(filled.query());
  EXPECT_TRUE(producer.query());
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(host[i], 0xC0FFEEu) << "at " << i;
  EXPECT_EQ(host[n - 1], 0xC0FFEEu);
  DP_CUDA_CHECK(cudaFree(buf));
}

TEST(CudaRuntime, TimingEventsMeasureElapsedTime) {
  DP_REQUIRE_GPU();
  cuda::Stream s = cuda::Stream::create(0);
  cuda::Event start(true), end(true);
  start.record(s);
  cuda::detail::sleep_cycles(int64_t(10) * 1000 * 1000, s);
  end.record(s);
  end.synchronize();
  EXPECT_GT(start.elapsed_ms(end), 0.0f);
  cuda::Event untimed;
  untimed.record(s);
  untimed.synchronize();
  EXPECT_THROW(start.elapsed_ms(untimed), ValueError);
  cuda::Event moved = std::move(start);
  EXPECT_TRUE(moved.recorded());
  EXPECT_FALSE(start.recorded());  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(CudaAllocator, RoundTripThroughDeviceMemory) {
  DP_REQUIRE_GPU();
  Allocator& a = allocator_for(Device::cuda(0));
  EXPECT_EQ(a.device(), Device::cuda(0));
  EXPECT_EQ(&a, &cuda::device_allocator(0));
  const MemoryStats before = a.stats();
  constexpr size_t n = 3 << 20;  // large pool
  std::vector<uint8_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  void* p = a.allocate(n);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a.stats().allocated, before.allocated + int64_t(n));
  EXPECT_GE(a.stats().reserved, a.stats().allocated);
  DP_CUDA_CHECK(cudaMemcpy(p, src.data(), n, cudaMemcpyHostToDevice));
  DP_CUDA_CHECK(cudaMemcpy(dst.data(), p, n, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0);
  a.deallocate(p, n);
  EXPECT_EQ(a.stats().allocated, before.allocated);
  void* q = a.allocate(n);  // same stream, same size: the cached block
  EXPECT_EQ(q, p);
  a.deallocate(q, n);
  EXPECT_EQ(memory_stats(Device::cuda(0)).allocated, before.allocated);
}

TEST(CudaAllocator, AllocatesOnTheCurrentStreamAndHonoursRecordStream) {
  DP_REQUIRE_GPU();
  warm_up_kernels();
  Allocator& a = allocator_for(Device::cuda(0));
  cuda::Stream side = cuda::Stream::create(0);
  void* p = nullptr;
  {
    cuda::StreamGuard guard(side);
    p = a.allocate(64 << 10);
  }
  a.deallocate(p, 64 << 10);
  void* on_default = a.allocate(64 << 10);  // the default stream does not reuse side's block
  EXPECT_NE(on_default, p);
  // A block used on another stream is not reused while that stream's work is pending.
  cuda::Stream busy = cuda::Stream::create(0);
  cuda::detail::sleep_cycles(int64_t(50) * 1000 * 1000, busy);
  cuda::record_stream(on_default, busy);
  a.deallocate(on_default, 64 << 10);
  void* again = a.allocate(64 << 10);
  EXPECT_NE(again, on_default);
  busy.synchronize();
  void* after = a.allocate(64 << 10);
  EXPECT_EQ(after, on_default);
  a.deallocate(again, 64 << 10);
  a.deallocate(after, 64 << 10);
}

TEST(CudaAllocator, OutOfMemoryIsAClearErrorAndTheAllocatorRecovers) {
  DP_REQUIRE_GPU();
  Allocator& a = allocator_for(Device::cuda(0));
  size_t free_b = 0, total_b = 0;
  DP_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t too_much = total_b * 2;
  try {
    a.allocate(too_much);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA out of memory on cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(too_much) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  }
  EXPECT_GE(cuda::memory_stats(0).num_ooms, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no error behind
  void* p = a.allocate(1 << 20);
  EXPECT_NE(p, nullptr);
  a.deallocate(p, 1 << 20);
  cuda::empty_cache(0);
  EXPECT_EQ(cuda::memory_stats(0).cached_segments, 0);
}

#endif  // DP_HAVE_CUDA

}  // namespace
}  // namespace dp
