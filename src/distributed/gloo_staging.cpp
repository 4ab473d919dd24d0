// Packing tensors into gloo's flat buffers and back, and host staging of CUDA tensors (gloo_staging.h).
#include "distributed/gloo_staging.h"
#include <cstring>
#include "dp/autograd/grad_mode.h"
#include "dp/core/errors.h"
#include "dp/core/half.h"

namespace dp::distributed::detail {
namespace {

// Calls f(i, offset) for every element of t in row-major order: i counts elements, offset is the
// element's position (in elements) from t.data_ptr(). The innermost dimension is a plain loop.
template <typename F>
void for_each_element(const Tensor& t, F&& f) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int64_t d = t.dim();
  if (d == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  const int64_t inner = sizes[d - 1];
  const int64_t inner_stride = strides[d - 1];
  std::vector<int64_t> index(static_cast<size_t>(d), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n;) {
    for (int64_t k = 0; k < inner; ++k, ++i) f(i, offset + k * inner_stride);
    for (int64_t dim = d - 2; dim >= 0; --dim) {
      offset += strides[dim];
      if (++index[dim] < sizes[dim]) break;
      offset -= strides[dim] * sizes[dim];
      index[dim] = 0;
    }
  }
}

template <typename T>
void gather_as(const Tensor& t, void* dst) {
  const T* src = static_cast<const T*>(t.data_ptr());
  T* out = static_cast<T*>(dst);
  for_each_element(t, [&](int64_t i, int64_t off) { out[i] = src[off]; });
}

template <typename T>
void scatter_as(const void* src, const Tensor& t) {
  const T* in = static_cast<const T*>(src);
  T* dst = static_cast<T*>(t.data_ptr());
  for_each_element(t, [&](int64_t i, int64_t off) { dst[off] = in[i]; });
}

// Bytes of one element, moved as an integer of that width (dtype-blind).
void gather_bytes(const Tensor& t, void* dst) {
  switch (t.element_size()) {
    case 1:
      return gather_as<uint8_t>(t, dst);
    case 2:
      return gather_as<uint16_t>(t, dst);
    case 4:
      return gather_as<uint32_t>(t, dst);
    case 8:
      return gather_as<uint64_t>(t, dst);
  }
  throw DTypeError(dp::detail::str("pack: unsupported element size ", t.element_size(), " of dtype ", dtype_name(t.dtype())));
}

void scatter_bytes(const void* src, const Tensor& t) {
  switch (t.element_size()) {
    case 1:
      return scatter_as<uint8_t>(src, t);
    case 2:
      return scatter_as<uint16_t>(src, t);
    case 4:
      return scatter_as<uint32_t>(src, t);
    case 8:
      return scatter_as<uint64_t>(src, t);
  }
  throw DTypeError(dp::detail::str("unpack: unsupported element size ", t.element_size(), " of dtype ", dtype_name(t.dtype())));
}

template <typename Half16>
void widen(const Tensor& t, float* dst) {
  const Half16* src = static_cast<const Half16*>(t.data_ptr());
  if (t.is_contiguous()) {
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
    return;
  }
  for_each_element(t, [&](int64_t i, int64_t off) { dst[i] = static_cast<float>(src[off]); });
}

template <typename Half16>
void narrow_into(const float* src, const Tensor& t) {
  Half16* dst = static_cast<Half16*>(t.data_ptr());
  if (t.is_contiguous()) {
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) dst[i] = Half16(src[i]);
    return;
  }
  for_each_element(t, [&](int64_t i, int64_t off) { dst[off] = Half16(src[i]); });
}

}  // namespace

void* ScratchBuffer::get(size_t bytes) {
  if (bytes > capacity_ || !data_) {
    const size_t rounded = ((bytes > 64 ? bytes : 64) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw OutOfMemory(dp::detail::str("process group scratch buffer: cannot allocate ", rounded, " bytes"));
    data_.reset(p);
    capacity_ = rounded;
  }
  return data_.get();
}

void pack(const Tensor& t, void* dst, DType dst_dtype) {
  if (dst_dtype == t.dtype()) {
    if (t.is_contiguous()) {
      if (t.nbytes() > 0) std::memcpy(dst, t.data_ptr(), t.nbytes());
    } else {
      gather_bytes(t, dst);
    }
    return;
  }
  if (dst_dtype == kFloat32 && t.dtype() == kFloat16) return widen<Half>(t, static_cast<float*>(dst));
  if (dst_dtype == kFloat32 && t.dtype() == kBFloat16) return widen<BFloat16>(t, static_cast<float*>(dst));
  throw DTypeError(dp::detail::str("pack: cannot convert ", dtype_name(t.dtype()), " to ", dtype_name(dst_dtype)));
}

void unpack(const void* src, DType src_dtype, const Tensor& t) {
  if (src_dtype == t.dtype()) {
    if (t.is_contiguous()) {
      if (t.nbytes() > 0) std::memcpy(t.data_ptr(), src, t.nbytes());
    } else {
      scatter_bytes(src, t);
    }
    return;
  }
  if (src_dtype == kFloat32 && t.dtype() == kFloat16) return narrow_into<Half>(static_cast<const float*>(src), t);
  if (src_dtype == kFloat32 && t.dtype() == kBFloat16) return narrow_into<BFloat16>(static_cast<const float*>(src), t);
  throw DTypeError(dp::detail::str("unpack: cannot convert ", dtype_name(src_dtype), " to ", dtype_name(t.dtype())));
}

HostStaging HostStaging::stage(const std::vector<Tensor>& tensors, bool read, bool write) {
  HostStaging s;
  s.host.reserve(tensors.size());
  NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    if (t.is_cpu()) {  // already in host memory
      s.host.push_back(t);
      continue;
    }
    Tensor h = read ? t.to(Device::cpu(), /*non_blocking=*/false, /*copy=*/true).contiguous() : make_empty(t.sizes(), t.dtype(), Device::cpu());
    if (write) s.copy_back.emplace_back(t, h);
    s.host.push_back(std::move(h));
  }
  return s;
}

void HostStaging::finish() const {
  if (copy_back.empty()) return;
  NoGradGuard no_grad;
  for (const auto& [device_tensor, host_copy] : copy_back) {
    Tensor target = device_tensor;  // copy_ needs a non-const handle; it aliases the caller's tensor
    target.copy_(host_copy);
  }
}

}  // namespace dp::distributed::detail
