#pragma once
// ZeroedAllocator<T>: a std::allocator-shaped allocator whose memory starts zeroed.
//
// Every module object is allocated with it (ModuleHolder's and a clone's copies), so that bytes no
// constructor writes (padding, which a trivially copyable options struct's copy carries along
// whole) are 0 and cannot look like a pointer. Recycled memory would repeat stale bytes
// (allocation patterns are deterministic: the freed buffer of an earlier model's child list is a
// row of module addresses), which a clone's check for members still pointing at the original
// tree (nn/module_clone.cpp) would take for a copied child address.
#include <cstddef>
#include <cstring>
#include <new>

namespace dp::detail {

template <typename T>
struct ZeroedAllocator {
  using value_type = T;
  ZeroedAllocator() = default;
  template <typename U>
  ZeroedAllocator(const ZeroedAllocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    void* p = ::operator new(n * sizeof(T), std::align_val_t(alignof(T)));
    std::memset(p, 0, n * sizeof(T));
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(alignof(T))); }
  template <typename U>
  bool operator==(const ZeroedAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace dp::detail
