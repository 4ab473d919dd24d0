// The CPU kernels of nll_loss (the kernel interface: backend/loss_kernels.h; the op:
// src/ops/loss_nll.cpp): one pass over the targets reading one input element each (input seen as
// [N, C, S]), checking each target, summing the weighted losses and the weights of the
// non-ignored targets in double. Backward: a zero-filled gradient with -weight[t] * G scattered at
// the targets.
#include <cstring>
#include "backend/cpu/loss_common.h"

namespace dp::backend::cpu {
namespace {

using cpu::loss::incoming;
using cpu::loss::Incoming;
using cpu::loss::ptr_or_null;

constexpr const char* kOp = "nll_loss";

// Writes the per-sample losses to out (None; may be null), the sum to total and the sum of the
// weights of the non-ignored targets to tw. Returns false at the first target outside [0, C) that
// is not ignored.
template <typename T, typename I>
bool nll_forward(const T* x, const I* tg, const T* w, T* out, ClassShape cs, int64_t ignore, double& total, double& tw) {
  double sum = 0, wsum = 0;
  const int64_t C = cs.c, S = cs.s;
  for (int64_t n = 0; n < cs.n; ++n) {
    const T* xn = x + n * C * S;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s;
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == ignore) {
        if (out) out[i] = T(0);
        continue;
      }
      if (t < 0 || t >= C) [[unlikely]]
        return false;
      const T wt = w ? w[t] : T(1);
      const T v = -wt * xn[t * S + s];
      if (out) out[i] = v;
      sum += static_cast<double>(v);
      wsum += static_cast<double>(wt);
    }
  }
  total = sum;
  tw = wsum;
  return true;
}

// gi (zero-filled, input's shape) [n, t, s] = -weight[t] * G, G = g[i] (per-sample) or gs.
template <typename T, typename I>
void nll_backward(T* gi, const I* tg, const T* w, const T* g, T gs, ClassShape cs, int64_t ignore) {
  const int64_t C = cs.c, S = cs.s;
  for (int64_t n = 0; n < cs.n; ++n) {
    T* gn = gi + n * C * S;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = n * S + s;
      const int64_t t = static_cast<int64_t>(tg[i]);
      if (t == ignore || t < 0 || t >= C) continue;  // range was checked by the forward
      const T G = g ? g[i] : gs;
      gn[t * S + s] = -(w ? w[t] : T(1)) * G;
    }
  }
}

bool nll_loss_forward_kernel(const Tensor& out, Reduction red, const Tensor& total_weight, const Tensor& x, const Tensor& target, const Tensor& w,
                             ClassShape cs, int64_t ignore) {
  bool ok = true;
  cpu::loss::dispatch_index(x.dtype(), target.dtype(), kOp, [&]<typename T, typename I>() {
    double total = 0, tw = 0;
    ok = nll_forward<T, I>(static_cast<const T*>(x.data_ptr()), static_cast<const I*>(target.data_ptr()), ptr_or_null<T>(w),
                           red == Reduction::None ? static_cast<T*>(out.data_ptr()) : nullptr, cs, ignore, total, tw);
    if (!ok || red == Reduction::None) return;
    static_cast<T*>(out.data_ptr())[0] = static_cast<T>(red == Reduction::Mean ? total / tw : total);
    static_cast<T*>(total_weight.data_ptr())[0] = static_cast<T>(tw);
  });
  return !ok;
}

void nll_loss_backward_kernel(const Tensor& gi, const LossGrad& g, const Tensor& target, const Tensor& w, ClassShape cs, int64_t ignore) {
  if (gi.numel() > 0) std::memset(gi.data_ptr(), 0, gi.nbytes());
  cpu::loss::dispatch_index(gi.dtype(), target.dtype(), kOp, [&]<typename T, typename I>() {
    const Incoming<T> in = incoming<T>(g);
    nll_backward<T, I>(static_cast<T*>(gi.data_ptr()), static_cast<const I*>(target.data_ptr()), ptr_or_null<T>(w), in.per_sample, in.value, cs,
                       ignore);
  });
}

}  // namespace

void register_nll_loss_kernels() {
  DP_REGISTER_KERNEL(CPU, nll_loss_forward_kernel);
  DP_REGISTER_KERNEL(CPU, nll_loss_backward_kernel);
}

}  // namespace dp::backend::cpu
