#include "dp/core/allocator.h"
#include <sys/mman.h>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>
#include <array>
#include "dp/core/device_registry.h"
#include "dp/core/device_runtime.h"
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
// Large blocks (> 64 KiB) are kept after free and handed out again for a request of about the
// same size (a training step asks for the same activation and gradient sizes every iteration).
// Without it every step re-faulted its pages in, and glibc's heap fragmented around the 2 MiB
// aligned blocks so the resident set grew step after step well past the live bytes. Sizes are
// rounded (64 KiB steps, 2 MiB from 4 MiB up, where blocks are 2 MiB aligned and advised for
// transparent huge pages); a cached block serves a request whose rounded size it exceeds by at
// most a quarter. The cache holds at most the larger of kLargeCacheMax bytes and the most bytes
// that live large blocks have held at once (so at most the program's own high-water mark more),
// and is emptied and the allocation retried before an out-of-memory error. A model whose step
// frees and takes again more than 1 GiB (a GPT-2 small step: its gradients, their 16-bit copies,
// the activations) otherwise handed those blocks back to the system every step and took the cost
// of faulting in zeroed pages again (7% of such a step's CPU time). One cache serves every CPU
// device: host memory is host memory.
class LargeBlockCache {
 public:
  static constexpr size_t kHuge = size_t(2) << 20;
  static constexpr size_t kLargeCacheMax = size_t(1) << 30;

  static size_t rounded(size_t nbytes) {
    const size_t step = nbytes >= 2 * kHuge ? kHuge : (size_t(64) << 10);
    return (nbytes + step - 1) / step * step;
  }
  void* take(size_t nbytes) {
    const size_t want = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(want);
      if (it != free_.end() && it->first <= want + want / 4) {
        void* p = it->second;
        cached_ -= it->first;
        sizes_[p] = it->first;
        add_live(it->first);
        free_.erase(it);
        return p;
      }
    }
    void* p = fresh(want);
    if (p == nullptr) {
      release_all();
      p = fresh(want);
    }
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[p] = want;
      add_live(want);
    }
    return p;
  }
  void give(void* p, size_t nbytes) {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    const size_t size = it != sizes_.end() ? it->second : rounded(nbytes);
    if (it != sizes_.end()) {
      sizes_.erase(it);
      live_ -= size;
    }
    if (cached_ + size <= std::max(kLargeCacheMax, peak_live_)) {
      free_.emplace(size, p);
      cached_ += size;
      return;
    }
    lock.unlock();
    std::free(p);
  }
  void release_all() {
    std::multimap<size_t, void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(free_);
      cached_ = 0;
    }
    for (auto& kv : drop) std::free(kv.second);
  }
  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  static void* fresh(size_t size) {
    const bool huge = size >= 2 * kHuge;
    void* p = std::aligned_alloc(huge ? kHuge : 64, size);
    if (p && huge) madvise(p, size, MADV_HUGEPAGE);
    return p;
  }
  void add_live(size_t size) {  // under mu_
    live_ += size;
    peak_live_ = std::max(peak_live_, live_);
  }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;        // size -> block
  std::unordered_map<void*, size_t> sizes_;  // live large blocks -> their size
  size_t cached_ = 0;
  size_t live_ = 0;       // bytes in live large blocks
  size_t peak_live_ = 0;  // the most live_ has been
};

LargeBlockCache& large_cache() {
  static auto* cache = new LargeBlockCache();  // outlives every tensor (never destroyed)
  return *cache;
}

class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(Device d) : device_(d) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    // No block can be this large, and rounding it up to the cache's steps would wrap around.
    if (nbytes > static_cast<size_t>(PTRDIFF_MAX) / 2) [[unlikely]]
      throw_oom(nbytes);
    if (nbytes <= kSmallMax) {
      void* p = small_cache_pop(nbytes);
      if (p == nullptr) p = std::aligned_alloc(64, small_class_bytes(nbytes));
      if (p == nullptr) throw_oom(nbytes);
      count_alloc(nbytes);
      return p;
    }
    void* p = large_cache().take(nbytes);
    if (p == nullptr) throw_oom(nbytes);
    count_alloc(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
    if (nbytes <= kSmallMax) {
      if (!small_cache_push(p, nbytes)) std::free(p);
      return;
    }
    large_cache().give(p, nbytes);
  }
  MemoryStats stats() const override {
    MemoryStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.reserved = s.allocated + static_cast<int64_t>(large_cache().cached_bytes());
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
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
  }
  Device device_;
  std::atomic<int64_t> allocated_{0}, peak_{0}, num_allocs_{0};
};

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    // Never destroyed, as the per-device ones: a static Tensor of the user's may be freed after
    // this function's statics during exit.
    static HostAllocator* host = new HostAllocator(Device::cpu());
    if (d.index < 0) return *host;
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
  check_device(d);  // throws for a CUDA device that does not exist (always, without the CUDA backend)
  if (const DeviceRuntime* rt = device_runtime(d.type)) return rt->allocator(d.index);
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

StorageImpl::StorageImpl(std::shared_ptr<StorageImpl> base, Device device)
    : data_(base->data_), nbytes_(base->nbytes_), device_(device), base_(std::move(base)) {
  // Alias of an alias: point at the root, so chains never form and the counter is the root's.
  if (base_->base_) base_ = base_->base_;
  version_ptr_ = base_->version_ptr_;
}

StorageImpl::~StorageImpl() {
  if (base_) return;  // an alias owns nothing
  if (deleter_)
    deleter_(data_);
  else if (data_)
    allocator_->deallocate(data_, nbytes_);
}

}  // namespace dp
