// Argument checks and small helpers shared by the loss ops.
#include "ops/loss_common.h"

#include "backend/capabilities.h"
#include "dp/autograd/grad_mode.h"
#include "dp/ops/reduction.h"
#include "dp/ops/index.h"
#include "dp/ops/elementwise.h"

namespace dp {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
  }
  return "?";
}

namespace loss {

void check_input(const char* op, const Tensor& input) {
  ops::check_defined(op, input);
  // The CUDA kernels also take 16-bit floats (computing in float32); the CPU loops do not. The
  // message names the CUDA device: that is where the user can run them.
  const bool half_device = backend::capabilities(input.device()).half_nn;
  const bool half = input.dtype() == kFloat16 || input.dtype() == kBFloat16;
  DP_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64 || (half && half_device), DTypeError, op, ": \"", op, "\" not implemented for '",
           backend::torch_type_name(input.dtype()), "' (input must be float32 or float64",
           half_device ? ", or float16 / bfloat16 on a CUDA device" : " on the CPU; float16 / bfloat16 on a CUDA device", ", got ", input.describe(),
           ")");
}

void check_companion(const char* op, const Tensor& input, const Tensor& t, const char* what) {
  ops::check_same_device(op, {&input, &t});
  DP_CHECK(t.dtype() == input.dtype(), DTypeError, op, ": expected ", what, " of dtype ", dtype_name(input.dtype()), " (the input's), but found ",
           dtype_name(t.dtype()), " (", what, " ", t.describe(), ")");
}

void check_constant(const char* op, const Tensor& t, const char* what) {
  DP_CHECK(!(t.defined() && autograd::needs_grad(t)), AutogradError, "The function '", op, "' is not differentiable with respect to argument '", what,
           "'. This input cannot have requires_grad True.");
}

ClassGeometry class_geometry(const char* op, const Tensor& input, const Tensor& target) {
  ClassGeometry g;
  DP_CHECK(input.dim() >= 1, ShapeError, op, ": Expected 1 or more dimensions (got 0) (input ", input.describe(), ")");
  if (input.dim() == 1) {
    DP_CHECK(target.dim() == 0, ShapeError, op, ": size mismatch (got input: ", input.size_str(), ", target: ", target.size_str(),
             "); a 1-D input (one sample, no batch dim) takes a 0-dim target");
    g.c = input.size(0);
    g.class_dim = 0;
    return g;
  }
  g.n = input.size(0);
  g.c = input.size(1);
  DP_CHECK(target.dim() >= 1 && target.size(0) == g.n, ShapeError, op, ": Expected input batch_size (", g.n, ") to match target batch_size (",
           target.dim() >= 1 ? target.size(0) : 0, ") (input ", input.size_str(), ", target ", target.size_str(), ")");
  g.out_shape.push_back(g.n);
  for (int64_t d = 2; d < input.dim(); ++d) {
    g.out_shape.push_back(input.size(d));
    g.s *= input.size(d);
  }
  DP_CHECK(target.sizes() == g.out_shape, ShapeError, op, ": Expected target size ", shape_str(g.out_shape), ", got ", target.size_str(), " (input ",
           input.size_str(), ")");
  return g;
}

void check_class_target_dtype(const char* op, const Tensor& target) {
  DP_CHECK(target.dtype() == kInt64 || target.dtype() == kUInt8, DTypeError, op, ": expected scalar type Long but found ",
           backend::torch_type_name(target.dtype()), " (class-index target ", target.describe(), ")");
}

void check_class_weight(const char* op, const Tensor& input, const Tensor& weight, int64_t n_classes) {
  if (!weight.defined()) return;
  check_companion(op, input, weight, "weight");
  check_constant(op, weight, "weight");
  DP_CHECK(weight.dim() == 1 && weight.numel() == n_classes, ShapeError, op, ": weight tensor should be defined either for all ", n_classes,
           " classes or no classes but got weight tensor of shape: ", weight.size_str());
}

void throw_target_out_of_bounds(const char* op, int64_t target, int64_t n_classes, int64_t ignore_index) {
  throw IndexError(
      detail::str(op, ": Target ", target, " is out of bounds (expected a class index in [0, ", n_classes, ") or ignore_index ", ignore_index, ")"));
}

void throw_first_bad_target(const char* op, const Tensor& target, int64_t n_classes, int64_t ignore_index) {
  const Tensor h = backend::contiguous_nograd(backend::convert_nograd(target.cpu(), kInt64));
  const int64_t* p = static_cast<const int64_t*>(h.data_ptr());
  for (int64_t i = 0; i < h.numel(); ++i)
    if (p[i] != ignore_index && (p[i] < 0 || p[i] >= n_classes)) throw_target_out_of_bounds(op, p[i], n_classes, ignore_index);
  throw IndexError(
      detail::str(op, ": a target is out of bounds (expected class indices in [0, ", n_classes, ") or ignore_index ", ignore_index, ")"));
}

Tensor device_scalar(double v, DType dtype, Device device) {
  Tensor t = make_empty({}, dtype, device);
  backend::fill_kernel(t.device().type, t, v);
  return t;
}

backend::LossGrad loss_grad(const Tensor& g, Reduction red, DType dtype, double scale, const Tensor& divisor) {
  backend::LossGrad lg;
  lg.g = plain(g, dtype);
  lg.per_sample = red == Reduction::None;
  lg.scale = scale;
  if (red == Reduction::Mean) lg.divisor = divisor;
  return lg;
}

Tensor per_sample_to_input(const Tensor& g, const ClassGeometry& geo) {
  if (geo.class_dim == 0) return g;  // [C] input: g is 0-dim and broadcasts
  return g.reshape(geo.out_shape).unsqueeze(1);
}

Tensor plain(const Tensor& g, DType dtype) { return backend::contiguous_nograd(backend::convert_nograd(g, dtype)); }

// ---------------------------------------------------------------- MeanLossRecorder

Tensor mean_count(double n, const Tensor& input) { return device_scalar(n, backend::loss_acc_dtype(input.dtype()), input.device()); }

Tensor class_mean_count(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index) {
  NoGradGuard no_grad;
  const DType acc = backend::loss_acc_dtype(input.dtype());
  Tensor keep = dp::ne(target, Scalar(ignore_index));
  if (!weight.defined()) return dp::sum(keep).to(acc);
  Tensor safe = dp::where(keep, target, Scalar(0)).to(kInt64);
  Tensor w = dp::index_select(weight, 0, safe.reshape({-1})).reshape(target.sizes());
  return dp::sum(dp::where(keep, w, Scalar(0))).to(acc);
}

Tensor record_mean(const Tensor& sum, const Tensor& count) {
  MeanLossRecorder* recorder = MeanLossRecorder::current();
  DP_CHECK(recorder != nullptr, ValueError, "record_mean: no MeanLossRecorder on this thread");
  return recorder->record(sum, count);
}

}  // namespace loss

namespace {
thread_local MeanLossRecorder* tls_mean_recorder = nullptr;
}  // namespace

MeanLossRecorder::MeanLossRecorder() : previous_(tls_mean_recorder) { tls_mean_recorder = this; }
MeanLossRecorder::~MeanLossRecorder() { tls_mean_recorder = previous_; }
MeanLossRecorder* MeanLossRecorder::current() { return tls_mean_recorder; }

const MeanLossRecorder::Entry* MeanLossRecorder::find(const Tensor& loss) const {
  if (!loss.defined()) return nullptr;
  for (const Entry& e : entries_)
    if (e.mean.is_same(loss)) return &e;
  return nullptr;
}

Tensor MeanLossRecorder::record(const Tensor& sum, const Tensor& count) {
  Tensor mean = dp::div(sum, count.to(sum.dtype()));
  entries_.push_back({mean, sum, count});
  return mean;
}

}  // namespace dp
