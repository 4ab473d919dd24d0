#pragma once
// The CUDA element-wise kernels (src/backend/cuda/elementwise_*.cu), copies and fills (copy.cu): the CUDA
// backend of the kernel interfaces backend/elementwise_kernels.h and backend/copy_kernels.h
// (registered in register_elementwise_kernels.cpp), with the same math as the CPU kernels (both
// are instantiations of backend/elementwise_impl.h), for an output on a CUDA device. Inputs
// are on out's device (a CPU input with one element, a 0-dim "scalar tensor", is copied over
// first). The work is queued on the current stream of out's device; nothing waits for it.
#include <optional>
#include "backend/elementwise_kernels.h"
#include "dp/core/tensor.h"

namespace dp::backend::cuda {

using backend::ActGrad;
using backend::CmpOp;
using backend::UnaryOp;

void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha);
void add_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s, const Scalar& alpha);
void rsub_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void mul_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);
void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void div_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& s);
void rdiv_scalar_kernel(const Tensor& out, const Scalar& s, const Tensor& a);
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& e);
void pow_scalar_kernel(const Tensor& out, const Tensor& a, const Scalar& e);
void rpow_scalar_kernel(const Tensor& out, const Scalar& base, const Tensor& e);
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b);
void extremum_weight_kernel(const Tensor& out, const Tensor& a, const Tensor& b, bool is_max);
void lerp_kernel(const Tensor& out, const Tensor& a, const Tensor& end, const Scalar& weight);
void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void where_scalar_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Scalar& b);
void addcmul_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value);
void addcdiv_kernel(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& value);
void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& a);
void clamp_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);
void clamp_mask_kernel(const Tensor& out, const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi);
void activation_backward_kernel(ActGrad op, const Tensor& out, const Tensor& g, const Tensor& xy);
void compare_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void compare_scalar_kernel(CmpOp op, const Tensor& out, const Tensor& a, const Scalar& s);
void logical_not_kernel(const Tensor& out, const Tensor& a);

// dst (any layout, on a CUDA device) <- src (on dst's device) converted to dst's dtype and broadcast
// to dst's shape, on the current stream.
void copy_on_device(const Tensor& dst, const Tensor& src);
// Every element of dst (any layout, on a CUDA device) = value.
void fill_kernel(const Tensor& dst, const Scalar& value);
// The factories' fills (backend/copy_kernels.h's ArangeKernel, LinspaceKernel), on the current stream.
void arange_kernel(const Tensor& out, const Scalar& start, const Scalar& step);
void linspace_kernel(const Tensor& out, double start, double end);

}  // namespace dp::backend::cuda
