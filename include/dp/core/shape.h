#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace dp {

// Sizes or strides of a tensor: a std::vector<int64_t>-like container that keeps up to kInline
// values inline. Every tensor has two and most ops build a few more, so with a heap vector they
// were a large share of small models' per-op cost (malloc/free dominated a tiny training step).
// It converts implicitly to and from std::vector<int64_t>, and offers the vector operations the
// code base uses (pointer iterators, insert, erase, resize, push_back, comparisons).
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_t kInline = 6;

  Shape() noexcept = default;
  Shape(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }
  explicit Shape(size_t n, int64_t v = 0) { assign(n, v); }
  template <typename It>
  requires(!std::is_integral_v<It>) Shape(It first, It last) { assign(first, last); }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit, as a vector would be
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> l) {
    assign(l.begin(), l.end());
    return *this;
  }
  ~Shape() { release(); }

  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return cap_; }
  int64_t* data() noexcept { return data_; }
  const int64_t* data() const noexcept { return data_; }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  int64_t& at(size_t i) {
    check_index(i);
    return data_[i];
  }
  const int64_t& at(size_t i) const {
    check_index(i);
    return data_[i];
  }
  int64_t& front() { return data_[0]; }
  const int64_t& front() const { return data_[0]; }
  int64_t& back() { return data_[size_ - 1]; }
  const int64_t& back() const { return data_[size_ - 1]; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  void reserve(size_t n) {
    if (n <= cap_) return;
    int64_t* p = new int64_t[n];
    std::copy(data_, data_ + size_, p);
    release();
    data_ = p;
    cap_ = n;
  }
  void clear() noexcept { size_ = 0; }
  void push_back(int64_t v) {
    if (size_ == cap_) reserve(cap_ * 2);
    data_[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { --size_; }
  void resize(size_t n, int64_t v = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = v;
    size_ = n;
  }
  void assign(size_t n, int64_t v) {
    size_ = 0;
    resize(n, v);
  }
  template <typename It>
  requires(!std::is_integral_v<It>) void assign(It first, It last) {
    const auto n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }

  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t(1), v); }
  iterator insert(const_iterator pos, size_t n, int64_t v) {
    const size_t at = static_cast<size_t>(pos - data_);
    open_gap(at, n);
    std::fill(data_ + at, data_ + at + n, v);
    return data_ + at;
  }
  template <typename It>
  requires(!std::is_integral_v<It>) iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const auto n = static_cast<size_t>(std::distance(first, last));
    Shape copy(first, last);  // the range may alias this container
    open_gap(at, n);
    std::copy(copy.begin(), copy.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> l) { return insert(pos, l.begin(), l.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t a = static_cast<size_t>(first - data_), b = static_cast<size_t>(last - data_);
    std::copy(data_ + b, data_ + size_, data_ + a);
    size_ -= b - a;
    return data_ + a;
  }
  void swap(Shape& o) noexcept {
    Shape tmp(std::move(o));
    o = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept { return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin()); }
  friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
  friend bool operator<(const Shape& a, const Shape& b) noexcept { return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  bool on_heap() const noexcept { return data_ != inline_; }
  void release() noexcept {
    if (on_heap()) delete[] data_;
    data_ = inline_;
    cap_ = kInline;
  }
  void take(Shape& o) noexcept {
    if (o.on_heap()) {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
      data_ = inline_;
      cap_ = kInline;
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  void open_gap(size_t at, size_t n) {
    if (size_ + n > cap_) reserve(std::max(size_ + n, cap_ * 2));
    std::copy_backward(data_ + at, data_ + size_, data_ + size_ + n);
    size_ += n;
  }
  void check_index(size_t i) const;

  int64_t* data_ = inline_;
  size_t size_ = 0;
  size_t cap_ = kInline;
  int64_t inline_[kInline];
};

// A non-owning view of a list of integers, built from a Shape or a braced list ({2, 3}).
// Like libtorch's IntArrayRef: valid only while what it views lives.
class IntArrayRef {
 public:
  IntArrayRef() = default;
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  IntArrayRef(const Shape& v) : data_(v.data()), size_(v.size()) {}
  // Viewing a braced list is safe for the call it is an argument of (the list lives until the end
  // of the full expression), which is the only use: GCC's lifetime warning does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  IntArrayRef(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop
  IntArrayRef(const int64_t* d, size_t n) : data_(d), size_(n) {}
  // One integer as a one-element list, as libtorch's IntArrayRef: x.sum(0), x.mean(1),
  // max_pool2d(x, 2) (the ops that take "one value or two" expand it). It views `one`, so like the
  // braced list it is for an argument: an int literal becomes a temporary that lives until the end
  // of the call's full expression, not beyond (never store an IntArrayRef made from one).
  IntArrayRef(const int64_t& one) : data_(&one), size_(1) {}  // NOLINT: implicit, as in libtorch
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  const int64_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t back() const { return data_[size_ - 1]; }
  Shape vec() const { return Shape(begin(), end()); }
  bool equals(IntArrayRef o) const;

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

// "[15, 5]": how PyTorch prints a torch.Size's contents.
std::string shape_str(IntArrayRef s);
std::ostream& operator<<(std::ostream& os, IntArrayRef s);
inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << IntArrayRef(s); }

// The element count; ShapeError when the product overflows int64.
int64_t numel_of(IntArrayRef sizes);
// The one size check of every new tensor (make_empty, the safetensors reader): true when `sizes`
// can describe a contiguous tensor of elements of `element_size` bytes, that is every size is >= 0,
// and neither the row-major strides (the product of the sizes with an empty dimension counted as 1,
// as contiguous_strides computes them) nor the element count times `element_size` overflow int64.
// The rule does not depend on the order of the dimensions. Fills *numel and *nbytes when it fits.
bool sizes_fit(IntArrayRef sizes, size_t element_size, int64_t* numel, int64_t* nbytes) noexcept;
Shape contiguous_strides(IntArrayRef sizes);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming op and range. (A 0-dim
// tensor accepts 0 and -1.) The in-range case is inline: size(d) and stride(d) call it constantly.
int64_t wrap_dim_slow(int64_t dim, int64_t ndim, const char* op);
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  if (dim >= 0 && dim < ndim) return dim;
  if (dim < 0 && dim >= -ndim) return dim + ndim;
  return wrap_dim_slow(dim, ndim, op);
}
// Broadcast two shapes by NumPy rules; throws ShapeError naming op and both shapes.
Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);

}  // namespace dp
