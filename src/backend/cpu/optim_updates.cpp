// The CPU backend's optimizer updates (backend/optim_kernels.h): each parameter of the list through
// the fused per-parameter loop of fused_updates.h, in order, in the calling thread.
#include "backend/cpu/fused_updates.h"

namespace dp::backend {
namespace {

void sgd_update_cpu(DType dtype, int /*device*/, const std::vector<SgdTensor>& list, const SgdScalars& s) {
  with_param_type(dtype, "SGD", [&](auto tag) {
    using S = decltype(tag);
    for (const SgdTensor& t : list)
      optim::kernels::sgd_update(static_cast<S*>(t.param), static_cast<const S*>(t.grad), static_cast<S*>(t.momentum_buffer), t.buffer_initialized,
                                 t.n, s);
  });
}

void adam_update_cpu(DType dtype, int /*device*/, const std::vector<AdamTensor>& list, const AdamScalars& scalars) {
  with_param_type(dtype, "Adam", [&](auto tag) {
    using S = decltype(tag);
    AdamScalars s = scalars;
    for (const AdamTensor& t : list) {
      s.step = t.step;
      optim::kernels::adam_update(static_cast<S*>(t.param), static_cast<const S*>(t.grad), static_cast<S*>(t.exp_avg), static_cast<S*>(t.exp_avg_sq),
                                  static_cast<S*>(t.max_exp_avg_sq), t.n, s);
    }
  });
}

// Nothing captures host work into a graph on the CPU.
void check_host_scalar_step_cpu(int /*device*/, const char* /*optimizer*/) {}

}  // namespace

void register_cpu_optim_kernels() {
  sgd_update.set(DeviceType::CPU, &sgd_update_cpu);
  adam_update.set(DeviceType::CPU, &adam_update_cpu);
  check_host_scalar_step.set(DeviceType::CPU, &check_host_scalar_step_cpu);
}

}  // namespace dp::backend
