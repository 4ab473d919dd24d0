#pragma once
// The logic of the per-device CUDA caching allocator, as plain C++ over a raw-memory backend, so
// that it is tested on every machine (tests/cuda/test_caching_allocator.cpp drives it with a fake
// backend; it is part of the CUDA library dparallel::cuda, and a build without CUDA compiles it into
// that test). The CUDA backend (cudaMalloc / cudaFree / cudaEvent) is in
// src/cuda/cuda_allocator.cpp. It follows PyTorch's CUDACachingAllocator:
//  - request sizes are rounded up to multiples of 512 bytes;
//  - requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from the
//    large pool, whose segments are 20 MiB for requests under 10 MiB, else the request rounded up
//    to 2 MiB;
//  - a request takes the best-fitting free block (smallest that fits) of its pool and stream; a
//    block larger than needed is split (small pool: when at least 512 bytes remain; large pool:
//    when more than 1 MiB remains) and the rest stays free;
//  - a freed block is merged with its free neighbours of the same segment;
//  - a block belongs to the stream it was allocated on and is reused only by requests on that
//    stream; record_stream(ptr, other) marks a use on another stream, and when such a block is freed
//    it goes back to the pool only once events recorded on those streams have completed;
//  - when the backend is out of memory: wait for pending events, free every cached segment that is
//    wholly unused, and retry once; then throw dp::OutOfMemory saying the device, the bytes asked
//    for, and what is allocated, reserved and reserved-but-free.
// CUDA graphs (dp/cuda/graph.h) get private pools, as PyTorch's graph memory pools:
//  - create_pool() makes one; begin_capture(stream, pool) routes every allocation on `stream` to
//    it until end_capture(stream). Its blocks are never handed to allocations outside a capture
//    into that pool, so the addresses a graph recorded stay the graph's while it lives;
//  - a block freed during a capture goes back to the capture's pool (reused only by later
//    allocations of that capture, which replay in the same order) when it was allocated in it, or
//    when it belongs to the default pool but was allocated or record_stream()ed on the capturing
//    stream: the graph may use it, so it is kept for the graph;
//  - while any capture is underway, events are neither queried nor waited for (CUDA forbids that
//    during capture): frees that need events are deferred until the last capture ends, and an
//    out-of-memory is not retried (releasing segments would synchronise the device);
//  - release_pool() drops a use (retain_pool() adds one, for graphs sharing a pool); at zero the
//    pool's free blocks return to the default pool (merged, reusable, released by empty_cache), and
//    its live blocks do so when freed.
// Thread-safe: one mutex; backend calls are made under it.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dp::cuda::detail {

using StreamId = std::uintptr_t;  // a cudaStream_t's value (0: the default stream)
using EventId = void*;            // a cudaEvent_t
using PoolId = std::uint64_t;     // a private pool (0: the default pool)

// Raw device memory and stream events. The allocator calls it under its mutex.
class RawMemoryBackend {
 public:
  virtual ~RawMemoryBackend() = default;
  // A new segment of exactly `bytes`; nullptr when the device is out of memory (other errors throw).
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* ptr, size_t bytes) = 0;
  // An event recorded on `stream` now; completed once the stream's work queued so far is done.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_completed(EventId event) = 0;
  virtual void synchronize_event(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
  // (free, total) bytes of the device for the out-of-memory message; negative when unknown.
  virtual std::pair<int64_t, int64_t> memory_info() { return {-1, -1}; }
};

struct CachingAllocatorStats {
  int64_t allocated = 0;       // bytes in blocks handed out (rounded sizes, as PyTorch's memory_allocated)
  int64_t requested = 0;       // bytes asked for by the live allocations
  int64_t reserved = 0;        // bytes in segments obtained from the backend (memory_reserved)
  int64_t peak_allocated = 0;  // since construction or reset_peak()
  int64_t peak_reserved = 0;
  int64_t num_allocs = 0;  // successful allocations
  int64_t num_frees = 0;
  int64_t num_ooms = 0;              // OutOfMemory errors thrown
  int64_t num_alloc_retries = 0;     // allocations that had to release the cache and retry
  int64_t segments = 0;              // segments held
  int64_t cached_segments = 0;       // of them wholly unused (what empty_cache() would release)
  int64_t pending_event_blocks = 0;  // freed blocks waiting for their record_stream uses
  int64_t private_pools = 0;         // live private pools (CUDA graphs)
  int64_t private_pool_free = 0;     // bytes in free blocks kept for private pools
  int64_t captures_underway = 0;
};

class CachingAllocatorCore {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t(1) << 20;     // largest request of the small pool
  static constexpr size_t kSmallBuffer = size_t(2) << 20;   // small-pool segment size
  static constexpr size_t kLargeBuffer = size_t(20) << 20;  // large-pool segment for requests < kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = size_t(10) << 20;
  static constexpr size_t kRoundLarge = size_t(2) << 20;

  // `device_name` ("cuda:0") is used in error messages. The backend must outlive the allocator.
  CachingAllocatorCore(std::string device_name, RawMemoryBackend& backend);
  ~CachingAllocatorCore();  // releases the cached segments (live allocations are leaked)
  CachingAllocatorCore(const CachingAllocatorCore&) = delete;
  CachingAllocatorCore& operator=(const CachingAllocatorCore&) = delete;

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);  // what the backend is asked for on a miss

  // nullptr for 0 bytes. Throws OutOfMemory as described above.
  void* allocate(size_t nbytes, StreamId stream);
  // nullptr is ignored; a pointer not from allocate() throws ValueError.
  void free(void* ptr);
  // `ptr` (from allocate) is used on `stream` too: when freed, it is reused only after that use.
  void record_stream(void* ptr, StreamId stream);
  // Waits for pending events and returns every wholly unused segment of the default pool to the
  // backend. DeviceError while a capture is underway (that would synchronise the device).
  void empty_cache();

  // Private pools (see the top of this file). create_pool: a new pool with one use.
  PoolId create_pool();
  void retain_pool(PoolId pool);
  void release_pool(PoolId pool);
  // Allocations on `stream` come from `pool` until end_capture(stream). One capture per stream.
  void begin_capture(StreamId stream, PoolId pool);
  void end_capture(StreamId stream);
  // The pool allocations on `stream` come from now (0 when the stream is not capturing).
  PoolId capture_pool(StreamId stream) const;
  CachingAllocatorStats stats() const;
  void reset_peak();
  // The size of the block behind a live allocation (its rounded size); 0 if unknown.
  size_t block_size(void* ptr) const;
  const std::string& device_name() const { return device_name_; }

 private:
  struct Block {
    Block(char* p, size_t n, StreamId s, bool is_small, PoolId pl) : ptr(p), size(n), stream(s), small(is_small), pool(pl) {}
    char* ptr;
    size_t size;
    StreamId stream;
    bool small;
    PoolId pool;  // 0: the default pool
    bool allocated = false;
    size_t requested = 0;
    Block* prev = nullptr;  // neighbours in the same segment
    Block* next = nullptr;
    int event_count = 0;
    std::set<StreamId> stream_uses;
  };
  struct ByPoolStreamSizePtr {
    bool operator()(const Block* a, const Block* b) const {
      if (a->pool != b->pool) return a->pool < b->pool;
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, ByPoolStreamSizePtr>;

  Pool& pool_for(bool small) { return small ? small_pool_ : large_pool_; }
  Block* find_free_block(bool small, PoolId pool, StreamId stream, size_t size);
  void free_block(Block* b);  // back into its pool, merged with free neighbours of that pool
  bool mergeable(const Block* b, PoolId pool) const;
  void record_free_events(Block* b);  // one event per stream use; the block is free once all completed
  void process_events();              // blocks whose events completed go back to the pools
  void synchronize_and_free_events();
  void release_cached_segments();        // of the default pool
  void return_pool_blocks(PoolId pool);  // a released pool's free blocks into the default pool
  [[noreturn]] void throw_oom(size_t nbytes, size_t segment_bytes);

  std::string device_name_;
  RawMemoryBackend& backend_;
  mutable std::mutex mu_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> live_;
  std::deque<std::pair<EventId, Block*>> events_;
  std::vector<Block*> deferred_;                   // freed during a capture, waiting to record events
  std::unordered_map<PoolId, int> pools_;          // live private pools and their use counts
  std::unordered_map<StreamId, PoolId> captures_;  // capturing streams and their pools
  PoolId next_pool_ = 1;
  CachingAllocatorStats stats_;
};

// "1.50 MiB": for messages.
std::string format_bytes(int64_t bytes);

}  // namespace dp::cuda::detail
