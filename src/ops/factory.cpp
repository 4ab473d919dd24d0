// Tensor factories: empty / zeros / ones / full (+ _like), scalar_tensor, arange, linspace, eye,
// tensor<T>(host data), from_blob_copy. Every factory validates its device and sizes and writes its
// values with the kernels of backend/copy_kernels.h on the tensor's own device; only from_blob_copy
// (and tensor<T>, through it) reads host memory: the caller's data.
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"
#include <cmath>
#include <cstring>
#include "backend/copy_kernels.h"
#include "backend/tensor_nograd.h"
#include "dp/core/device_registry.h"

namespace dp {

namespace {

void check_sizes(const char* op, IntArrayRef sizes) {
  for (int64_t s : sizes) DP_CHECK(s >= 0, ShapeError, op, ": Trying to create tensor with negative dimension ", s, ": ", shape_str(sizes));
}

Tensor make(const char* op, IntArrayRef sizes, const TensorOptions& opts) {
  check_sizes(op, sizes);
  check_device(opts.device_);
  return make_empty(sizes, opts.dtype_, opts.device_);
}

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace

TensorOptions options_of(const Tensor& t) { return TensorOptions().dtype(t.dtype()).device(t.device()); }

Tensor empty(IntArrayRef sizes, TensorOptions opts) { return finish(make("empty", sizes, opts), opts); }

Tensor zeros(IntArrayRef sizes, TensorOptions opts) {
  Tensor t = make("zeros", sizes, opts);
  backend::fill_kernel(t.device().type, t, 0);  // the CPU's fill of all-zero bits is a memset
  return finish(t, opts);
}

Tensor ones(IntArrayRef sizes, TensorOptions opts) {
  Tensor t = make("ones", sizes, opts);
  backend::fill_kernel(t.device().type, t, 1);
  return finish(t, opts);
}

Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions opts) {
  Tensor t = make("full", sizes, opts);
  backend::fill_kernel(t.device().type, t, value);
  return finish(t, opts);
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), options_of(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), options_of(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), options_of(t)); }
Tensor full_like(const Tensor& t, const Scalar& value) { return full(t.sizes(), value, options_of(t)); }

Tensor scalar_tensor(const Scalar& value, TensorOptions opts) { return full({}, value, opts); }

Tensor arange(const Scalar& end, std::optional<TensorOptions> opts) { return arange(0, end, 1, opts); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<TensorOptions> opts) {
  // torch.arange's dtype inference: any floating argument -> the default float dtype, else int64.
  const bool any_float = start.is_floating_point() || end.is_floating_point() || step.is_floating_point();
  TensorOptions o = opts ? *opts : TensorOptions().dtype(any_float ? default_float_dtype() : kInt64);
  check_device(o.device_);
  const DType dt = o.dtype_;
  DP_CHECK(dt != kBool, DTypeError, "arange: unsupported dtype bool");
  // As PyTorch: the arguments are taken in the output's accumulation type (int64 for integer
  // outputs, truncating; double otherwise); the length is computed in double, except for int64
  // outputs, where it is computed exactly in integers.
  const bool integral = is_integral(dt, false);
  const double ds = integral ? static_cast<double>(start.to_int()) : start.to_double();
  const double de = integral ? static_cast<double>(end.to_int()) : end.to_double();
  const double dst = integral ? static_cast<double>(step.to_int()) : step.to_double();
  DP_CHECK(dst != 0.0, ValueError, "arange: step must be nonzero (start=", start, ", end=", end, ", step=", step, ")");
  DP_CHECK(std::isfinite(ds) && std::isfinite(de), ValueError, "arange: unsupported range: ", start, " -> ", end);
  DP_CHECK((dst > 0 && de >= ds) || (dst < 0 && de <= ds), ValueError,
           "arange: upper bound and larger bound inconsistent with step sign (start=", start, ", end=", end, ", step=", step, ")");
  double size_d;
  if (dt == kInt64) {
    const int64_t xs = start.to_int(), xe = end.to_int(), xst = step.to_int();
    const int64_t sgn = (xst > 0) - (xst < 0);
    size_d = static_cast<double>((xe - xs + xst - sgn) / xst);
  } else {
    size_d = std::ceil((end.to_double() - start.to_double()) / step.to_double());
  }
  DP_CHECK(size_d >= 0 && size_d <= 9.0e18, ValueError, "arange: invalid size, possible overflow? (start=", start, ", end=", end, ", step=", step,
           ")");
  const int64_t size = static_cast<int64_t>(size_d);
  Tensor out = make_empty({size}, dt, o.device_);
  if (size > 0) backend::arange_kernel(o.device_.type, out, start, step);
  return finish(out, o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  DP_CHECK(steps >= 0, ValueError, "linspace: number of steps must be non-negative, got ", steps);
  Tensor out = make("linspace", {steps}, opts);
  // PyTorch's symmetric formula (backend/copy_kernels.h): the first half counts up from start, the
  // second half down from end, so both ends are exact.
  if (steps == 1)
    backend::fill_kernel(out.device().type, out, start);
  else if (steps > 1)
    backend::linspace_kernel(out.device().type, out, start, end);
  return finish(out, opts);
}

Tensor eye(int64_t n, TensorOptions opts) {
  DP_CHECK(n >= 0, ValueError, "eye: n must be greater or equal to 0, got ", n);
  Tensor out = zeros({n, n}, opts.requires_grad(false));
  // The diagonal: an [n] view with stride n + 1, filled with one.
  backend::fill_kernel((backend::restride_nograd(out, {n}, {n + 1})).device().type, backend::restride_nograd(out, {n}, {n + 1}), true);
  return finish(out, opts);
}

template <typename T>
Tensor tensor(const std::vector<T>& data, IntArrayRef sizes, std::optional<TensorOptions> opts) {
  TensorOptions o = opts ? *opts : TensorOptions().dtype(dtype_of<T>);
  check_sizes("tensor", sizes);
  const int64_t n = numel_of(sizes);
  DP_CHECK(static_cast<int64_t>(data.size()) == n, ValueError, "tensor: the data has ", data.size(), " elements but the shape ", shape_str(sizes),
           " needs ", n);
  Tensor src;
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(data.begin(), data.end());  // std::vector<bool> is bit-packed
    src = from_blob_copy(bytes.data(), sizes, kBool, o.device_);
  } else {
    src = from_blob_copy(data.data(), sizes, dtype_of<T>, o.device_);
  }
  if (o.dtype_ != dtype_of<T>) {
    Tensor c = make_empty(sizes, o.dtype_, o.device_);
    backend::copy_kernel(backend::copy_device_type(c, src), c, src);
    src = c;
  }
  return finish(src, o);
}

template Tensor tensor<float>(const std::vector<float>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<double>(const std::vector<double>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<bool>(const std::vector<bool>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<Half>(const std::vector<Half>&, IntArrayRef, std::optional<TensorOptions>);
template Tensor tensor<BFloat16>(const std::vector<BFloat16>&, IntArrayRef, std::optional<TensorOptions>);

Tensor tensor(std::initializer_list<double> data, TensorOptions opts) {
  return tensor<double>(std::vector<double>(data), {static_cast<int64_t>(data.size())}, opts);
}

Tensor from_blob_copy(const void* data, IntArrayRef sizes, DType dtype, Device device) {
  check_sizes("from_blob_copy", sizes);
  check_device(device);
  Tensor t = make_empty(sizes, dtype, device.is_cpu() ? device : Device::cpu());
  if (t.nbytes() > 0) {
    DP_CHECK(data != nullptr, ValueError, "from_blob_copy: null data pointer for ", t.nbytes(), " bytes of shape ", shape_str(sizes));
    std::memcpy(t.data_ptr(), data, t.nbytes());  // the caller's host data into a host tensor (then copied over)
  }
  if (!device.is_cpu()) t = to(t, device, dtype, false, true);
  return t;
}

}  // namespace dp
