#pragma once
// A vector that keeps up to N elements inline (no heap allocation), for the per-op metadata of
// hot paths (iteration shapes and strides). Only what those paths need: trivially copyable T.
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

namespace dp {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable values only");

 public:
  SmallVector() = default;
  SmallVector(size_t n, T v) { assign(n, v); }
  SmallVector(const SmallVector& o) { copy_from(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      size_ = 0;
      copy_from(o);
    }
    return *this;
  }
  ~SmallVector() = default;

  void assign(size_t n, T v) {
    reserve(n);
    for (size_t i = 0; i < n; ++i) data_[i] = v;
    size_ = n;
  }
  void push_back(T v) {
    if (size_ == cap_) reserve(cap_ * 2);
    data_[size_++] = v;
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    auto bigger = std::make_unique<T[]>(n);
    std::memcpy(bigger.get(), data_, size_ * sizeof(T));
    heap_ = std::move(bigger);
    data_ = heap_.get();
    cap_ = n;
  }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void copy_from(const SmallVector& o) {
    reserve(o.size_);
    std::memcpy(data_, o.data_, o.size_ * sizeof(T));
    size_ = o.size_;
  }
  T inline_[N];
  std::unique_ptr<T[]> heap_;
  T* data_ = inline_;
  size_t size_ = 0;
  size_t cap_ = N;
};

}  // namespace dp
