// The CPU backend's kernels, registered into the kernel interfaces' stubs (called once, from
// src/backend/registry.cpp). Each kernel family's file exposes its own register function.
namespace dp::backend {

void register_cpu_cross_entropy_kernels();       // loss_cross_entropy.cpp
void register_cpu_nll_loss_kernels();            // loss_nll.cpp
void register_cpu_pointwise_loss_kernels();      // loss_pointwise.cpp
void register_cpu_optim_kernels();               // optim_updates.cpp
void register_cpu_core_kernels();                // register_core_kernels.cpp
void register_cpu_ops_kernels();                 // register_ops.cpp
void register_cpu_elementwise_binary_kernels();  // elementwise_binary.cpp
void register_cpu_elementwise_unary_kernels();   // elementwise_unary.cpp

void register_cpu_kernels() {
  register_cpu_cross_entropy_kernels();
  register_cpu_nll_loss_kernels();
  register_cpu_pointwise_loss_kernels();
  register_cpu_optim_kernels();
  register_cpu_core_kernels();
  register_cpu_ops_kernels();
  register_cpu_elementwise_binary_kernels();
  register_cpu_elementwise_unary_kernels();
}

}  // namespace dp::backend
