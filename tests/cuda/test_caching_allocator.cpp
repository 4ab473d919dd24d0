// The CUDA caching allocator's logic (dp/cuda/caching_allocator.h) against a fake backend: fake
// device addresses (never dereferenced) from a capacity-limited address space, and events whose
// completion the test controls. Runs on every machine; no GPU needed.
#include <gtest/gtest.h>
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>
#include "dp/core/errors.h"
#include "dp/cuda/caching_allocator.h"

namespace dp::cuda::detail {
namespace {

constexpr size_t KiB = size_t(1) << 10;
constexpr size_t MiB = size_t(1) << 20;
using Core = CachingAllocatorCore;

class FakeBackend : public RawMemoryBackend {
 public:
  explicit FakeBackend(size_t capacity) : capacity_(capacity) {}
  ~FakeBackend() override = default;

  void* allocate(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++allocate_calls;
    if (used_ + bytes > capacity_) {
      ++failed_allocations;
      return nullptr;
    }
    used_ += bytes;
    const uintptr_t p = next_;
    next_ += bytes + 4096;  // gaps: segments are never adjacent, as with cudaMalloc
    segments_[p] = bytes;
    return reinterpret_cast<void*>(p);
  }
  void free(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = segments_.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, segments_.end()) << "free of an unknown segment";
    ASSERT_EQ(it->second, bytes) << "free with a size other than the segment's";
    used_ -= bytes;
    segments_.erase(it);
    ++free_calls;
  }
  EventId record_event(StreamId stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* e = new FakeEvent{stream, false};
    events_.insert(e);
    ++events_recorded;
    return e;
  }
  bool event_completed(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* e = static_cast<FakeEvent*>(event);
    EXPECT_TRUE(events_.count(e)) << "query of a destroyed event";
    return e->done || completed_streams_.count(e->stream);
  }
  void synchronize_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    static_cast<FakeEvent*>(event)->done = true;  // "waits" until done
    ++events_synchronized;
  }
  void destroy_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* e = static_cast<FakeEvent*>(event);
    EXPECT_EQ(events_.erase(e), 1u) << "double destroy";
    delete e;
  }
  std::pair<int64_t, int64_t> memory_info() override {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(capacity_ - used_), static_cast<int64_t>(capacity_)};
  }

  // The work queued on `stream` so far has completed: its events read as completed.
  void complete_stream(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    for (FakeEvent* e : events_)
      if (e->stream == stream) e->done = true;
  }
  size_t used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_;
  }
  size_t live_segments() const {
    std::lock_guard<std::mutex> lock(mu_);
    return segments_.size();
  }
  size_t live_events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

  int allocate_calls = 0, failed_allocations = 0, free_calls = 0, events_recorded = 0, events_synchronized = 0;

 private:
  struct FakeEvent {
    StreamId stream;
    bool done;
  };
  mutable std::mutex mu_;
  size_t capacity_;
  size_t used_ = 0;
  uintptr_t next_ = uintptr_t(1) << 32;
  std::map<uintptr_t, size_t> segments_;
  std::set<FakeEvent*> events_;
  std::set<StreamId> completed_streams_;
};

char* as_char(void* p) { return static_cast<char*>(p); }

constexpr StreamId kS0 = 0;       // the default stream
constexpr StreamId kS1 = 0x1000;  // two side streams
constexpr StreamId kS2 = 0x2000;

TEST(CachingAllocatorCore, SizeRoundingAndSegmentSizesFollowPyTorch) {
  EXPECT_EQ(Core::round_size(1), 512u);
  EXPECT_EQ(Core::round_size(512), 512u);
  EXPECT_EQ(Core::round_size(513), 1024u);
  EXPECT_EQ(Core::round_size(1000000), 1000448u);
  EXPECT_EQ(Core::segment_size(512), 2 * MiB);  // small pool
  EXPECT_EQ(Core::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(Core::segment_size(1 * MiB + 512), 20 * MiB);  // large pool, < 10 MiB
  EXPECT_EQ(Core::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(Core::segment_size(10 * MiB), 10 * MiB);  // from 10 MiB: rounded to 2 MiB
  EXPECT_EQ(Core::segment_size(11 * MiB), 12 * MiB);
}

TEST(CachingAllocatorCore, ZeroBytesIsNullAndFreeOfNullIsANoOp) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  EXPECT_EQ(a.allocate(0, kS0), nullptr);
  a.free(nullptr);
  EXPECT_EQ(a.stats().num_allocs, 0);
  EXPECT_EQ(backend.allocate_calls, 0);
}

TEST(CachingAllocatorCore, FreedBlocksAreReusedWithoutNewSegments) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(1000, kS0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a.block_size(p), 1024u);
  a.free(p);
  void* q = a.allocate(700, kS0);  // same rounded size: the same block
  EXPECT_EQ(q, p);
  a.free(q);
  void* big = a.allocate(30 * MiB, kS0);
  a.free(big);
  void* big2 = a.allocate(29 * MiB, kS0);  // fits the cached 30 MiB segment
  EXPECT_EQ(big2, big);
  a.free(big2);
  EXPECT_EQ(backend.allocate_calls, 2);  // one small and one large segment
  EXPECT_EQ(a.stats().segments, 2);
}

TEST(CachingAllocatorCore, SmallRequestsSplitOneSmallSegment) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p1 = a.allocate(512, kS0);
  void* p2 = a.allocate(4000, kS0);
  void* p3 = a.allocate(1 * MiB, kS0);  // the largest small request
  EXPECT_EQ(backend.allocate_calls, 1);
  EXPECT_EQ(a.stats().reserved, int64_t(2 * MiB));
  // Split blocks are consecutive in the segment, each handed out from the front of the free rest.
  EXPECT_EQ(as_char(p2), as_char(p1) + 512);
  EXPECT_EQ(as_char(p3), as_char(p2) + 4096);
  EXPECT_EQ(a.stats().allocated, int64_t(512 + 4096 + MiB));
  void* p4 = a.allocate(MiB, kS0);  // does not fit the rest (1 MiB - 4.5 KiB): a second segment
  EXPECT_EQ(backend.allocate_calls, 2);
  for (void* p : {p1, p2, p3, p4}) a.free(p);
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_EQ(a.stats().cached_segments, 2);  // both whole again after coalescing
}

TEST(CachingAllocatorCore, LargePoolSplitsOnlyWhenMoreThanOneMiBRemains) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(2 * MiB, kS0);  // a 20 MiB segment, split: 18 MiB stays free
  EXPECT_EQ(a.block_size(p), 2 * MiB);
  EXPECT_EQ(a.stats().reserved, int64_t(20 * MiB));
  void* q = a.allocate(17 * MiB + 512, kS0);  // best fit in the 18 MiB rest; remaining < 1 MiB: not split
  EXPECT_EQ(as_char(q), as_char(p) + 2 * MiB);
  EXPECT_EQ(a.block_size(q), 18 * MiB);
  EXPECT_EQ(backend.allocate_calls, 1);
  a.free(p);
  a.free(q);
  // Large requests never come from the small pool and vice versa.
  void* s = a.allocate(4 * KiB, kS0);
  EXPECT_EQ(backend.allocate_calls, 2);
  EXPECT_EQ(a.stats().reserved, int64_t(22 * MiB));
  a.free(s);
}

TEST(CachingAllocatorCore, BestFitPicksTheSmallestFreeBlockThatFits) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  // Three separate large segments of different sizes, all freed.
  void* b12 = a.allocate(12 * MiB, kS0);
  void* b16 = a.allocate(16 * MiB, kS0);
  void* b14 = a.allocate(14 * MiB, kS0);
  a.free(b12);
  a.free(b16);
  a.free(b14);
  EXPECT_EQ(a.allocate(13 * MiB, kS0), b14);  // 14 fits best (not 16, and 12 is too small)
  EXPECT_EQ(a.allocate(11 * MiB, kS0), b12);
  EXPECT_EQ(a.allocate(15 * MiB, kS0), b16);
  EXPECT_EQ(backend.allocate_calls, 3);
  a.free(b12);
  a.free(b14);
  a.free(b16);
}

TEST(CachingAllocatorCore, FreeCoalescesWithBothNeighbours) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p1 = a.allocate(100 * KiB, kS0);
  void* p2 = a.allocate(100 * KiB, kS0);
  void* p3 = a.allocate(100 * KiB, kS0);
  void* p4 = a.allocate(100 * KiB, kS0);  // keeps the segment's tail apart from p3
  a.free(p1);
  a.free(p3);
  a.free(p2);  // merges p1, p2, p3 into one 300 KiB free block
  void* big = a.allocate(300 * KiB, kS0);
  EXPECT_EQ(big, p1);
  EXPECT_EQ(backend.allocate_calls, 1);
  a.free(big);
  a.free(p4);  // now the whole segment is one free block
  auto s = a.stats();
  EXPECT_EQ(s.cached_segments, 1);
  void* whole = a.allocate(1 * MiB, kS0);  // from the segment's start only if fully coalesced
  EXPECT_EQ(whole, p1);
  EXPECT_EQ(backend.allocate_calls, 1);
  a.free(whole);
}

TEST(CachingAllocatorCore, BlocksAreReusedOnlyOnTheirStream) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(4 * KiB, kS1);
  a.free(p);
  void* q = a.allocate(4 * KiB, kS2);  // another stream: a new segment, not p's
  EXPECT_NE(q, p);
  EXPECT_EQ(backend.allocate_calls, 2);
  void* r = a.allocate(4 * KiB, kS1);  // p's stream again: p
  EXPECT_EQ(r, p);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocatorCore, RecordStreamDelaysReuseUntilTheOtherStreamsWorkIsDone) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(8 * KiB, kS0);
  a.record_stream(p, kS1);
  a.record_stream(p, kS1);  // recorded once
  a.record_stream(p, kS0);  // its own stream: nothing to record
  a.free(p);
  EXPECT_EQ(backend.events_recorded, 1);  // one event, on kS1
  EXPECT_EQ(a.stats().pending_event_blocks, 1);
  EXPECT_EQ(a.stats().allocated, 0);
  void* q = a.allocate(8 * KiB, kS0);  // kS1 still busy: p is not handed out again
  EXPECT_NE(q, p);
  backend.complete_stream(kS1);
  void* r = a.allocate(8 * KiB, kS0);  // its event completed: p is back in the pool
  EXPECT_EQ(r, p);
  EXPECT_EQ(backend.live_events(), 0u);
  EXPECT_EQ(a.stats().pending_event_blocks, 0);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocatorCore, RecordStreamOnSeveralStreamsWaitsForAll) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(8 * KiB, kS0);
  void* keep = a.allocate(8 * KiB, kS0);  // keeps the segment split, so p stays visible
  a.record_stream(p, kS1);
  a.record_stream(p, kS2);
  a.free(p);
  EXPECT_EQ(backend.events_recorded, 2);
  backend.complete_stream(kS1);
  void* q = a.allocate(8 * KiB, kS0);
  EXPECT_NE(q, p);  // kS2 still busy
  backend.complete_stream(kS2);
  void* r = a.allocate(8 * KiB, kS0);
  EXPECT_EQ(r, p);
  for (void* x : {keep, q, r}) a.free(x);
}

TEST(CachingAllocatorCore, BlockWaitingForEventsIsNotMergedIntoItsNeighbours) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p1 = a.allocate(4 * KiB, kS0);
  void* p2 = a.allocate(4 * KiB, kS0);
  a.record_stream(p2, kS1);
  a.free(p2);                          // pending
  a.free(p1);                          // must not swallow p2
  void* q = a.allocate(8 * KiB, kS0);  // 8 KiB needs p1+p2 merged: must not start at p1
  EXPECT_NE(q, p1);
  a.free(q);
  backend.complete_stream(kS1);
  void* r = a.allocate(8 * KiB, kS0);  // now p1 and p2 merge
  EXPECT_EQ(r, p1);
  a.free(r);
}

TEST(CachingAllocatorCore, EmptyCacheReturnsOnlyWhollyUnusedSegments) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* keep = a.allocate(4 * KiB, kS0);    // small segment 1, kept in use
  void* drop = a.allocate(1 * MiB, kS1);    // small segment 2 (another stream), freed
  void* large = a.allocate(30 * MiB, kS0);  // large segment, freed
  a.free(drop);
  a.free(large);
  EXPECT_EQ(a.stats().segments, 3);
  EXPECT_EQ(a.stats().cached_segments, 2);
  a.empty_cache();
  auto s = a.stats();
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.cached_segments, 0);
  EXPECT_EQ(s.reserved, int64_t(2 * MiB));
  EXPECT_EQ(backend.used(), 2 * MiB);
  EXPECT_EQ(backend.free_calls, 2);
  a.free(keep);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(CachingAllocatorCore, EmptyCacheWaitsForPendingEvents) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(4 * KiB, kS0);
  a.record_stream(p, kS1);
  a.free(p);
  a.empty_cache();  // synchronises the event, then the segment is whole and released
  EXPECT_EQ(backend.events_synchronized, 1);
  EXPECT_EQ(backend.live_events(), 0u);
  EXPECT_EQ(backend.live_segments(), 0u);
  EXPECT_EQ(a.stats().pending_event_blocks, 0);
}

TEST(CachingAllocatorCore, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeBackend backend(50 * MiB);
  Core a("cuda:0", backend);
  void* x = a.allocate(30 * MiB, kS0);
  a.free(x);                           // 30 MiB cached, 20 MiB left on the "device"
  void* s = a.allocate(4 * KiB, kS1);  // 2 MiB small segment on another stream, freed too
  a.free(s);
  void* y = a.allocate(40 * MiB, kS0);  // fails first (18 MiB left), succeeds after empty cache
  ASSERT_NE(y, nullptr);
  auto st = a.stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_ooms, 0);
  EXPECT_EQ(st.reserved, int64_t(40 * MiB));
  EXPECT_EQ(st.segments, 1);
  EXPECT_EQ(backend.failed_allocations, 1);
  a.free(y);
}

TEST(CachingAllocatorCore, OutOfMemoryRetryWaitsForPendingEventsAndReusesTheBlock) {
  FakeBackend backend(2 * MiB);  // room for exactly one small segment
  Core a("cuda:0", backend);
  void* p = a.allocate(1 * MiB, kS0);
  void* keep = a.allocate(1 * MiB, kS0);  // the segment's other half
  a.record_stream(p, kS1);
  a.free(p);                           // pending: kS1's work is not done
  void* q = a.allocate(1 * MiB, kS0);  // the backend is full; the retry waits for kS1's event
  EXPECT_EQ(q, p);
  EXPECT_EQ(backend.failed_allocations, 1);
  EXPECT_EQ(backend.events_synchronized, 1);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_ooms, 0);
  a.free(q);
  a.free(keep);
}

TEST(CachingAllocatorCore, OutOfMemoryErrorSaysDeviceRequestAndHoldings) {
  FakeBackend backend(24 * MiB);
  Core a("cuda:1", backend);
  void* small = a.allocate(1000, kS0);    // 2 MiB segment, 1024 bytes allocated
  void* big = a.allocate(12 * MiB, kS0);  // 12 MiB segment
  const auto before = a.stats();
  try {
    a.allocate(100 * MiB, kS0);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA out of memory on cuda:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tried to allocate 100.00 MiB (104857600 bytes)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(before.allocated) + " bytes) allocated"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(before.reserved) + " bytes) reserved"), std::string::npos) << msg;
    const int64_t free_cached = before.reserved - before.allocated;
    EXPECT_NE(msg.find(std::to_string(free_cached) + " bytes) is reserved but free"), std::string::npos) << msg;
    EXPECT_NE(msg.find("The device has 10.00 MiB (10485760 bytes) free of 24.00 MiB"), std::string::npos) << msg;
  }
  auto s = a.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.allocated, before.allocated);  // nothing changed by the failed call
  EXPECT_EQ(s.reserved, before.reserved);
  EXPECT_EQ(backend.failed_allocations, 2);  // the first try and the one retry
  // The allocator still works after an OOM.
  void* again = a.allocate(4 * KiB, kS0);
  EXPECT_NE(again, nullptr);
  for (void* p : {small, big, again}) a.free(p);
}

TEST(CachingAllocatorCore, StatisticsTrackAllocatedReservedAndPeaks) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(1000, kS0);
  void* q = a.allocate(3 * MiB, kS0);
  auto s = a.stats();
  EXPECT_EQ(s.allocated, int64_t(1024 + 3 * MiB));
  EXPECT_EQ(s.requested, int64_t(1000 + 3 * MiB));
  EXPECT_EQ(s.reserved, int64_t(2 * MiB + 20 * MiB));
  EXPECT_EQ(s.peak_allocated, s.allocated);
  EXPECT_EQ(s.peak_reserved, s.reserved);
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.segments, 2);
  EXPECT_EQ(s.cached_segments, 0);
  a.free(q);
  s = a.stats();
  EXPECT_EQ(s.allocated, 1024);
  EXPECT_EQ(s.requested, 1000);
  EXPECT_EQ(s.peak_allocated, int64_t(1024 + 3 * MiB));  // the peak stays
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_EQ(s.cached_segments, 1);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated, 1024);
  EXPECT_EQ(a.stats().peak_reserved, int64_t(22 * MiB));
  void* r = a.allocate(2048, kS0);
  EXPECT_EQ(a.stats().peak_allocated, int64_t(1024 + 2048));
  a.free(p);
  a.free(r);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.reserved, 0);
  EXPECT_EQ(s.peak_reserved, int64_t(22 * MiB));
  EXPECT_EQ(s.num_allocs, 3);
  EXPECT_EQ(s.num_frees, 3);
}

TEST(CachingAllocatorCore, FreeOrRecordStreamOfAForeignPointerThrows) {
  FakeBackend backend(64 * MiB);
  Core a("cuda:0", backend);
  int x = 0;
  EXPECT_THROW(a.free(&x), ValueError);
  EXPECT_THROW(a.record_stream(&x, kS1), ValueError);
  void* p = a.allocate(100, kS0);
  a.free(p);
  EXPECT_THROW(a.free(p), ValueError);  // double free
}

TEST(CachingAllocatorCore, DestructorReturnsCachedSegments) {
  FakeBackend backend(64 * MiB);
  {
    Core a("cuda:0", backend);
    void* p = a.allocate(100, kS0);
    void* q = a.allocate(5 * MiB, kS1);
    a.record_stream(q, kS2);
    a.free(p);
    a.free(q);
  }
  EXPECT_EQ(backend.used(), 0u);
  EXPECT_EQ(backend.live_events(), 0u);
}

TEST(CachingAllocatorCore, ManyThreadsAllocateAndFreeConcurrently) {
  FakeBackend backend(size_t(8) << 30);
  Core a("cuda:0", backend);
  constexpr int kThreads = 4;
  constexpr int kIters = 2000;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  std::mutex live_mu;
  std::map<uintptr_t, size_t> live;  // every live block's [start, end) must be disjoint
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<void*> mine;
      const StreamId stream = t % 2 ? kS1 : kS0;
      for (int i = 0; i < kIters; ++i) {
        if (mine.size() < 16 && (mine.empty() || rng() % 3 != 0)) {
          const size_t n = rng() % 4 ? 1 + rng() % (64 * KiB) : 1 + rng() % (12 * MiB);
          void* p = a.allocate(n, stream);
          if (rng() % 8 == 0) a.record_stream(p, stream == kS0 ? kS1 : kS0);
          const size_t size = a.block_size(p);
          {
            std::lock_guard<std::mutex> lock(live_mu);
            const uintptr_t s = reinterpret_cast<uintptr_t>(p);
            auto next = live.lower_bound(s);
            if (next != live.end() && next->first < s + size) ++overlaps;
            if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > s) ++overlaps;
            live.emplace(s, size);
          }
          mine.push_back(p);
        } else {
          const size_t k = rng() % mine.size();
          void* p = mine[k];
          mine.erase(mine.begin() + k);
          {
            std::lock_guard<std::mutex> lock(live_mu);
            live.erase(reinterpret_cast<uintptr_t>(p));
          }
          a.free(p);
        }
        if (i % 97 == 0) backend.complete_stream(i % 2 ? kS0 : kS1);
        if (t == 0 && i % 500 == 0) (void)a.stats();
        if (t == 1 && i % 300 == 0) a.empty_cache();  // releases segments while others allocate
      }
      for (void* p : mine) {
        {
          std::lock_guard<std::mutex> lock(live_mu);
          live.erase(reinterpret_cast<uintptr_t>(p));
        }
        a.free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  auto s = a.stats();
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.requested, 0);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_EQ(backend.used(), 0u);
  EXPECT_EQ(backend.live_events(), 0u);
}

// ---------------------------------------------------------------- private pools (CUDA graphs)

constexpr StreamId kCap = 0x3000;  // the capturing side stream

TEST(CachingAllocatorPrivatePool, CaptureAllocationsComeFromThePoolAndAreNotReusedOutsideIt) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* eager = a.allocate(4 * KiB, kCap);  // before the capture, on the stream that will capture
  a.free(eager);                            // cached in the default pool
  const PoolId pool = a.create_pool();
  EXPECT_NE(pool, 0u);
  a.begin_capture(kCap, pool);
  EXPECT_EQ(a.capture_pool(kCap), pool);
  EXPECT_EQ(a.capture_pool(kS0), 0u);
  void* g1 = a.allocate(4 * KiB, kCap);  // not the cached default-pool block: a new segment
  EXPECT_NE(g1, eager);
  EXPECT_EQ(backend.allocate_calls, 2);
  void* other = a.allocate(4 * KiB, kS0);  // another stream during the capture: default pool
  a.end_capture(kCap);
  EXPECT_EQ(a.capture_pool(kCap), 0u);
  a.free(g1);  // freed after the capture: kept for the graph
  EXPECT_EQ(a.stats().private_pool_free, int64_t(2 * MiB));
  void* after = a.allocate(4 * KiB, kCap);  // eager work on the same stream: the default pool's block
  EXPECT_EQ(after, eager);
  void* more = a.allocate(8 * KiB, kCap);
  EXPECT_NE(as_char(more), as_char(g1));  // never inside the graph's segment
  EXPECT_TRUE(as_char(more) < as_char(g1) || as_char(more) >= as_char(g1) + 2 * MiB);
  for (void* p : {other, after, more}) a.free(p);
  // The graph's segment is not released by empty_cache while the pool lives.
  a.empty_cache();
  EXPECT_EQ(a.stats().segments, 1);
  EXPECT_EQ(a.stats().reserved, int64_t(2 * MiB));
  a.release_pool(pool);  // the graph is gone: its memory is ordinary cache again
  EXPECT_EQ(a.stats().private_pools, 0);
  EXPECT_EQ(a.stats().private_pool_free, 0);
  EXPECT_EQ(a.stats().cached_segments, 1);
  EXPECT_EQ(a.allocate(4 * KiB, kCap), g1);  // reusable by anyone on its stream now
  a.free(g1);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
}

TEST(CachingAllocatorPrivatePool, BlocksFreedDuringTheCaptureAreReusedWithinIt) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  const PoolId pool = a.create_pool();
  a.begin_capture(kCap, pool);
  void* t1 = a.allocate(64 * KiB, kCap);
  void* keep = a.allocate(64 * KiB, kCap);
  a.free(t1);                             // a temporary of the captured step
  void* t2 = a.allocate(64 * KiB, kCap);  // reuses it: the replay runs in the same order
  EXPECT_EQ(t2, t1);
  a.free(t2);
  a.end_capture(kCap);
  // Outside the capture the freed temporary is not handed out, on any stream.
  for (StreamId s : {kCap, kS0}) {
    void* q = a.allocate(64 * KiB, s);
    EXPECT_NE(q, t1);
    a.free(q);
  }
  // A second capture into the same pool (a shared pool) reuses the graph's free blocks.
  a.begin_capture(kCap, pool);
  EXPECT_EQ(a.allocate(64 * KiB, kCap), t1);
  a.free(t1);
  a.end_capture(kCap);
  a.free(keep);
  a.release_pool(pool);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(CachingAllocatorPrivatePool, DefaultPoolBlocksFreedDuringCaptureOnTheCapturingStreamAreKeptForTheGraph) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* warm = a.allocate(16 * KiB, kCap);   // e.g. a gradient from the warm-up step
  void* shared = a.allocate(16 * KiB, kS0);  // e.g. an input the captured step reads on kCap
  a.record_stream(shared, kCap);
  void* unrelated = a.allocate(16 * KiB, kS1);
  void* pin1 = a.allocate(16 * KiB, kCap);  // keep the segments split so freed blocks stay visible
  void* pin2 = a.allocate(16 * KiB, kS0);
  void* pin3 = a.allocate(16 * KiB, kS1);
  const PoolId pool = a.create_pool();
  a.begin_capture(kCap, pool);
  a.free(warm);                           // the graph may have read it: kept for the graph
  a.free(shared);                         // used on the capturing stream: kept too (its event is deferred)
  a.free(unrelated);                      // nothing to do with the capture: back to the default pool
  EXPECT_EQ(backend.events_recorded, 0);  // no event recorded during the capture
  EXPECT_EQ(a.stats().pending_event_blocks, 1);
  EXPECT_EQ(a.allocate(16 * KiB, kCap), warm);  // reused within the capture
  a.free(warm);
  a.end_capture(kCap);
  EXPECT_EQ(backend.events_recorded, 1);  // the deferred event, recorded once the capture ended
  backend.complete_stream(kCap);
  // Eager work gets neither block back; the unrelated one is reused normally.
  void* e1 = a.allocate(16 * KiB, kCap);
  void* e2 = a.allocate(16 * KiB, kS0);
  void* e3 = a.allocate(16 * KiB, kS1);
  EXPECT_NE(e1, warm);
  EXPECT_NE(e2, shared);
  EXPECT_EQ(e3, unrelated);
  EXPECT_EQ(a.stats().pending_event_blocks, 0);
  a.release_pool(pool);  // both come back to the default pool, merged with their free neighbours
  EXPECT_EQ(a.allocate(16 * KiB, kCap), warm);
  EXPECT_EQ(a.allocate(16 * KiB, kS0), shared);
  for (void* p : {warm, shared, e1, e2, e3, pin1, pin2, pin3}) a.free(p);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
  EXPECT_EQ(backend.live_events(), 0u);
}

TEST(CachingAllocatorPrivatePool, LiveBlocksOfAReleasedPoolReturnToTheDefaultPoolWhenFreed) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  const PoolId pool = a.create_pool();
  a.begin_capture(kCap, pool);
  void* out = a.allocate(4 * MiB, kCap);  // a graph output the user still holds
  a.end_capture(kCap);
  a.release_pool(pool);
  EXPECT_EQ(a.stats().private_pools, 0);
  a.free(out);
  EXPECT_EQ(a.stats().private_pool_free, 0);
  EXPECT_EQ(a.stats().cached_segments, 1);
  EXPECT_EQ(a.allocate(4 * MiB, kCap), out);
  a.free(out);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
}

TEST(CachingAllocatorPrivatePool, SharedPoolLivesUntilItsLastUse) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  const PoolId pool = a.create_pool();
  a.retain_pool(pool);  // a second graph shares it
  a.begin_capture(kCap, pool);
  a.free(a.allocate(4 * KiB, kCap));
  a.end_capture(kCap);
  a.release_pool(pool);
  EXPECT_EQ(a.stats().private_pools, 1);
  EXPECT_EQ(a.stats().private_pool_free, int64_t(2 * MiB));
  a.release_pool(pool);
  EXPECT_EQ(a.stats().private_pools, 0);
  EXPECT_THROW(a.release_pool(pool), ValueError);
  EXPECT_THROW(a.retain_pool(pool), ValueError);
  EXPECT_THROW(a.begin_capture(kCap, pool), ValueError);
  a.empty_cache();
  EXPECT_EQ(backend.used(), 0u);
}

TEST(CachingAllocatorPrivatePool, CaptureMisuseAndEmptyCacheDuringCaptureAreErrors) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:3", backend);
  const PoolId pool = a.create_pool();
  EXPECT_THROW(a.end_capture(kCap), ValueError);  // not capturing
  a.begin_capture(kCap, pool);
  EXPECT_EQ(a.stats().captures_underway, 1);
  EXPECT_THROW(a.begin_capture(kCap, pool), ValueError);  // already capturing
  EXPECT_THROW(a.release_pool(pool), ValueError);         // its last use, while capturing into it
  try {
    a.empty_cache();
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("empty_cache on cuda:3: a CUDA graph capture is underway"), std::string::npos) << e.what();
  }
  a.end_capture(kCap);
  EXPECT_EQ(a.stats().captures_underway, 0);
  a.release_pool(pool);
}

TEST(CachingAllocatorPrivatePool, OutOfMemoryDuringCaptureIsNotRetriedAndSaysWhy) {
  FakeBackend backend(24 * MiB);
  Core a("cuda:0", backend);
  a.free(a.allocate(20 * MiB, kS0));  // cached: a retry would release it, but not during a capture
  const PoolId pool = a.create_pool();
  a.begin_capture(kCap, pool);
  try {
    a.allocate(8 * MiB, kCap);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("a CUDA graph capture is underway"), std::string::npos) << e.what();
  }
  EXPECT_EQ(backend.free_calls, 0);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
  a.end_capture(kCap);
  void* p = a.allocate(8 * MiB, kCap);  // after the capture: released and retried
  EXPECT_NE(p, nullptr);
  a.free(p);
  a.release_pool(pool);
}

TEST(CachingAllocatorPrivatePool, PendingEventsAreNotQueriedDuringCapture) {
  FakeBackend backend(256 * MiB);
  Core a("cuda:0", backend);
  void* p = a.allocate(4 * KiB, kS0);
  void* keep = a.allocate(4 * KiB, kS0);
  a.record_stream(p, kS1);
  a.free(p);  // an event on kS1
  backend.complete_stream(kS1);
  const PoolId pool = a.create_pool();
  a.begin_capture(kCap, pool);
  void* q = a.allocate(4 * KiB, kS0);  // would reuse p, but its event is not queried now
  EXPECT_NE(q, p);
  EXPECT_EQ(a.stats().pending_event_blocks, 1);
  a.end_capture(kCap);
  void* r = a.allocate(4 * KiB, kS0);
  EXPECT_EQ(r, p);
  for (void* x : {keep, q, r}) a.free(x);
  a.release_pool(pool);
}

TEST(CachingAllocatorPrivatePool, DestructorReturnsThePoolsSegmentsToo) {
  FakeBackend backend(256 * MiB);
  {
    Core a("cuda:0", backend);
    const PoolId pool = a.create_pool();
    a.begin_capture(kCap, pool);
    void* p = a.allocate(4 * KiB, kCap);
    void* q = a.allocate(4 * KiB, kCap);
    a.free(p);
    a.free(q);
    a.end_capture(kCap);
    EXPECT_EQ(a.stats().private_pools, 1);  // the graph is never released
  }
  EXPECT_EQ(backend.used(), 0u);
}

TEST(CachingAllocatorCore, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t(3) << 30), "3.00 GiB");
}

}  // namespace
}  // namespace dp::cuda::detail
