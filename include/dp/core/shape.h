#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace dp {

using Shape = std::vector<int64_t>;

// A non-owning view of a list of integers, built from a Shape or a braced list ({2, 3}).
// Like libtorch's IntArrayRef: valid only while what it views lives.
class IntArrayRef {
 public:
  IntArrayRef() = default;
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  // Viewing a braced list is safe for the call it is an argument of (the list lives until the end
  // of the full expression), which is the only use: GCC's lifetime warning does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  IntArrayRef(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop
  IntArrayRef(const int64_t* d, size_t n) : data_(d), size_(n) {}
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

int64_t numel_of(IntArrayRef sizes);
Shape contiguous_strides(IntArrayRef sizes);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming op and range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Broadcast two shapes by NumPy rules; throws ShapeError naming op and both shapes.
Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);

}  // namespace dp
