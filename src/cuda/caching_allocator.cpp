// The caching allocator's logic (see dp/cuda/caching_allocator.h). Plain C++, no CUDA headers:
// cmake/Cuda.cmake builds this file with or without nvcc.
#include "dp/cuda/caching_allocator.h"
#include <algorithm>
#include <cstdio>
#include <vector>
#include "dp/core/errors.h"

namespace dp::cuda::detail {

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

namespace {
std::string bytes_both(int64_t bytes) {
  if (bytes < 1024) return format_bytes(bytes);
  return dp::detail::str(format_bytes(bytes), " (", bytes, " bytes)");
}
}  // namespace

CachingAllocatorCore::CachingAllocatorCore(std::string device_name, RawMemoryBackend& backend)
    : device_name_(std::move(device_name)), backend_(backend) {}

CachingAllocatorCore::~CachingAllocatorCore() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    synchronize_and_free_events();
    release_cached_segments();
  } catch (...) {
    // The device may already be gone at exit; nothing useful to do.
  }
  // Bookkeeping of segments still in use (leaked by the user) is dropped; their memory is not freed.
  std::vector<Block*> rest;
  for (Block* b : small_pool_) rest.push_back(b);
  for (Block* b : large_pool_) rest.push_back(b);
  for (auto& kv : live_) rest.push_back(kv.second);
  for (auto& ev : events_) {
    if (std::find(rest.begin(), rest.end(), ev.second) == rest.end()) rest.push_back(ev.second);
  }
  for (Block* b : rest) delete b;
}

size_t CachingAllocatorCore::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t CachingAllocatorCore::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

CachingAllocatorCore::Block* CachingAllocatorCore::find_free_block(bool small, StreamId stream, size_t size) {
  Pool& pool = pool_for(small);
  Block key(nullptr, size, stream, small);
  auto it = pool.lower_bound(&key);  // smallest block of this stream with size >= size
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

bool CachingAllocatorCore::mergeable(const Block* b) const {
  return b != nullptr && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
}

void CachingAllocatorCore::free_block(Block* b) {
  Pool& pool = pool_for(b->small);
  if (Block* p = b->prev; mergeable(p)) {
    pool.erase(p);
    b->ptr = p->ptr;
    b->size += p->size;
    b->prev = p->prev;
    if (b->prev) b->prev->next = b;
    delete p;
  }
  if (Block* n = b->next; mergeable(n)) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next) b->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocatorCore::process_events() {
  for (auto it = events_.begin(); it != events_.end();) {
    if (!backend_.event_completed(it->first)) {
      ++it;
      continue;
    }
    backend_.destroy_event(it->first);
    Block* b = it->second;
    it = events_.erase(it);
    if (--b->event_count == 0) {
      --stats_.pending_event_blocks;
      free_block(b);
    }
  }
}

void CachingAllocatorCore::synchronize_and_free_events() {
  while (!events_.empty()) {
    auto [ev, b] = events_.front();
    events_.pop_front();
    backend_.synchronize_event(ev);
    backend_.destroy_event(ev);
    if (--b->event_count == 0) {
      --stats_.pending_event_blocks;
      free_block(b);
    }
  }
}

void CachingAllocatorCore::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      backend_.free(b->ptr, b->size);
      stats_.reserved -= static_cast<int64_t>(b->size);
      --stats_.segments;
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocatorCore::throw_oom(size_t nbytes, size_t segment_bytes) {
  ++stats_.num_ooms;
  const int64_t unallocated = stats_.reserved - stats_.allocated;
  std::string msg = dp::detail::str("CUDA out of memory on ", device_name_, ": tried to allocate ", bytes_both(static_cast<int64_t>(nbytes)));
  if (segment_bytes != nbytes) msg += dp::detail::str(" (a new segment of ", bytes_both(static_cast<int64_t>(segment_bytes)), ")");
  msg += ". ";
  auto [free_b, total_b] = backend_.memory_info();
  if (free_b >= 0 && total_b >= 0) msg += dp::detail::str("The device has ", bytes_both(free_b), " free of ", bytes_both(total_b), ". ");
  msg += dp::detail::str("dparallel's allocator on ", device_name_, " has ", bytes_both(stats_.allocated), " allocated and ",
                     bytes_both(stats_.reserved), " reserved, of which ", bytes_both(unallocated),
                     " is reserved but free (cached blocks in partly used segments); its unused cached segments were "
                     "released and the allocation retried once.");
  throw OutOfMemory(msg);
}

void* CachingAllocatorCore::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Block* b = find_free_block(small, stream, size);
  if (b == nullptr) {
    const size_t seg = segment_size(size);
    void* p = backend_.allocate(seg);
    if (p == nullptr) {
      // Out of memory: blocks waiting for events may free whole segments, then release every
      // wholly unused cached segment (of any stream and pool) and retry once.
      ++stats_.num_alloc_retries;
      synchronize_and_free_events();
      b = find_free_block(small, stream, size);
      if (b == nullptr) {
        release_cached_segments();
        p = backend_.allocate(seg);
        if (p == nullptr) throw_oom(nbytes, seg);
      }
    }
    if (b == nullptr) {
      b = new Block(static_cast<char*>(p), seg, stream, small);
      stats_.reserved += static_cast<int64_t>(seg);
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
      ++stats_.segments;
    }
  }
  const size_t remaining = b->size - size;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    // Split: the front is handed out, the rest stays free in the pool.
    auto* rest = new Block(b->ptr + size, remaining, stream, small);
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_for(small).insert(rest);
  }
  b->allocated = true;
  b->requested = nbytes;
  live_.emplace(b->ptr, b);
  stats_.allocated += static_cast<int64_t>(b->size);
  stats_.requested += static_cast<int64_t>(nbytes);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.num_allocs;
  return b->ptr;
}

void CachingAllocatorCore::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  DP_CHECK(it != live_.end(), ValueError, "CUDA caching allocator on ", device_name_, ": free of pointer ", ptr,
           ", which it did not allocate or already freed");
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  stats_.allocated -= static_cast<int64_t>(b->size);
  stats_.requested -= static_cast<int64_t>(b->requested);
  ++stats_.num_frees;
  if (b->stream_uses.empty()) {
    free_block(b);
    return;
  }
  // Used on other streams: reusable once their work queued so far is done.
  for (StreamId s : b->stream_uses) {
    events_.emplace_back(backend_.record_event(s), b);
    ++b->event_count;
  }
  b->stream_uses.clear();
  ++stats_.pending_event_blocks;
}

void CachingAllocatorCore::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  DP_CHECK(it != live_.end(), ValueError, "record_stream: pointer ", ptr, " is not a live allocation of the CUDA caching allocator on ",
           device_name_);
  Block* b = it->second;
  if (stream != b->stream) b->stream_uses.insert(stream);
}

void CachingAllocatorCore::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  synchronize_and_free_events();
  release_cached_segments();
}

CachingAllocatorStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CachingAllocatorStats s = stats_;
  s.cached_segments = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_})
    for (const Block* b : *pool)
      if (b->prev == nullptr && b->next == nullptr) ++s.cached_segments;
  return s;
}

void CachingAllocatorCore::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

size_t CachingAllocatorCore::block_size(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

}  // namespace dp::cuda::detail
