// The CPU backend's kernels, registered into the kernel interfaces' stubs (called once, from
// src/backend/registry.cpp). Each kernel family's file registers its own kernels, each under its
// stub's name (DP_REGISTER_KERNEL).
namespace dp::backend::cpu {

void register_cross_entropy_kernels();       // loss_cross_entropy.cpp
void register_nll_loss_kernels();            // loss_nll.cpp
void register_pointwise_loss_kernels();      // loss_pointwise.cpp
void register_optim_kernels();               // optim_updates.cpp
void register_core_kernels();                // register_core_kernels.cpp
void register_ops_kernels();                 // register_ops.cpp
void register_elementwise_binary_kernels();  // elementwise_binary.cpp
void register_elementwise_unary_kernels();   // elementwise_unary.cpp

}  // namespace dp::backend::cpu

namespace dp::backend {

void register_cpu_kernels() {
  cpu::register_cross_entropy_kernels();
  cpu::register_nll_loss_kernels();
  cpu::register_pointwise_loss_kernels();
  cpu::register_optim_kernels();
  cpu::register_core_kernels();
  cpu::register_ops_kernels();
  cpu::register_elementwise_binary_kernels();
  cpu::register_elementwise_unary_kernels();
}

}  // namespace dp::backend
