// Shared helpers of the element-wise ops: checks, conversion, output allocation, autograd glue.
#include <cstdint>
#include "ops/elementwise_common.h"
#include "backend/copy_kernels.h"

namespace dp::ops {

void check_input(const char* op, const Tensor& t) {
  DP_CHECK(t.defined(), ValueError, op, ": input is an undefined tensor");
  (void)op;
}

void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_input(op, a);
  check_input(op, b);
  if (a.device() != b.device()) {
    // As PyTorch: a CPU 0-dim tensor may meet a device tensor (it is copied over as a scalar).
    const bool scalar_ok = (!a.is_cpu() && b.is_cpu() && b.dim() == 0) || (!b.is_cpu() && a.is_cpu() && a.dim() == 0);
    if (!scalar_ok) check_same_device(op, {&a, &b});
  }
}

Tensor new_output(IntArrayRef sizes, DType dtype, Device device) { return make_empty(sizes, dtype, device); }

Tensor zeros_of(IntArrayRef sizes, DType dtype, Device device) {
  Tensor z = new_output(sizes, dtype, device);
  backend::fill_kernel(z.device().type, z, Scalar(0));
  return z;
}

void copy_into(const Tensor& dst, const Tensor& src) { backend::copy_kernel(backend::copy_device_type(dst, src), dst, src); }

Tensor to_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor r = new_output(t.sizes(), dtype, t.device());
  backend::copy_kernel(backend::copy_device_type(r, t), r, t);
  return r;
}

void check_inplace_shape(const char* op, const Tensor& self, const Tensor& other) {
  if (other.sizes() == self.sizes()) return;
  Shape b = broadcast_shapes(self.sizes(), other.sizes(), op);
  DP_CHECK(IntArrayRef(b).equals(self.sizes()), ShapeError, op, ": output with shape ", self.size_str(), " doesn't match the broadcast shape ",
           shape_str(b));
}

void check_no_internal_overlap(const char* op, const Tensor& self) {
  for (int64_t d = 0; d < self.dim(); ++d)
    DP_CHECK(!(self.strides()[d] == 0 && self.sizes()[d] > 1), ValueError, op,
             ": unsupported operation: more than one element of the written-to tensor refers to a single memory location "
             "(shape ",
             self.size_str(), ", an expanded tensor). Please clone() the tensor before performing the operation.");
}

namespace {
// [first byte, one past the last byte] that t's elements span.
std::pair<uintptr_t, uintptr_t> byte_range(const Tensor& t) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr()), hi = lo;
  const int64_t es = static_cast<int64_t>(t.element_size());
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = (t.sizes()[d] - 1) * t.strides()[d] * es;
    if (span >= 0)
      hi += span;
    else
      lo += span;
  }
  return {lo, hi + es};
}
}  // namespace

bool same_memory(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  if (a.storage() != b.storage()) return false;
  auto [alo, ahi] = byte_range(a);
  auto [blo, bhi] = byte_range(b);
  return alo < bhi && blo < ahi;
}

Tensor unaliased(const Tensor& self, const Tensor& t) {
  if (!same_memory(self, t)) return t;
  if (t.data_ptr() == self.data_ptr() && t.dtype() == self.dtype() && t.sizes() == self.sizes() && t.strides() == self.strides()) return t;
  Tensor c = make_empty(t.sizes(), t.dtype(), t.device());
  backend::copy_kernel(backend::copy_device_type(c, t), c, t);
  return c;
}

Tensor GradInfo::reduce(const Tensor& g) const {
  if (!g.defined()) return g;
  Tensor r = g.sizes() == sizes ? g : dp::sum_to(g, sizes);
  if (r.dtype() != dtype) r = dp::to(r, r.device(), dtype);
  return r;
}

Tensor unpack_output(const autograd::SavedVariable& saved, autograd::Node& node) {
  // SavedVariable gives a saved output its node back as grad_fn under create_graph.
  return saved.unpack(&node);
}

autograd::SavedVariable save_input(const Tensor& t, const Tensor* self) {
  if (self && same_memory(*self, t)) return autograd::SavedVariable(dp::clone(t), false);
  return autograd::SavedVariable(t, false);
}

}  // namespace dp::ops
