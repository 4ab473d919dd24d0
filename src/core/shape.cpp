#include "dp/core/shape.h"
#include "dp/core/errors.h"

namespace dp {

bool IntArrayRef::equals(IntArrayRef o) const {
  if (size_ != o.size_) return false;
  for (size_t i = 0; i < size_; ++i)
    if (data_[i] != o.data_[i]) return false;
  return true;
}

std::string shape_str(IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::ostream& operator<<(std::ostream& os, IntArrayRef s) { return os << shape_str(s); }

int64_t numel_of(IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(n, s, &n)) [[unlikely]]
      throw ShapeError(detail::str("numel: the element count of size ", shape_str(sizes), " overflows int64"));
  return n;
}

bool sizes_fit(IntArrayRef sizes, size_t element_size, int64_t* numel, int64_t* nbytes) noexcept {
  int64_t n = 1, span = 1;  // span: the product with empty dims counted as 1 (the largest stride x size)
  for (int64_t s : sizes) {
    if (s < 0) return false;
    if (__builtin_mul_overflow(span, s > 1 ? s : 1, &span)) return false;
    n *= s;  // n <= the previous span and s <= max(s, 1): n * s <= span, which fits
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(span, static_cast<int64_t>(element_size), &bytes)) return false;
  if (numel) *numel = n;
  if (nbytes) *nbytes = n * static_cast<int64_t>(element_size);
  return true;
}

Shape contiguous_strides(IntArrayRef sizes) {
  Shape st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return st;
}

int64_t wrap_dim_slow(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim > 0 ? ndim : 1;  // a 0-dim tensor accepts dim 0 and -1, as in PyTorch
  DP_CHECK(dim >= -n && dim < n, IndexError, op, ": Dimension out of range (expected to be in range of [", -n, ", ", n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DP_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": The size of tensor a (", da, ") must match the size of tensor b (", db,
             ") at non-singleton dimension ", i, " (shapes ", shape_str(a), " and ", shape_str(b), ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace dp

namespace dp {
void Shape::check_index(size_t i) const { DP_CHECK(i < size_, IndexError, "Shape::at: index ", i, " out of range (size ", size_, ")"); }
}  // namespace dp
