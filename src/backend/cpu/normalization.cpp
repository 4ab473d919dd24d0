// The CPU backend's batch_norm per-channel steps (norm_kernels.h): plain loops over C values.
#include <cmath>
#include "backend/norm_kernels.h"
#include "backend/dispatch.h"

namespace dp::backend {
namespace {

void batch_norm_update_running_cpu(const Tensor& running, const Tensor& stat, double factor, double momentum) {
  const double* s = stat.data_ptr<double>();
  const int64_t C = running.numel();
  kernels::dispatch_floating(running.dtype(), "batch_norm", [&]<typename T>() {
    T* p = running.data_ptr<T>();
    for (int64_t c = 0; c < C; ++c) {
      const double v = (1.0 - momentum) * kernels::convert<double>(p[c]) + momentum * s[c] * factor;
      p[c] = kernels::convert<T>(v);
    }
  });
}

void batch_norm_invstd_cpu(const Tensor& v, double eps, bool zero) {
  double* p = v.data_ptr<double>();
  const int64_t C = v.numel();
  for (int64_t c = 0; c < C; ++c) p[c] = zero ? 0.0 : 1.0 / std::sqrt(p[c] + eps);
}

}  // namespace

void register_cpu_norm_kernels() {
  batch_norm_update_running.set(DeviceType::CPU, &batch_norm_update_running_cpu);
  batch_norm_invstd.set(DeviceType::CPU, &batch_norm_invstd_cpu);
}

}  // namespace dp::backend
