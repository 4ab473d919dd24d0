#pragma once
// make_pooled<T>(args...): std::make_shared through a per-thread cache of small blocks.
//
// A training step of a small model creates and destroys a few dozen tensor handles, storages
// and autograd nodes; with plain make_shared each is a malloc/free pair, and glibc's per-thread
// cache holds only 7 blocks of a size, so most of those calls took its slow path. Here freed
// blocks (<= 512 bytes, 16-byte size classes, at most 256 per class per thread) are kept for the
// next allocation on the same thread; larger or surplus blocks go to operator new/delete. A block
// freed on another thread joins that thread's cache, which is harmless: all blocks come from
// operator new.
#include <cstddef>
#include <memory>
#include <utility>

namespace dp::detail {

void* pooled_allocate(size_t bytes);
void pooled_deallocate(void* p, size_t bytes) noexcept;

template <typename T>
struct PooledAllocator {
  using value_type = T;
  PooledAllocator() noexcept = default;
  template <typename U>
  PooledAllocator(const PooledAllocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(pooled_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pooled_deallocate(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PooledAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T, typename... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PooledAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace dp::detail
