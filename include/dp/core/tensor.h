#pragma once
// The Tensor handle: a shared reference to a TensorImpl (copying a Tensor aliases it, as in
// libtorch). Methods are thin wrappers over the free functions in dp/ops/*.h.
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>
#include "dp/core/clone_map.h"
#include "dp/core/device.h"
#include "dp/core/dtype.h"
#include "dp/core/errors.h"
#include "dp/core/scalar.h"
#include "dp/core/shape.h"
#include "dp/core/storage.h"
#include "dp/core/tensor_impl.h"

namespace dp {

class Tensor;
class Generator;
using TensorList = std::vector<Tensor>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // Copying aliases; during a module clone it re-points to the copy (see dp/core/clone_map.h).
  Tensor(const Tensor& o) : impl_(o.impl_) {
    if (detail::tls_clone_map != nullptr) [[unlikely]]
      detail::remap_tensor(impl_);
  }
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor&) = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  ~Tensor() = default;

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  const Shape& sizes() const { return impl().sizes; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return impl().numel; }
  DType dtype() const { return impl().dtype; }
  DType scalar_type() const { return impl().dtype; }
  Device device() const { return impl().device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return dp::is_floating_point(dtype()); }
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const { return impl().is_contiguous; }
  size_t element_size() const { return dp::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const Storage& storage() const { return impl().storage; }
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const;  // checks that T matches dtype()
  template <typename T>
  const T* const_data_ptr() const {
    return data_ptr<T>();
  }
  // "[15, 5]"
  std::string size_str() const { return shape_str(sizes()); }
  // "torch.FloatTensor [15, 5]"-style description used in error messages.
  std::string describe() const;

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  Tensor set_requires_grad(bool on) {
    requires_grad_(on);
    return *this;
  }
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // The accumulated gradient (undefined if none yet).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  Tensor& mutable_grad();
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  // Shares storage (and the version counter), without history.
  Tensor detach() const;
  Tensor& detach_();
  // Makes this handle's tensor (every alias of it, autograd identity and .grad kept) use
  // `data`'s storage, shape, strides and dtype: how Module::to() moves parameters in place.
  void set_data(const Tensor& data);
  void retain_grad();
  bool retains_grad() const;
  uint32_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }
  // Hook on the gradient w.r.t. this tensor; may return a replacement gradient. Returns a handle.
  int register_hook(TensorHook hook);
  void remove_hook(int handle);
  // Leaves only: runs after the gradient has been accumulated into .grad() ("gradient ready").
  int register_post_accumulate_grad_hook(PostAccumulateGradHook hook);

  // ---- conversion and copies ----
  Tensor to(Device device, bool non_blocking = false, bool copy = false) const;
  Tensor to(DType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Scalar item() const;
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  // Copies the elements (row-major) into a vector of T (converting).
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- views and shape ----
  Tensor view(IntArrayRef sizes) const;
  Tensor reshape(IntArrayRef sizes) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(IntArrayRef dims) const;
  Tensor expand(IntArrayRef sizes) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(IntArrayRef sizes, int64_t dim = 0) const;

  // ---- math (see dp/ops/*.h for semantics) ----
  Tensor add(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor add(const Scalar& o) const;
  Tensor sub(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor sub(const Scalar& o) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(const Scalar& o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(const Scalar& o) const;
  Tensor neg() const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(const Scalar& e) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor eq(const Tensor& o) const;
  Tensor eq(const Scalar& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor ne(const Scalar& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor lt(const Scalar& o) const;
  Tensor le(const Tensor& o) const;
  Tensor le(const Scalar& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor gt(const Scalar& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor ge(const Scalar& o) const;
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor logical_xor(const Tensor& o) const;
  Tensor sum() const;
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  Tensor max() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor var(IntArrayRef dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  // Sequence-model ops (dp/ops/sequence.h).
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  // (values, indices): the k largest (or smallest) along dim, sorted when `sorted`.
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  // (values, indices), stable.
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1, const Scalar& alpha = 1) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator* gen = nullptr) const;

  // ---- in place (bump the version counter) ----
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& o);
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& sub_(const Scalar& o);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(const Scalar& o);
  Tensor& div_(const Tensor& o);
  Tensor& div_(const Scalar& o);
  Tensor& addcmul_(const Tensor& a, const Tensor& b, const Scalar& value = 1);
  Tensor& addcdiv_(const Tensor& a, const Tensor& b, const Scalar& value = 1);
  Tensor& lerp_(const Tensor& end, const Scalar& weight);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& sqrt_();
  Tensor& relu_();
  Tensor& neg_();
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);

  std::string to_string() const;  // PyTorch-style print: tensor([[...]], dtype=…, device=…)

 private:
  // Inline: every accessor goes through it (an out-of-line call per sizes(), dtype(), ...).
  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  [[noreturn]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Scalar& b);
Tensor& operator-=(Tensor& a, const Scalar& b);
Tensor& operator*=(Tensor& a, const Scalar& b);
Tensor& operator/=(Tensor& a, const Scalar& b);

// Comparisons are element-wise, as libtorch's: `a > 0`, `a == b` give Bool tensors (dp::gt, dp::eq,
// ... with broadcasting and type promotion), not a bool. Whether two handles alias the same tensor
// is a.is_same(b); whether two tensors hold the same values is dp::equal(a, b).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator==(const Scalar& a, const Tensor& b);
Tensor operator!=(const Scalar& a, const Tensor& b);
Tensor operator<(const Scalar& a, const Tensor& b);
Tensor operator<=(const Scalar& a, const Tensor& b);
Tensor operator>(const Scalar& a, const Tensor& b);
Tensor operator>=(const Scalar& a, const Tensor& b);
// Bit-wise operators on Bool tensors (dp::bitwise_*, broadcasting): mask combinations such as
// `(x > 0) & (x < 1)`, `~mask`. Other dtypes are a DTypeError naming the op.
Tensor operator~(const Tensor& a);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);

// Builds a tensor impl over fresh memory (contiguous) on a device.
Tensor make_empty(IntArrayRef sizes, DType dtype, Device device);

// Typed data_ptr: checks dtype so a wrong template argument is an error, not garbage.
template <typename T>
T* Tensor::data_ptr() const {
  DP_CHECK(dtype_of<T> == dtype(), DTypeError, "data_ptr<", dtype_name(dtype_of<T>), ">() called on a tensor of dtype ", dtype_name(dtype()));
  return static_cast<T*>(data_ptr());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(Device::cpu(), dtype_of<T>).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace dp
