// The CPU backend's batch_norm per-channel steps (norm_kernels.h): plain loops over C values.
#include <cmath>
#include "backend/norm_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend::cpu {
namespace {

void batch_norm_update_running_kernel(const Tensor& running, const Tensor& stat, double factor, double momentum) {
  const double* s = stat.data_ptr<double>();
  const int64_t C = running.numel();
  backend::dispatch_floating(running.dtype(), "batch_norm", [&]<typename T>() {
    T* p = running.data_ptr<T>();
    for (int64_t c = 0; c < C; ++c) {
      const double v = (1.0 - momentum) * backend::convert<double>(p[c]) + momentum * s[c] * factor;
      p[c] = backend::convert<T>(v);
    }
  });
}

void batch_norm_invstd_kernel(const Tensor& v, double eps, bool zero) {
  double* p = v.data_ptr<double>();
  const int64_t C = v.numel();
  for (int64_t c = 0; c < C; ++c) p[c] = zero ? 0.0 : 1.0 / std::sqrt(p[c] + eps);
}

}  // namespace

void register_norm_kernels() {
  DP_REGISTER_KERNEL(CPU, batch_norm_update_running_kernel);
  DP_REGISTER_KERNEL(CPU, batch_norm_invstd_kernel);
}

}  // namespace dp::backend::cpu
