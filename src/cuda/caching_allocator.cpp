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
    // Graphs still alive at exit: their pools' free segments are released with the rest.
    std::vector<PoolId> ids;
    for (const auto& kv : pools_) ids.push_back(kv.first);
    pools_.clear();
    captures_.clear();
    for (PoolId id : ids) return_pool_blocks(id);
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
  rest.insert(rest.end(), deferred_.begin(), deferred_.end());
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

CachingAllocatorCore::Block* CachingAllocatorCore::find_free_block(bool small, PoolId pool_id, StreamId stream, size_t size) {
  Pool& pool = pool_for(small);
  Block key(nullptr, size, stream, small, pool_id);
  auto it = pool.lower_bound(&key);  // smallest block of this pool and stream with size >= size
  if (it == pool.end() || (*it)->pool != pool_id || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

bool CachingAllocatorCore::mergeable(const Block* b, PoolId pool) const {
  // A block of another pool may share the segment (a default-pool block kept for a graph).
  return b != nullptr && !b->allocated && b->event_count == 0 && b->stream_uses.empty() && b->pool == pool;
}

void CachingAllocatorCore::free_block(Block* b) {
  // A released pool's blocks go back to the default pool as they come free.
  if (b->pool != 0 && pools_.count(b->pool) == 0) b->pool = 0;
  Pool& pool = pool_for(b->small);
  if (Block* p = b->prev; mergeable(p, b->pool)) {
    pool.erase(p);
    b->ptr = p->ptr;
    b->size += p->size;
    b->prev = p->prev;
    if (b->prev) b->prev->next = b;
    delete p;
  }
  if (Block* n = b->next; mergeable(n, b->pool)) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next) b->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocatorCore::record_free_events(Block* b) {
  for (StreamId s : b->stream_uses) {
    events_.emplace_back(backend_.record_event(s), b);
    ++b->event_count;
  }
  b->stream_uses.clear();
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
      if (b->pool != 0) break;  // ordered by pool: the rest are private pools' (a graph's memory)
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
                         " is reserved but free (cached blocks in partly used segments); ");
  if (captures_.empty()) {
    msg += "its unused cached segments were released and the allocation retried once.";
  } else {
    msg +=
        "a CUDA graph capture is underway on this device, during which the cache is not released (that would "
        "synchronise the device): capture with more free memory, or empty_cache() before capturing.";
  }
  throw OutOfMemory(msg);
}

void* CachingAllocatorCore::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  // Events cannot be queried while a capture is underway: pending blocks wait until it ends.
  if (captures_.empty()) process_events();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  PoolId pool = 0;
  if (!captures_.empty()) {
    auto c = captures_.find(stream);
    if (c != captures_.end()) pool = c->second;
  }
  Block* b = find_free_block(small, pool, stream, size);
  if (b == nullptr) {
    const size_t seg = segment_size(size);
    void* p = backend_.allocate(seg);
    if (p == nullptr) {
      // Out of memory: blocks waiting for events may free whole segments, then release every
      // wholly unused cached segment (of any stream, default pool) and retry once. Not during a
      // capture: waiting for events and freeing segments would synchronise the device.
      if (!captures_.empty()) throw_oom(nbytes, seg);
      ++stats_.num_alloc_retries;
      synchronize_and_free_events();
      b = find_free_block(small, pool, stream, size);
      if (b == nullptr) {
        release_cached_segments();
        p = backend_.allocate(seg);
        if (p == nullptr) throw_oom(nbytes, seg);
      }
    }
    if (b == nullptr) {
      b = new Block(static_cast<char*>(p), seg, stream, small, pool);
      stats_.reserved += static_cast<int64_t>(seg);
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
      ++stats_.segments;
    }
  }
  const size_t remaining = b->size - size;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    // Split: the front is handed out, the rest stays free in the pool.
    auto* rest = new Block(b->ptr + size, remaining, stream, small, b->pool);
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
  if (!captures_.empty() && b->pool == 0) {
    // A default-pool block the capture may use (allocated or used on a capturing stream): the
    // graph replays that use later, so the block is kept for the graph's pool.
    auto c = captures_.find(b->stream);
    for (auto u = b->stream_uses.begin(); c == captures_.end() && u != b->stream_uses.end(); ++u) c = captures_.find(*u);
    if (c != captures_.end()) b->pool = c->second;
  }
  if (b->stream_uses.empty()) {
    free_block(b);
    return;
  }
  ++stats_.pending_event_blocks;
  if (!captures_.empty()) {
    // An event recorded now could not be queried until the capture ends: record it then.
    deferred_.push_back(b);
    return;
  }
  // Used on other streams: reusable once their work queued so far is done.
  record_free_events(b);
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
  DP_CHECK(captures_.empty(), DeviceError, "empty_cache on ", device_name_,
           ": a CUDA graph capture is underway on this device; "
           "releasing cached memory would synchronise the device and invalidate the capture");
  synchronize_and_free_events();
  release_cached_segments();
}

PoolId CachingAllocatorCore::create_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  const PoolId id = next_pool_++;
  pools_.emplace(id, 1);
  return id;
}

void CachingAllocatorCore::retain_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  DP_CHECK(it != pools_.end(), ValueError, "CUDA caching allocator on ", device_name_, ": private pool ", pool, " does not exist (released?)");
  ++it->second;
}

void CachingAllocatorCore::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  DP_CHECK(it != pools_.end(), ValueError, "CUDA caching allocator on ", device_name_, ": private pool ", pool, " does not exist (released twice?)");
  for (const auto& [stream, p] : captures_)
    DP_CHECK(p != pool || it->second > 1, ValueError, "CUDA caching allocator on ", device_name_, ": private pool ", pool,
             " released while a capture into it is underway");
  if (--it->second > 0) return;
  pools_.erase(it);
  return_pool_blocks(pool);
}

void CachingAllocatorCore::return_pool_blocks(PoolId pool) {
  // The pool's free blocks change pool (part of the set's order: out, relabelled, back in), then
  // each segment they are in is merged in one walk, so no block is merged away while listed.
  std::set<Block*> heads;
  for (Pool* set : {&small_pool_, &large_pool_}) {
    std::vector<Block*> mine;
    for (Block* b : *set)
      if (b->pool == pool) mine.push_back(b);
    for (Block* b : mine) {
      set->erase(b);
      b->pool = 0;
      set->insert(b);
      Block* h = b;
      while (h->prev) h = h->prev;
      heads.insert(h);
    }
  }
  for (Block* h : heads) {
    Pool& set = pool_for(h->small);
    for (Block* b = h; b != nullptr && b->next != nullptr;) {
      Block* n = b->next;
      const bool both_free = set.count(b) != 0 && mergeable(b, 0) && mergeable(n, 0) && set.count(n) != 0;
      if (!both_free) {
        b = n;
        continue;
      }
      set.erase(b);
      set.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (b->next) b->next->prev = b;
      delete n;
      set.insert(b);
    }
  }
}

void CachingAllocatorCore::begin_capture(StreamId stream, PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  DP_CHECK(pools_.count(pool) != 0, ValueError, "CUDA caching allocator on ", device_name_, ": begin_capture into private pool ", pool,
           ", which does not exist");
  DP_CHECK(captures_.count(stream) == 0, ValueError, "CUDA caching allocator on ", device_name_, ": stream ", reinterpret_cast<void*>(stream),
           " is already capturing");
  captures_.emplace(stream, pool);
}

void CachingAllocatorCore::end_capture(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  DP_CHECK(captures_.erase(stream) == 1, ValueError, "CUDA caching allocator on ", device_name_, ": end_capture of stream ",
           reinterpret_cast<void*>(stream), ", which is not capturing");
  if (!captures_.empty()) return;
  // The last capture ended: blocks freed during it with uses on other streams get their events now
  // (recorded after those uses, so waiting for them is safe if late).
  for (Block* b : deferred_) record_free_events(b);
  deferred_.clear();
}

PoolId CachingAllocatorCore::capture_pool(StreamId stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = captures_.find(stream);
  return it == captures_.end() ? 0 : it->second;
}

CachingAllocatorStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CachingAllocatorStats s = stats_;
  s.cached_segments = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_})
    for (const Block* b : *pool) {
      if (b->pool != 0)
        s.private_pool_free += static_cast<int64_t>(b->size);
      else if (b->prev == nullptr && b->next == nullptr)
        ++s.cached_segments;
    }
  s.private_pools = static_cast<int64_t>(pools_.size());
  s.captures_underway = static_cast<int64_t>(captures_.size());
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
