#include "dp/core/allocator.h"
#include <sys/mman.h>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <array>
#include "dp/core/device_registry.h"
#include "dp/core/errors.h"
#include "dp/core/storage.h"

namespace dp {
namespace {

// Small blocks (<= 64 KiB) are recycled through a per-thread cache of power-of-two size classes:
// a training step allocates and frees the same few dozen small tensors every iteration, and
// aligned_alloc/free of those dominated small models' step time. Blocks are plain 64-byte-aligned
// host memory, so any CPU device's allocator can reuse any block, and a block freed on another
// thread simply joins that thread's cache. Each class keeps at most kSmallPerClass blocks (the
// rest go back to libc), so the cache holds at most 2 MiB per thread.
constexpr size_t kSmallMin = 64;
constexpr size_t kSmallMax = size_t(64) << 10;
constexpr int kSmallClasses = 11;  // 64 B ... 64 KiB
constexpr int kSmallPerClass = 16;

int small_class(size_t nbytes) {
  size_t n = nbytes < kSmallMin ? kSmallMin : nbytes;
  return static_cast<int>(std::bit_width(n - 1)) - 6;  // 64 -> 0, 65..128 -> 1, ...
}
size_t small_class_bytes(size_t nbytes) { return kSmallMin << small_class(nbytes); }

struct SmallCache {
  void* blocks[kSmallClasses][kSmallPerClass];
  int count[kSmallClasses] = {};
  ~SmallCache();
};
// Trivially destructible flag: tensors freed after this thread's cache is gone (static
// destruction at exit) go straight to libc.
constinit thread_local bool tls_cache_alive = false;
constinit thread_local bool tls_cache_dead = false;
thread_local SmallCache tls_cache;

SmallCache::~SmallCache() {
  tls_cache_alive = false;
  tls_cache_dead = true;
  for (int c = 0; c < kSmallClasses; ++c)
    for (int i = 0; i < count[c]; ++i) std::free(blocks[c][i]);
}

void* small_cache_pop(size_t nbytes) {
  if (!tls_cache_alive) {
    if (tls_cache_dead) return nullptr;
    tls_cache_alive = true;  // first use on this thread constructs the cache (and its destructor)
    (void)tls_cache;
  }
  SmallCache& c = tls_cache;
  int k = small_class(nbytes);
  return c.count[k] > 0 ? c.blocks[k][--c.count[k]] : nullptr;
}

bool small_cache_push(void* p, size_t nbytes) {
  if (!tls_cache_alive) return false;
  SmallCache& c = tls_cache;
  int k = small_class(nbytes);
  if (c.count[k] == kSmallPerClass) return false;
  c.blocks[k][c.count[k]++] = p;
  return true;
}

// Host memory for every CPU device: 64-byte aligned (a cache line, and full AVX-512 vectors).
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(Device d) : device_(d) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    if (nbytes <= kSmallMax) {
      void* p = small_cache_pop(nbytes);
      if (p == nullptr) p = std::aligned_alloc(64, small_class_bytes(nbytes));
      if (p == nullptr) throw_oom(nbytes);
      count_alloc(nbytes);
      return p;
    }
    // Large blocks are 2 MiB aligned and advised for transparent huge pages: their first write
    // then faults in 2 MiB pages instead of 4 KiB ones, which dominates a fresh large output.
    constexpr size_t kHuge = size_t(2) << 20;
    const bool huge = nbytes >= 2 * kHuge;
    const size_t align = huge ? kHuge : 64;
    size_t rounded = (nbytes + align - 1) & ~(align - 1);
    void* p = std::aligned_alloc(align, rounded);
    if (p && huge) madvise(p, rounded, MADV_HUGEPAGE);
    if (!p) throw_oom(nbytes);
    count_alloc(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    if (nbytes <= kSmallMax && small_cache_push(p, nbytes)) return;
    std::free(p);
  }
  MemoryStats stats() const override {
    MemoryStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.reserved = s.allocated;
    s.num_allocs = num_allocs_.load();
    return s;
  }
  void reset_peak() override { peak_.store(allocated_.load()); }
  Device device() const override { return device_; }

 private:
  [[noreturn]] void throw_oom(size_t nbytes) const {
    throw OutOfMemory(detail::str("out of memory on ", device_.str(), ": tried to allocate ", nbytes, " bytes; ", allocated_.load(),
                                  " bytes are allocated by dparallel on this device"));
  }
  void count_alloc(size_t nbytes) {
    int64_t now = allocated_.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
  }
  Device device_;
  std::atomic<int64_t> allocated_{0}, peak_{0}, num_allocs_{0};
};

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    static HostAllocator host(Device::cpu());
    if (d.index < 0) return host;
    // Lock-free lookup on the hot path; creation (once per device) under a mutex.
    static std::array<std::atomic<HostAllocator*>, 4096> per_device{};
    static std::mutex mu;
    DP_CHECK(d.index < static_cast<int>(per_device.size()), DeviceError, "device index too large: ", d.str());
    if (HostAllocator* a = per_device[d.index].load(std::memory_order_acquire)) return *a;
    std::lock_guard<std::mutex> lock(mu);
    if (HostAllocator* a = per_device[d.index].load(std::memory_order_acquire)) return *a;
    check_device(d);
    auto* a = new HostAllocator(d);  // lives for the process: tensors may outlive static destruction order
    per_device[d.index].store(a, std::memory_order_release);
    return *a;
  }
  check_device(d);  // throws: no CUDA backend allocator registered
  throw DeviceError(detail::str("no allocator for device ", d.str()));
}

MemoryStats memory_stats(Device d) { return allocator_for(d).stats(); }
void reset_peak_memory_stats(Device d) { allocator_for(d).reset_peak(); }

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (deleter_) deleter_(data_);
  else if (data_) allocator_->deallocate(data_, nbytes_);
}

}  // namespace dp
